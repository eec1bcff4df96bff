"""Kept for old command lines and imports: attention_client/export_model.py is
the tool (`python -m attention_client.export_model ...` once the package is
installed); this file runs or re-exports it from the source tree."""
import importlib.util
import os
import runpy
import sys

_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_client",
                     "export_model.py")
sys.path.insert(0, os.path.dirname(_TOOL))  # for its seed_modules import

if __name__ == "__main__":
    runpy.run_path(_TOOL, run_name="__main__")
else:
    _spec = importlib.util.spec_from_file_location("attention_client_export_model", _TOOL)
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    save_module, write_safetensors = _module.save_module, _module.write_safetensors
    # The seed modules the tool checks against, for `import seed_modules`.
    sys.modules.setdefault("seed_modules", _module.seed_modules)
