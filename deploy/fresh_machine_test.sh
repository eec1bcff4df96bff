#!/usr/bin/env bash
# The README on a fresh Debian 12 machine, literally: a minimal Debian 12
# root (debootstrap, from this machine's Debian mirror) that has none of the
# project's packages, a copy of the checkout in it, then, as root inside it,
# deploy/run.sh (which must install everything it and the README's Python
# need), and once it serves, the README's Python sh block and Python block
# (deploy/run_test.sh's extraction), whose output must be the README's.
# Slow (the packages and a build: about 5 minutes on 2 CPUs): tests/run.sh
# --all runs it.
#   deploy/fresh_machine_test.sh [WORK_DIR]   (default: a temp dir, removed after)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/deploy/packages.sh"
ensure_packages debootstrap
. "$root/tests/scripts/loopback.sh"  # free_port
keep=${1:+1}  # a WORK_DIR given is kept (and reused: the root is not bootstrapped again)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
fs=$work/rootfs
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
  umount "$fs/proc" "$fs/sys" "$fs/dev" 2>/dev/null || true
  [ -n "$keep" ] || rm -rf "$work"
}
trap cleanup EXIT
if [ ! -x "$fs/usr/bin/apt-get" ]; then
  echo "== debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$fs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; echo "FAIL: debootstrap"; exit 1; }
fi
cp /etc/resolv.conf "$fs/etc/resolv.conf"
[ -f /etc/apt/sources.list.d/debian.sources ] && cp /etc/apt/sources.list.d/debian.sources "$fs/etc/apt/sources.list.d/"
mount --bind /proc "$fs/proc"
mount --bind /sys "$fs/sys"
mount --bind /dev "$fs/dev"
# The checkout as a clone would give it: tracked and untracked files, no
# build outputs.
rm -rf "$fs/src"
mkdir -p "$fs/src"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$fs/src" -xf -
for pkg in python3-grpcio libgrpc++-dev g++; do
  if chroot "$fs" dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "note: $pkg is already in the root (a reused WORK_DIR): not a fresh machine"
  fi
done
port=$(free_port)
echo "== deploy/run.sh inside the fresh root (packages and a build: minutes)"
chroot "$fs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash -c "cd /src && deploy/run.sh --host 127.0.0.1 --port $port --http-port -1" \
  >"$work/run.log" 2>&1 &
server_pid=$!
# Up to 30 minutes for the packages and the build, then its SERVING line.
for _ in $(seq 1 1800); do
  grep -q SERVING "$work/run.log" && break
  kill -0 "$server_pid" 2>/dev/null ||
    { tail -40 "$work/run.log"; echo "FAIL: deploy/run.sh exited before serving"; exit 1; }
  sleep 1
done
grep -q SERVING "$work/run.log" || { tail -40 "$work/run.log"; echo "FAIL: not SERVING after 30 min"; exit 1; }
echo "== the README's Python inside the fresh root"
/usr/bin/python3 - "$root/README.md" "$fs/src" "127.0.0.1:$port" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
at = text.index("<!-- first-call.py")
sh = [b for b in re.findall(r"```sh\n(.*?)```", text[:at], re.S) if "venv/bin/pip" in b][-1]
py, out = re.findall(r"```(?:python)?\n(.*?)```", text[at:], re.S)[:2]
open(sys.argv[2] + "/readme.sh", "w").write(sh)
open(sys.argv[2] + "/first_call.py", "w").write(py.replace("localhost:50051", sys.argv[3]))
open(sys.argv[2] + "/expected.txt", "w").write(out)
PY
chroot "$fs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash -c "cd /src && bash -euo pipefail readme.sh" >"$work/python.out" 2>&1 ||
  { cat "$work/python.out"; echo "FAIL: the README's Python in the fresh root"; exit 1; }
tail -n "$(wc -l <"$fs/src/expected.txt")" "$work/python.out" | diff -u "$fs/src/expected.txt" - ||
  { cat "$work/python.out"; echo "FAIL: the README's Python printed something else"; exit 1; }
echo "PASS: on a fresh Debian 12 root, deploy/run.sh served and the README's Python printed its output"
