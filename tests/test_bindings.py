"""The runtime loads llama-cpp-python's ctypes bindings without its high-level half (the `Llama`
class, its chat formats and disk cache), which would stay resident in every idle server; code
that asks for the high-level API still gets the whole package."""
from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from llmpack.runtime.engine import engine  # noqa: F401 - everything a server's engine imports
from llmpack.runtime.server.lifecycle import serve  # noqa: F401
loaded = sorted(m for m in sys.modules if m.startswith("llama_cpp"))
import llama_cpp
from llama_cpp import mtmd_cpp
whole = llama_cpp.Llama.__name__, llama_cpp.__version__
print(json.dumps({"loaded": loaded, "whole": whole, "mtmd": hasattr(mtmd_cpp, "mtmd_init_from_file"),
                  "same": llama_cpp.llama_decode is sys.modules["llama_cpp.llama_cpp"].llama_decode}))
"""


def test_the_engine_imports_the_bindings_only_and_the_whole_package_loads_on_demand() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["loaded"] == ["llama_cpp", "llama_cpp._ctypes_extensions", "llama_cpp.llama_cpp"]
    assert got["whole"][0] == "Llama" and got["whole"][1].count(".") == 2
    assert got["mtmd"] and got["same"]
