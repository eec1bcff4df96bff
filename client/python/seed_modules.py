"""Kept for old imports: the seed's modules live in attention_client/seed_modules.py.
Importing this gives that module itself, so that isinstance checks agree."""
import importlib.util
import os
import sys

try:
    from attention_client import seed_modules as _real
except ImportError:  # the package is not importable (no stubs): load the file
    _spec = importlib.util.spec_from_file_location(
        "attention_client_seed_modules",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_client",
                     "seed_modules.py"))
    _real = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_real)
sys.modules[__name__] = _real
