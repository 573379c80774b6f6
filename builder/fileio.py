"""Small file helpers shared by the packfile modules: positioned reads, quiet unlinks, and
replacing a file atomically (write a ``.tmp-<pid>`` sibling, then rename over the target)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable


def reader(f: BinaryIO) -> Callable[[int, int], bytes]:
    """read(offset, n) on an open file: up to n bytes from offset (fewer at the end)."""
    def read(offset: int, n: int) -> bytes:
        f.seek(offset)
        return f.read(n)
    return read


def unlink_quietly(path: Path | str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def tmp_sibling(path: Path, hidden: bool = False) -> Path:
    """Where to write `path`'s new content before renaming it into place; the pid suffix lets a
    later run tell a leftover of a dead process from a write in progress."""
    return path.with_name(f"{'.' if hidden else ''}{path.name}.tmp-{os.getpid()}")


def replace_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: readers see the old content or the new, never half."""
    tmp = tmp_sibling(path)
    try:
        tmp.write_text(text, "utf-8")
        os.replace(tmp, path)
    finally:
        unlink_quietly(tmp)
