"""llama.cpp's RPC backend: a model split across other machines' devices (`--rpc HOST:PORT,...`),
and any llmpack as the worker that lends them (`llmpack rpc-worker`, `chat.exe --rpc-worker`).

Client side: llama-cpp-python ignores its `rpc_servers` argument, so endpoints are registered the
way llama.cpp's own common/arg.cpp does it: ggml_backend_reg_by_name("RPC"), that backend's
"ggml_backend_rpc_add_server" proc, ggml_backend_register on what it returns; the devices it lists
then go into llama_model_params.devices (runtime/hardware/placement.py). Two things ggml does
badly for a product, and what is done about them:

* ggml aborts the whole process on an endpoint it cannot reach or that speaks another protocol
  version. Each endpoint is therefore probed first here, in Python, with the same HELLO handshake,
  so a typo or a worker that is not running is one line naming it, not a core dump.
* ggml aborts the process (GGML_ABORT on its dispatcher thread) when a worker dies mid-request.
  ggml_set_abort_callback lets us see that message first: the callback ends every request with
  an error naming the lost worker (`on_worker_lost` listeners: the engine), then parks the
  dispatcher thread for good instead of returning into abort(). The engine thread stays blocked
  inside llama_decode; the server keeps answering, with /health saying why, until it is restarted.

Worker side: ggml_backend_rpc_start_server over this machine's GPUs (else its CPU), through the
backend's "ggml_backend_rpc_start_server" proc (ggml-rpc.h: endpoint, cache_dir, n_threads,
n_devices, devices). `--mem MB` caps the memory a device reports to clients (llama.cpp splits the
layers in proportion to it): the device's get_memory, replaced in the worker's process (cap_memory).

Who may use a worker: llmpack's build of ggml-rpc proves a shared key in both directions before any
command (runtime/hardware/rpc_key.py, builder/llama_rpc_patch.py), so a connection without it is
closed; the worker makes the key the first time and prints where it is. The traffic itself is not
encrypted: hence 127.0.0.1 by default, and any other address only with `insecure=True` (the
`--insecure-bind` flag); docs/SCALING.md shows the SSH tunnel to use.

What a worker reports is checked before ggml uses it (finding 5 of issue 36): the probe asks for
the device count, each device's memory, alignment and largest buffer, and refuses values outside
REPORT_BOUNDS with one line naming the worker and the value; ggml's own view is checked again.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from llmpack.errors import LlmpackError
from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.backends import _ggml, gpu_devices, load_backends

DEFAULT_PORT = 50052              # llama.cpp's rpc-server default
PROTO_MAJOR, PROTO_MINOR = 7, 0   # RPC_PROTO_*_VERSION of the vendored ggml-rpc.h
_HELLO, _CAPS = 14, 24            # RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE
_ALIGNMENT, _MAX_SIZE, _MEMORY, _COUNT = 1, 2, 11, 15   # RPC_CMD_GET_ALIGNMENT, ..._MAX_SIZE, ..._DEVICE_MEMORY, ..._COUNT
MAX_DEVICES = 64                  # per worker; ggml makes one device object per reported device
MAX_MEMORY = 1 << 50              # 1 PiB: more than any one device has
MAX_ALIGNMENT = 1 << 16
MIN_MAX_SIZE = 1 << 20
PROBE_TIMEOUT_S = 5.0
_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_GET_MEMORY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))


class RpcError(LlmpackError):
    pass


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


def parse_endpoints(spec: str | Sequence[str]) -> tuple[str, ...]:
    """`--rpc HOST:PORT,...` as a tuple of "HOST:PORT"; a clear error for anything ggml would abort on."""
    items = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if not items:
        raise RpcError("--rpc needs at least one HOST:PORT, e.g. --rpc 127.0.0.1:50052")
    out: list[str] = []
    for item in items:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RpcError(f"--rpc {item!r}: expected HOST:PORT, e.g. 192.168.1.20:{DEFAULT_PORT}")
        if ":" in host or host.startswith("["):
            raise RpcError(f"--rpc {item!r}: llama.cpp's RPC takes an IPv4 address or a host name, not IPv6")
        endpoint = f"{host}:{int(port)}"
        if endpoint in out:
            raise RpcError(f"--rpc names {endpoint} twice")
        out.append(endpoint)
    return tuple(out)


def probe(endpoint: str, key: bytes, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Connect, prove the key, do the RPC HELLO and read what the worker reports, as ggml would,
    so its aborts (and a worker's absurd answers) become one line naming the worker."""
    host, port = endpoint.rsplit(":", 1)
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except ConnectionRefusedError:
        raise RpcError(f"no RPC worker listens at {endpoint}; start one there with "
                       f"`llmpack rpc-worker --port {port}` (or `chat.exe --rpc-worker --port {port}`)") from None
    except socket.gaierror as exc:
        raise RpcError(f"--rpc {endpoint}: unknown host ({exc.strerror})") from None
    except OSError as exc:
        raise RpcError(f"cannot reach the RPC worker at {endpoint}: {exc.strerror or exc}") from None
    with sock:
        try:
            rpc_key.prove(sock, key, endpoint)
            hello = _ask(sock, _HELLO, bytes(_CAPS), endpoint)
            if len(hello) < 4:
                raise RpcError(f"{endpoint} is not an llmpack RPC worker (its answer to HELLO was not one)")
            major, minor, patch = hello[0], hello[1], hello[2]
            if major != PROTO_MAJOR or minor > PROTO_MINOR:
                raise RpcError(f"the RPC worker at {endpoint} speaks protocol {major}.{minor}.{patch}, this llmpack "
                               f"{PROTO_MAJOR}.{PROTO_MINOR}: run the same llmpack version on both machines")
            check_reports(endpoint, *_reports(sock, endpoint))
        except socket.timeout:
            raise RpcError(f"the RPC worker at {endpoint} did not answer within {timeout:.0f} s: it serves one "
                           "llmpack at a time (is another one using it?), or it is a stock llama.cpp rpc-server, "
                           "which llmpack does not use (it lets anyone in)") from None
        except OSError as exc:
            raise RpcError(f"the RPC worker at {endpoint} closed the connection ({exc.strerror or exc})") from None


def _ask(sock: socket.socket, cmd: int, payload: bytes, endpoint: str) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    head = rpc_key.recv_exactly(sock, 8)
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
    body = rpc_key.recv_exactly(sock, size) if 0 <= size <= 64 else b""
    if size < 0 or len(body) != size:
        raise RpcError(f"the RPC worker at {endpoint} closed the connection or answered out of protocol")
    return body


def _reports(sock: socket.socket, endpoint: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(device count, [(free, total, alignment, max size)]) as the worker reports them."""
    body = _ask(sock, _COUNT, b"", endpoint)
    count = struct.unpack("<I", body)[0] if len(body) == 4 else -1
    if not 0 < count <= MAX_DEVICES:
        return count, []
    devices = []
    for i in range(count):
        dev = struct.pack("<I", i)
        memory, alignment, largest = (_ask(sock, cmd, dev, endpoint) for cmd in (_MEMORY, _ALIGNMENT, _MAX_SIZE))
        if (len(memory), len(alignment), len(largest)) != (16, 8, 8):
            raise RpcError(f"the RPC worker at {endpoint} answered out of protocol about its device {i}")
        devices.append((*struct.unpack("<QQ", memory), struct.unpack("<Q", alignment)[0],
                        struct.unpack("<Q", largest)[0]))
    return count, devices


def check_reports(endpoint: str, count: int, devices: list[tuple[int, int, int, int]]) -> None:
    """One RpcError line for the first report outside REPORT_BOUNDS; nothing when all are plausible."""
    def bad(what: str, value: int, bounds: str) -> RpcError:
        return RpcError(f"the RPC worker at {endpoint} reports {what} = {value}, outside {bounds}: it is broken "
                        "or not an llmpack worker; llmpack will not use it")

    if not 0 < count <= MAX_DEVICES:
        raise bad("a device count", count, f"1..{MAX_DEVICES}")
    for i, (free, total, alignment, largest) in enumerate(devices):
        if not 0 < total <= MAX_MEMORY:
            raise bad(f"device {i}'s total memory", total, f"1..{MAX_MEMORY} bytes")
        if free > total:
            raise bad(f"device {i}'s free memory", free, f"0..its total {total}")
        if not 0 < alignment <= MAX_ALIGNMENT or alignment & (alignment - 1):
            raise bad(f"device {i}'s alignment", alignment, f"powers of two up to {MAX_ALIGNMENT}")
        if largest < MIN_MAX_SIZE:
            raise bad(f"device {i}'s largest buffer", largest, f"{MIN_MAX_SIZE} bytes and up")


_SIGS = {"ggml_backend_reg_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
         "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
         "ggml_backend_register": ([ctypes.c_void_p], None),
         "ggml_backend_reg_dev_get": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
         "ggml_backend_dev_by_type": ([ctypes.c_int], ctypes.c_void_p),
         "ggml_set_abort_callback": ([_ABORT_CB], ctypes.c_void_p)}


def _api():
    """ggml's registry functions as well as backends._ggml's, looked up the same way."""
    return _ggml(_SIGS)


def _rpc_reg(g) -> int:
    found = load_backends()
    reg = g.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError(found.rpc_note or "this llama.cpp build has no RPC backend (libggml-rpc); "
                       "reinstall llmpack's llama-cpp-python with ./dev setup")
    return reg


# ---------------------------------------------------------------- client: --rpc
_registered: dict[str, list[RemoteDevice]] = {}
_lock = threading.Lock()


def add_servers(endpoints: Sequence[str]) -> list[RemoteDevice]:
    """Register each worker's devices with ggml (once per endpoint and process) and list them, in
    the order given. Each endpoint is probed first: nothing reaches ggml that would abort it."""
    with _lock:
        g = _api()
        reg = _rpc_reg(g)
        add = _ADD_SERVER(g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") or 0)
        if not add:
            raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
        key = rpc_key.head_key()
        rpc_key.install(g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_set_key") or 0, key)
        out: list[RemoteDevice] = []
        for endpoint in endpoints:
            if endpoint not in _registered:
                probe(endpoint, key)
                _install_abort_handler(g)
                server_reg = add(endpoint.encode())
                if not server_reg:
                    raise RpcError(f"the RPC worker at {endpoint} offers no device")
                g.ggml_backend_register(server_reg)
                count = g.ggml_backend_reg_dev_count(server_reg)
                devices = [_device(g, g.ggml_backend_reg_dev_get(server_reg, i), endpoint)
                           for i in range(min(count, MAX_DEVICES + 1))]
                # ggml asked again on its own connection: a worker that answers differently is caught here
                check_reports(endpoint, count, [(d.memory_free, d.memory_total, 1, MIN_MAX_SIZE) for d in devices])
                _registered[endpoint] = devices
            out += _registered[endpoint]
        return out


def _device(g, dev: int, endpoint: str) -> RemoteDevice:
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return RemoteDevice(g.ggml_backend_dev_name(dev).decode(), endpoint, total.value, free.value, dev)


def is_remote(dev: int) -> bool:
    """Whether a ggml device belongs to the RPC backend (gpu_devices() lists only local GPUs)."""
    return any(d.handle == dev for devs in _registered.values() for d in devs)


# ---------------------------------------------------------------- a worker that dies mid-request
_listeners: list[Callable[[str], None]] = []
_abort_cb = None
_RPC_ABORTS = ("Remote RPC server crashed", "Failed to connect to", "RPC handshake failed")


def on_worker_lost(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call listener(reason) when ggml gives up on a worker; returns the function that unregisters it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def any_registered() -> bool:
    """Whether this process added RPC workers' devices to ggml's (process-wide) registry."""
    return bool(_registered)


def lost_reason(message: str, wait_s: float = 3.0) -> str:
    """Which worker is gone, found by asking each: a dead one refuses the connection (a live one,
    even busy, is accepted into its backlog). Asked again for a moment: the connection can break
    a little before a dying worker's port closes."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = []
        for endpoint in list(_registered):
            host, port = endpoint.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=1.0).close()
            except OSError as exc:
                dead.append(f"{endpoint} ({exc.strerror or exc})")
        if dead or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    who = ", ".join(dead) if dead else "one of " + ", ".join(_registered)
    return f"lost the RPC worker at {who}; start it again, then restart llmpack"


def _install_abort_handler(g) -> None:
    global _abort_cb
    if _abort_cb is not None:
        return

    def on_abort(message: bytes) -> None:
        text = (message or b"").decode("utf-8", "replace").strip()
        if not any(m in text for m in _RPC_ABORTS):
            os.write(2, f"{text}\n".encode())   # ggml's own line; abort() follows as before
            return
        reason = lost_reason(text)
        if not _listeners:   # nothing to tell (a load in progress): end with the reason, not a core dump
            os.write(2, f"llmpack: error: {reason}\n".encode())
            os._exit(3)
        for listener in list(_listeners):
            try:
                listener(reason)
            except Exception as exc:  # noqa: BLE001 - a listener's failure must not undo the others
                os.write(2, f"llmpack: error while reporting the lost worker: {exc!r}\n".encode())
        threading.Event().wait()   # park ggml's dispatcher thread: returning would abort() the process

    _abort_cb = _ABORT_CB(on_abort)
    g.ggml_set_abort_callback(_abort_cb)


# ---------------------------------------------------------------- worker: llmpack rpc-worker
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
    """Lend this machine's devices to other llmpacks until Ctrl+C (ggml serves one client at a time)."""
    check_bind(host, port, insecure)
    if mem_mb is not None and mem_mb < 1:
        raise RpcError(f"--mem must be at least 1 (MiB), not {mem_mb}")
    load_backends()
    g = _api()
    reg = _rpc_reg(g)
    start = _START_SERVER(g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_start_server") or 0)
    if not start:
        raise RpcError("this llama.cpp's RPC backend has no ggml_backend_rpc_start_server")
    key, key_where, created = rpc_key.worker_key()
    rpc_key.install(g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_set_key") or 0, key)
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
    """`llmpack rpc-worker` and a built file's `--rpc-worker` (flags: llmpack/cli.py add_worker_args)."""
    if getattr(args, "rpc_key_file", None):
        os.environ[rpc_key.KEY_FILE_ENV] = str(args.rpc_key_file)   # read by rpc_key, never kept in argv
    cache = None
    if args.cache:
        from llmpack.paths import cache_dir, private_folder   # lazy: only with --cache

        cache = str(private_folder(cache_dir() / "rpc"))   # 0700; the entries 0600 (the umask below)
    if os.name != "nt":
        os.umask(0o077)   # what ggml writes in this worker process (the cache entries) is this user's alone
    return serve_worker(args.host, args.port, args.mem, args.threads, args.device, args.insecure_bind, cache)
