"""The PyInstaller *onefile* runtime stub every built executable starts from (`llmpack stub`).

The stub is ``builder/stub_entry.py`` frozen with llmpack's runtime (engine, server, web UI,
recipes, ``builder.packfile``, ``builder.extract``) and llama.cpp's shared libraries. It is
built once and cached as ``stubs_dir()/<key>/llmpack-stub[.exe]``, where the key changes
with anything that changes the bundle::

    <llmpack version>-<platform>-py<X.Y>-llama<llama-cpp-python version>-<libs hash>-<source hash>

* libs hash: the llama_cpp shared libraries (a CUDA, Vulkan or portable build each get a stub);
* source hash: every file staged into the bundle (builder/*.py included, so also this module
  and ``stub_bundle.py``, which writes the spec) and the PyInstaller version, so editing
  llmpack rebuilds the stub.

Targets: the stub for this computer (:class:`NativeTarget`) is frozen by this Python with the
installed llama-cpp-python; the Windows x64 stub is made on Linux (:mod:`llmpack.builder.windows`:
llama.cpp cross-compiled with mingw, PyInstaller run by python.org's Windows CPython under Wine).
Both go through :func:`build_stub`; a target only says which interpreter freezes, which
libraries go in, how the result is run for its self-test, and what its own inputs hash to.

Build: :mod:`llmpack.builder.stub_bundle` *stages* the runtime packages into a temporary
``src/llmpack/...`` tree (the repo's folders are mapped onto ``llmpack.*`` by setuptools, which
PyInstaller's module finder cannot follow) and writes the spec; PyInstaller runs in a
subprocess (:mod:`llmpack.builder.stub_run`: its log in a file, its latest step on a progress
bar); the result is smoke-tested (``--llmpack-selftest``: imports llama.cpp, finds the
web UI and recipes) and moved into place atomically.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from llmpack import __version__
from llmpack.builder.stub_bundle import (BuildEnv, StubError, StubTarget, check_security_floors, llama_lib_dir,
                                         runtime_sources, shared_libs, write_spec)
from llmpack.builder.stub_run import run_with_status, tail
from llmpack.builder.stub_wheel import installed_stub, write_stub_wheel
from llmpack.paths import stubs_dir
from llmpack.progress import human_bytes

STUB_NAME = "llmpack-stub"
INFO_SUFFIX = ".json"
KEEP_OLD_BUILDS = 2          # older stubs of the same platform/llama build kept besides the current one


def _here() -> Path:
    return Path(__file__).resolve().parent


def entry_script() -> Path:
    return _here() / "stub_entry.py"


def llama_cpp_version() -> str | None:
    from importlib import metadata   # lazy: a large share of start-up (BENCHMARKS.md), and `build --stub` never asks

    try:
        return metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        return None


def _libs_hash(lib: Path) -> str:
    """sha256 over the llama_cpp shared libraries, memoised by (size, mtime) since a CUDA build
    is hundreds of MB and `llmpack build` asks for the key every time."""
    memo_path = stubs_dir_safe() / "libhash.json"
    try:
        memo = json.loads(memo_path.read_text("utf-8"))
    except (OSError, ValueError):
        memo = {}
    h, changed = hashlib.sha256(), False
    for p in shared_libs(lib):
        st = p.stat()
        rec = memo.get(str(p))
        if not (isinstance(rec, list) and rec[:2] == [st.st_size, st.st_mtime_ns]):
            fh = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    fh.update(chunk)
            rec, changed = [st.st_size, st.st_mtime_ns, fh.hexdigest()], True
            memo[str(p)] = rec
        h.update(f"{p.name}\0{rec[2]}\n".encode())
    if changed:
        try:
            tmp = memo_path.with_name(f"{memo_path.name}.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(memo), "utf-8")
            os.replace(tmp, memo_path)
        except OSError:
            pass
    return h.hexdigest()


def _pyinstaller_version() -> str:
    from importlib import metadata   # lazy: a large share of start-up (BENCHMARKS.md); only building a stub asks

    try:
        return metadata.version("pyinstaller")
    except metadata.PackageNotFoundError:
        raise StubError("PyInstaller is not installed; pip install pyinstaller (it builds the runtime stub)") from None


def llmpack_sources() -> str:
    """sha256 over every file llmpack stages into a stub (builder/*.py included, so also this
    module and stub_bundle.py, which writes the spec, and stub_entry.py under its own name)."""
    h = hashlib.sha256()
    for rel, path in [*runtime_sources(), ("__entry__/stub_entry.py", entry_script())]:
        data = path.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


class NativeTarget:
    """A stub for the computer llmpack runs on, frozen by this very Python."""
    exe_suffix = ".exe" if os.name == "nt" else ""

    def __init__(self) -> None:
        self.platform = platform_tag()
        self.python = f"{sys.version_info[0]}.{sys.version_info[1]}"
        os_name = {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")
        arch = {"x86_64": "x64", "amd64": "x64", "arm64": "arm64", "aarch64": "arm64"}.get(
            platform.machine().lower(), platform.machine().lower())
        self.name = f"{os_name}-{arch}"     # as published: llmpack-stub-<name>

    def inputs(self) -> tuple[str, str]:
        """llama.cpp's libraries (a CUDA, Vulkan or portable build each get a stub) and PyInstaller."""
        return (f"llama{llama_cpp_version() or 'unknown'}-{_libs_hash(llama_lib_dir())[:10]}",
                f"pyinstaller {_pyinstaller_version()}")

    def prepare(self, quiet: bool) -> BuildEnv:
        check_security_floors()   # this Python's packages are what the stub bundles
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH")}
        return BuildEnv(python_cmd=(sys.executable,), lib_dir=llama_lib_dir(), env=env)

    def info(self) -> dict:
        return {"llama_cpp_version": llama_cpp_version()}


TARGETS = ("native", "windows-x64")


def resolve_target(name: str | None) -> StubTarget:
    """`--target` to a target object: native (default) or windows-x64 (made here on Linux)."""
    native = NativeTarget()
    if name in (None, "native", native.name):
        return native
    if name == "windows-x64":
        # lazy: the Windows cross-build's six modules only for --target windows-x64 (or an .exe)
        from llmpack.builder.windows.target import WindowsTarget

        return WindowsTarget()
    raise StubError(f"a stub for {name} cannot be made on this computer; choose one of {', '.join(TARGETS)}")


def stub_key(target: StubTarget | None = None, sources: str | None = None) -> str:
    """<llmpack version>-<platform>-py<X.Y>-<target's label>-<hash of its inputs and `sources`>."""
    target = target or NativeTarget()
    label, inputs = target.inputs()
    digest = hashlib.sha256(f"{inputs}\n{sources or llmpack_sources()}".encode()).hexdigest()
    return f"{__version__}-{target.platform}-py{target.python}-{label}-{digest[:12]}"


def exe_name(target: StubTarget | None = None) -> str:
    return STUB_NAME + (target or NativeTarget()).exe_suffix


def stubs_dir_safe() -> Path:
    return stubs_dir()


def stub_info(stub: Path) -> dict:
    """What `llmpack stub` recorded about a stub (beside it as <stub>.json), or {}."""
    try:
        info = json.loads(Path(str(stub) + INFO_SUFFIX).read_text("utf-8"))
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- building


def get_stub(path_override=None, *, target: StubTarget | None = None, force: bool = False,
             quiet: bool = False) -> Path:
    """The runtime stub: `path_override` if given (checked), else the cached one for `target`
    (default: this computer), built if missing."""
    if path_override:
        path = Path(path_override).expanduser()
        if not path.is_file():
            raise StubError(f"runtime stub {path} does not exist; make one with `llmpack stub -o {path}`")
        return path
    target = target or NativeTarget()
    _ensure_webui_vendor()   # before the key: the chat page's libraries are part of the bundle
    sources = llmpack_sources()
    published = installed_stub(target.name, sources)   # `pip install llmpack-stub-<target>`
    if published is not None and not force:
        return published
    key = stub_key(target, sources)
    final = stubs_dir_safe() / key / exe_name(target)
    if final.is_file() and not force:
        try:
            os.utime(final.parent)   # most recently used, for pruning
        except OSError:
            pass
        return final
    return build_stub(key, final, target, quiet=quiet)


def _ensure_webui_vendor() -> None:
    """markdown-it and highlight.js (npm, pinned in webui/vendor.lock.json) into webui/vendor/."""
    # lazy: webui.vendor pulls in urllib.request (http.client, email, ssl): only when the cached stub is looked up
    from llmpack.webui.vendor import VendorError, ensure_vendor

    try:
        ensure_vendor()
    except VendorError as exc:
        raise StubError(f"the chat page's libraries are missing: {exc}") from None


def build_stub(key: str, final: Path, target: StubTarget | None = None, *, quiet: bool = False) -> Path:
    target = target or NativeTarget()
    root = stubs_dir_safe()
    started = time.monotonic()
    build = target.prepare(quiet)   # a cross target's toolchain: minutes, cached, with its own progress
    work = Path(tempfile.mkdtemp(prefix=f".build-{os.getpid()}-", dir=root))
    log_path = work / "pyinstaller.log"
    host = build.host_path
    try:
        entry = work / "llmpack_stub_entry.py"
        shutil.copyfile(entry_script(), entry)
        spec = write_spec(work, entry, STUB_NAME, lib_dir=build.lib_dir, host_path=host)
        dist = work / "dist"
        cmd = [*build.python_cmd, "-m", "PyInstaller", "--noconfirm", "--log-level", "INFO",
               "--distpath", host(dist), "--workpath", host(work / "build"), host(spec)]
        env = {**build.env, "PYTHONDONTWRITEBYTECODE": "1"}
        rc = run_with_status(cmd, log_path, env, work, quiet=quiet,
                              label=f"building the {target.name} runtime stub (once per llmpack version; a few minutes)")
        if rc != 0:
            raise StubError(f"PyInstaller failed (exit {rc}); last lines of its log:\n{tail(log_path)}"
                            f"\nfull log: {_keep_log(log_path, key)}")
        built = dist / exe_name(target)
        if not built.is_file():
            raise StubError(f"PyInstaller finished but made no {built.name}; see {_keep_log(log_path, key)}")
        _selftest(built, build, log_path, key)
        info = {"key": key, "target": target.name, "llmpack_version": __version__, "sources": llmpack_sources(),
                **target.info(),
                "platform": target.platform, "python": target.python,
                "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
                "build_seconds": round(time.monotonic() - started, 1), "size": built.stat().st_size}
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, final.parent / "build.log")
        tmp_final = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.move(str(built), tmp_final)
        os.chmod(tmp_final, 0o755)
        Path(str(tmp_final) + INFO_SUFFIX).write_text(json.dumps(info, indent=1), "utf-8")
        os.replace(str(tmp_final) + INFO_SUFFIX, str(final) + INFO_SUFFIX)
        os.replace(tmp_final, final)
        if not quiet:
            print(f"llmpack: {target.name} runtime stub ready in {time.monotonic() - started:.0f} s: {final} "
                  f"({human_bytes(final.stat().st_size)})", file=sys.stderr, flush=True)
        _prune(root, key)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _keep_log(log_path: Path, key: str) -> Path:
    kept = stubs_dir_safe() / f"failed-{key}.log"
    try:
        shutil.copyfile(log_path, kept)
    except OSError:
        return log_path
    return kept


def _selftest(built: Path, build: BuildEnv, log_path: Path, key: str) -> None:
    """Run the fresh stub once (under Wine for Windows): it must import llama.cpp and the server,
    load a CPU backend and find its data."""
    try:
        proc = subprocess.run([*build.run_prefix, str(built), "--llmpack-selftest"], capture_output=True,
                              stdin=subprocess.DEVNULL, text=True, timeout=300, env=build.env,
                              cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        raise StubError("the freshly built runtime stub did not answer its self-test in 5 minutes") from None
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n--- self-test (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}\n")
    if proc.returncode != 0 or '"ok": true' not in proc.stdout:
        raise StubError(f"the freshly built runtime stub fails its self-test (exit {proc.returncode}):\n"
                        f"{(proc.stderr or proc.stdout).strip()[-2000:]}\nlog: {_keep_log(log_path, key)}")


def _prune(root: Path, key: str) -> None:
    """Drop stubs of older llmpack sources for the same platform and llama.cpp build, keeping
    the newest few (another checkout sharing this cache may still be using one)."""
    prefix = key.rsplit("-", 1)[0] + "-"
    old = [d for d in root.iterdir() if d.is_dir() and d.name.startswith(prefix) and d.name != key]
    old.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    for d in old[KEEP_OLD_BUILDS:]:
        shutil.rmtree(d, ignore_errors=True)
    for p in root.glob(".build-*"):   # work folders of builds whose process is gone
        try:
            pid = int(p.name.split("-")[1])
            if pid != os.getpid() and os.name != "nt":
                os.kill(pid, 0)
                continue
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, OSError, IndexError):
            continue


# --------------------------------------------------------------------------- CLI


def cmd_stub(args: argparse.Namespace) -> int:
    """`llmpack stub [--target T] [--force] [-o PATH]`: build (or show) the cached runtime stub."""
    t0 = time.monotonic()
    target = resolve_target(getattr(args, "target", None))
    stub = get_stub(target=target, force=bool(getattr(args, "force", False)))
    took = time.monotonic() - t0
    info = stub_info(stub)
    size = stub.stat().st_size
    print(f"runtime stub  {stub}")
    print(f"size          {human_bytes(size)}")
    print(f"key           {info.get('key') or stub.parent.name}")
    print(f"llama.cpp     llama-cpp-python {info.get('llama_cpp_version') or '?'} ({target.platform})")
    if took > 5:
        print(f"built in      {took:.0f} s")
    if getattr(args, "wheel", None):
        print(f"wheel         {write_stub_wheel(stub, target.name, info, Path(args.wheel))}")
    output = getattr(args, "output", None)
    if output:
        out = Path(output)
        if out.is_dir():
            out = out / stub.name
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.copyfile(stub, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
        if info:
            Path(str(out) + INFO_SUFFIX).write_text(json.dumps(info, indent=1), "utf-8")
        print(f"copied to     {out}")
    return 0

