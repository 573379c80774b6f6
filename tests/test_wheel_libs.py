"""builder/wheel_libs.py: the CUDA flavour's wheel carries the toolkit libraries its backend needs.

The libraries here are real ELF files made with the C compiler: a backend that needs libmid,
which needs libleaf, as libggml-cuda.so needs libcublas, which needs libcublasLt."""
from __future__ import annotations

import base64
import ctypes
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from llmpack.builder.elf import needed
from llmpack.builder.wheel_libs import WheelLibsError, vendor_libs

ROOT = Path(__file__).resolve().parent.parent


def _cc(out: Path, *args: str) -> None:
    src = out.with_suffix(".c")
    src.write_text(f"int {out.name.split('.')[0].replace('-', '_')}_fn(void) {{ return 1; }}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed", *args], check=True)


@pytest.fixture()
def toolkit(tmp_path: Path) -> tuple[Path, Path]:
    """(a wheel holding llama_cpp/lib/libggml-cuda.so, the toolkit folder it was linked against)."""
    lib = tmp_path / "toolkit"
    lib.mkdir()
    _cc(lib / "libleaf.so.13", "-Wl,-soname,libleaf.so.13")
    _cc(lib / "libmid.so.13", "-Wl,-soname,libmid.so.13", str(lib / "libleaf.so.13"), "-Wl,-rpath,$ORIGIN")
    (lib / "libunused.so.13").write_bytes((lib / "libleaf.so.13").read_bytes())
    backend = tmp_path / "libggml-cuda.so"
    _cc(backend, str(lib / "libmid.so.13"), "-Wl,-rpath,$ORIGIN")
    wheel = tmp_path / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(backend, "llama_cpp/lib/libggml-cuda.so")
        z.writestr("llama_cpp/__init__.py", "")
        z.writestr("llama_cpp_python-0.3.36.dist-info/RECORD",
                   "llama_cpp/__init__.py,,0\nllama_cpp/lib/libggml-cuda.so,,1\n"
                   "llama_cpp_python-0.3.36.dist-info/RECORD,,\n")
    return wheel, lib


def _loads(folder: Path) -> bool:
    try:
        ctypes.CDLL(str(folder / "llama_cpp" / "lib" / "libggml-cuda.so"))
    except OSError:
        return False
    return True


def test_the_backend_loads_from_the_wheel_only_once_its_libraries_are_vendored(toolkit, tmp_path):
    wheel, lib = toolkit
    zipfile.ZipFile(wheel).extractall(tmp_path / "before")
    assert not _loads(tmp_path / "before"), "the backend should need libmid from the toolkit"

    assert vendor_libs(str(wheel), str(lib)) == ["libmid.so.13", "libleaf.so.13"]

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"llama_cpp/lib/libmid.so.13", "llama_cpp/lib/libleaf.so.13"} <= names
        assert "llama_cpp/lib/libunused.so.13" not in names          # only what is needed
        assert not any("libc.so" in n for n in names)                 # the system's own libraries stay out
        for name in ("llama_cpp/lib/libmid.so.13", "llama_cpp/lib/libleaf.so.13"):
            assert z.getinfo(name).external_attr >> 16 == 0o755
        z.extractall(tmp_path / "after")
    for member in ("libmid.so.13", "libleaf.so.13"):
        (tmp_path / "after" / "llama_cpp" / "lib" / member).chmod(0o755)
    assert _loads(tmp_path / "after")


def test_record_lists_each_new_file_with_its_hash_and_size(toolkit):
    wheel, lib = toolkit
    vendor_libs(str(wheel), str(lib))
    with zipfile.ZipFile(wheel) as z:
        rows = {r.split(",")[0]: r.split(",")[1:] for r in z.read("llama_cpp_python-0.3.36.dist-info/RECORD")
                .decode().splitlines()}
        for name in ("llama_cpp/lib/libmid.so.13", "llama_cpp/lib/libleaf.so.13"):
            data = z.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == [f"sha256={digest}", str(len(data))]
    assert rows["llama_cpp_python-0.3.36.dist-info/RECORD"] == ["", ""]
    assert "llama_cpp/__init__.py" in rows


def test_a_second_run_adds_nothing(toolkit):
    wheel, lib = toolkit
    vendor_libs(str(wheel), str(lib))
    before = wheel.read_bytes()
    assert vendor_libs(str(wheel), str(lib)) == []
    assert wheel.read_bytes() == before


def test_a_wheel_without_the_backend_is_refused_by_name(tmp_path, toolkit):
    _, lib = toolkit
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("x.dist-info/RECORD", "")
    with pytest.raises(WheelLibsError, match="holds no libggml-cuda.so: pass the llama-cpp-python wheel"):
        vendor_libs(str(wheel), str(lib))


def test_needed_lists_dt_needed_in_order(toolkit):
    _, lib = toolkit
    assert needed(lib / "libmid.so.13") == ["libleaf.so.13", "libc.so.6"]
    assert needed(lib / "libleaf.so.13") == ["libc.so.6"]


def test_a_library_that_is_not_elf_is_one_clear_error(tmp_path, toolkit):
    wheel, lib = toolkit
    (lib / "libmid.so.13").write_bytes(b"not a library")
    with pytest.raises(WheelLibsError, match="libmid.so.13: not an ELF file.*linux x86_64"):
        vendor_libs(str(wheel), str(lib))


def test_dev_runs_it_as_a_script_before_llmpack_is_installed(toolkit, tmp_path):
    """-S: no site-packages, so no installed llmpack; elf.py and llmpack/errors.py come from the tree."""
    wheel, lib = toolkit
    script = [sys.executable, "-S", str(ROOT / "builder" / "wheel_libs.py")]
    done = subprocess.run([*script, str(wheel), str(lib)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["libmid.so.13", "libleaf.so.13"], done.stderr
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("x.dist-info/RECORD", "")
    done = subprocess.run([*script, str(other), str(lib)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("wheel_libs: error: ") and "Traceback" not in done.stderr
