"""Windows: system DLLs come from the system, ours from our own folders, none from the program's.

Why: Windows looks for a DLL in the program's own folder before System32. chat.exe is a
download, and downloads share one folder, where a web page can drop a `vulkan-1.dll` or
`nvcuda.dll` of its own: when ggml-vulkan.dll asked for vulkan-1.dll by name, that one was
loaded and ran as the user. Microsoft's guidance (Dynamic-Link Library Security) is followed:

* `restrict()` runs first thing at start-up (builder/stub_entry.py, again in
  backends.load_backends for `llmpack` run from Python): SetDefaultDllDirectories with System32
  and the folders added with AddDllDirectory only, and those folders are our own bundled
  libraries (llama_cpp/lib, the bundle folder). Every LoadLibrary without flags (ggml loading a
  backend) and the imports of what it loads are then searched there, not in the program's folder;
* ctypes loads our own libraries with OWN_LIBRARY (their own folder, System32, ours), not with
  Python's default, which adds the program's folder back;
* a system library we open ourselves (vulkan-1.dll, nvcuda.dll) is opened by its full System32
  path (`system_dll`), so the one in memory is the system's whatever asks for it by name later.

On other systems these do nothing; the dynamic loader there never looks in the current folder.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR = 0x100
LOAD_LIBRARY_SEARCH_USER_DIRS = 0x400
LOAD_LIBRARY_SEARCH_SYSTEM32 = 0x800
SAFE_DEFAULT = LOAD_LIBRARY_SEARCH_SYSTEM32 | LOAD_LIBRARY_SEARCH_USER_DIRS
OWN_LIBRARY = LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | SAFE_DEFAULT   # ctypes winmode for a DLL of ours, by path
SYSTEM_LIBRARIES = {"Vulkan": "vulkan-1.dll", "CUDA": "nvcuda.dll"}   # what a backend imports from the GPU driver

_added: list = []          # AddDllDirectory cookies, kept for the process's life
_restricted = False


def restrict(folders: list[Path] | None = None) -> bool:
    """Search System32 and our own `folders` (default: the bundle and llama_cpp/lib) only; True
    when set. Idempotent; False off Windows or where the call is missing."""
    global _restricted
    if os.name != "nt":
        return False
    for folder in folders if folders is not None else own_folders():
        if folder.is_dir() and str(folder) not in {str(p) for p, _ in _added}:
            _added.append((folder, os.add_dll_directory(str(folder))))
    if not _restricted:
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        if not kernel32.SetDefaultDllDirectories(SAFE_DEFAULT):
            return False
        _restricted = True
    return True


def own_folders() -> list[Path]:
    """Where our bundled libraries are: the bundle folder and its llama_cpp\\lib (a built program),
    or llama_cpp\\lib of the installed package."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return [Path(bundle), Path(bundle) / "llama_cpp" / "lib"]
    import importlib.util   # lazy: only when running from Python

    spec = importlib.util.find_spec("llama_cpp")
    return [Path(p) / "lib" for p in (spec.submodule_search_locations or [])] if spec else []


def system_dll(name: str) -> str:
    """The full System32 path of a system library (or `name` off Windows)."""
    if os.name != "nt":
        return name
    buf = ctypes.create_unicode_buffer(260)
    n = ctypes.WinDLL("kernel32").GetSystemDirectoryW(buf, len(buf))  # type: ignore[attr-defined]
    return str(Path(buf.value[:n]) / name) if n else name


def load_own(path: Path | str) -> ctypes.CDLL:
    """ctypes.CDLL of one of our libraries, its imports searched in its folder, System32 and ours."""
    return ctypes.CDLL(str(path), winmode=OWN_LIBRARY) if os.name == "nt" else ctypes.CDLL(str(path))


def preload_system_library(backend: str) -> None:
    """Open the system library `backend` imports (SYSTEM_LIBRARIES) by its System32 path, where it
    exists: the one in memory is then the system's, whatever later asks for it by bare name."""
    name = SYSTEM_LIBRARIES.get(backend)
    if os.name != "nt" or name is None:
        return
    path = system_dll(name)
    if os.path.isfile(path):
        try:
            ctypes.CDLL(path, winmode=LOAD_LIBRARY_SEARCH_SYSTEM32)
        except OSError:
            pass   # a broken driver: the backend's own load says so (backends._explain)
