'use strict';
// Runs one ONNX graph with ONNX Runtime's Node binding (onnxruntime-node,
// CPU provider), in-process, for tests/bench/ort_peer.py:
//
//   node ort_run.js SPEC_JSON
//
// SPEC: { ort: folder holding node_modules/onnxruntime-node, model: path,
//   threads, warmup, runs, seconds (a cap on the timed runs),
//   inputs: [{ name, dims, type: 'float32'|'int32', file? (raw little-endian
//   values) | fill: 'random' | values: [...] }], outputs_dir? (each output
//   written as NAME.bin) }.
// Prints { median_ms, min_ms, runs, outputs: { name: dims } } as JSON.
const fs = require('fs');
const path = require('path');

async function main() {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const ort = require(path.join(spec.ort, 'node_modules', 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(spec.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: spec.threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  let seed = 12345;
  const rand = () => {  // xorshift, in [-1, 1)
    seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
    return ((seed >>> 0) / 4294967296) * 2 - 1;
  };
  for (const inp of spec.inputs) {
    const n = inp.dims.reduce((a, b) => a * b, 1);
    let data;
    if (inp.type === 'int32') {
      data = Int32Array.from(inp.values);
    } else if (inp.file) {
      const buf = fs.readFileSync(inp.file);
      data = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    } else {
      data = new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = rand();
    }
    feeds[inp.name] = new ort.Tensor(inp.type, data, inp.dims);
  }
  let out = null;
  for (let i = 0; i < spec.warmup; i++) out = await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  for (let i = 0; i < spec.runs; i++) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (Number(process.hrtime.bigint() - start) / 1e9 > spec.seconds && times.length >= 3) break;
  }
  times.sort((a, b) => a - b);
  const outputs = {};
  for (const [name, t] of Object.entries(out || {})) {
    outputs[name] = t.dims;
    if (spec.outputs_dir) {
      fs.writeFileSync(path.join(spec.outputs_dir, `${name}.bin`),
        Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    }
  }
  process.stdout.write(JSON.stringify({
    median_ms: times.length ? times[Math.floor(times.length / 2)] : null,
    min_ms: times.length ? times[0] : null, runs: times.length, outputs,
  }) + '\n');
}

main().catch((e) => { console.error(e && e.stack ? e.stack : e); process.exit(1); });
