"""The worker's side of llama.cpp's RPC backend: this machine's devices lent to other llmpacks
(`llmpack rpc-worker`, a built file's `--rpc-worker`).

ggml_backend_rpc_start_server over this machine's GPUs (else its CPU), through the backend's
"ggml_backend_rpc_start_server" proc (ggml-rpc.h: endpoint, cache_dir, n_threads, n_devices,
devices). `--mem MB` caps the memory a device reports to clients (llama.cpp splits the layers in
proportion to it): the device's get_memory, replaced in the worker's process (cap_memory).

Who may use it: the key (runtime/hardware/rpc_key.py), made the first time and printed where it
is; a key ggml-rpc does not take stops the worker before it listens (install_key). The traffic is
not encrypted: hence 127.0.0.1 by default, and any other address only with `insecure=True` (the
`--insecure-bind` flag); docs/SCALING.md shows the SSH tunnel to use.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import sys
import threading
from typing import Callable

from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.backends import gpu_devices, load_backends
from llmpack.runtime.hardware.rpc import DEFAULT_PORT, RpcError, api, install_key, proc, rpc_reg

_GET_MEMORY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is this machine's loopback."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RpcError(f"--host {host!r}: {exc.strerror}") from None
    return all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class _DeviceStruct(ctypes.Structure):
    # struct ggml_backend_device (ggml-backend-impl.h): 16 interface functions, then reg, context
    _fields_ = [("iface", ctypes.c_void_p * 16), ("reg", ctypes.c_void_p), ("context", ctypes.c_void_p)]


def cap_memory(dev: int, mem_bytes: int) -> object:
    """Make ggml device `dev` report `mem_bytes` free and total from now on, in this process: its
    get_memory slot is replaced in place. ggml's RPC server answers its clients' GET_DEVICE_MEMORY
    from the device of the backend it created (ggml_backend_get_device), which for the CPU is
    ggml's own static device, not one passed in: so the device itself is changed, which is only
    done in a worker's process. Returns the callback, to be kept alive while the server runs."""
    def get_memory(_dev, free, total) -> None:
        free[0] = total[0] = mem_bytes

    callback = _GET_MEMORY(get_memory)
    _DeviceStruct.from_address(dev).iface[2] = ctypes.cast(callback, ctypes.c_void_p).value   # get_memory
    return callback


def check_bind(host: str, port: int, insecure: bool) -> None:
    """Refuse a non-loopback address without the explicit flag; fail early on a busy port."""
    if not is_loopback(host) and not insecure:
        raise RpcError(f"--host {host} would send this computer's share of every prompt over the network "
                       "unencrypted (the key keeps strangers out, not eavesdroppers). Keep 127.0.0.1 and use "
                       "an SSH tunnel (docs/SCALING.md), or pass --insecure-bind on a network you fully trust")
    if not 0 < port < 65536:
        raise RpcError(f"--port must be from 1 to 65535, not {port}")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if os.name != "nt":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as ggml's own bind does
            s.bind((host, port))
    except OSError as exc:
        raise RpcError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; another worker there? "
                       "Pick another --port") from None


def serve_worker(host: str = "127.0.0.1", port: int = DEFAULT_PORT, mem_mb: int | None = None,
                 threads: int | None = None, device: str | None = None, insecure: bool = False,
                 cache_dir: str | None = None, say: Callable[[str], None] = print) -> int:
    """Lend this machine's devices to other llmpacks until Ctrl+C (ggml serves one client at a time).
    Every check comes before the first line it says: a worker that would not hold is not started."""
    check_bind(host, port, insecure)
    if mem_mb is not None and mem_mb < 1:
        raise RpcError(f"--mem must be at least 1 (MiB), not {mem_mb}")
    load_backends()
    g = api()
    reg = rpc_reg(g)
    start = _START_SERVER(proc(g, reg, "ggml_backend_rpc_start_server"))
    if not start:
        raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_start_server")
    key, key_where, created = rpc_key.worker_key()
    install_key(g, reg, key)   # a key ggml-rpc does not take: RpcKeyError, and nothing listens
    gpus = [] if (device or "").lower() == "cpu" else gpu_devices()
    if device and device.lower() not in ("cpu", "auto"):
        gpus = [d for d in gpus if d.id.lower() == device.lower()]
        if not gpus:
            raise RpcError(f"--device {device}: no such GPU here; use --device cpu or leave it out")
    devs = [(d.handle, d.name) for d in gpus] or [(g.ggml_backend_dev_by_type(0), "this computer's processor")]
    keep = [cap_memory(dev, mem_mb << 20) for dev, _name in devs] if mem_mb is not None else []
    handles = [dev for dev, _name in devs]
    array = (ctypes.c_void_p * len(handles))(*handles)
    what = ", ".join(name for _dev, name in devs) + (f", offering {mem_mb} MiB" if mem_mb else "")
    say(f"llmpack rpc-worker: lending {what} at {host}:{port} to `llmpack --rpc {host}:{port}`.")
    say(f"llmpack rpc-worker: {'made a new key in' if created else 'the key is'} {key_where}: a head on this "
        "computer finds it by itself; on another, copy that file there and pass --rpc-key-file PATH.")
    say("llmpack rpc-worker: only programs on this computer that have the key can connect; Ctrl+C stops."
        if is_loopback(host) else "llmpack rpc-worker: WARNING: open to the network; the key keeps strangers out "
                                  "but the traffic is not encrypted: anyone on the way can read it.")
    sys.stdout.flush()
    endpoint, cache = f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None
    worker = threading.Thread(target=start, args=(endpoint, cache, threads or os.cpu_count() or 1,
                                                  len(handles), array), name="llmpack-rpc-worker", daemon=True)
    worker.start()
    while worker.is_alive():   # the C loop never returns while it serves; this thread stays Ctrl+C-able
        worker.join(0.5)
    del keep, array
    raise RpcError(f"the RPC worker at {host}:{port} stopped (ggml could not listen there or create its backend)")


def cmd_rpc_worker(args) -> int:
    """`llmpack rpc-worker` and a built file's `--rpc-worker` (flags: runtime/server/lifecycle/flags.py
    add_worker_args; wired by llmpack/cli.py and builder/stub_entry.py)."""
    if getattr(args, "rpc_key_file", None):
        os.environ[rpc_key.KEY_FILE_ENV] = str(args.rpc_key_file)   # read by rpc_key, never kept in argv
    cache = None
    if args.cache:
        from llmpack.paths import cache_dir, private_folder   # lazy: only with --cache

        cache = str(private_folder(cache_dir() / "rpc"))   # 0700; the entries 0600 (the umask below)
    if os.name != "nt":
        os.umask(0o077)   # what ggml writes in this worker process (the cache entries) is this user's alone
    return serve_worker(args.host, args.port, args.mem, args.threads, args.device, args.insecure_bind, cache)
