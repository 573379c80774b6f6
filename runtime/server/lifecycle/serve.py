"""`llmpack run` and what a built executable runs: bind, print the URL, prepare the model in
the background (the page shows progress), serve on waitress until Ctrl+C / SIGTERM / the
console window's close button; a built program also leaves an instance lock for a second launch."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from llmpack import signals
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.server.lifecycle import instance
from llmpack.runtime.server.lifecycle.browser import open_browser, remove_file, runtime_dir, write_redirect
from llmpack.runtime.server.lifecycle.prepare import Progress
from llmpack.runtime.server.lifecycle.server import Server


def serve(config: ServeConfig, prepare_model: Callable[[Progress], Path | ModelFile]) -> int:
    """config.instance_key (a built program's model key): leave a lock file while serving, for a
    second launch of the same model to find (lifecycle/instance.py)."""
    server = Server(config, prepare_model)
    server.state.instance = config.instance_key
    opened: list[Path | None] = []
    held: Path | None = None
    previous: dict = {}
    try:
        previous = _install_signals(server)   # before announcing: a Ctrl+C right after must stop cleanly
        server.watch_console_close()
        server.announce()
        server.start_preparing()
        if config.instance_key:   # a second launch opens the browser through the same redirect file
            opened.append(write_redirect(server.page_url))
            try:
                held = instance.claim(runtime_dir(), config.instance_key, server.url, opened[0],
                                      server.state.instance_secret)
            except OSError:   # no private folder: this copy serves all the same, unseen by a second launch
                pass
        if config.open_browser:
            threading.Thread(target=lambda: opened.append(open_browser(server.page_url, *opened[:1])),
                             daemon=True).start()
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        signals.restore(previous)
        instance.release(held)
        for path in filter(None, opened):
            remove_file(path)
    print("llmpack: stopped", flush=True)
    rc = 1 if server.state.phase == "error" else 0
    if server.still_preparing():   # inside llama.cpp past PREPARE_WAIT_S: skip the shutdown that would abort
        print("llmpack: the model was still loading; exiting without waiting for it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(rc)
    return rc


def _install_signals(server: Server) -> dict:
    def on_signal(signum: int, frame: Any) -> None:
        if server.stopping:   # second Ctrl+C: stop waiting
            raise KeyboardInterrupt
        print("\nllmpack: shutting down...", file=sys.stderr, flush=True)
        server.stop()

    return signals.install(on_signal, ("SIGINT", "SIGTERM", "SIGBREAK"))
