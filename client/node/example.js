#!/usr/bin/env node
'use strict';
// The seed's worked example from Node.js:  node example.js [HOST:PORT]
const { AttentionClient } = require('./attention_client');

async function main() {
  const client = new AttentionClient(process.argv[2] || 'localhost:50051');
  try {
    console.log('health:', await client.health());
    const x = { shape: [5, 2], data: new Float32Array([1, 0, 0, 1, 1, 1, 1, 1, 0.5, 1]) };
    const { output, weights } = await client.attention({ query: x, return_weights: true });
    const rows = (a) => Array.from({ length: a.shape[0] }, (_, i) =>
      Array.from(a.data.slice(i * a.shape[1], (i + 1) * a.shape[1]), (v) => v.toFixed(4)).join(' '));
    console.log('output:\n' + rows(output).join('\n'));
    console.log('weights:\n' + rows(weights).join('\n'));
    for (const m of await client.listModels()) console.log('model:', JSON.stringify(m));
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err.code} ${err.details || err.message}`);
  process.exit(1);
});
