#!/usr/bin/env python3
"""The layering and the rooms of ARCHITECTURE.md, checked on every #include.

Layers (which may use which):

  core   -> the standard library and oneDNN only (no gRPC, protobuf, spdlog)
  wire   -> core, proto, gRPC
  server -> core, wire, proto, gRPC, spdlog       (never client/)
  client -> core, wire, proto, gRPC               (never server/)

Rooms: inside a layer's src/, each folder is a room with a rank; a file may
include its own room's files and those of rooms ranked below, never above
or beside (ROOMS). "" is the files directly in src/. On top of the ranks:

  server: a protocol front end (attention_v1/, oip/) includes no other
          protocol's files; call/ includes no front end; ops/ knows no
          protocol (no front end, no call/, no generated protocol header);
  core:   kernels/ includes no model code (models/, attn/model.h,
          attn/safetensors.h);
  client: no include runs back up (the library, then bench/, then cli/).

Every source file is in a declared room, and no folder holds more than
MAX_FILES_PER_FOLDER sources. A quoted include is "attn/..." (core's public
headers), "wire/..." (wire's), a generated proto header ("attention/v1/...",
"grpc/health/...", "inference/...") or a path under the including layer's
src/ ("call/dispatch.h"); anything else is a failure.

Usage: check_layers.py [ROOT]     exit 1 with a list on a breach
       check_layers.py --self-test  plants each kind of breach in a copy of
                                    the tree and fails unless each is caught
"""
import os
import re
import shutil
import sys
import tempfile

import source_tree

ALLOWED = {
    "core": {"core"},
    "wire": {"core", "wire", "proto"},
    "server": {"core", "wire", "proto", "server"},
    "client": {"core", "wire", "proto", "client"},
}
FORBIDDEN_SYSTEM = {
    "core": ("grpc", "grpcpp", "google/protobuf", "spdlog", "absl"),
    "wire": ("spdlog",),
    "client": ("spdlog",),
    "server": (),
}
# layer -> room -> rank. Rooms of one rank are siblings: neither may include
# the other.
ROOMS = {
    "core": {"support": 0, "kernels": 1, "": 2, "kvformats": 3, "models": 4, "kvcache": 4},
    "wire": {"": 0},
    "server": {"ops": 0, "models": 0, "call": 1, "sessions": 2, "attention_v1": 3, "oip": 3,
               "": 4},
    "client": {"": 0, "bench": 1, "cli": 2},
}
PROTOCOL_HEADERS = ("attention/v1/", "grpc/health/", "inference/")
MODEL_HEADERS = ("attn/model.h", "attn/safetensors.h")
MAX_FILES_PER_FOLDER = 12
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def room_of(root, layer, path):
    """(room, ok): the room of a source file of `layer`; public headers
    (LAYER/include/) are the layer's API, room None."""
    src = os.path.join(root, layer, "src")
    rel = os.path.relpath(path, src)
    if rel.startswith(".."):
        return None, True
    parts = rel.split(os.sep)
    room = parts[0] if len(parts) > 1 else ""
    return room, room in ROOMS[layer]


def resolve(root, layer, header):
    """(owner, room) of a quoted include in `layer`."""
    if header.startswith("attn/"):
        return "core", None
    if header.startswith("wire/"):
        return "wire", None
    if header.startswith(PROTOCOL_HEADERS):
        return "proto", None
    for other in [layer] + [l for l in ALLOWED if l != layer]:
        if os.path.isfile(os.path.join(root, other, "src", header)):
            parts = header.split("/")
            return other, parts[0] if len(parts) > 1 else ""
    return "unknown", None


def room_rule(layer, room, header, target_room):
    """The breach of a room rule by `header` (in room `target_room`, or a
    public/protocol header when None), or None."""
    if layer == "core" and room == "kernels" and (
            header.startswith(MODEL_HEADERS) or target_room == "models"):
        return "kernels/ includes no model code"
    if layer == "server" and room == "ops" and (
            header.startswith(PROTOCOL_HEADERS) or target_room in ("call", "attention_v1", "oip")):
        return "ops/ knows no protocol"
    if target_room is None or target_room == room:
        return None
    ranks = ROOMS[layer]
    if ranks[target_room] < ranks[room]:
        return None
    if layer == "server" and room in ("attention_v1", "oip") and target_room in ("attention_v1", "oip"):
        return "a protocol front end includes no other protocol's files"
    if layer == "server" and room == "call":
        return "call/ includes no protocol front end"
    if layer == "client":
        return "no include runs back up inside client/ (library, then bench/, then cli/)"
    return f"{room or 'src'}/ may not include {target_room or 'src'}/ (rank {ranks[target_room]} >= {ranks[room]})"


def check(root):
    sources = {layer: source_tree.sources(root, layer) for layer in ALLOWED}
    problems, count = [], 0
    folders = {}
    for layer, paths in sources.items():
        for path in paths:
            rel = os.path.relpath(path, root)
            folders.setdefault(os.path.dirname(rel), []).append(rel)
            room, ok = room_of(root, layer, path)
            if not ok:
                problems.append(f"{rel}: not in a room of {layer}/src ({', '.join(r or 'src' for r in ROOMS[layer])})")
                continue
            for kind, header in INCLUDE.findall(open(path, encoding="utf-8").read()):
                count += 1
                if kind == "<":
                    if FORBIDDEN_SYSTEM[layer] and header.startswith(FORBIDDEN_SYSTEM[layer]):
                        problems.append(f"{rel}: <{header}> is not allowed in {layer}/")
                    continue
                owner, target_room = resolve(root, layer, header)
                if owner not in ALLOWED[layer]:
                    problems.append(f'{rel}: "{header}" belongs to {owner}, which {layer}/ may not use')
                    continue
                if room is None:  # a public header: the layer's API, no rooms
                    continue
                if owner == layer and target_room is not None and target_room not in ROOMS[layer]:
                    problems.append(f'{rel}: "{header}" is not in a room of {layer}/src')
                    continue
                breach = room_rule(layer, room, header, target_room if owner == layer else None)
                if breach:
                    problems.append(f'{rel}: "{header}": {breach}')
    for folder, files in sorted(folders.items()):
        if len(files) > MAX_FILES_PER_FOLDER:
            problems.append(f"{folder}/: {len(files)} sources, more than {MAX_FILES_PER_FOLDER}: split it into rooms")
    files = sum(len(p) for p in sources.values())
    return count, files, problems


def main(root):
    count, files, problems = check(root)
    return source_tree.report(f"{count} includes checked in {files} files", problems, count)


# (what is planted, the file it goes into, the line, the words the failure must say)
PLANTS = [
    ("front end -> other protocol", "server/src/attention_v1/attention_service.cc",
     '#include "oip/oip_json.h"', "no other protocol"),
    ("call -> front end", "server/src/call/dispatch.cc",
     '#include "attention_v1/attention_service.h"', "call/ includes no protocol front end"),
    ("ops -> protocol header", "server/src/ops/server_metrics.cc",
     '#include "attention/v1/attention.pb.h"', "ops/ knows no protocol"),
    ("ops -> call", "server/src/ops/server_log.cc",
     '#include "call/prepared_call.h"', "ops/ knows no protocol"),
    ("kernels -> model header", "core/src/kernels/simd/small_matmul.cc",
     '#include "attn/model.h"', "kernels/ includes no model code"),
    ("kernels -> models/", "core/src/kernels/blocked_attention.cc",
     '#include "models/none.h"', "kernels/ includes no model code"),
    ("client library -> bench", "client/src/request_builder.cc",
     '#include "bench/bench_config.h"', "runs back up"),
    ("client bench -> cli", "client/src/bench/bench_loop.cc",
     '#include "cli/flags.h"', "runs back up"),
    ("core -> gRPC", "core/src/support/status.cc", "#include <grpcpp/grpcpp.h>", "not allowed in core/"),
    ("server -> client", "server/src/main.cc", '#include "request_builder.h"', "belongs to client"),
    ("a flat include that resolves nowhere", "server/src/call/dispatch.cc",
     '#include "server_log.h"', "belongs to unknown"),
]


def self_test():
    real = source_tree.default_root(__file__)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for layer in ALLOWED:
            for path in source_tree.sources(real, layer):
                dst = os.path.join(tmp, os.path.relpath(path, real))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(path, dst)
        os.makedirs(os.path.join(tmp, "core/src/models"), exist_ok=True)
        open(os.path.join(tmp, "core/src/models/none.h"), "w").close()
        _, _, clean = check(tmp)
        if clean:
            failures.append("the unplanted copy already fails: " + "; ".join(clean))
        for what, rel, line, words in PLANTS:
            path = os.path.join(tmp, rel)
            before = open(path, encoding="utf-8").read()
            with open(path, "a", encoding="utf-8") as f:
                f.write("\n" + line + "\n")
            _, _, problems = check(tmp)
            if not any(words in p and rel in p for p in problems):
                failures.append(f"{what}: not caught ({problems})")
            with open(path, "w", encoding="utf-8") as f:
                f.write(before)
        # A file outside any room, and a folder over the limit.
        stray = os.path.join(tmp, "server/src/misc/helpers.cc")
        os.makedirs(os.path.dirname(stray))
        open(stray, "w").close()
        if not any("not in a room" in p for p in check(tmp)[2]):
            failures.append("a file outside the rooms: not caught")
        os.remove(stray)
        for i in range(MAX_FILES_PER_FOLDER + 1):
            open(os.path.join(tmp, f"server/src/ops/extra_{i}.h"), "w").close()
        if not any("more than" in p for p in check(tmp)[2]):
            failures.append("a folder over the limit: not caught")
    print(f"{len(PLANTS) + 2} planted breaches")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else source_tree.default_root(__file__)))
