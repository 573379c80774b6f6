"""llama.cpp's RPC backend: a model split across other machines' devices (`--rpc HOST:PORT,...`),
and any llmpack as the worker that lends them (`llmpack rpc-worker`, `chat.exe --rpc-worker`).

Four modules, dependencies one way (rpc <- rpc_probe <- rpc_client; rpc <- rpc_worker):

* ``rpc`` (this one): the errors, `--rpc`'s endpoints, and ggml's RPC backend as both sides reach
  it (its registry entry and proc addresses; the key handed to it, `install_key`).
* ``rpc_probe``: the head's network probe, in Python, before ggml connects: the key, HELLO and
  what the worker reports, bounded (``check_reports``), so a typo, a stopped worker or an absurd
  answer is one line naming it, not an abort.
* ``rpc_client``: the worker's devices registered with ggml (``add_servers``), and the abort hook
  that turns a worker lost mid-request into an engine failure naming it (``on_worker_lost``).
* ``rpc_worker``: lending this machine's devices (``serve_worker``) and its command
  (``cmd_rpc_worker``: `llmpack rpc-worker`, a built file's `--rpc-worker`).

Who may use a worker: llmpack's build of ggml-rpc (builder/patches/0004-rpc-key-handshake.patch)
proves a shared key in both directions before any command (runtime/hardware/rpc_key.py), so a
connection without it is closed; the traffic itself is not encrypted (docs/SCALING.md: SSH tunnel).
"""
from __future__ import annotations

import ctypes
from typing import Sequence

from llmpack.errors import LlmpackError
from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.backends import _ggml, load_backends

DEFAULT_PORT = 50052              # llama.cpp's rpc-server default
_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_SIGS = {"ggml_backend_reg_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
         "ggml_backend_reg_get_proc_address": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
         "ggml_backend_register": ([ctypes.c_void_p], None),
         "ggml_backend_reg_dev_get": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p),
         "ggml_backend_dev_by_type": ([ctypes.c_int], ctypes.c_void_p),
         "ggml_set_abort_callback": ([_ABORT_CB], ctypes.c_void_p)}


class RpcError(LlmpackError):
    pass


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


def api():
    """ggml's registry functions as well as backends._ggml's, looked up the same way."""
    return _ggml(_SIGS)


def rpc_reg(g) -> int:
    """ggml's RPC backend (registry entry), loading the backends first; one line when there is none."""
    found = load_backends()
    reg = g.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError(found.rpc_note or "this llama.cpp build has no RPC backend (libggml-rpc); "
                       "reinstall llmpack's llama-cpp-python with ./dev setup")
    return reg


def proc(g, reg: int, name: str) -> int:
    """The address of one of the RPC backend's functions (0 when this build has none by that name)."""
    return g.ggml_backend_reg_get_proc_address(reg, name.encode()) or 0


def install_key(g, reg: int, key: bytes) -> None:
    """Hand ggml-rpc the key, for both directions of this process; RpcKeyError when it is not
    taken (this build then refuses every connection: nothing runs without the key)."""
    if not proc(g, reg, "ggml_rpc_hmac_sha256"):
        raise rpc_key.RpcKeyError("this llama.cpp's RPC backend is not llmpack's current build (it cannot refuse "
                                  "a key it does not take): reinstall llmpack's llama-cpp-python with ./dev setup")
    rpc_key.install(proc(g, reg, "ggml_backend_rpc_set_key"), key)
