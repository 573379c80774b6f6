"""The llama.cpp both runtimes are built from: llama-cpp-python's sdist from PyPI (pinned by
sha256), with llmpack's patches to its vendored tree, ``builder/patches/*.patch``.

One patch per concern, each a unified diff (as ``git diff`` writes it) under a header that says
why and which upstream issue or advisory it answers, as Ollama keeps its ``llama/patches/``:

* ``0001-mtmd-projector-in-place``: ``mtmd_init_from_file_at``, a projector read inside a built program;
* ``0002-mtmd-decode-audio``: ``mtmd_helper_decode_audio``, sound decoded without a model (a sandboxed child);
* ``0003-mtmd-no-video``: MTMD_VIDEO off, so no ``ffmpeg`` is started from the PATH;
* ``0004-rpc-key-handshake``: a shared key proved both ways before any RPC command (HMAC-SHA256 on
  llama.cpp's vendored SHA-256), one deadline for the whole handshake;
* ``0005-rpc-server-bounds``: upstream's later rpc-server fixes, redone for this build;
* ``0006-rpc-cache-entries``: ``--cache`` entries tagged with an HMAC of their content;
* ``0007-rpc-client-reports``: what a worker reports bounded on ggml's own connection.

They apply in name order, each on the tree the earlier ones left. A hunk must find its lines
exactly: where the diff says, or else at exactly one other place (``patch``'s offset, never its
fuzz). Every patch is checked in memory before any file is written, so a llama.cpp update that
moved the text stops the build with the patch, file and hunk named, and leaves nothing half-done.
Both builds apply the same files: the Linux wheel (`./dev`, before llmpack is installed, hence
stdlib only) and the Windows DLLs (builder/windows/llama_dlls.py, which adds
``builder/patches/windows/``). The files' bytes are part of both caches' keys. Both builds also
turn the RDMA transport off (``GGML_RPC_RDMA=OFF``: ./dev's DL flags, builder/windows/llama_dlls.py).

    python builder/llama_source.py --key          # what the wheel's cache key adds
    python builder/llama_source.py DIR SOURCES    # DIR/llama_cpp_python-<version>/, patched
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

NAME = "llama-cpp-python"
VERSION = "0.3.36"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDORED = f"llama_cpp_python-{VERSION}/vendor/llama.cpp"

PATCHES = Path(__file__).resolve().parent / "patches"


class SourceError(Exception):
    """The sources cannot be fetched or patched; the message says what to do."""


def patch_files(folder: Path | None = None) -> list[Path]:
    """The patches in `folder` (builder/patches/), in the order they apply (their names)."""
    return sorted((folder or PATCHES).glob("*.patch"))


def files_key(files: list[Path]) -> list[tuple[str, str]]:
    """(name, sha256 of the bytes) of each patch: what a cache key holds of them."""
    return [(f.name, hashlib.sha256(f.read_bytes()).hexdigest()) for f in files]


def key() -> str:
    """What the built libraries depend on here: the sdist's hash and the patch files' contents."""
    text = json.dumps({"sdist": SHA256, "patches": files_key(patch_files())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(name: str, version: str, sha256: str, sources: Path) -> Path:
    """`sources/<filename>`, downloaded with pip once and checked against the pinned sha256."""
    path = sources / f"{name.replace('-', '_')}-{version}.tar.gz"
    if path.is_file() and sha256_file(path) == sha256:
        return path
    sources.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=sources) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "-q", "-d", tmp, f"{name}=={version}"], capture_output=True, text=True)
        got = Path(tmp) / path.name
        if proc.returncode != 0 or not got.is_file():
            raise SourceError(f"pip could not download {name}=={version} from PyPI: "
                              f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        digest = sha256_file(got)
        if digest != sha256:
            raise SourceError(f"{path.name} from PyPI has sha256 {digest}, not the pinned {sha256}; "
                              "refusing to build with it")
        shutil.move(str(got), path.with_name(path.name + ".tmp"))
        os.replace(path.with_name(path.name + ".tmp"), path)
    return path


# Plain classes, not dataclasses: run as a script, builder/ is sys.path[0] and its inspect.py
# hides the standard library's, which dataclasses imports.
class Hunk:
    def __init__(self, old_start: int) -> None:
        self.old_start = old_start     # 1-based line of the old text, as the diff's @@ line says
        self.old: list[str] = []
        self.new: list[str] = []


class FilePatch:
    def __init__(self, path: str, created: bool) -> None:
        self.path = path               # relative to the tree, without git's a/ b/
        self.created = created         # --- /dev/null
        self.hunks: list[Hunk] = []


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_patch(text: str, name: str) -> list[FilePatch]:
    """The files and hunks of a unified diff; its header (everything before the first ``---``
    line that a ``+++`` line follows) is prose and ignored. Hunks are read by their line counts."""
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            if files and lines[i].startswith("@@"):
                i = _read_hunk(lines, i, files[-1], name)
                continue
            i += 1
            continue
        old, new = lines[i][4:].strip().split("\t")[0], lines[i + 1][4:].strip().split("\t")[0]
        if new == "/dev/null":
            raise SourceError(f"{name}: deletes {old}; llmpack's patches only change or add files")
        files.append(FilePatch(new[2:] if new.startswith("b/") else new, old == "/dev/null"))
        i += 2
    if not files or any(not f.hunks for f in files):
        raise SourceError(f"{name} holds no unified diff (or a file without a hunk)")
    return files


def _read_hunk(lines: list[str], i: int, target: FilePatch, name: str) -> int:
    m = _HUNK.match(lines[i])
    if not m:
        raise SourceError(f"{name}: a malformed hunk header: {lines[i].strip()}")
    n_old = int(m.group(2)) if m.group(2) is not None else 1
    n_new = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(int(m.group(1)))
    i += 1
    last: list[str] | None = None
    while len(hunk.old) < n_old or len(hunk.new) < n_new or (i < len(lines) and lines[i].startswith("\\")):
        if i >= len(lines):
            raise SourceError(f"{name}: a hunk of {target.path} ends before its {n_old}/{n_new} lines")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line.startswith("\\"):   # "\ No newline at end of file": the line before has none
            for side in last or []:
                side[-1] = side[-1].rstrip("\n")
        elif tag == " " or line in ("\n", "\r\n"):   # an empty context line may lose its space
            body = body if tag == " " else line
            hunk.old.append(body)
            hunk.new.append(body)
            last = [hunk.old, hunk.new]
        elif tag == "-":
            hunk.old.append(body)
            last = [hunk.old]
        elif tag == "+":
            hunk.new.append(body)
            last = [hunk.new]
        else:
            raise SourceError(f"{name}: an unexpected line in a hunk of {target.path}: {line.rstrip()}")
        i += 1
    if len(hunk.old) != n_old or len(hunk.new) != n_new:
        raise SourceError(f"{name}: a hunk of {target.path} does not hold the lines its header counts")
    target.hunks.append(hunk)
    return i


def _apply_hunks(lines: list[str], fp: FilePatch, name: str) -> list[str]:
    """`lines` with every hunk of `fp` applied: each where the diff says, else at its one match
    after the hunk before; anything else (no match, two) is an error naming the hunk."""
    out, shift, floor = list(lines), 0, 0
    for n, hunk in enumerate(fp.hunks, 1):
        size = len(hunk.old)
        want = max(hunk.old_start - 1 + (0 if size else 1), 0) + shift
        if out[want:want + size] == hunk.old and want >= floor:
            at = want
        else:
            found = [j for j in range(floor, len(out) - size + 1) if out[j:j + size] == hunk.old]
            if len(found) != 1:
                where = "matches nowhere" if not found else f"matches {len(found)} places"
                raise SourceError(f"{name} does not apply: hunk {n} of {fp.path} (line {hunk.old_start}) {where}; "
                                  "the pinned llama.cpp changed, or the patch was written against another tree")
            at = found[0]
        out[at:at + size] = hunk.new
        shift = at + len(hunk.new) - (hunk.old_start - 1 + (0 if size else 1)) - size
        floor = at + len(hunk.new)
    return out


def apply_patch_files(root: Path, files: list[Path]) -> None:
    """Apply `files` in order to the tree at `root`, all or nothing: every hunk is checked in
    memory first; SourceError names the patch, file and hunk that does not apply."""
    changed: dict[Path, list[str]] = {}
    for patch in files:
        for fp in parse_patch(patch.read_text("utf-8"), patch.name):
            path = root / fp.path
            if path in changed:
                lines = changed[path]
            elif fp.created:
                if path.exists():
                    raise SourceError(f"{patch.name} creates {fp.path}, which already exists")
                lines = []
            elif path.is_file():
                lines = path.read_text("utf-8").splitlines(keepends=True)
            else:
                raise SourceError(f"{patch.name} changes {fp.path}, which the sources do not have")
            changed[path] = _apply_hunks(lines, fp, patch.name)
    for path, lines in changed.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("".join(lines))


def unpack_patched(dest: Path, sources: Path) -> Path:
    """`dest/llama_cpp_python-<version>/`: the pinned sdist unpacked, with the patches applied."""
    sdist = fetch_sdist(NAME, VERSION, SHA256, sources)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    apply_patch_files(dest / VENDORED, patch_files())
    return dest / f"llama_cpp_python-{VERSION}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--key"]:
        print(key())
        sys.exit(0)
    if len(sys.argv) != 3:
        print("usage: python builder/llama_source.py --key | DEST SOURCES", file=sys.stderr)
        sys.exit(2)
    try:
        print(unpack_patched(Path(sys.argv[1]), Path(sys.argv[2])))
    except SourceError as exc:
        print(f"[dev] {exc}", file=sys.stderr)
        sys.exit(1)
