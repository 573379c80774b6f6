"""One running copy per model: a second launch of a built program finds the first one and opens
its page instead of starting another server.

Why: people double-click the file again when they closed the browser tab or lost the window.
That used to start a second full copy on the next port (8201, then 8202): twice the memory and
CPU for the same model, and nothing said so. Now the running copy leaves a lock file while it
serves, and a later launch of the same model that finds it alive opens the browser on it and
exits 0 with one line. `--new-instance` starts a second copy anyway.

The lock file is ``instance-<model key>.json`` in the per-user runtime folder (`lifecycle.browser.runtime_dir()`, passed in:
$XDG_RUNTIME_DIR/llmpack, e.g. /run/user/1000/llmpack, on Linux; %LOCALAPPDATA%\\Temp\\llmpack on
Windows; 0700), written 0600 once the server listens and removed when it stops::

    {"key": "5167a0c3e1", "pid": 4242, "port": 8201, "url": "http://127.0.0.1:8201",
     "redirect": "/run/user/1000/llmpack/open-8201.html", "exe": "/home/me/qwen-chat"}

The model key is the model's sha256 prefix, as saved chats use (serving._model_key), so two copies
of one program, or two programs built from one model, share one server and one chat list. The URL
has no secret in it: the page's secret stays in the 0600 redirect file the first launch wrote
(`launch.write_redirect`), and the second launch hands the browser that file, exactly as the first
did, so the page opens unlocked without the secret ever reaching a command line.

A lock is believed only when its process is alive and ours AND the server on its port proves
it is the one that wrote the lock: the lock holds a random `secret` (the file is 0600 in the
private runtime folder), and ``GET /api/instance?nonce=N`` must answer
``{"instance": <this key>, "proof": HMAC-SHA256(secret, N)}`` (any phase: loading counts).
The model key alone proved nothing: anyone can compute it, so after a crash and the reuse of
its pid, another user's server answering on the old port would have received the next
double-click, on the same origin, with the page's saved settings. A process of another user
(PermissionError from kill(pid, 0)) is not ours. Anything else (a dead pid, a port now used by
something else, a wrong proof, an unreadable file) is stale and replaced. Two launches in the
very same second may both start, since the lock is written once the server listens; that is
the old behaviour, not a broken one.
"""
from __future__ import annotations

import hmac
import http.client
import json
import os
import secrets
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from llmpack.runtime.server.http.security import CHALLENGE_PATH, instance_proof as proof

HEALTH_TIMEOUT_S = 3.0


def new_secret() -> str:
    """A secret like the one a server keeps in memory (ServerState.instance_secret) and writes into its lock."""
    return secrets.token_hex(32)


@dataclass(frozen=True)
class Running:
    """A live copy serving this model, as its lock file describes it."""

    url: str
    port: int
    pid: int
    redirect: Path | None


def lock_path(folder: Path, key: str) -> Path:
    """The lock file of model `key` in `folder` (the caller's `browser.runtime_dir()`)."""
    return Path(folder) / f"instance-{key}.json"


def find_running(folder: Path, key: str) -> Running | None:
    """The live copy serving model `key`, or None; a stale lock is removed on the way."""
    path = lock_path(folder, key)
    try:
        info = json.loads(path.read_text("utf-8"))
        running = Running(str(info["url"]), int(info["port"]), int(info["pid"]),
                          Path(info["redirect"]) if info.get("redirect") else None)
        secret = str(info["secret"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.get("key") == key and running.pid != os.getpid() and pid_alive(running.pid) \
            and _answers(running.url, key, secret):
        return running
    try:
        path.unlink()   # stale: a later claim writes a fresh one
    except OSError:
        pass
    return None


def claim(folder: Path, key: str, url: str, redirect: Path | None, secret: str) -> Path | None:
    """Record this process as the copy serving `key` (0600, replaced atomically), with the
    `secret` its server answers the challenge with; the path, for `release`. None when the
    runtime folder cannot be written: the server runs all the same."""
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"key": key, "pid": os.getpid(), "port": port, "url": url, "secret": secret,
                       "redirect": str(redirect) if redirect else None, "exe": sys.executable}, indent=1)
    path = lock_path(folder, key)
    try:
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(tmp, path)
        return path
    except OSError:
        return None


def release(path: Path | None) -> None:
    """Remove our lock file, unless another copy has taken it over since (--new-instance)."""
    if path is None:
        return
    try:
        if json.loads(path.read_text("utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":   # os.kill(pid, 0) would terminate it there
        import ctypes   # lazy: Windows only

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)   # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        try:
            code = ctypes.c_ulong()
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259   # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, but another user's: not the copy that wrote our lock
        return False
    return True


def _answers(url: str, key: str, secret: str) -> bool:
    """The server at `url` names this model and proves it holds the lock's secret."""
    parts = urllib.parse.urlsplit(url)
    nonce = secrets.token_hex(16)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=HEALTH_TIMEOUT_S)
    try:
        conn.request("GET", f"{CHALLENGE_PATH}?nonce={nonce}", headers={"Host": parts.netloc})
        resp = conn.getresponse()
        body = json.loads(resp.read(1 << 16).decode("utf-8"))
        return isinstance(body, dict) and body.get("instance") == key and isinstance(body.get("proof"), str) \
            and hmac.compare_digest(body["proof"], proof(secret, nonce))
    except (OSError, ValueError, http.client.HTTPException):
        return False
    finally:
        conn.close()
