#!/usr/bin/env bash
# attention-client bench --html, looked at the way a person does: a short
# 3-level run against the real server, then Debian's headless Chromium
# renders the page, takes a screenshot and dumps the DOM. Checks: the
# latency-throughput chart has a p50 and a p99 point per level, a histogram
# per level with its 10 bars, the percentile table a row per level, a PNG of
# the page size, and no console message (the page has no scripts; anything
# on the console is an error). A page with a failing script must be caught
# by the same check, so the check is run on one first.
#   tests/client/bench/bench_html_test.sh BUILD_DIR [OUT_DIR]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [OUT_DIR]}
. "$(dirname "$0")/../../scripts/loopback.sh"
binary_test "$build"
out=${2:-$(mktemp -d)}
mkdir -p "$out"
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || { echo "FAIL: chromium is not installed (deploy/packages.sh)"; exit 1; }

# render FILE NAME: a screenshot (NAME.png), the DOM (NAME.dom) and the
# console (NAME.log), each bounded in time.
render() {
  local flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
    --user-data-dir="$out/profile" --enable-logging=stderr --v=0)
  timeout 90 "$chromium" "${flags[@]}" --window-size=1200,1800 --screenshot="$out/$2.png" \
    "file://$1" 2>"$out/$2.log" >/dev/null
  timeout 90 "$chromium" "${flags[@]}" --dump-dom "file://$1" >"$out/$2.dom" 2>>"$out/$2.log"
}
console_errors() { grep -E 'CONSOLE|Uncaught' "$out/$1.log" || true; }

# The check catches a page whose script fails.
echo '<!DOCTYPE html><html><body><script>undefined_function()</script></body></html>' \
  >"$out/broken.html"
render "$out/broken.html" broken
[ -n "$(console_errors broken)" ] \
  || { echo "FAIL: a failing script was not seen on the console"; cat "$out/broken.log"; exit 1; }

start_server "$log" --threads 2
"$client" bench --target "127.0.0.1:$port" --op mha --model demo-mha-small --seq-q 16 \
  --concurrency 1,2,4 --duration 1s --warmup 300ms --no-progress --latency-slo p99=200ms \
  --html "$out/report.html" --json "$out/report.json" >"$out/bench.txt"
render "$out/report.html" report
errors=$(console_errors report)
[ -z "$errors" ] || { echo "FAIL: console messages on the report: $errors"; exit 1; }

/usr/bin/python3 - "$out" <<'PY'
import json, re, struct, sys
out = sys.argv[1]
dom = open(f"{out}/report.dom").read()
levels = len(json.load(open(f"{out}/report.json"))["levels"])
assert levels == 3, levels
def count(pattern):
    return len(re.findall(pattern, dom))
checks = {
    "p50 points": (count(r'<circle class="point p50"'), levels),
    "p99 points": (count(r'<circle class="point p99"'), levels),
    "chart lines": (count(r'<polyline class="series'), 2),
    "histograms": (count(r'<svg class="histogram"'), levels),
    "histogram bars": (count(r'<rect class="bar"'), 10 * levels),
    "percentile rows": (len(re.findall(r"<tr", dom.split('id="percentiles"')[1].split("</table>")[0])) - 1, levels),
    "external resources": (count(r'(src|href)="(https?:)?//'), 0),
    "scripts": (count(r"<script"), 0),
}
bad = {k: v for k, v in checks.items() if v[0] != v[1]}
assert not bad, f"DOM checks (got, want): {bad}"
png = open(f"{out}/report.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", png[16:24])
assert (width, height) == (1200, 1800), (width, height)
assert len(png) > 20000, f"a {len(png)}-byte screenshot is too small to hold the charts"
print(f"DOM: {levels} levels, {checks['p50 points'][0]}+{checks['p99 points'][0]} points, "
      f"{checks['histogram bars'][0]} bars; screenshot {width}x{height}, {len(png)} bytes")
PY
echo "PASS: the report renders in Chromium with every chart element and no console errors"

# bench --op decode's page: its figures table and the token-latency chart.
"$client" bench --target "127.0.0.1:$port" --op decode --concurrency 2 --sessions 1 \
  --num-layers 2 --prefill 64 --num-heads 4 --num-kv-heads 2 --dim 16 --duration 1s \
  --warmup 200ms --html "$out/decode.html" >"$out/decode.txt"
render "$out/decode.html" decode
errors=$(console_errors decode)
[ -z "$errors" ] || { echo "FAIL: console messages on the decode report: $errors"; exit 1; }
/usr/bin/python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
dom = open(f"{out}/decode.dom").read()
figures = dom.split('id="figures"')[1].split("</table>")[0]
for label in ("session-steps/s", "ms per token (2 layer steps)", "tokens/s", "mean cache length",
              "cache read", "memory-bound limit"):
    assert label in figures, f"the decode page lacks '{label}'"
bars = len(re.findall(r'<rect class="bar"', dom))
assert bars == 20, f"{bars} histogram bars, expected 20"
assert "<script" not in dom
png = open(f"{out}/decode.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, len(png)
print(f"decode page: the figures and {bars} bars; screenshot {len(png)} bytes")
PY
echo "PASS: the decode report renders in Chromium with its figures and chart"
