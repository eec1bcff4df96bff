"""Which BLAS PyTorch actually runs, read from the process's own memory map.

Debian's python3-torch links the generic libblas.so.3, which the alternatives
system points at the reference BLAS (libblas3) unless libopenblas0-pthread is
installed. The reference BLAS makes nn.MultiheadAttention about 20x slower
(B1 L2048 E512 H8: 2,604 ms against 131 ms), so a PyTorch column measured on
it is meaningless. The benchmark scripts install OpenBLAS when they find
torch, record what torch loaded (loaded_blas) and refuse a PyTorch column
whose BLAS is not OpenBLAS (is_openblas).

Run as a script, it prints the record as JSON and exits 1 when torch's BLAS
is not OpenBLAS.
"""
import json
import sys


def blas_of_maps(lines):
    """The BLAS libraries among /proc/PID/maps lines: {"kind", "paths"}.

    kind is "openblas", "mkl", "reference" (Debian's libblas3, or any other
    libblas.so), or "none" when no BLAS is mapped.
    """
    paths = set()
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        path = fields[5].strip()
        name = path.rsplit("/", 1)[-1].lower()
        if "blas" in name or "mkl" in name:
            paths.add(path)
    paths = sorted(paths)
    low = [p.lower() for p in paths]
    if any("openblas" in p for p in low):
        kind = "openblas"
    elif any("mkl" in p for p in low):
        kind = "mkl"
    elif paths:
        kind = "reference"
    else:
        kind = "none"
    return {"kind": kind, "paths": paths}


def loaded_blas():
    """What this process's torch has mapped, after a matmul that needs BLAS."""
    import torch

    a = torch.ones(128, 128)
    (a @ a).sum().item()
    with open("/proc/self/maps") as f:
        return blas_of_maps(f)


def is_openblas(record):
    return bool(record) and record.get("kind") == "openblas"


def describe(record):
    """One line for a table header: the kind and the library's file."""
    if not record:
        return "BLAS not recorded"
    paths = record.get("paths") or []
    return f"{record.get('kind', '?')} BLAS ({', '.join(paths) or 'no library mapped'})"


def main():
    record = loaded_blas()
    print(json.dumps(record))
    return 0 if is_openblas(record) else 1


if __name__ == "__main__":
    sys.exit(main())
