#!/usr/bin/env bash
# The Python package as a user installs it: a fresh venv with Debian's
# packages (--system-site-packages), pip install --no-build-isolation
# --no-index ./client/python (offline; the stubs are generated from proto/
# at build time), then pytest on test_package.py from outside the source
# tree, against the server binary.
#   package_test.sh SERVER_BIN WORK_DIR
set -euo pipefail
server=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# A copy of the sources (no build outputs: a stale build/ would be reused),
# so that the build leaves nothing in the checkout; setup.py finds proto/
# two levels above the package's folder.
mkdir -p "$work/tree/client/python"
tar -C "$root/client/python" --exclude=build --exclude='*.egg-info' --exclude=_proto \
  --exclude=__pycache__ --exclude=generated -cf - . | tar -C "$work/tree/client/python" -xf -
cp -r "$root/proto" "$work/tree/proto"
"$work/venv/bin/pip" install -q --no-build-isolation --no-index --no-deps "$work/tree/client/python"
cd "$work"  # outside the source tree: the import must be the installed package
ATTN_EXPECT_INSTALLED=1 ATTN_SERVER_BIN=$server timeout 600 \
  "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$here/test_package.py"
