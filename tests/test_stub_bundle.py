"""Spec for llmpack.builder.stub_bundle: what the runtime stub holds and the two passes the
generated PyInstaller spec runs over its binaries (one file per identical library, debug
info stripped from copies). Real ELF files are compiled here with gcc; no PyInstaller run."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from llmpack.builder import elf
from llmpack.builder.stub_bundle import (BUILD_TIME_MODULES, EXCLUDES, SPEC_TEMPLATE, dedupe_shared_libs,
                                         runtime_sources, strip_debug_info)


def compile_lib(tmp: Path, name: str, *flags: str) -> Path:
    src = tmp / "lib.c"
    src.write_text("#ifdef DIFFERENT\nint llmpack_other(void) { return 7; }\n#endif\n"
                   "int llmpack_answer(int x) { int y = x * 2; return y + 42; }\n")
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return out


def readelf_sections(path: Path) -> set[str]:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) >= 2 and parts[0].startswith("[") and parts[0][1:-1].isdigit() and parts[0] != "[0]":
            names.add(parts[1])
    return names


def test_elf_section_names_agree_with_readelf(tmp_path):
    lib = compile_lib(tmp_path, "libdbg.so", "-g")
    names = elf.section_names(lib)
    assert ".debug_info" in names and ".text" in names
    assert set(names) - {""} == readelf_sections(lib)
    offset, size = names[".text"]
    assert 0 < offset and 0 < size and offset + size <= lib.stat().st_size


@pytest.mark.parametrize("content", [b"", b"MZ" + bytes(100), b"\x7fELF\x01\x01" + bytes(60), b"\x7fELF\x02\x01"])
def test_elf_section_names_of_other_files_is_empty(tmp_path, content):
    path = tmp_path / "other"
    path.write_bytes(content)
    assert elf.section_names(path) == {}


def test_strip_debug_info_copies_only_libraries_with_debug_info(tmp_path):
    with_debug = compile_lib(tmp_path, "libdbg.so", "-g")
    without = compile_lib(tmp_path, "libplain.so", "-g0", "-s")
    original = with_debug.read_bytes()
    folder = tmp_path / "stripped"
    entries = [("llama_cpp/lib/libdbg.so", str(with_debug), "BINARY"),
               ("llama_cpp/lib/libplain.so", str(without), "BINARY"),
               ("data/notes.txt", str(tmp_path / "lib.c"), "DATA")]
    out = strip_debug_info(entries, str(folder))
    assert [e[0] for e in out] == [e[0] for e in entries] and [e[2] for e in out] == [e[2] for e in entries]
    stripped = Path(out[0][1])
    assert stripped == folder / "llama_cpp/lib/libdbg.so"
    assert ".debug_info" not in elf.section_names(stripped) and ".text" in elf.section_names(stripped)
    assert stripped.stat().st_size < len(original)
    assert with_debug.read_bytes() == original   # the installed library is never touched
    assert out[1:] == entries[1:]


def test_dedupe_keeps_one_file_per_identical_library(tmp_path):
    lib = compile_lib(tmp_path, "libggml.so.0.25.3")
    for alias in ("libggml.so", "libggml.so.0"):
        (tmp_path / alias).write_bytes(lib.read_bytes())
    (tmp_path / "other").mkdir()
    other = compile_lib(tmp_path / "other", "libllama.so", "-O2", "-DDIFFERENT")
    entries = [(f"llama_cpp/lib/{n}", str(tmp_path / n), "BINARY")
               for n in ("libggml.so", "libggml.so.0", "libggml.so.0.25.3")]
    entries += [("llama_cpp/lib/libllama.so", str(other), "BINARY"),
                ("elsewhere/libggml.so", str(tmp_path / "libggml.so"), "BINARY")]
    out = sorted(dedupe_shared_libs(entries))
    assert out == sorted([
        ("llama_cpp/lib/libggml.so.0.25.3", str(lib), "BINARY"),          # the longest name keeps the file
        ("llama_cpp/lib/libggml.so", "libggml.so.0.25.3", "SYMLINK"),     # relative, same folder
        ("llama_cpp/lib/libggml.so.0", "libggml.so.0.25.3", "SYMLINK"),
        ("llama_cpp/lib/libllama.so", str(other), "BINARY"),
        ("elsewhere/libggml.so", str(tmp_path / "libggml.so"), "BINARY"),  # other folder: its own file
    ])


def test_build_time_modules_stay_out_of_the_bundle():
    staged = {rel for rel, _ in runtime_sources()}
    assert {"llmpack/builder/stub_bundle.py", "llmpack/builder/stub_entry.py",
            "llmpack/builder/packfile.py", "llmpack/webui/index.html"} <= staged
    assert BUILD_TIME_MODULES <= set(EXCLUDES)
    assert "from llmpack.builder.stub_bundle import dedupe_shared_libs, strip_debug_info" in SPEC_TEMPLATE
    assert os.path.basename(__file__) not in {Path(rel).name for rel in staged}


def test_every_runtime_package_is_staged_in_the_bundle():
    """A built program imports every room of the runtime (a new protocol room missing here made
    the Windows stub's self-test fail with ModuleNotFoundError); only the optional extras are left out."""
    import tomllib

    from llmpack.builder.stub_bundle import NOT_IN_BUILT_FILES

    packages = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    staged = {str(Path(rel).parent).replace("/", ".") for rel, _ in runtime_sources() if rel.endswith("__init__.py")}
    wanted = {p for p in packages if p.startswith("llmpack.runtime") and p not in NOT_IN_BUILT_FILES}
    assert wanted <= staged, sorted(wanted - staged)
