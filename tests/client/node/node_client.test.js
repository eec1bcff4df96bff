'use strict';
// The Node.js client against a real attention-server (loopback, free port),
// with node's built-in test runner. ATTN_SERVER_BIN and ATTN_GOLDEN_DIR come
// from ctest. Results are compared with the committed PyTorch 1.13 goldens.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { AttentionClient, grpc } = require('../../../client/node/attention_client');

const SERVER = process.env.ATTN_SERVER_BIN;
const GOLDEN = process.env.ATTN_GOLDEN_DIR;

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const meta = header.__metadata__ || {};
  delete header.__metadata__;
  const arrays = {};
  for (const [name, e] of Object.entries(header)) {
    const [b, end] = e.data_offsets;
    const bytes = new Uint8Array(buf.subarray(8 + n + b, 8 + n + end));  // aligned copy
    arrays[name] = { shape: e.shape, data: new Float32Array(bytes.buffer, 0, bytes.length / 4) };
  }
  return { meta, arrays };
}

function assertClose(got, want, floor, what) {
  assert.deepStrictEqual(got.shape, want.shape, `${what}: shape`);
  for (let i = 0; i < want.data.length; i++) {
    const tol = 1e-5 * Math.max(Math.abs(want.data[i]), floor);
    if (!(Math.abs(got.data[i] - want.data[i]) <= tol)) {
      assert.fail(`${what}: element ${i} is ${got.data[i]}, expected ${want.data[i]}`);
    }
  }
}

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(SERVER, ['--host', '127.0.0.1', '--port', '0', '--model-dir',
      path.join(GOLDEN, 'models')]);
    let port = null;
    let buffered = '';
    const timer = setTimeout(() => { proc.kill(); reject(new Error('server did not start')); }, 30000);
    proc.stdout.on('data', (chunk) => {
      buffered += chunk.toString();
      const m = buffered.match(/listening on [\d.]+:(\d+)/);
      if (m) port = Number(m[1]);
      if (port && buffered.includes('SERVING')) {
        clearTimeout(timer);
        resolve({ proc, port });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); if (!port) reject(new Error(`server exited ${code}`)); });
  });
}

test('Node client end to end', async (t) => {
  const { proc, port } = await startServer();
  const client = new AttentionClient(`127.0.0.1:${port}`);
  try {
    await t.test('health', async () => assert.strictEqual(await client.health(), 'SERVING'));

    await t.test('seed worked example, both encodings', async () => {
      for (const encoding of ['data', 'values']) {
        const x = { shape: [5, 2], data: new Float32Array([1, 0, 0, 1, 1, 1, 1, 1, 0.5, 1]) };
        const { output } = await client.attention({ query: x, encoding });
        assert.ok(Math.abs(output.data[0] - 0.7988) < 1e-4, `got ${output.data[0]}`);
        assert.ok(Math.abs(output.data[1] - 0.7616) < 1e-4, `got ${output.data[1]}`);
      }
    });

    await t.test('PyTorch goldens: nn.MultiheadAttention and the seed modules', async () => {
      const cases = fs.readdirSync(path.join(GOLDEN, 'cases')).map((f) => f.replace('.safetensors', ''));
      assert.strictEqual(cases.length, 11);
      for (const name of cases) {
        const { meta, arrays: a } = readSafetensors(path.join(GOLDEN, 'cases', `${name}.safetensors`));
        const wantW = meta.need_weights === '1';
        const common = { causal: meta.causal === '1', return_weights: wantW, attn_bias: a.attn_bias };
        if (a.key_padding_mask) {
          common.key_padding_mask = { shape: a.key_padding_mask.shape,
            data: Uint8Array.from(a.key_padding_mask.data, (v) => (v ? 1 : 0)) };
        }
        let r;
        if (meta.op === 'sdpa') {
          r = await client.attention({ query: a.query, key: a.key, value: a.value, ...common });
        } else if (name === 'seed_self_attention') {
          r = await client.attention({ query: a.query, model: name, ...common });
        } else if (name === 'seed_cross_attention') {
          r = await client.crossAttention({ decoder: a.query, encoder: a.key, model: name, ...common });
        } else {
          r = await client.multiHeadAttention({ query: a.query, key: a.key, value: a.value, model: name,
            per_head_weights: meta.average_weights === '0', ...common });
        }
        const want = a.expected_output;
        const floor = want.data.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        assertClose(r.output, want, floor, `${name} output`);
        if (wantW) assertClose(r.weights, a.expected_weights, 1e-6, `${name} weights`);
      }
    });

    await t.test('errors carry the code and name the field', async () => {
      const q = { shape: [2, 3], data: new Float32Array(6) };
      await assert.rejects(client.multiHeadAttention({ query: q, model: 'nope' }), (err) => {
        assert.strictEqual(err.code, grpc.status.NOT_FOUND);
        assert.match(err.details, /model: no model named 'nope'/);
        return true;
      });
      await assert.rejects(client.attention({ query: { shape: [5, 2], data: new Float32Array(3) } }), (err) => {
        assert.strictEqual(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, /query: data has 12 bytes, expected 40/);
        return true;
      });
    });

    await t.test('list models', async () => {
      const models = await client.listModels();
      const m = models.find((x) => x.name === 'mha_cross_kdim_vdim_bias4d');
      assert.strictEqual(m.kdim, 12);
      assert.strictEqual(m.num_heads, 2);
    });
  } finally {
    client.close();
    proc.kill('SIGTERM');
  }
});
