"""Debian 13's Vulkan and SPIR-V headers, unpacked into a private folder of the llmpack cache.

Both llama.cpp builds with the Vulkan backend need them: the Linux wheel (`./dev`) and the
Windows DLLs cross-compiled with mingw (builder/windows/llama_dlls.py). Debian 12's own headers
(1.3.239) lack vk::LayerSettingEXT, which the vendored ggml-vulkan uses, and it has no SPIR-V
headers CMake package. The packages are headers only, so one copy serves both targets.

They are fetched with apt through a private sources list, lists and cache folder (the
machine's own package sources stay as they are), from the Debian archive this machine's apt
already uses. Run as a script (stdlib only: `./dev` calls it before llmpack is installed):

    python builder/vulkan_headers.py            # fetch if missing, print the usr folder
    python builder/vulkan_headers.py --pins     # print the pinned packages (part of the wheel's key)
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

PINS = "libvulkan-dev=1.4.309.0-1 spirv-headers=1.6.1+1.4.309.0-1"
SUITE = "trixie"


class HeadersError(Exception):
    """The headers cannot be fetched; the message says what to do."""


def _cache_root() -> Path:
    """The llmpack cache, as llmpack.paths.cache_dir() and ./dev compute it on Linux."""
    override = os.environ.get("LLMPACK_CACHE")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmpack"


def headers_dir(cache_root: Path | None = None) -> Path:
    key = hashlib.sha256(PINS.encode()).hexdigest()[:12]
    return (cache_root or _cache_root()) / "vulkan-headers" / key


def _debian_mirror() -> str:
    """The Debian archive this machine's apt uses (its mirror or proxy), asked of apt."""
    try:
        out = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI) $(LABEL)"],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        uri, _, label = line.partition(" ")
        if label.strip() == "Debian":
            return uri
    raise HeadersError("no Debian archive found in this machine's apt sources; the Vulkan headers come from "
                       f"Debian {SUITE} (or LLMPACK_LLAMA_FLAVOUR=avx2 ./dev ... for the CPU-only AVX2 build)")


def ensure_headers(cache_root: Path | None = None, log=lambda msg: print(msg, file=sys.stderr)) -> Path:
    """The usr folder holding include/vulkan and share/cmake/SPIRV-Headers; fetched once."""
    dest = headers_dir(cache_root)
    if (dest / "usr/include/vulkan/vulkan.hpp").is_file():
        return dest / "usr"
    log(f"fetching Vulkan headers ({PINS} from Debian {SUITE}) into {dest}")
    apt = dest.parent.parent / f"apt-{SUITE}"
    debs = apt / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {_debian_mirror()} {SUITE} main\n")
    opts = ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", "Dir::Etc::SourceParts=-",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
            "-o", "APT::Get::List-Cleanup=0", "-o", "APT::Sandbox::User=root", "-qq"]
    try:
        subprocess.run(["apt-get", *opts, "update"], check=True, stdout=sys.stderr)
        subprocess.run(["apt-get", *opts, "download", *PINS.split()], check=True, cwd=debs, stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise HeadersError(f"apt could not fetch {PINS} from Debian {SUITE} ({exc})") from None
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(tmp)], check=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest / "usr"


if __name__ == "__main__":
    if sys.argv[1:] == ["--pins"]:
        print(PINS)
        sys.exit(0)
    try:
        print(ensure_headers())
    except HeadersError as exc:
        print(f"[dev] {exc}", file=sys.stderr)
        sys.exit(1)
