"""A runtime stub as a platform wheel (`llmpack stub --target T --wheel DIR`), and finding one.

The release workflow (.github/workflows/release.yml) builds each platform's stub once and
publishes it as ``llmpack-stub-<target>`` (``llmpack-stub-windows-x64``, ``-linux-x64``,
``-macos-arm64``), versioned with llmpack. With it installed, `llmpack build -o chat.exe` uses
the published stub, so a user never needs Wine, mingw or a compiler. A wheel is only used
when it was made from exactly these llmpack sources (its ``<stub>.json`` records their hash), so
a development checkout never picks up a stub that lacks its changes.

Wheel layout (PEP 427)::

    llmpack_stub_windows_x64/__init__.py      STUB = "llmpack-stub.exe"
    llmpack_stub_windows_x64/llmpack-stub.exe
    llmpack_stub_windows_x64/llmpack-stub.exe.json   what `llmpack stub` recorded: key, sources, ...
    llmpack_stub_windows_x64-<version>.dist-info/{METADATA,WHEEL,RECORD}
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import zipfile
from pathlib import Path

from llmpack import __version__

# Published stubs. Each wheel is tagged py3-none-any: it is data to splice into, usable on any OS
# (a Linux machine builds chat.exe from the Windows stub), so pip must not refuse it by platform.
TARGETS = ("linux-x64", "windows-x64", "macos-arm64")


def package_name(target: str) -> str:
    return "llmpack_stub_" + target.replace("-", "_")


def write_stub_wheel(stub: Path, target: str, info: dict, out_dir: Path) -> Path:
    """`out_dir/llmpack_stub_<target>-<version>-py3-none-<platform>.whl` holding `stub`."""
    pkg = package_name(target)
    dist = f"{pkg}-{__version__}"
    wheel = out_dir / f"{dist}-py3-none-any.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        f"{pkg}/__init__.py": f'"""llmpack\'s {target} runtime stub (see llmpack.builder.stub_wheel)."""\n'
                              f'STUB = "{stub.name}"\n'.encode(),
        f"{pkg}/{stub.name}.json": json.dumps({**info, "target": target}, indent=1, sort_keys=True).encode(),
        f"{dist}.dist-info/METADATA": (f"Metadata-Version: 2.1\nName: {pkg.replace('_', '-')}\nVersion: {__version__}\n"
                                       f"Summary: llmpack's prebuilt {target} runtime stub\nLicense: MIT\n").encode(),
        f"{dist}.dist-info/WHEEL": (f"Wheel-Version: 1.0\nGenerator: llmpack {__version__}\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n").encode(),
    }
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
            record.append(_record_line(name, data))
        data = stub.read_bytes()
        info_exe = zipfile.ZipInfo(f"{pkg}/{stub.name}")
        info_exe.external_attr = 0o755 << 16
        z.writestr(info_exe, data, compress_type=zipfile.ZIP_STORED)
        record.append(_record_line(info_exe.filename, data))
        record.append(f"{dist}.dist-info/RECORD,,")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def installed_stub(target: str, sources: str) -> Path | None:
    """The stub of an installed `llmpack-stub-<target>` wheel made from these `sources`, or None."""
    spec = importlib.util.find_spec(package_name(target))
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    stub = folder / ("llmpack-stub.exe" if target == "windows-x64" else "llmpack-stub")
    try:
        info = json.loads(Path(f"{stub}.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if info.get("sources") != sources or info.get("llmpack_version") != __version__ or not stub.is_file():
        return None
    return stub
