"""Builds the package with its gRPC stubs, generated from the repository's
proto/ at build time into attention_client/_proto (imports rewritten to stay
inside the package). Everything else is in pyproject.toml."""
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto"
PROTOS = ["attention/v1/attention.proto", "attention/v1/session.proto",
          "inference/open_inference_grpc.proto"]


def _protoc(out):
    """protoc with grpc_python_plugin (Debian's protobuf-compiler and
    protobuf-compiler-grpc), else grpc_tools; health.proto goes to the top
    of `out`, as grpc_health would shadow nothing then."""
    plugin = shutil.which("grpc_python_plugin")
    protoc = shutil.which("protoc")
    if protoc and plugin:
        base = [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    else:
        base = [sys.executable, "-m", "grpc_tools.protoc"]
    run = lambda include, files: subprocess.run(  # noqa: E731
        base + ["-I", str(include), f"--python_out={out}", f"--grpc_python_out={out}"] + files,
        check=True)
    run(PROTO, [str(PROTO / p) for p in PROTOS])
    run(PROTO / "grpc/health/v1", [str(PROTO / "grpc/health/v1/health.proto")])


def _rewrite_imports(out):
    """Generated code imports 'attention.v1', 'inference' and 'health_pb2' as
    top-level modules: point them inside the package instead."""
    for path in out.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"^from (attention|inference)(\.[\w.]+)? import",
                      r"from attention_client._proto.\1\2 import", text, flags=re.M)
        text = re.sub(r"^import health_pb2 as", "from attention_client._proto import health_pb2 as",
                      text, flags=re.M)
        path.write_text(text)
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        if not PROTO.is_dir():
            raise SystemExit(f"attention-client: {PROTO} not found: build from the repository")
        out = pathlib.Path(self.build_lib) / "attention_client" / "_proto"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        _protoc(out)
        _rewrite_imports(out)


setup(cmdclass={"build_py": BuildWithStubs})
