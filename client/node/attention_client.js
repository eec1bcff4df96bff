'use strict';
// Node.js client for the Attention Service, on @grpc/grpc-js and
// @grpc/proto-loader (the .proto files are loaded at run time from ../../proto).
//
//   const { AttentionClient } = require('./attention_client');
//   const client = new AttentionClient('localhost:50051');
//   const { output } = await client.attention({
//     query: { shape: [5, 2], data: new Float32Array([1, 0, 0, 1, 1, 1, 1, 1, 0.5, 1]) } });
//
// Arrays are { shape: number[], data: Float32Array } (bool masks: a
// Uint8Array, with dtype 'bool'). Every call returns a Promise that rejects
// with the gRPC error (err.code, err.details).
//
// KV-cache sessions (attention.v1.SessionService):
//   const s = await client.createSession({ num_layers: 1, num_kv_heads: 8, head_dim: 128,
//                                          cache_dtype: 'bfloat16' });
//   const { output } = await s.extend(0, { query, key, value });   // [Hq, n, D], [Hkv, n, D]
//   await s.delete();

const crypto = require('crypto');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');
const definition = protoLoader.loadSync(
  ['attention/v1/attention.proto', 'attention/v1/session.proto', 'grpc/health/v1/health.proto'],
  { includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: false });
const proto = grpc.loadPackageDefinition(definition);

// { shape, data } -> attention.v1.Tensor. encoding 'data' sends raw
// little-endian bytes, 'values' the repeated float field.
function toTensor(array, encoding = 'data') {
  const isBool = array.dtype === 'bool' || array.data instanceof Uint8Array;
  const t = { shape: array.shape, dtype: isBool ? 'DATA_TYPE_BOOL' : 'DATA_TYPE_FLOAT32' };
  if (encoding === 'values') {
    t.values = Array.from(array.data, Number);
  } else if (isBool) {
    t.data = Buffer.from(Uint8Array.from(array.data, (x) => (x ? 1 : 0)));
  } else {
    const f = array.data instanceof Float32Array ? array.data : Float32Array.from(array.data);
    t.data = Buffer.from(f.buffer, f.byteOffset, f.byteLength);
  }
  return t;
}

// attention.v1.Tensor -> { shape, data: Float32Array }.
function fromTensor(t) {
  const shape = (t.shape || []).map(Number);
  if (t.values && t.values.length) return { shape, data: Float32Array.from(t.values) };
  const bytes = t.data || Buffer.alloc(0);
  const copy = new Uint8Array(bytes);  // aligned copy
  return { shape, data: new Float32Array(copy.buffer, 0, copy.byteLength / 4) };
}

// A fresh session id ("s-" and 24 hex digits), a family of its own: made
// here so that the create call carries the header a balancer hashes.
function newSessionId() { return `s-${crypto.randomBytes(12).toString('hex')}`; }
// A fork child's id: newId, or the parent's family and a fresh tail.
function childSessionId(parent, newId) {
  return newId || `${parent.split(':')[0]}:${crypto.randomBytes(8).toString('hex')}`;
}

class AttentionClient {
  // retries: how many times a session step that carries its expected_tokens
  // is sent again after UNAVAILABLE (a replay on the server if it was applied).
  constructor(target = 'localhost:50051', { maxMessageMb = 64, timeoutMs = 30000, retries = 3 } = {}) {
    this.retries = retries;
    const options = {
      'grpc.max_send_message_length': maxMessageMb << 20,
      'grpc.max_receive_message_length': maxMessageMb << 20,
    };
    const creds = grpc.credentials.createInsecure();
    this.stub = new proto.attention.v1.AttentionService(target, creds, options);
    this.health_ = new proto.grpc.health.v1.Health(target, creds, options);
    this.sessions_ = new proto.attention.v1.SessionService(target, creds, options);
    this.timeoutMs = timeoutMs;
  }

  close() {
    this.stub.close();
    this.health_.close();
    this.sessions_.close();
  }

  // `sessionId`: sent as the x-attn-session header, by which a balancer
  // keeps a session's calls on the replica that holds it.
  call_(stub, method, request, sessionId = null) {
    const deadline = new Date(Date.now() + this.timeoutMs);
    const metadata = new grpc.Metadata();
    if (sessionId) metadata.set('x-attn-session', sessionId);
    return new Promise((resolve, reject) => {
      stub[method](request, metadata, { deadline }, (err, resp) => (err ? reject(err) : resolve(resp)));
    });
  }

  // Builds the shared request fields: tensors, masks and projections.
  static request_(fields, encoding) {
    const req = {};
    for (const [key, value] of Object.entries(fields)) {
      if (value === undefined || value === null) continue;
      if (key === 'projections') {
        req.projections = {};
        for (const [name, array] of Object.entries(value)) {
          req.projections[name] = toTensor(array, encoding);
        }
      } else if (value && typeof value === 'object' && 'shape' in value) {
        req[key] = toTensor(key === 'key_padding_mask' ? { ...value, dtype: 'bool' } : value,
          encoding);
      } else {
        req[key] = value;
      }
    }
    return req;
  }

  async run_(method, fields) {
    const { encoding = 'data', ...rest } = fields;
    const resp = await this.call_(this.stub, method, AttentionClient.request_(rest, encoding));
    return { output: fromTensor(resp.output), weights: resp.weights ? fromTensor(resp.weights) : null };
  }

  // { query, key?, value?, model?, projections?, causal?, key_padding_mask?,
  //   attn_bias?, scale?, return_weights?, encoding? } -> { output, weights }
  attention(fields) { return this.run_('Attention', fields); }
  // { decoder, encoder, model? | projections?, ... }
  crossAttention(fields) { return this.run_('CrossAttention', fields); }
  // { query, key?, value?, model? | projections? + num_heads, per_head_weights?, ... }
  multiHeadAttention(fields) { return this.run_('MultiHeadAttention', fields); }

  async listModels() {
    const resp = await this.call_(this.stub, 'ListModels', {});
    return (resp.models || []).map((m) => ({
      name: m.name, kind: m.kind, embed_dim: Number(m.embed_dim || 0),
      num_heads: Number(m.num_heads || 0), kdim: Number(m.kdim || 0), vdim: Number(m.vdim || 0),
    }));
  }

  async health(service = '') {
    const resp = await this.call_(this.health_, 'Check', { service });
    return resp.status || 'UNKNOWN';
  }

  // ---- KV-cache sessions ----------------------------------------------------

  // { num_layers, num_kv_heads, head_dim, value_dim?, cache_dtype? ('float32',
  //   'bfloat16', 'float16'), key_format?, value_format? ('int8', 'fp8_e4m3';
  //   absent: as cache_dtype), max_tokens?, session_id? } -> Session
  async createSession(spec) {
    const dtype = { float32: 'DATA_TYPE_FLOAT32', bfloat16: 'DATA_TYPE_BFLOAT16',
      float16: 'DATA_TYPE_FLOAT16' }[spec.cache_dtype || 'float32'];
    if (!dtype) throw new Error(`cache_dtype: expected float32, bfloat16 or float16, got ${spec.cache_dtype}`);
    const formats = {};
    for (const field of ['key_format', 'value_format']) {
      const name = spec[field];
      if (name === undefined || name === null) continue;
      const wire = CACHE_FORMATS[name];
      if (!wire) throw new Error(`${field}: expected int8, fp8_e4m3 or int4, got ${name}`);
      formats[field] = wire;
    }
    const id = spec.session_id || newSessionId();
    const info = await this.call_(this.sessions_, 'CreateSession',
      { ...spec, ...formats, session_id: id, cache_dtype: dtype }, id);
    return new Session(this, info.session_id, (info.layer_tokens || []).map(Number));
  }

  // A handle on an existing session (nothing is sent).
  session(id) { return new Session(this, id); }

  async listSessions() {
    const r = await this.call_(this.sessions_, 'ListSessions', {});
    return { sessions: (r.sessions || []).map(sessionInfo),
      cache_bytes_used: Number(r.cache_bytes_used || 0), cache_bytes_limit: Number(r.cache_bytes_limit || 0),
      owner_bytes_used: Number(r.owner_bytes_used || 0),
      owner_bytes_limit: Number(r.owner_bytes_limit || 0) };
  }

  // One Extend of several sessions as a batch. steps: [{ session (a Session or
  // an id), query?, key?, value? }]; options: { causal (default true), scale,
  // window_left, window_right, softcap, alibi_slopes, sink_logits, return_lse }.
  // -> [{ output, lse, replayed }] per step. A Session's step carries its
  // layer's token count (expected_tokens): when every step does, the call is
  // sent again after UNAVAILABLE (up to `retries` times), each step applied
  // once (a step the server had applied is a replay).
  async extendMany(layer, steps, options = {}) {
    const expected = [];
    for (const st of steps) {
      expected.push(st.session instanceof Session ? await st.session.expected_(layer) : null);
    }
    const { causal = true, scale, encoding = 'data', ...rest } = options;
    const opts = { causal_alignment: 'CAUSAL_ALIGNMENT_BOTTOM_RIGHT' };
    for (const [key, value] of Object.entries(rest)) {
      if (value === undefined || value === null) continue;
      opts[key] = typeof value === 'object' && 'shape' in value ? toTensor(value, encoding) : value;
    }
    const req = { layer, causal, options: opts, steps: steps.map((st, i) => {
      const out = { session_id: typeof st.session === 'string' ? st.session : st.session.id };
      for (const f of ['query', 'key', 'value']) if (st[f]) out[f] = toTensor(st[f], encoding);
      if (expected[i] !== null) out.expected_tokens = expected[i];
      return out;
    }) };
    if (scale !== undefined) req.scale = scale;
    const safe = expected.every((e) => e !== null);
    let resp;
    for (let attempt = 0; ; attempt++) {
      try {
        resp = await this.call_(this.sessions_, 'Extend', req,
          steps.length === 1 ? req.steps[0].session_id : null);
        break;
      } catch (err) {
        if (!safe || attempt >= this.retries || err.code !== grpc.status.UNAVAILABLE) throw err;
        await new Promise((r) => setTimeout(r, 100 * 2 ** Math.min(attempt, 4)));
      }
    }
    steps.forEach((st, i) => {
      if (expected[i] !== null) st.session.tokens_[layer] = expected[i] + (st.key ? st.key.shape[1] : 0);
    });
    const replayed = resp.replayed || [];
    return (resp.results || []).map((r, i) => ({
      output: fromTensor(r.output), lse: r.lse ? fromTensor(r.lse) : null,
      replayed: Boolean(replayed[i]) }));
  }
}

const CACHE_FORMATS = { int8: 'CACHE_FORMAT_INT8', fp8_e4m3: 'CACHE_FORMAT_FP8_E4M3',
  int4: 'CACHE_FORMAT_INT4' };
// A side's format as info() gives it: 'int8', 'fp8_e4m3', or null (as cache_dtype).
function formatName(wire) {
  const hit = Object.entries(CACHE_FORMATS).find(([, w]) => w === wire);
  return hit ? hit[0] : null;
}

function sessionInfo(m) {
  return { session_id: m.session_id, num_layers: m.num_layers, num_kv_heads: m.num_kv_heads,
    head_dim: m.head_dim, value_dim: m.value_dim, cache_dtype: m.cache_dtype,
    key_format: formatName(m.key_format), value_format: formatName(m.value_format),
    max_tokens: Number(m.max_tokens || 0), layer_tokens: (m.layer_tokens || []).map(Number),
    cache_bytes: Number(m.cache_bytes || 0), owner: m.owner || '' };
}

// One session: extend, fork, truncate, info, delete.
class Session {
  // layerTokens: each layer's count when known (else asked for once).
  constructor(client, id, layerTokens = null) {
    this.client = client;
    this.id = id;
    this.tokens_ = layerTokens;
  }

  async expected_(layer) {
    if (this.tokens_ === null) await this.info();
    return layer >= 0 && layer < this.tokens_.length ? this.tokens_[layer] : null;
  }

  // Appends { key, value } ([Hkv, n, D]) to `layer`, then attends { query }
  // ([Hq, n_q, D]) over the layer, bottom-right; options as for extendMany.
  async extend(layer, { query, key, value, ...options } = {}) {
    return (await this.client.extendMany(layer, [{ session: this, query, key, value }], options))[0];
  }

  // The child's id is newId (in this session's family, 'family:...') or one
  // made here in the family, so that a balancer routes it with its parent.
  async fork(newId = '') {
    const info = await this.client.call_(this.client.sessions_, 'ForkSession',
      { session_id: this.id, new_session_id: childSessionId(this.id, newId) }, this.id);
    return new Session(this.client, info.session_id, (info.layer_tokens || []).map(Number));
  }

  async truncate(tokens) {
    const info = sessionInfo(await this.client.call_(this.client.sessions_, 'TruncateSession',
      { session_id: this.id, tokens }, this.id));
    this.tokens_ = info.layer_tokens.slice();
    return info;
  }

  // Also resynchronizes the handle's token counts (after FAILED_PRECONDITION).
  async info() {
    const info = sessionInfo(await this.client.call_(this.client.sessions_, 'GetSession',
      { session_id: this.id }, this.id));
    this.tokens_ = info.layer_tokens.slice();
    return info;
  }

  async delete() {
    return sessionInfo(await this.client.call_(this.client.sessions_, 'DeleteSession',
      { session_id: this.id }, this.id));
  }
}

module.exports = { AttentionClient, Session, toTensor, fromTensor, grpc, newSessionId, childSessionId };
