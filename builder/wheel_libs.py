"""Put the shared libraries a wheel's library needs into the wheel, beside it, as auditwheel does.

Used by ./dev for the CUDA flavour: llama-cpp-python's build links `libggml-cuda.so` against
cudart and cuBLAS from the CUDA toolkit's PyPI wheels, but leaves them out of its own wheel, so
the stub would carry a CUDA backend that cannot load. `vendor_libs` copies every library the
target needs (DT_NEEDED, followed transitively) that exists in the toolkit's folder into the
target's folder inside the wheel; its RUNPATH `$ORIGIN` then finds them, and the stub bundles
them with the rest of `llama_cpp/lib`. Libraries not in that folder (libc, libcuda - the
driver, which must come from the user's machine) are left alone. RECORD gets each new file's
sha256 and size, so pip installs the result like any wheel.

DT_NEEDED is read by builder/elf.py, the one ELF reader. ./dev runs this file as a script
before llmpack is installed, so it needs only the standard library and two files of the source
tree that import nothing else: elf.py beside it and llmpack/errors.py.

    python builder/wheel_libs.py WHEEL LIBDIR [TARGET]     (TARGET defaults to libggml-cuda.so)
"""
from __future__ import annotations

import base64
import hashlib
import os
import sys
import tempfile
import zipfile

try:
    from llmpack.builder.elf import ElfError, needed
    from llmpack.errors import LlmpackError
except ModuleNotFoundError:   # ./dev, before llmpack is installed: the same two files, from the source tree
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # for llmpack/errors.py
    from elf import ElfError, needed   # beside this file, so on sys.path already
    from llmpack.errors import LlmpackError


class WheelLibsError(LlmpackError):
    """The wheel or a library in it cannot be vendored (not the wheel llama-cpp-python built, not ELF)."""


def closure(first: list[str], libdir: str) -> list[str]:
    """Names from `first` found in libdir, plus what those need from libdir, transitively."""
    todo, found = list(first), []
    while todo:
        name = todo.pop(0)
        path = os.path.join(libdir, name)
        if name not in found and os.path.isfile(path):
            found.append(name)
            todo += _needed(path)
    return found


def _needed(path: str) -> list[str]:
    try:
        return needed(path)
    except ElfError as exc:
        raise WheelLibsError(f"{exc}: vendor_libs handles 64-bit little-endian Linux libraries only; "
                             "check that the wheel and LIBDIR are for linux x86_64") from None


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def vendor_libs(wheel: str, libdir: str, target: str = "libggml-cuda.so") -> list[str]:
    """Rewrite `wheel` in place with target's libdir dependencies beside it; returns their names.
    Running it again adds nothing (they are already there)."""
    with zipfile.ZipFile(wheel) as zin:
        names = zin.namelist()
        member = next((n for n in names if n.rsplit("/", 1)[-1] == target), None)
        if member is None:
            raise WheelLibsError(f"{wheel} holds no {target}: pass the llama-cpp-python wheel that ./dev built "
                                 f"with the CUDA flavour (LLMPACK_LLAMA_FLAVOUR=cuda), or name the library to "
                                 f"vendor as the third argument")
        with tempfile.TemporaryDirectory() as tmp:
            deps = _needed(zin.extract(member, tmp))
        dest = member.rsplit("/", 1)[0]
        libs = [n for n in closure(deps, libdir) if f"{dest}/{n}" not in names]
        if not libs:
            return []
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = [row for row in zin.read(record).decode().splitlines() if row and not row.startswith(record + ",")]
        with zipfile.ZipFile(wheel + ".tmp", "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                if info.filename != record:
                    zout.writestr(info, zin.read(info))
            for name in libs:
                with open(os.path.join(libdir, name), "rb") as f:
                    data = f.read()
                info = zipfile.ZipInfo(f"{dest}/{name}", date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr, info.compress_type = 0o755 << 16, zipfile.ZIP_DEFLATED
                zout.writestr(info, data)
                rows.append(f"{dest}/{name},{_record_hash(data)},{len(data)}")
            zout.writestr(record, "\n".join(rows + [f"{record},,"]) + "\n")
    os.replace(wheel + ".tmp", wheel)
    return libs


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: " + __doc__.rsplit("\n\n", 1)[-1].strip(), file=sys.stderr)
        return 2
    try:
        print("\n".join(vendor_libs(*argv)))
    except LlmpackError as exc:
        print(f"wheel_libs: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
