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

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');
const definition = protoLoader.loadSync(
  ['attention/v1/attention.proto', 'grpc/health/v1/health.proto'],
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

class AttentionClient {
  constructor(target = 'localhost:50051', { maxMessageMb = 64, timeoutMs = 30000 } = {}) {
    const options = {
      'grpc.max_send_message_length': maxMessageMb << 20,
      'grpc.max_receive_message_length': maxMessageMb << 20,
    };
    const creds = grpc.credentials.createInsecure();
    this.stub = new proto.attention.v1.AttentionService(target, creds, options);
    this.health_ = new proto.grpc.health.v1.Health(target, creds, options);
    this.timeoutMs = timeoutMs;
  }

  close() {
    this.stub.close();
    this.health_.close();
  }

  call_(stub, method, request) {
    const deadline = new Date(Date.now() + this.timeoutMs);
    return new Promise((resolve, reject) => {
      stub[method](request, { deadline }, (err, resp) => (err ? reject(err) : resolve(resp)));
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
}

module.exports = { AttentionClient, toTensor, fromTensor, grpc };
