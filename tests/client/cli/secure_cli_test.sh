#!/usr/bin/env bash
# The binaries with mutual TLS and bearer tokens, end to end: certificates
# from the openssl CLI, attention-server with --tls-* and --auth-token-file,
# attention-client (one-shot and bench) with the matching flags, SIGHUP
# reloading the tokens, and /metrics counting the refusals. Tokens must never
# reach the logs or the bench report.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
server="$build/bin/attention-server"
client="$build/bin/attention-client"
dir=$(mktemp -d)
. "$(dirname "$0")/../../scripts/loopback.sh"
trap 'kill ${pid:-} 2>/dev/null || true; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; echo "--- server log"; tail -20 "$dir/server.log"; exit 1; }

# PKI: a CA, a server certificate for 127.0.0.1, a client certificate.
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(
  cd "$dir"
  openssl req -x509 $ec -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >server.ext
  openssl req $ec -subj /CN=localhost -keyout server.key -out server.csr
  openssl x509 -req -days 2 -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -extfile server.ext -out server.pem
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  openssl req $ec -subj /CN=cli -keyout client.key -out client.csr
  openssl x509 -req -days 2 -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -extfile client.ext -out client.pem
) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log"; echo "FAIL: openssl"; exit 1; }

token1=secret-one-$RANDOM$RANDOM
token2=secret-two-$RANDOM$RANDOM
printf '# callers\nteam-cli %s\n' "$token1" >"$dir/tokens"
printf '%s\n' "$token1" >"$dir/token1"
printf '%s\n' "$token2" >"$dir/token2"

start_server "$dir/server.log" --tls-cert "$dir/server.pem" --tls-key "$dir/server.key" \
  --tls-client-ca "$dir/ca.pem" --auth-token-file "$dir/tokens" --metrics-port 0 --http-port 0 \
  --log-level debug
grep -q "transport mutual TLS; bearer tokens 1 loaded" "$dir/server.log" || fail "no security line"
metrics_port=$(grep -oE 'metrics http://[0-9.]+:[0-9]+/metrics' "$dir/server.log" | grep -oE ':[0-9]+/' | tr -d ':/')
target=127.0.0.1:$port
tls=(--target "$target" --tls-ca "$dir/ca.pem" --tls-cert "$dir/client.pem" --tls-key "$dir/client.key")

# Health needs TLS but no token.
[ "$("$client" health "${tls[@]}")" = SERVING ] || fail "health over mTLS"
# No client certificate: the handshake fails.
if "$client" health --target "$target" --tls-ca "$dir/ca.pem" --timeout 2s >/dev/null 2>&1; then
  fail "served a client without a certificate"
fi
# A call: without a token UNAUTHENTICATED; with one the seed example.
out=$("$client" attention "${tls[@]}" --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]' 2>&1) && fail "no token, yet: $out"
grep -q "UNAUTHENTICATED: missing 'authorization: Bearer <token>' metadata" <<<"$out" || fail "wrong refusal: $out"
out=$("$client" attention "${tls[@]}" --token-file "$dir/token1" --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]')
grep -q "0.7988" <<<"$out" || fail "seed example: $out"
out=$(ATTN_TOKEN=$token1 "$client" models "${tls[@]}")
grep -q demo-mha-small <<<"$out" || fail "models with ATTN_TOKEN: $out"
# The same through OIP over gRPC.
out=$("$client" attention "${tls[@]}" --token-file "$dir/token1" --protocol oip --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]')
grep -q "0.7988" <<<"$out" || fail "seed example over OIP: $out"

# OIP over HTTPS: the same certificate, client CA and tokens as the gRPC port.
https=$(grep -oE 'OIP HTTP https://[0-9.]+:[0-9]+' "$dir/server.log" | grep -oE '[0-9]+$') || fail "no HTTPS line"
pki=(--cacert "$dir/ca.pem" --cert "$dir/client.pem" --key "$dir/client.key")
body='{"inputs": [{"name": "query", "shape": [5, 2], "datatype": "FP32", "data": [1, 0, 0, 1, 1, 1, 1, 1, 0.5, 1]}]}'
code=$(curl -sS -o "$dir/h.json" -w '%{http_code}' "${pki[@]}" -X POST -d "$body" \
  "https://127.0.0.1:$https/v2/models/scaled_dot_product_attention/infer")
[ "$code" = 401 ] || fail "HTTPS without a token: $code $(cat "$dir/h.json")"
code=$(curl -sS -o "$dir/h.json" -w '%{http_code}' "${pki[@]}" -H "Authorization: Bearer $token1" \
  -X POST -d "$body" "https://127.0.0.1:$https/v2/models/scaled_dot_product_attention/infer")
[ "$code" = 200 ] && grep -q '0.798781' "$dir/h.json" || fail "HTTPS with a token: $code $(cat "$dir/h.json")"
if curl -sS -o /dev/null --cacert "$dir/ca.pem" "https://127.0.0.1:$https/v2/health/live" 2>/dev/null; then
  fail "HTTPS served a client without a certificate"
fi
if curl -sS -o /dev/null "http://127.0.0.1:$https/v2/health/live" 2>/dev/null; then
  fail "plain HTTP answered on the HTTPS port"
fi

# The bench over mTLS with a token: no errors, and no token in its report.
"$client" bench "${tls[@]}" --token-file "$dir/token1" --op mha --model demo-mha-small \
  --batch 1 --seq-q 16 --concurrency 8 --requests 200 --warmup 0s --verify --no-progress \
  --json "$dir/bench.json" >"$dir/bench.txt" || { cat "$dir/bench.txt"; fail "bench"; }
grep -q '"tls": true' "$dir/bench.json" || fail "bench JSON lacks tls: true"
grep -q '"token": true' "$dir/bench.json" || fail "bench JSON lacks token: true"
! grep -q "$token1" "$dir/bench.json" "$dir/bench.txt" || fail "the token is in the bench report"

# Sessions are their principal's: the CLI shows each one's owner and the
# caller's own bytes beside the pool's.
"$client" session create "${tls[@]}" --token-file "$dir/token1" --session-id cli-owned \
  --num-layers 1 --num-kv-heads 1 --head-dim 8 >"$dir/session.txt" || fail "session create"
grep -q "^cli-owned .* owner=team-cli$" "$dir/session.txt" || fail "no owner: $(cat "$dir/session.txt")"
out=$("$client" session list "${tls[@]}" --token-file "$dir/token1")
grep -qE "^1 sessions; yours 0 of [0-9]+ bytes used; pool 0 of [0-9]+ bytes used$" <<<"$out" || fail "session list: $out"
grep -q "owner=team-cli" <<<"$out" || fail "session list lacks the owner: $out"
grep -q 'rpc=CreateSession protocol=attention.v1 model=- principal="team-cli"' "$dir/server.log" || fail "no principal on the access line"

# SIGHUP: team-cli's token rotates, token2 replaces token1.
printf 'team-cli %s\n' "$token2" >"$dir/tokens"
kill -HUP "$pid"
for _ in $(seq 1 50); do grep -q "reloaded --auth-token-file: 1 tokens" "$dir/server.log" && break; sleep 0.1; done
grep -q "reloaded --auth-token-file: 1 tokens" "$dir/server.log" || fail "no reload line"
kill -0 "$pid" || fail "SIGHUP stopped the server"
"$client" models "${tls[@]}" --token-file "$dir/token1" >/dev/null 2>&1 && fail "the old token still works"
"$client" models "${tls[@]}" --token-file "$dir/token2" >/dev/null || fail "the new token is refused"
out=$("$client" session list "${tls[@]}" --token-file "$dir/token2")
grep -q "^cli-owned .* owner=team-cli$" <<<"$out" || fail "the rotated principal lost its session: $out"

# /metrics counts the refusals; the tokens appear nowhere.
metrics=$(/usr/bin/python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:$metrics_port/metrics', timeout=5).read().decode())")
grep -q 'attn_requests_total{rpc="Attention",model="-",code="UNAUTHENTICATED",protocol="attention.v1"} 1' <<<"$metrics" || fail "metrics: $(echo "$metrics" | grep requests_total)"
grep -q 'attn_requests_total{rpc="MultiHeadAttention",model="demo-mha-small",code="OK",protocol="attention.v1"}' <<<"$metrics" || fail "metrics lack the bench calls"
for t in "$token1" "$token2"; do
  ! grep -q "$t" "$dir/server.log" || fail "a token is in the server log"
  ! grep -q "$t" <<<"$metrics" || fail "a token is in /metrics"
done
echo "PASS: mTLS + bearer tokens end to end, SIGHUP reload, metrics; no token in any log"
