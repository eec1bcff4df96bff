"""Kept for old command lines: attention_client/export_model.py is the tool
(`python -m attention_client.export_model ...` once the package is installed)."""
import os
import runpy
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "attention_client"))
from export_model import save_module, write_safetensors  # noqa: E402,F401

if __name__ == "__main__":
    runpy.run_path(os.path.join(_HERE, "attention_client", "export_model.py"), run_name="__main__")
