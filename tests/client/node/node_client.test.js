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

    await t.test('sessions: int8 keys and fp8 values, named in info; a decode step close to exact', async () => {
      const [hq, hkv, d] = [4, 2, 16];
      const s = await client.createSession({ num_layers: 1, num_kv_heads: hkv, head_dim: d,
        cache_dtype: 'bfloat16', key_format: 'int8', value_format: 'fp8_e4m3' });
      const info = await s.info();
      assert.strictEqual(info.key_format, 'int8');
      assert.strictEqual(info.value_format, 'fp8_e4m3');
      // One key and value: every query row's answer is that value as stored
      // (fp8 keeps it within 2^-4 of its largest element).
      const v = Float32Array.from({ length: hkv * d }, (_, i) => (i % 7) - 3);
      const { output } = await s.extend(0, { query: { shape: [hq, 1, d], data: new Float32Array(hq * d).fill(0.5) },
        key: { shape: [hkv, 1, d], data: v }, value: { shape: [hkv, 1, d], data: v } });
      for (let h = 0; h < hq; h++) {
        const g = Math.floor(h / (hq / hkv));
        for (let x = 0; x < d; x++) {
          assert.ok(Math.abs(output.data[h * d + x] - v[g * d + x]) <= 3 / 16, `${h},${x}`);
        }
      }
      await assert.rejects(client.createSession({ num_layers: 1, num_kv_heads: 1, head_dim: 8,
        key_format: 'int3' }), /key_format: expected int8, fp8_e4m3 or int4, got int3/);
      await s.delete();
    });

    await t.test('sessions: a decode loop equals one-shot attention; fork, truncate, errors', async () => {
      const [hq, hkv, d] = [4, 2, 8];
      let seed = 1;
      const rand = (n) => Float32Array.from({ length: n }, () => {
        seed = (seed * 16807) % 2147483647;
        return seed / 2147483647 - 0.5;
      });
      const keys = [[], []];
      const values = [[], []];
      const s = await client.createSession({ num_layers: 1, num_kv_heads: hkv, head_dim: d,
        session_id: 'node-1' });
      assert.strictEqual(s.id, 'node-1');
      for (const n of [6, 1, 1, 1]) {
        const q = rand(hq * n * d);
        const k = rand(hkv * n * d);
        const v = rand(hkv * n * d);
        const { output, lse } = await s.extend(0, { query: { shape: [hq, n, d], data: q },
          key: { shape: [hkv, n, d], data: k }, value: { shape: [hkv, n, d], data: v },
          return_lse: true });
        for (let g = 0; g < hkv; g++) {
          keys[g].push(...k.subarray(g * n * d, (g + 1) * n * d));
          values[g].push(...v.subarray(g * n * d, (g + 1) * n * d));
        }
        assert.deepStrictEqual(output.shape, [hq, n, d]);
        assert.deepStrictEqual(lse.shape, [hq, n]);
        const L = keys[0].length / d;
        // One-shot attention in float64: head h reads kv head h / (hq / hkv),
        // query t sits at L - n + t and sees keys up to it.
        for (let h = 0; h < hq; h++) {
          const g = Math.floor(h / (hq / hkv));
          for (let t = 0; t < n; t++) {
            const w = [];
            for (let j = 0; j <= L - n + t; j++) {
              let dot = 0;
              for (let x = 0; x < d; x++) dot += q[(h * n + t) * d + x] * keys[g][j * d + x];
              w.push(dot / Math.sqrt(d));
            }
            const m = Math.max(...w);
            const e = w.map((x) => Math.exp(x - m));
            const sum = e.reduce((a, b) => a + b, 0);
            for (let x = 0; x < d; x++) {
              let want = 0;
              for (let j = 0; j < e.length; j++) want += (e[j] / sum) * values[g][j * d + x];
              const got = output.data[(h * n + t) * d + x];
              assert.ok(Math.abs(got - want) <= 1e-5, `h ${h} t ${t} x ${x}: ${got} vs ${want}`);
            }
            assert.ok(Math.abs(lse.data[h * n + t] - (m + Math.log(sum))) <= 1e-5);
          }
        }
      }
      // Every step carries the layer's count (expected_tokens): the same
      // step sent again is a replay (nothing appended, the same answer), and
      // a handle that missed a step is refused with FAILED_PRECONDITION.
      const before = (await s.info()).layer_tokens[0];
      const q1 = { shape: [hq, 1, d], data: Float32Array.from({ length: hq * d }, (_, i) => Math.sin(i)) };
      const k1 = { shape: [hkv, 1, d], data: Float32Array.from({ length: hkv * d }, (_, i) => Math.cos(i)) };
      const stale = client.session('node-1');
      assert.deepStrictEqual((await stale.info()).layer_tokens, [before]);
      const [once] = await client.extendMany(0, [{ session: s, query: q1, key: k1, value: k1 }]);
      assert.strictEqual(once.replayed, false);
      const [twice] = await client.extendMany(0, [{ session: stale, query: q1, key: k1, value: k1 }]);
      assert.strictEqual(twice.replayed, true);
      assert.deepStrictEqual(Array.from(twice.output.data), Array.from(once.output.data));
      assert.deepStrictEqual((await s.info()).layer_tokens, [before + 1]);
      const late = client.session('node-1');
      late.tokens_ = [before];
      const k2 = { shape: [hkv, 1, d], data: new Float32Array(hkv * d).fill(0.25) };
      await assert.rejects(late.extend(0, { query: q1, key: k2, value: k2 }),
        (err) => err.code === grpc.status.FAILED_PRECONDITION &&
          err.details.includes(`layer 0 holds ${before + 1} tokens, expected_tokens ${before}`));
      // s's own count is right: it steps on.
      await s.extend(0, { key: k1, value: k1 });
      assert.deepStrictEqual((await s.info()).layer_tokens, [before + 2]);
      await s.truncate(before);
      const child = await s.fork('node-1:2');
      assert.deepStrictEqual((await child.info()).layer_tokens, [9]);
      assert.deepStrictEqual((await child.truncate(4)).layer_tokens, [4]);
      assert.deepStrictEqual((await s.info()).layer_tokens, [9]);
      const listed = await client.listSessions();
      assert.ok(listed.sessions.some((x) => x.session_id === 'node-1:2'));
      // Without tokens every caller is the anonymous principal (owner ''),
      // whose bytes are the pool's and whose quota is the pool's limit.
      assert.ok(listed.sessions.every((x) => x.owner === ''));
      assert.strictEqual(listed.owner_bytes_used, listed.cache_bytes_used);
      assert.ok(listed.owner_bytes_used > 0);
      assert.strictEqual(listed.owner_bytes_limit, listed.cache_bytes_limit);
      await s.delete();
      await child.delete();
      await assert.rejects(client.session('node-1').info(), (err) => {
        assert.strictEqual(err.code, grpc.status.NOT_FOUND);
        assert.match(err.details, /may have expired/);
        return true;
      });
      await assert.rejects(client.createSession({ num_layers: 0, num_kv_heads: 1, head_dim: 8 }), (err) => {
        assert.strictEqual(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, /num_layers: must be in \[1, 4096\], got 0/);
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
