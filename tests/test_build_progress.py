"""The cold set-up's progress line (builder/build_progress.py) and its ccache (issue 38 #5).

`./dev` pipes `pip wheel -v`'s output through build_progress.py: the whole output goes to a log,
and the console gets which part of llama.cpp is compiling and how far through, from ninja's
`[N/M]` counter. A full llama.cpp build takes 20 minutes of both cores, so the line is shown
here on a small CMake + Ninja project laid out as llama.cpp is (ggml-base, one library per CPU
variant, a nested build with its own counter) and on lines copied from a real llama.cpp build.
The same project shows the ccache set-up `./dev` uses: the build folder inside the temporary
folder and CCACHE_BASEDIR set to it, so a rebuild in another temporary folder hits the cache."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest


from llmpack.builder import build_progress as B


# What `ninja -v` printed in a real llama-cpp-python 0.3.36 build (paths shortened)
REAL = [
    b"[12/655] ccache /usr/bin/g++ -DGGML_BACKEND_DL -O3 -DNDEBUG -fPIC -o vendor/llama.cpp/ggml/src/ggml-cpu/"
    b"CMakeFiles/ggml-cpu-haswell.dir/ggml-cpu/ops.cpp.o -c /src/vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp",
    b"[40/655] ccache /usr/bin/gcc -O3 -o vendor/llama.cpp/ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o -c ggml.c",
    b"[41/655] : && /usr/bin/g++ -fPIC -O3 -shared -Wl,-soname,libllama.so -o bin/libllama.so "
    b"vendor/llama.cpp/src/CMakeFiles/llama.dir/llama.cpp.o && :",
    b"[2/9] /usr/bin/c++ -o CMakeFiles/vulkan-shaders-gen.dir/vulkan-shaders-gen.cpp.o -c vulkan-shaders-gen.cpp",
]


def test_each_step_is_named_by_the_part_it_compiles():
    assert B.describe(REAL[0].split(b"] ", 1)[1].decode()) == "CPU kernels for haswell: ops.cpp"
    assert B.describe(REAL[1].split(b"] ", 1)[1].decode()) == "ggml core: ggml.c"
    assert B.describe(REAL[2].split(b"] ", 1)[1].decode()) == "linking libllama"
    state = B.Progress()
    for line in [b"Building wheel for llama_cpp_python (pyproject.toml): started\n", *REAL]:
        state.feed(line)
    # the shader generator's own [2/9] came last: the main count stays where it was
    assert (state.phase, state.done, state.total, state.what) == ("compiling", 41, 655, "linking libllama")
    assert state.line().startswith("compiling 41/655 (6%) · linking libllama · ")


def test_the_phases_before_and_after_compiling_are_named():
    state = B.Progress()
    for line, phase in ((b"  Installing build dependencies: started", "getting the build tools"),
                        (b"  Building wheel for llama_cpp_python (pyproject.toml): started", "configuring (CMake)"),
                        (b"[1/2] cc -o CMakeFiles/llama.dir/a.c.o -c a.c", "compiling"),
                        (b"-- Install configuration: \"Release\"", "installing into the wheel")):
        state.feed(line)
        assert state.phase == phase
    assert state.line().startswith("installing into the wheel · ")


PROJECT = """cmake_minimum_required(VERSION 3.16)
project(toy C)
find_program(CCACHE ccache)
if (CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE})   # as ggml's CMake does when it finds ccache
endif()
file(GLOB BASE base/*.c)
add_library(ggml-base SHARED ${BASE})
foreach (variant haswell zen4)
  file(GLOB CPU cpu/*.c)
  add_library(ggml-cpu-${variant} MODULE ${CPU})
endforeach()
"""


def toy_project(root: Path) -> Path:
    src = root / "src"
    for folder, n in (("base", 6), ("cpu", 10)):
        (src / folder).mkdir(parents=True)
        for i in range(n):   # enough work per file that the build takes a few seconds
            body = "\n".join(f"double f{i}_{k}(double x) {{ return x * {k}.5 + {i}; }}" for k in range(120))
            (src / folder / f"ops{i}.c").write_text(body + "\n")
    (src / "CMakeLists.txt").write_text(PROJECT)
    return src


def build(src: Path, tmp: Path, cache: Path, log: Path, *, tty: bool) -> str:
    """Configure and build as ./dev does: the build folder inside the temporary folder, which is
    CCACHE_BASEDIR, and the output through the progress line; what the console got."""
    env = {**os.environ, "CCACHE_DIR": str(cache), "CCACHE_BASEDIR": str(tmp), "CCACHE_NOHASHDIR": "1"}
    work = tmp / "src"
    shutil.copytree(src, work)
    subprocess.run(["cmake", "-S", str(work), "-B", str(tmp / "build"), "-G", "Ninja"], env=env, check=True,
                   capture_output=True)
    proc = subprocess.Popen(["cmake", "--build", str(tmp / "build"), "-v", "-j", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = io.StringIO()
    with open(log, "wb") as f:
        B.relay(proc.stdout, f, out, tty=tty)
    assert proc.wait() == 0
    return out.getvalue()


@pytest.mark.needs("ccache")
def test_a_cmake_build_shows_which_part_compiles_and_how_far(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(B, "PLAIN_EVERY_S", 0.05)
    monkeypatch.setattr(B, "REFRESH_S", 0.05)
    src = toy_project(tmp_path)
    log = tmp_path / "build.log"
    plain = build(src, tmp_path / "one", tmp_path / "ccache", log, tty=False)
    lines = plain.splitlines()
    steps = [ln for ln in lines if " · " in ln and ln.startswith("[dev] compiling ")]
    assert steps, plain
    assert all("\r" not in ln for ln in lines)                         # a log gets plain lines
    assert any("CPU kernels for haswell: ops" in ln or "CPU kernels for zen4: ops" in ln for ln in steps), steps
    counts = [tuple(map(int, ln.split()[2].split("/"))) for ln in steps]
    assert counts == sorted(counts) and all(total == counts[0][1] for _, total in counts)
    assert b"ggml-cpu-zen4.dir" in log.read_bytes() and b"[1/" in log.read_bytes()   # the whole output kept
    shown = build(src, tmp_path / "two", tmp_path / "ccache2", tmp_path / "two.log", tty=True)
    assert shown.startswith("\r\033[K[dev] ") and shown.endswith("\r\033[K")   # one line, rewritten, then cleared
    assert "\n" not in shown


@pytest.mark.needs("ccache")
def test_a_rebuild_in_another_temporary_folder_hits_ccache(tmp_path: Path):
    src = toy_project(tmp_path)
    cache = tmp_path / "ccache"
    build(src, tmp_path / "wheel.tmp.101", cache, tmp_path / "a.log", tty=False)
    env = {**os.environ, "CCACHE_DIR": str(cache)}
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    build(src, tmp_path / "wheel.tmp.202", cache, tmp_path / "b.log", tty=False)
    stats = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True).stdout
    values = dict(line.split("\t", 1) for line in stats.splitlines() if "\t" in line)
    hits = int(values.get("direct_cache_hit", 0)) + int(values.get("preprocessed_cache_hit", 0))
    misses = int(values.get("cache_miss", 0))
    assert hits == 6 + 2 * 10 and misses == 0, stats
