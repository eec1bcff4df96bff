#!/usr/bin/env python3
"""The layering of ARCHITECTURE.md, checked on every #include:

  core   -> the standard library and oneDNN only (no gRPC, protobuf, spdlog)
  wire   -> core, proto, gRPC
  server -> core, wire, proto, gRPC, spdlog       (never client/)
  client -> core, wire, proto, gRPC               (never server/)

A quoted include is "attn/..." (core), "wire/..." (wire), a generated proto
header ("attention/v1/...", "grpc/health/...") or a header of the including
folder itself. Usage: check_layers.py [ROOT]; exit 1 with a list on a breach.
"""
import os
import re
import sys

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
    if header.startswith(("attention/v1/", "grpc/health/")):
        return "proto"
    if os.path.basename(header) in folder_headers[layer]:
        return layer
    for other, names in folder_headers.items():
        if os.path.basename(header) in names:
            return other
    return "unknown"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    sources, folder_headers = {}, {}
    for layer in ALLOWED:
        folder_headers[layer] = set()
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            if "node_modules" in dirpath:
                continue
            for n in names:
                if n.endswith(".h"):
                    folder_headers[layer].add(n)
                if n.endswith((".h", ".cc")):
                    sources.setdefault(layer, []).append(os.path.join(dirpath, n))
    problems, count = [], 0
    for layer, paths in sources.items():
        for path in sorted(paths):
            rel = os.path.relpath(path, root)
            for kind, header in INCLUDE.findall(open(path, encoding="utf-8").read()):
                count += 1
                if kind == "<":
                    if header.startswith(FORBIDDEN_SYSTEM[layer]) and FORBIDDEN_SYSTEM[layer]:
                        problems.append(f"{rel}: <{header}> is not allowed in {layer}/")
                    continue
                o = owner(header, layer, folder_headers)
                if o not in ALLOWED[layer]:
                    problems.append(f'{rel}: "{header}" belongs to {o}, which {layer}/ may not use')
    print(f"{count} includes checked in {sum(len(p) for p in sources.values())} files")
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
