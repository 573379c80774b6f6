"""Fetch the chat page's third-party browser code (markdown-it, highlight.js, DOMPurify) into webui/vendor/.

The repository holds no third-party code: `vendor.lock.json` pins each npm package by version
and by the registry's sha512 `integrity`, and this module downloads the tarball, refuses it
unless the hash matches, and copies the listed files (the browser build and its LICENSE) into
the gitignored `vendor/` folder, which the package data and the runtime stub then carry, so the
page works offline. Downloads are cached under the llmpack cache (keyed by integrity), so a
fresh clone on the same machine needs no network.

    python -m llmpack.webui.vendor          # fetch if vendor/ is missing or stale
    python -m llmpack.webui.vendor --check  # exit 1 unless vendor/ matches the lock

The registry is the one npm itself is configured for (`LLMPACK_NPM_REGISTRY`, then
`npm_config_registry`, then `npm config get registry`), so a mirror or proxy set up for npm
is used as it is; the lock names no host. To move to a new version, put its
`npm view NAME@VERSION dist.integrity` into the lock; the files to copy are listed there
too (the browser build and the LICENSE).
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "vendor.lock.json"
VENDOR = HERE / "vendor"
STAMP = ".lock-sha256"          # in vendor/: the hash of the lock it was filled from


class VendorError(RuntimeError):
    """The pinned browser libraries could not be fetched or failed their integrity check."""


def lock_packages(lock: Path = LOCK) -> list[dict]:
    return json.loads(lock.read_text("utf-8"))["packages"]


def _lock_digest(lock: Path) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()


def is_current(dest: Path = VENDOR, lock: Path = LOCK) -> bool:
    """vendor/ was filled from this very lock and still holds every file it names."""
    try:
        stamp = (dest / STAMP).read_text("utf-8").strip()
    except OSError:
        return False
    names = [name for pkg in lock_packages(lock) for name in pkg["files"].values()]
    return stamp == _lock_digest(lock) and all((dest / n).is_file() for n in names)


def check_integrity(data: bytes, integrity: str) -> None:
    algo, _, want = integrity.partition("-")
    if algo != "sha512":
        raise VendorError(f"unsupported integrity {algo!r} in {LOCK.name}; use the registry's sha512")
    got = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if got != want:
        raise VendorError(f"integrity mismatch: expected sha512-{want}, got sha512-{got}")


def _cache_dir() -> Path:
    """A download cache only. Not llmpack.paths: this file also runs while a wheel is built
    (setup.py), where llmpack is not importable yet."""
    root = os.environ.get("LLMPACK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "llmpack")
    return Path(root) / "npm"


def _registry() -> str:
    """The npm registry npm is configured for on this machine (a mirror where one is set)."""
    url = os.environ.get("LLMPACK_NPM_REGISTRY") or os.environ.get("npm_config_registry")
    if not url:
        try:
            url = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            raise VendorError(f"cannot ask npm which registry to use ({exc}); install Node.js's npm once, "
                              "or set LLMPACK_NPM_REGISTRY to the npm registry's URL") from None
    return url.rstrip("/") + "/"


def _tarball_url(pkg: dict) -> str:
    """npm's own layout: REGISTRY/<name>/-/<name without scope>-<version>.tgz."""
    name, version = pkg["name"], pkg["version"]
    return f"{_registry()}{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"


def fetch_tarball(pkg: dict) -> bytes:
    """The package's tarball, from the cache or the registry; always integrity-checked."""
    key = hashlib.sha256(pkg["integrity"].encode()).hexdigest()[:32]
    cached = _cache_dir() / f"{key}.tgz"
    if cached.is_file():
        data = cached.read_bytes()
        try:
            check_integrity(data, pkg["integrity"])
            return data
        except VendorError:
            cached.unlink(missing_ok=True)
    url = _tarball_url(pkg)
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:   # noqa: S310 - the configured npm registry
            data = resp.read()
    except OSError as exc:
        raise VendorError(f"cannot download {pkg['name']}@{pkg['version']} from {url}: {exc}; the chat page "
                          "needs it once (set LLMPACK_NPM_REGISTRY to use a mirror)") from None
    try:
        check_integrity(data, pkg["integrity"])
    except VendorError as exc:
        raise VendorError(f"{pkg['name']}@{pkg['version']} from {url}: {exc}") from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.part")
    tmp.write_bytes(data)
    os.replace(tmp, cached)
    return data


def _extract(data: bytes, files: dict[str, str], into: Path, label: str) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for inner, name in files.items():
            try:
                src = tar.extractfile(tar.getmember(inner))
            except KeyError:
                src = None
            if src is None:
                raise VendorError(f"{label} has no file {inner}; fix {LOCK.name}")
            (into / name).write_bytes(src.read())


def ensure_vendor(dest: Path = VENDOR, lock: Path = LOCK, *, quiet: bool = False) -> Path:
    """Fill `dest` from the lock unless it is already current; atomic (a temporary folder is
    renamed into place), so a failed or concurrent run never leaves a half-filled vendor/."""
    if is_current(dest, lock):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".vendor-", dir=dest.parent))
    os.chmod(tmp, 0o755)   # mkdtemp makes it private; the files are public anyway
    try:
        for pkg in lock_packages(lock):
            label = f"{pkg['name']}@{pkg['version']}"
            if not quiet:
                print(f"llmpack: fetching {label} for the chat page", file=sys.stderr)
            _extract(fetch_tarball(pkg), pkg["files"], tmp, label)
        (tmp / STAMP).write_text(_lock_digest(lock) + "\n", "utf-8")
        old = dest.with_name(f".vendor-old-{os.getpid()}")
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmpack.webui.vendor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that vendor/ matches the lock")
    args = parser.parse_args(argv)
    if args.check:
        ok = is_current()
        print(f"webui/vendor is {'current' if ok else 'missing or stale: run python -m llmpack.webui.vendor'}")
        return 0 if ok else 1
    try:
        ensure_vendor()
    except VendorError as exc:
        print(f"llmpack: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
