#!/usr/bin/env python3
"""The layering of ARCHITECTURE.md, checked on every #include:

  core   -> the standard library and oneDNN only (no gRPC, protobuf, spdlog)
  wire   -> core, proto, gRPC
  server -> core, wire, proto, gRPC, spdlog       (never client/)
  client -> core, wire, proto, gRPC               (never server/)

A quoted include is "attn/..." (core), "wire/..." (wire), a generated proto
header ("attention/v1/...", "grpc/health/...", "inference/...") or a header of the including
folder itself. Usage: check_layers.py [ROOT]; exit 1 with a list on a breach.
"""
import os
import re
import sys

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
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def owner(header, layer, folder_headers):
    if header.startswith("attn/"):
        return "core"
    if header.startswith("wire/"):
        return "wire"
    if header.startswith(("attention/v1/", "grpc/health/", "inference/")):
        return "proto"
    if os.path.basename(header) in folder_headers[layer]:
        return layer
    for other, names in folder_headers.items():
        if os.path.basename(header) in names:
            return other
    return "unknown"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else source_tree.default_root(__file__)
    sources = {layer: source_tree.sources(root, layer) for layer in ALLOWED}
    folder_headers = {layer: {os.path.basename(p) for p in paths if p.endswith(".h")}
                      for layer, paths in sources.items()}
    problems, count = [], 0
    for layer, paths in sources.items():
        for path in paths:
            rel = os.path.relpath(path, root)
            for kind, header in INCLUDE.findall(open(path, encoding="utf-8").read()):
                count += 1
                if kind == "<":
                    if FORBIDDEN_SYSTEM[layer] and header.startswith(FORBIDDEN_SYSTEM[layer]):
                        problems.append(f"{rel}: <{header}> is not allowed in {layer}/")
                    continue
                o = owner(header, layer, folder_headers)
                if o not in ALLOWED[layer]:
                    problems.append(f'{rel}: "{header}" belongs to {o}, which {layer}/ may not use')
    files = sum(len(p) for p in sources.values())
    return source_tree.report(f"{count} includes checked in {files} files", problems, count)


if __name__ == "__main__":
    sys.exit(main())
