"""DLL planting (issue 36 finding 7): a `vulkan-1.dll` put beside chat.exe, as a web page can drop
one into Downloads, is not loaded; the program takes the system's from System32 and still chats
(runtime/hardware/dll_search.py).

The planted DLL is made here with mingw: every export of the Vulkan loader, each a stub that
fails, and a DllMain that writes a marker file when it is loaded. A small control program in the
same folder that asks for `vulkan-1.dll` by name, as ggml-vulkan.dll's imports do, does load it
(so the test can tell: Wine, like Windows, looks in the program's folder first).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from apps import llmpack_cli
from test_windows import ctrl_c, pc, start, stream_chat, windows_stub  # noqa: F401 - pc, windows_stub: fixtures

from llmpack.builder.windows.tools import MINGW_CC, WINE_DLLS, windows_path

pytestmark = pytest.mark.stub

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
def planted_folder(tiny_chat_model, windows_stub, tmp_path_factory) -> Path:  # noqa: F811
    """Downloads: chat.exe (the tiny model), a planted vulkan-1.dll and the control program."""
    folder = tmp_path_factory.mktemp("Downloads")
    exe = folder / "chat.exe"
    proc = llmpack_cli("build", str(tiny_chat_model), "-o", str(exe))
    assert f"wrote {exe}" in proc.stdout, proc.stdout + proc.stderr
    work = tmp_path_factory.mktemp("planted-src")
    (work / "planted.c").write_text(PLANTED)
    (work / "control.c").write_text(CONTROL)
    names = _vulkan_exports()
    assert "vkCreateInstance" in names and "vkGetInstanceProcAddr" in names
    (work / "planted.def").write_text("LIBRARY vulkan-1.dll\nEXPORTS\n" + "".join(f"    {n}=planted_fail\n" for n in names))
    subprocess.run([MINGW_CC, "-shared", "-O1", "-o", str(folder / "vulkan-1.dll"), "planted.c", "planted.def"],
                   cwd=work, check=True, capture_output=True)
    subprocess.run([MINGW_CC, "-O1", "-o", str(folder / "control.exe"), "control.c"], cwd=work, check=True,
                   capture_output=True)
    return folder


def _env(marker: Path) -> dict:
    return {MARKER_ENV: windows_path(marker)}


def test_the_planted_dll_is_what_a_bare_name_finds(pc, planted_folder: Path, tmp_path: Path) -> None:  # noqa: F811
    """The control: LoadLibrary("vulkan-1.dll") from a program in that folder loads the planted one."""
    marker = tmp_path / "control-loaded.txt"
    proc = subprocess.run(["wine", str(planted_folder / "control.exe")], cwd=planted_folder, capture_output=True,
                          env={**pc.env(), **_env(marker)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.read_text() == "planted", "Wine did not load the DLL beside the program: the test would prove nothing"


def test_chat_exe_never_loads_a_vulkan_dll_beside_it_and_still_chats(pc, planted_folder: Path,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    marker = tmp_path / "chat-loaded.txt"
    app = start(pc, planted_folder / "chat.exe", env=_env(marker))
    try:
        app.wait_healthy()
        assert stream_chat(app.url)
    finally:
        ctrl_c(app)
    assert not marker.exists(), "chat.exe loaded the vulkan-1.dll planted in its folder"
