"""llama-cpp-python's ctypes bindings (`llama_cpp.llama_cpp`), without its high-level half.

The runtime drives llama.cpp through the low-level API only. Importing the `llama_cpp` package
the usual way also runs its `__init__`, which imports the high-level `Llama` class and with it
the chat formats, the disk cache and the speculative helpers: modules llmpack never calls, whose
code stays resident in every idle server (docs/BENCHMARKS.md, idle RSS). So before anything
imports `llama_cpp`, this module puts the package in `sys.modules` with only its bindings
loaded; its submodules (`llama_cpp.llama_cpp`, `mtmd_cpp`, `llama_grammar`) import as usual.
A name the bindings lack (`llama_cpp.Llama`, `__version__`) runs the package's real `__init__`
once, so code that wants the whole package still gets it.

Every llmpack module that needs llama.cpp imports `lc` (the package, bindings first) or
`bindings` (the `llama_cpp.llama_cpp` module itself) from here.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class _BindingsFirst(types.ModuleType):
    """The `llama_cpp` package whose names come from its bindings until one is missing."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name != "__version__":
            raise AttributeError(name)
        low = importlib.import_module("llama_cpp.llama_cpp")
        if hasattr(low, name):
            value = getattr(low, name)
        elif importlib.util.find_spec(f"llama_cpp.{name}") is not None:
            raise AttributeError(name)   # a submodule (`from llama_cpp import mtmd_cpp`): Python imports it
        else:   # the high-level API: run the package's own __init__ into this module, once
            self.__class__ = types.ModuleType   # back to a plain module first: no recursion
            self.__spec__.loader.exec_module(self)
            value = getattr(self, name)
        setattr(self, name, value)
        return value


def _install() -> None:
    if "llama_cpp" in sys.modules:   # imported whole already (a test, the stub's self-test)
        return
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return                        # not installed: the import below fails with Python's own message
    package = _BindingsFirst("llama_cpp")
    package.__spec__, package.__loader__ = spec, spec.loader
    package.__file__, package.__package__ = spec.origin, "llama_cpp"
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["llama_cpp"] = package


_install()

import llama_cpp as lc  # noqa: E402 - after _install, by design
from llama_cpp import llama_cpp as bindings  # noqa: E402

__all__ = ["bindings", "lc"]
