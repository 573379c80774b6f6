"""Opening the chat page in the person's browser without putting its secret on a command line:
a 0600 redirect file in this user's private runtime folder, handed to the browser, as Jupyter does."""
from __future__ import annotations

import html
import os
import urllib.parse
import webbrowser
from pathlib import Path

from llmpack import paths


def runtime_dir() -> Path:
    """This user's private runtime folder (llmpack.paths.runtime_dir: owned by the user, 0700,
    never a symlink, never /tmp/runtime-UID); OSError, which callers already handle, when none is."""
    try:
        return paths.runtime_dir()
    except paths.PathsError as exc:
        raise OSError(str(exc)) from None


def open_browser(url: str, redirect: Path | None = None) -> Path | None:
    """Open `url` (which carries the chat secret) in the user's browser without putting it on a
    command line, where other users can read it (/proc/*/cmdline, Task Manager): a 0600 HTML file
    in the runtime folder redirects to it, and the browser is given that file's path, as Jupyter
    does. Goes through Python's webbrowser (os.startfile on Windows). Returns the file, for the
    server to delete when it stops; None when it could not be written (the printed link remains).
    `redirect`: that file, already written (write_redirect)."""
    path = redirect or write_redirect(url)
    if path is not None:
        open_redirect(path)
    return None if redirect else path


def open_redirect(path: Path) -> None:
    """Hand the browser a redirect file (ours, or the running copy's: lifecycle/instance.py)."""
    try:
        webbrowser.open(path.as_uri())
    except Exception:  # noqa: BLE001 - no browser is fine: the URL is printed
        pass


def write_redirect(url: str) -> Path | None:
    """The 0600 redirect file for `url` (see open_browser); None when it cannot be written."""
    port = urllib.parse.urlsplit(url).port
    try:
        path = (runtime_dir() / f"open-{port}.html").absolute()   # as_uri() needs an absolute path
        target = html.escape(url, quote=True)
        page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0;url={target}"><title>Opening the chat</title></head>\n'
                f'<body><p>Opening <a href="{target}">the chat page</a>...</p></body></html>\n')
        path.unlink(missing_ok=True)   # a fresh file, so O_CREAT applies the mode below
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError:
        return None
    return path


def remove_file(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
