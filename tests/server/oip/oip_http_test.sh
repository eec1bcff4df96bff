#!/usr/bin/env bash
# The Open Inference Protocol over HTTP/JSON, with curl, against the real
# server: every endpoint, JSON and binary tensor data (FP32, FP16, BF16), the
# error codes (400, 401, 404, 413, 429) with their {"error": ...} bodies, and
# the metrics labelled by protocol. Expected values come from numpy in double
# precision. Usage: oip_http_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../scripts/loopback.sh"
binary_test "$1"
py=/usr/bin/python3
work=$(mktemp -d)
trap 'kill ${pid:-} ${pid2:-} ${pid3:-} 2>/dev/null || true; rm -rf "$log" "$work"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
http_port_of() { grep -oE 'OIP HTTP https?://[0-9.]+:[0-9]+' "$1" | grep -oE '[0-9]+$'; }

# call METHOD PATH [curl args...]: sets $code and $body (file $work/body),
# headers in $work/headers.
call() {
  local method=$1 path=$2
  shift 2
  code=$(curl -sS -o "$work/body" -D "$work/headers" -w '%{http_code}' --max-time 60 \
    -X "$method" "$base$path" "$@")
  body=$(tr -d '\0' <"$work/body")
}
expect() {  # expect CODE TEXT: the last call's status, and TEXT in its body
  [ "$code" = "$1" ] || fail "expected HTTP $1, got $code: $body"
  grep -qF -- "$2" "$work/body" || fail "HTTP $1 body lacks '$2': $body"
}

start_server "$log" --metrics-port 0 --http-port 0 --max-message-mb 4
http=$(http_port_of "$log")
metrics=$(grep -oE 'http://[0-9.]+:[0-9]+/metrics' "$log")
base="http://127.0.0.1:$http"

# ---- health and metadata -----------------------------------------------------
call GET /v2/health/live && expect 200 '{"live":true}'
call GET /v2/health/ready && expect 200 '{"ready":true}'
call GET /v2 && expect 200 '"extensions":["binary_tensor_data","parameters"]'
call GET /v2/models/demo-mha-small && expect 200 '"platform":"attention-server_onednn"'
grep -qF '{"name":"key_padding_mask","datatype":"BOOL","shape":[-1,-1]}' "$work/body" || fail "metadata: $body"
call GET /v2/models/demo-mha-small/versions/1 && expect 200 '"versions":["1"]'
call GET /v2/models/demo-mha-small/versions/2 && expect 404 "model_version: model 'demo-mha-small' has version 1 only, got '2'"
call GET /v2/models/scaled_dot_product_attention/ready && expect 200 '"ready":true'
call GET /v2/models/nope/ready && expect 404 "model_name: no model named 'nope'"
call GET /v2/models/nope && expect 404 "model_name: no model named 'nope'"
call GET /v3/whatever && expect 404 'no such endpoint: GET /v3/whatever'

# ---- infer, JSON: the seed's worked example, checked in float64 -----------------
sdpa=/v2/models/scaled_dot_product_attention/infer
call POST $sdpa -H 'Content-Type: application/json' -d '{"id": "seed", "inputs": [{"name": "query",
  "shape": [5, 2], "datatype": "FP32", "data": [[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]]}],
  "outputs": [{"name": "output"}, {"name": "weights"}]}'
expect 200 '"id":"seed"'
$py - "$work/body" <<'PY' || fail "seed example: $body"
import json, sys
import numpy as np
r = json.load(open(sys.argv[1]))
x = np.array([[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]], np.float64)
s = x @ x.T / np.sqrt(2)
p = np.exp(s - s.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
out = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in r["outputs"]}
assert r["outputs"][0]["datatype"] == "FP32"
assert np.allclose(out["output"], p @ x, rtol=1e-6, atol=1e-7), out["output"]
assert np.allclose(out["weights"], p, rtol=1e-6, atol=1e-7)
PY

# ---- infer, binary tensor data: FP32, FP16 and BF16 in, the same out -----------
# Computed in float32 (compute_precision "fp32"), the answer is the float64
# one on the widened inputs, rounded once to the wire type. BF16auto sends
# BF16 without the parameter: the server's auto policy computes bf16 where
# the CPU has a bf16 matrix tier, and the answer says which it used.
for dtype in FP32 FP16 BF16 BF16auto; do
  header_len=$($py - "$work" "$dtype" <<'PY'
import json, sys
import numpy as np
work, dtype = sys.argv[1], sys.argv[2]
params = {"causal": True, "binary_data_output": True}
if dtype == "BF16auto": dtype = "BF16"
else: params["compute_precision"] = "fp32"
rng = np.random.default_rng(5)
q, k, v = (rng.standard_normal((2, 4, 6, 8), dtype=np.float32) for _ in range(3))
def raw(a):
    if dtype == "FP16": return a.astype(np.float16).tobytes()
    if dtype == "BF16":
        u = a.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    return a.tobytes()
blobs = [raw(a) for a in (q, k, v)]
header = json.dumps({"inputs": [{"name": n, "shape": list(a.shape), "datatype": dtype,
                                 "parameters": {"binary_data_size": len(b)}}
                                for n, a, b in zip(("query", "key", "value"), (q, k, v), blobs)],
                     "parameters": params}).encode()
open(f"{work}/req.bin", "wb").write(header + b"".join(blobs))
np.savez(f"{work}/qkv.npz", q=q, k=k, v=v)
print(len(header))
PY
)
  call POST $sdpa -H "Inference-Header-Content-Length: $header_len" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$work/req.bin"
  [ "$code" = 200 ] || fail "$dtype binary: HTTP $code: $body"
  json_len=$(grep -i '^Inference-Header-Content-Length:' "$work/headers" | tr -dc 0-9)
  [ -n "$json_len" ] || fail "$dtype: no Inference-Header-Content-Length in the response"
  $py - "$work" "$dtype" "$json_len" <<'PY' || fail "$dtype binary result"
import json, sys
import numpy as np
work, dtype, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
auto = dtype == "BF16auto"
if auto: dtype = "BF16"
body = open(f"{work}/body", "rb").read()
r = json.loads(body[:n]); o = r["outputs"][0]; raw = body[n:]
used = r["parameters"]["compute_precision"]
assert used == "fp32" or (auto and used == "bf16"), r["parameters"]
assert o["datatype"] == dtype, o
assert len(raw) == o["parameters"]["binary_data_size"]
if dtype == "FP16": got = np.frombuffer(raw, np.float16).astype(np.float64)
elif dtype == "BF16": got = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
else: got = np.frombuffer(raw, np.float32).astype(np.float64)
assert len(raw) == got.size * (4 if dtype == "FP32" else 2)  # half types: half the bytes
t = np.load(f"{work}/qkv.npz")
def widen(a):
    if dtype == "FP16": return a.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        u = a.view(np.uint32).astype(np.uint64)
        return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32).astype(np.float64)
    return a.astype(np.float64)
q, k, v = widen(t["q"]), widen(t["k"]), widen(t["v"])
s = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
s = np.where(np.triu(np.ones((6, 6), bool), 1), -np.inf, s)
p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
want = (p @ v).ravel()
ulp = {"FP32": 0, "FP16": 2.0**-11, "BF16": 2.0**-8}[dtype]
# bf16 compute: docs/precision.md's bound for N(0, 1) inputs.
atol = 3e-2 if used == "bf16" else 1e-5
assert (np.abs(got - want) <= ulp * np.abs(want) + atol).all(), np.abs(got - want).max()
PY
done

# ---- the attention variants (issue 23): GQA shapes, bottom-right causal, a
# window, softcap, ALiBi and sinks as parameters and inputs, the lse as an
# output; against numpy in float64 -----------------------------------------------
$py - "$work" <<'PY'
import json, sys
import numpy as np
rng = np.random.default_rng(3)
q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
k = rng.standard_normal((1, 2, 9, 8)).astype(np.float32)   # 2 kv heads for 4 query heads
v = rng.standard_normal((1, 2, 9, 8)).astype(np.float32)
slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
sink = rng.standard_normal(4).astype(np.float32)
np.savez(f"{sys.argv[1]}/var.npz", q=q, k=k, v=v, slopes=slopes, sink=sink)
def inp(name, a): return {"name": name, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
body = {"parameters": {"causal": True, "causal_alignment": "bottom_right", "window_left": 4,
                       "softcap": 5.0, "return_lse": True},
        "inputs": [inp("query", q), inp("key", k), inp("value", v),
                   inp("alibi_slopes", slopes), inp("sink_logits", sink)],
        "outputs": [{"name": "output"}, {"name": "lse"}]}
json.dump(body, open(f"{sys.argv[1]}/var.json", "w"))
PY
call POST $sdpa --data-binary "@$work/var.json"
[ "$code" = 200 ] || fail "variants: HTTP $code: $body"
grep -q '"parameters":{"compute_precision":"fp32"}' "$work/body" ||
  fail "the answer does not say its compute precision: $(head -c 300 "$work/body")"
$py - "$work" <<'PY' || fail "variants result"
import json, sys
import numpy as np
t = np.load(f"{sys.argv[1]}/var.npz"); r = json.load(open(f"{sys.argv[1]}/body"))
out = {o["name"]: np.array(o["data"], np.float64).reshape(o["shape"]) for o in r["outputs"]}
q, k, v = (np.repeat(t[n].astype(np.float64), 2, axis=1) if n != "q" else t[n].astype(np.float64)
           for n in ("q", "k", "v"))
lq, lk = 3, 9
s = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
s = 5.0 * np.tanh(s / 5.0)
pos = np.arange(lq)[:, None] + lk - lq; j = np.arange(lk)[None, :]
s = s - t["slopes"].astype(np.float64)[None, :, None, None] * np.abs(pos - j)
s = np.where((j > pos) | (j < pos - 4), -np.inf, s)
sink = t["sink"].astype(np.float64)[None, :, None, None]
m = np.maximum(s.max(-1, keepdims=True), sink)
e = np.exp(s - m); tot = e.sum(-1, keepdims=True) + np.exp(sink - m)
want = (e / tot) @ v; lse = (m + np.log(tot))[..., 0]
assert out["output"].shape == want.shape and out["lse"].shape == lse.shape, (out["output"].shape, out["lse"].shape)
assert np.abs(out["output"] - want).max() < 2e-5, np.abs(out["output"] - want).max()
assert np.abs(out["lse"] - lse).max() < 2e-5, np.abs(out["lse"] - lse).max()
PY
# A packed batch: INT64 offsets as JSON data; each sequence its own problem.
$py - "$work" <<'PY'
import json, sys
import numpy as np
rng = np.random.default_rng(8)
cu_q, cu_k = [0, 2, 2, 6], [0, 3, 4, 9]
q = rng.standard_normal((6, 2, 4)).astype(np.float32)
k = rng.standard_normal((9, 1, 4)).astype(np.float32)
v = rng.standard_normal((9, 1, 4)).astype(np.float32)
np.savez(f"{sys.argv[1]}/packed.npz", q=q, k=k, v=v)
def inp(name, a, dt="FP32"): return {"name": name, "shape": list(np.shape(a)), "datatype": dt, "data": np.ravel(a).tolist()}
body = {"parameters": {"causal": True, "causal_alignment": "bottom_right"},
        "inputs": [inp("query", q), inp("key", k), inp("value", v),
                   inp("cu_seqlens_q", cu_q, "INT64"), inp("cu_seqlens_k", cu_k, "INT64")]}
json.dump(body, open(f"{sys.argv[1]}/packed.json", "w"))
PY
call POST $sdpa --data-binary "@$work/packed.json"
[ "$code" = 200 ] || fail "packed: HTTP $code: $body"
$py - "$work" <<'PY' || fail "packed result"
import json, sys
import numpy as np
t = np.load(f"{sys.argv[1]}/packed.npz"); r = json.load(open(f"{sys.argv[1]}/body"))
o = r["outputs"][0]; out = np.array(o["data"], np.float64).reshape(o["shape"])
assert list(out.shape) == [6, 2, 4], out.shape
cu_q, cu_k = [0, 2, 2, 6], [0, 3, 4, 9]
for s in (0, 2):
    q = t["q"][cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2).astype(np.float64)
    k = np.repeat(t["k"][cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2).astype(np.float64), 2, 0)
    v = np.repeat(t["v"][cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2).astype(np.float64), 2, 0)
    lq, lk = q.shape[1], k.shape[1]
    sc = q @ np.swapaxes(k, -1, -2) / 2.0
    pos = np.arange(lq)[:, None] + lk - lq
    sc = np.where(np.arange(lk)[None, :] > pos, -np.inf, sc)
    p = np.exp(sc - sc.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    got = out[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)
    assert np.abs(got - p @ v).max() < 2e-5, np.abs(got - p @ v).max()
PY
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [2, 1, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}, {"name": "cu_seqlens_q", "shape": [2], "datatype": "INT64", "data": [0, 2]}]}'
expect 400 'cu_seqlens_k: required with cu_seqlens_q'
call GET /v2/models/scaled_dot_product_attention
grep -q '"name":"cu_seqlens_q"' <<<"$body" || fail "metadata lacks cu_seqlens_q: $body"
grep -q '"name":"lse"' <<<"$body" && grep -q '"name":"alibi_slopes"' <<<"$body" ||
  fail "metadata lacks the lse output or the alibi_slopes input: $body"
call POST $sdpa -d '{"parameters": {"causal_alignment": "middle"}, "inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
expect 400 "parameters.causal_alignment: expected 'top_left' or 'bottom_right', got 'middle'"
call POST $sdpa -d '{"parameters": {"window_left": -1}, "inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
expect 400 'window_left: must be >= 0'
call POST $sdpa -d '{"parameters": {"compute_precision": "fp8"}, "inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}'
expect 400 "parameters.compute_precision: expected 'fp32' or 'bf16', got 'fp8'"

# ---- bad input: a clear 4xx, never a crash ------------------------------------
call POST $sdpa -d '{"inputs": [' && expect 400 'body: JSON unexpected end'
call POST $sdpa -d '[1, 2]' && expect 400 'body: expected an object, got an array'
call POST $sdpa -d '{"inputs": [], "extra": 1}' && expect 400 'body.extra: unknown field'
call POST $sdpa -H 'Inference-Header-Content-Length: 99999999999' -d '{"inputs": []}'
expect 400 'Inference-Header-Content-Length: 99999999999 is past the body'
call POST $sdpa -H 'Inference-Header-Content-Length: twelve' -d '{}'
expect 400 "Inference-Header-Content-Length: expected a byte count, got 'twelve'"
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "INT8", "data": [1, 2, 3, 4]}]}'
expect 400 'query: datatype must be FP32, FP16 or BF16, got INT8'
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3]}]}'
expect 400 'inputs[0] (query).data: shape [2, 2] needs 4 values, got 3'
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": ["a"]}]}'
expect 400 'inputs[0] (query).data: expected numbers or bools'
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [1099511627776, 1099511627776], "datatype": "FP32", "data": [1]}]}'
expect 400 'overflows int64'
printf '{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}' >"$work/h.json"
head -c 12 /dev/zero | cat "$work/h.json" - >"$work/short.bin"
call POST $sdpa -H "Inference-Header-Content-Length: $(stat -c %s "$work/h.json")" --data-binary "@$work/short.bin"
expect 400 'inputs[0] (query).parameters.binary_data_size: 16 bytes, but only 12 bytes of binary data remain'
head -c 20 /dev/zero | cat "$work/h.json" - >"$work/long.bin"
call POST $sdpa -H "Inference-Header-Content-Length: $(stat -c %s "$work/h.json")" --data-binary "@$work/long.bin"
expect 400 'body: 4 bytes of binary data left over'
printf '{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]}' >"$work/h.json"
head -c 12 /dev/zero | cat "$work/h.json" - >"$work/mismatch.bin"
call POST $sdpa -H "Inference-Header-Content-Length: $(stat -c %s "$work/h.json")" --data-binary "@$work/mismatch.bin"
expect 400 'query: raw_input_contents[0] has 12 bytes, expected 16'
call POST $sdpa -d '{"inputs": [{"name": "query", "shape": [2], "datatype": "FP32", "data": [1, 2]}], "parameters": {"causal": "yes"}}'
expect 400 'parameters.causal: expected a bool_param, got string_param'
call POST /v2/models/nope/infer -d '{"inputs": []}' && expect 404 "model_name: no model named 'nope'"
call GET $sdpa && expect 404 'no such endpoint: GET'
# Over --max-message-mb: refused from Content-Length, before the body is read.
head -c $((5 << 20)) /dev/zero >"$work/big.bin"
call POST $sdpa --data-binary "@$work/big.bin" && expect 413 'body: over the size limit'
call POST $sdpa -H 'Content-Length: 999999999999' -d '{}' && expect 413 'over the size limit'
call GET /v2/health/live && expect 200 '"live":true'  # still alive

# ---- metrics, labelled by protocol ----------------------------------------------
scrape=$(curl -sS "$metrics")
grep -qE '^attn_requests_total\{rpc="ModelInfer",model="-",code="OK",protocol="oip-http"\} 7$' <<<"$scrape" ||
  fail "metrics: $(grep ModelInfer <<<"$scrape")"
grep -qE '^attn_requests_total\{rpc="ModelInfer",model="-",code="INVALID_ARGUMENT",protocol="oip-http"\}' <<<"$scrape" ||
  fail "metrics lack the refused HTTP calls"
# The OK calls' bodies count too (read by a content reader, not req.body):
# the FP32 binary request alone is 3 x 1536 bytes of tensors.
in_bytes=$(grep -E '^attn_request_bytes_total\{rpc="ModelInfer",protocol="oip-http"\}' <<<"$scrape" | awk '{print $2}')
[ "${in_bytes:-0}" -ge 4608 ] || fail "attn_request_bytes_total for oip-http: $in_bytes, expected >= 4608"
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""

# ---- tokens: 401 without one, health open for probes ----------------------------
echo "s3cret-token" >"$work/tokens"
start_server "$work/log2" --http-port 0 --auth-token-file "$work/tokens"
pid2=$pid
base="http://127.0.0.1:$(http_port_of "$work/log2")"
req='{"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32", "data": [1, 0, 0, 1]}]}'
call POST $sdpa -d "$req" && expect 401 "missing 'authorization: Bearer <token>'"
grep -qi '^WWW-Authenticate: Bearer' "$work/headers" || fail "401 without WWW-Authenticate"
call POST $sdpa -H 'Authorization: Bearer wrong' -d "$req" && expect 401 'invalid bearer token'
call GET /v2 && expect 401 "missing 'authorization: Bearer <token>'"
call POST $sdpa -H 'Authorization: Bearer s3cret-token' -d "$req" && expect 200 '"outputs"'
call GET /v2/health/ready && expect 200 '"ready":true'
kill "$pid2"

# ---- admission: over --max-inflight is 429 with Retry-After -----------------------
start_server "$work/log3" --http-port 0 --max-inflight 1
pid3=$pid
base="http://127.0.0.1:$(http_port_of "$work/log3")"
header_len=$($py - "$work" <<'PY'
import json, sys
import numpy as np
q = np.random.default_rng(0).standard_normal((1, 4, 2048, 64), dtype=np.float32).tobytes()
h = json.dumps({"inputs": [{"name": "query", "shape": [1, 4, 2048, 64], "datatype": "FP32",
                            "parameters": {"binary_data_size": len(q)}}],
                "parameters": {"binary_data_output": True}}).encode()
open(f"{sys.argv[1]}/large.bin", "wb").write(h + q)
print(len(h))
PY
)
for i in 1 2 3 4 5 6; do
  curl -sS -o "$work/adm$i" -D "$work/admh$i" -w '%{http_code}\n' --max-time 120 -X POST "$base$sdpa" \
    -H "Inference-Header-Content-Length: $header_len" --data-binary "@$work/large.bin" >"$work/code$i" &
done
wait $(jobs -p | grep -v "^$pid3\$") 2>/dev/null || true
codes=$(cat "$work"/code? | sort | uniq -c | tr '\n' ' ')
grep -q ' 200' <<<"$codes" || fail "admission: no call succeeded: $codes $(cat "$work/adm1")"
grep -q ' 429' <<<"$codes" || fail "admission: nothing refused with 6 calls and --max-inflight 1: $codes"
for i in 1 2 3 4 5 6; do
  if [ "$(cat "$work/code$i")" = 429 ]; then
    grep -qi '^Retry-After: 1' "$work/admh$i" || fail "429 without Retry-After"
    grep -qF '"error":"server: 1 calls in flight already' "$work/adm$i" || fail "429 body: $(cat "$work/adm$i")"
  fi
done
echo "PASS: OIP HTTP endpoints, JSON and binary, errors, tokens, admission ($codes)"
