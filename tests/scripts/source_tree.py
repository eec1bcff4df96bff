"""What the source checks (check_code_size.py, check_layers.py) share: the
C++ sources of each layer, and the report."""
import os

LAYERS = ["core", "wire", "server", "client"]


def default_root(script):
    return os.path.join(os.path.dirname(os.path.abspath(script)), "..", "..")


def sources(root, layer):
    """Sorted paths of the .cc and .h files under root/layer (node_modules
    skipped)."""
    found = []
    for dirpath, _, names in os.walk(os.path.join(root, layer)):
        if "node_modules" in dirpath:
            continue
        found += [os.path.join(dirpath, n) for n in names if n.endswith((".cc", ".h"))]
    return sorted(found)


def report(summary, problems, checked):
    """Prints the summary and each problem; the exit code (1 on a problem or
    when nothing was checked, so that a check cannot pass by seeing nothing)."""
    print(summary)
    for p in problems:
        print("FAIL: " + p)
    return 1 if problems or checked == 0 else 0
