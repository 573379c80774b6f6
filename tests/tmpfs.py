"""Running a command with one folder replaced by a small tmpfs: a full disk on demand.

`unshare -rm` gives the command a mount namespace of its own (as a mapped root user, so no
real privileges are needed and nothing stays mounted after it exits)."""
from __future__ import annotations

from pathlib import Path

MOUNT_THEN_RUN = 'mount -t tmpfs -o size="$1" llmpack-test "$2" && shift 2 && exec "$@"'


def on_small_tmpfs(folder: Path, size: str, cmd: list[str]) -> list[str]:
    """The command line that runs `cmd` with `folder` (which must exist) on a tmpfs of `size` (e.g. "1m")."""
    return ["unshare", "-rm", "sh", "-c", MOUNT_THEN_RUN, "sh", size, str(folder), *cmd]
