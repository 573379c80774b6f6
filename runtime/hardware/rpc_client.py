"""The head's side of llama.cpp's RPC backend: workers' devices registered with ggml (`--rpc`).

llama-cpp-python ignores its `rpc_servers` argument, so endpoints are registered the way
llama.cpp's own common/arg.cpp does it: ggml_backend_reg_by_name("RPC"), that backend's
"ggml_backend_rpc_add_server" proc, ggml_backend_register on what it returns; the devices it lists
then go into llama_model_params.devices (runtime/hardware/placement.py). Two things ggml does
badly for a product, and what is done about them:

* ggml aborts the whole process on an endpoint it cannot reach or that speaks another protocol
  version. Each endpoint is therefore probed first (runtime/hardware/rpc_probe.py), so a typo or a
  worker that is not running is one line naming it, not a core dump. What the worker then tells
  ggml on its own connection is bounded in C before any device is made
  (builder/patches/0007-rpc-client-reports.patch); out of bounds, add_server returns nothing.
* ggml aborts the process (GGML_ABORT on its dispatcher thread) when a worker dies mid-request.
  ggml_set_abort_callback lets us see that message first: the callback ends every request with
  an error naming the lost worker (`on_worker_lost` listeners: the engine), then parks the
  dispatcher thread for good instead of returning into abort(). The engine thread stays blocked
  inside llama_decode; the server keeps answering, with /health saying why, until it is restarted.

ggml's device registry is process-wide, so what is registered here is too: one `_Workers` per
process (`WORKERS`), which holds the registered endpoints and the listeners.
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.rpc import _ABORT_CB, RpcError, api, install_key, proc, rpc_reg
from llmpack.runtime.hardware.rpc_probe import MAX_DEVICES, probe

_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_RPC_ABORTS = ("Remote RPC server crashed", "Failed to connect to", "RPC handshake failed")


class RpcWorkerLost(RpcError):
    """A worker stopped answering while the model was in use: the engine ends with this."""


@dataclass(slots=True)
class RemoteDevice:
    """A device another machine lends over RPC."""
    id: str                 # ggml's name, "RPC0", "RPC1", ... in the order the endpoints were given
    endpoint: str           # "HOST:PORT" of the worker
    memory_total: int
    memory_free: int
    handle: int = 0         # ggml_backend_dev_t

    def to_dict(self) -> dict:
        return {"id": self.id, "endpoint": self.endpoint, "memory_total": self.memory_total,
                "memory_free": self.memory_free}


@dataclass
class _Workers:
    """The workers this process registered with ggml, and who to tell when one is lost."""
    registered: dict[str, list[RemoteDevice]] = field(default_factory=dict)
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    abort_cb: object = None   # the ctypes callback, kept alive while ggml holds it


WORKERS = _Workers()


def add_servers(endpoints: Sequence[str]) -> list[RemoteDevice]:
    """Register each worker's devices with ggml (once per endpoint and process) and list them, in
    the order given. Each endpoint is probed first: nothing reaches ggml that would abort it."""
    with WORKERS.lock:
        g = api()
        reg = rpc_reg(g)
        add = _ADD_SERVER(proc(g, reg, "ggml_backend_rpc_add_server"))
        if not add:
            raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
        key = rpc_key.head_key()
        install_key(g, reg, key)
        out: list[RemoteDevice] = []
        for endpoint in endpoints:
            if endpoint not in WORKERS.registered:
                probe(endpoint, key)
                _install_abort_handler(g)
                server_reg = add(endpoint.encode())
                if not server_reg:
                    raise RpcError(f"the RPC worker at {endpoint} told ggml a device count, memory, alignment or "
                                   "largest buffer out of bounds (or no device), unlike what it told llmpack's "
                                   "probe: it is broken or not an llmpack worker; llmpack will not use it")
                g.ggml_backend_register(server_reg)
                count = g.ggml_backend_reg_dev_count(server_reg)
                WORKERS.registered[endpoint] = [_device(g, g.ggml_backend_reg_dev_get(server_reg, i), endpoint)
                                                for i in range(min(count, MAX_DEVICES))]
            out += WORKERS.registered[endpoint]
        return out


def _device(g, dev: int, endpoint: str) -> RemoteDevice:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return RemoteDevice(g.ggml_backend_dev_name(dev).decode(), endpoint, total.value, free.value, dev)


def is_remote(dev: int) -> bool:
    """Whether a ggml device belongs to the RPC backend (gpu_devices() lists only local GPUs)."""
    return any(d.handle == dev for devs in WORKERS.registered.values() for d in devs)


def any_registered() -> bool:
    """Whether this process added RPC workers' devices to ggml's (process-wide) registry."""
    return bool(WORKERS.registered)


# ---------------------------------------------------------------- a worker that dies mid-request
def on_worker_lost(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call listener(reason) when ggml gives up on a worker; returns the function that unregisters it."""
    WORKERS.listeners.append(listener)
    return lambda: WORKERS.listeners.remove(listener) if listener in WORKERS.listeners else None


def lost_reason(message: str, wait_s: float = 3.0) -> str:
    """Which worker is gone, found by asking each: a dead one refuses the connection (a live one,
    even busy, is accepted into its backlog). Asked again for a moment: the connection can break
    a little before a dying worker's port closes."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = []
        for endpoint in list(WORKERS.registered):
            host, port = endpoint.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=1.0).close()
            except OSError as exc:
                dead.append(f"{endpoint} ({exc.strerror or exc})")
        if dead or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    who = ", ".join(dead) if dead else "one of " + ", ".join(WORKERS.registered)
    return f"lost the RPC worker at {who}; start it again, then restart llmpack"


def _install_abort_handler(g) -> None:
    if WORKERS.abort_cb is not None:
        return

    def on_abort(message: bytes) -> None:
        text = (message or b"").decode("utf-8", "replace").strip()
        if not any(m in text for m in _RPC_ABORTS):
            os.write(2, f"{text}\n".encode())   # ggml's own line; abort() follows as before
            return
        reason = lost_reason(text)
        if not WORKERS.listeners:   # nothing to tell (a load in progress): end with the reason, not a core dump
            os.write(2, f"llmpack: error: {reason}\n".encode())
            os._exit(3)
        for listener in list(WORKERS.listeners):
            try:
                listener(reason)
            except Exception as exc:  # noqa: BLE001 - a listener's failure must not undo the others
                os.write(2, f"llmpack: error while reporting the lost worker: {exc!r}\n".encode())
        threading.Event().wait()   # park ggml's dispatcher thread: returning would abort() the process

    WORKERS.abort_cb = _ABORT_CB(on_abort)
    g.ggml_set_abort_callback(WORKERS.abort_cb)
