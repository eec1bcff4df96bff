#!/usr/bin/env bash
# deploy/run.sh starts a SERVING server in the foreground with the demo
# models, answers the seed's example through attention-client, serves OIP's
# HTTP/JSON by default (ATTN_HTTP_PORT, here a free port instead of 8000, so
# that parallel tests do not collide; a flag still wins over it), and exits 0
# on SIGTERM. Reuses the test build (BUILD_DIR) so nothing is rebuilt.
# Then the README's Python, as a newcomer runs it right after deploy/run.sh:
# its sh block verbatim (a fresh venv, pip install --no-build-isolation
# --no-index ./client/python) in a copy of the checkout, then its Python
# block, which must print exactly the output the README shows. The packages
# it needs are deploy/run.sh's to install (PYTHON_CLIENT_PACKAGES).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: $0 BUILD_DIR}
client="$build/bin/attention-client"
. "$root/tests/scripts/loopback.sh"
port=$(free_port)
http_port=$(free_port)
log=$(mktemp)
# The default itself: run.sh exports ATTN_HTTP_PORT=8000 when it is unset.
grep -q 'ATTN_HTTP_PORT=${ATTN_HTTP_PORT:-8000}' "$root/deploy/run.sh" ||
  { echo "FAIL: deploy/run.sh does not default HTTP to 8000"; exit 1; }
ATTN_HTTP_PORT=$http_port BUILD_DIR=$build "$root/deploy/run.sh" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
wait_serving "127.0.0.1:$port" $pid
models=$("$client" models --target "127.0.0.1:$port")
grep -q demo-mha <<<"$models" || { echo "FAIL: no demo models"; exit 1; }
out=$("$client" attention --target "127.0.0.1:$port" --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]')
echo "$out"
grep -q '^\[\[0.7988, 0.7616\],' <<<"$out" || { echo "FAIL: seed example"; exit 1; }
# The Quickstart's curl: OIP HTTP/JSON is up without any flag.
ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port/v2/health/ready")
[ "$ready" = 200 ] || { cat "$log"; echo "FAIL: /v2/health/ready on the HTTP port answered '$ready'"; exit 1; }
# The README's Python, against the server deploy/run.sh started.
(. "$root/deploy/packages.sh"
 for need in python3-grpcio python3-protobuf python3-numpy python3-venv python3-setuptools python3-wheel; do
   [[ " ${PYTHON_CLIENT_PACKAGES[*]} " == *" $need "* ]] ||
     { echo "FAIL: deploy/run.sh does not install $need (PYTHON_CLIENT_PACKAGES)"; exit 1; }
 done
 grep -q 'ensure_packages .*PYTHON_CLIENT_PACKAGES' "$root/deploy/run.sh" ||
   { echo "FAIL: deploy/run.sh does not ensure PYTHON_CLIENT_PACKAGES"; exit 1; }) || exit 1
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$log" "$work"' EXIT
# A copy of what a checkout holds (no build outputs), so pip's in-tree build
# leaves nothing behind in this one.
mkdir -p "$work/client/python"
tar -C "$root/client/python" --exclude=build --exclude='*.egg-info' --exclude=_proto \
  --exclude=__pycache__ --exclude=generated -cf - . | tar -C "$work/client/python" -xf -
cp -r "$root/proto" "$work/proto"
/usr/bin/python3 - "$root/README.md" "$work" "127.0.0.1:$port" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
at = text.index("<!-- first-call.py")
sh = [b for b in re.findall(r"```sh\n(.*?)```", text[:at], re.S) if "venv/bin/pip" in b][-1]
py, out = re.findall(r"```(?:python)?\n(.*?)```", text[at:], re.S)[:2]
assert "localhost:50051" in py, "the README's Python no longer calls localhost:50051"
open(sys.argv[2] + "/readme.sh", "w").write(sh)
open(sys.argv[2] + "/first_call.py", "w").write(py.replace("localhost:50051", sys.argv[3]))
open(sys.argv[2] + "/expected.txt", "w").write(out)
PY
(cd "$work" && bash -euo pipefail readme.sh) >"$work/python.out" 2>&1 ||
  { cat "$work/python.out"; echo "FAIL: the README's Python (its sh block, in a fresh venv)"; exit 1; }
tail -n "$(wc -l <"$work/expected.txt")" "$work/python.out" | diff -u "$work/expected.txt" - ||
  { cat "$work/python.out"; echo "FAIL: the README's Python printed something else"; exit 1; }
echo "PASS: the README's Python, in a fresh venv, printed the README's output"
# The int8 session's decode loop, in the same venv.
/usr/bin/python3 - "$root/README.md" "$work" "127.0.0.1:$port" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
at = text.index("<!-- int8-session.py")
py, out = re.findall(r"```(?:python)?\n(.*?)```", text[at:], re.S)[:2]
assert "localhost:50051" in py, "the README's int8 session no longer calls localhost:50051"
open(sys.argv[2] + "/int8_session.py", "w").write(py.replace("localhost:50051", sys.argv[3]))
open(sys.argv[2] + "/int8_expected.txt", "w").write(out)
PY
(cd "$work" && venv/bin/python int8_session.py) >"$work/int8.out" 2>&1 ||
  { cat "$work/int8.out"; echo "FAIL: the README's int8 session"; exit 1; }
diff -u "$work/int8_expected.txt" "$work/int8.out" ||
  { echo "FAIL: the README's int8 session printed something else"; exit 1; }
echo "PASS: the README's int8 session decode loop printed the README's output"
kill -TERM $pid
rc=0
wait $pid || rc=$?
grep -q "demo-mha" "$log" || { cat "$log"; echo "FAIL: startup log lacks the models"; exit 1; }
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc after SIGTERM"; exit 1; }
echo "PASS: deploy/run.sh served the demo models and stopped cleanly"
