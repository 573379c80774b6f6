"""`--forget`: remove what a built program left on this computer, after asking.

A launch may leave three things outside the program itself: the unpacked copy of its model
(only a compressed build unpacks one now, builder/extract.py; llmpack before issue 20 unpacked
every model, and that copy goes too) with its markers, in the per-user cache; and the chats and
page settings saved for its model (runtime/chats/chats.py, kept by the model key) in the
per-user data folder, and the long documents its chats searched (runtime/documents/index.py,
in the same folder; a document another model's chats also use stays for them). `--forget` lists
them with their size, asks
"Remove ... (N MB)? [y/N]" on the console, and removes them. `--yes` skips the question; with
no console to ask on (no tty), it refuses and says to add --yes, so a script never deletes
chats by accident. While a copy of the program is serving, it refuses: that copy is using them.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable, TextIO

from llmpack import paths
from llmpack.builder.extract import _remove_stale_tmps
from llmpack.builder.fileio import unlink_quietly
from llmpack.builder.manifest import MMPROJ_KEY, Manifest
from llmpack.builder.packfile import PackError
from llmpack.progress import human_bytes


def model_files(manifest: Manifest) -> list[Path]:
    """What the launches of this model wrote to the cache: the unpacked copy and its markers."""
    models = paths.models_dir()
    proj = (manifest.extra or {}).get(MMPROJ_KEY) or {}   # the vision projector's copy, too (builder/mmproj.py)
    sha = proj.get("sha256")
    shas = [manifest.model.sha256] + ([sha] if isinstance(sha, str) and re.fullmatch("[0-9a-f]{64}", sha) else [])
    names = [f"{sha}{end}" for sha in shas
             for end in (".gguf", ".gguf.ok", ".gguf.lock", ".inplace.ok", ".sidecar.ok")]
    return [models / n for n in names if (models / n).exists()]


def forget(manifest: Manifest, *, yes: bool, ask: Callable[[str], str] = input,
           stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Remove this program's model copy and saved chats/settings (see the module docstring); 0 when
    done or nothing was there, 1 when the answer was no."""
    from llmpack.runtime.server.lifecycle import instance   # lazy: the server package (Flask, waitress) only for --forget
    from llmpack.runtime.chats.chats import ChatStore   # lazy: as above
    from llmpack.runtime.documents.index import DocumentIndex   # lazy: as above
    from llmpack.runtime.server.lifecycle.browser import runtime_dir   # lazy: as above

    stdin, out = stdin or sys.stdin, out or sys.stdout
    key = manifest.model.sha256[:10]   # the model key saved chats are kept by (serving._model_key)
    try:
        running = instance.find_running(runtime_dir(), key)
    except OSError:   # no private runtime folder: no copy can have left a lock there
        running = None
    if running is not None:
        raise PackError(f"this chat is running at {running.url} (process {running.pid}); "
                        "stop it (Ctrl+C in its window), then run --forget again")
    files = model_files(manifest)
    store = ChatStore()
    n_chats, chat_bytes, settings = store.usage(key)
    index = DocumentIndex()
    n_docs, doc_bytes = index.usage(key)
    total = sum(f.stat().st_size for f in files) + chat_bytes + doc_bytes
    what = []
    copies = [f for f in files if f.suffix == ".gguf"]   # a compressed build's, or one an older llmpack unpacked
    if copies:
        what.append(f"the unpacked model {copies[0]}")
    elif files:
        what.append("the model's check markers in " + str(files[0].parent))
    if n_chats or settings:
        what.append(f"{n_chats} saved chat{'s' if n_chats != 1 else ''}"
                    f"{' and the page settings' if settings else ''} of this model in {store.path}")
    if n_docs:
        what.append(f"the index of {n_docs} long document{'s' if n_docs != 1 else ''} its chats searched, "
                    f"in {index.path}")
    if not what:
        print("Nothing to remove: this program has left no model copy and no saved chats on this computer.",
              file=out, flush=True)
        return 0
    question = f"Remove {' and '.join(what)} ({human_bytes(total)})? [y/N] "
    if not yes:
        if not _isatty(stdin):
            raise PackError(f"--forget would remove {' and '.join(what)} ({human_bytes(total)}); there is no console "
                            "to ask on, so add --yes to remove them")
        try:
            answer = ask(question)
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing removed.", file=out, flush=True)
            return 1
    for f in files:
        unlink_quietly(f)
    if files:
        _remove_stale_tmps(files[0].parent, manifest.model.sha256)
    if n_chats or settings:
        store.forget(key)
    if n_docs:
        index.forget(key)
    print(f"Removed {' and '.join(what)} ({human_bytes(total)}).", file=out, flush=True)
    return 0


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
