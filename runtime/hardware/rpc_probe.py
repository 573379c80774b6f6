"""The head's probe of an RPC worker, in Python, before ggml connects to it.

ggml aborts the whole process on an endpoint it cannot reach or that speaks another protocol
version, so each endpoint is first asked here the way ggml would ask it: connect, prove the key
(rpc_key.prove), HELLO, then the device count and each device's memory, alignment and largest
buffer, each checked against the bounds below (``check_reports``, finding 5 of issue 36). A typo,
a stopped worker or an absurd answer is then one line naming the worker and the value. ggml's
own connection, which a worker can answer differently, is bounded again in C by llmpack's build
(builder/patches/0007-rpc-client-reports.patch), before any device is made.
"""
from __future__ import annotations

import socket
import struct

from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.rpc import RpcError

PROTO_MAJOR, PROTO_MINOR = 7, 0   # RPC_PROTO_*_VERSION of the vendored ggml-rpc.h
_HELLO, _CAPS = 14, 24            # RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE
_ALIGNMENT, _MAX_SIZE, _MEMORY, _COUNT = 1, 2, 11, 15   # RPC_CMD_GET_ALIGNMENT, ..._MAX_SIZE, ..._DEVICE_MEMORY, ..._COUNT
# The same bounds as 0007-rpc-client-reports.patch's llmpack_reports
MAX_DEVICES = 64                  # per worker; ggml makes one device object per reported device
MAX_MEMORY = 1 << 50              # 1 PiB: more than any one device has
MAX_ALIGNMENT = 1 << 16
MIN_MAX_SIZE = 1 << 20
PROBE_TIMEOUT_S = 5.0
# The worker serves one connection at a time and gives a peer that has not proved the key at most
# its handshake deadline (10 s, 0004-rpc-key-handshake.patch): the challenge may come that much later.
QUEUE_WAIT_S = 10.0


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
            sock.settimeout(QUEUE_WAIT_S + timeout)   # behind another peer's handshake, at most
            rpc_key.prove(sock, key, endpoint)
            sock.settimeout(timeout)
            hello = _ask(sock, _HELLO, bytes(_CAPS), endpoint)
            if len(hello) < 4:
                raise RpcError(f"{endpoint} is not an llmpack RPC worker (its answer to HELLO was not one)")
            major, minor, patch = hello[0], hello[1], hello[2]
            if major != PROTO_MAJOR or minor > PROTO_MINOR:
                raise RpcError(f"the RPC worker at {endpoint} speaks protocol {major}.{minor}.{patch}, this llmpack "
                               f"{PROTO_MAJOR}.{PROTO_MINOR}: run the same llmpack version on both machines")
            check_reports(endpoint, *_reports(sock, endpoint))
        except socket.timeout:
            raise RpcError(f"the RPC worker at {endpoint} did not answer in time: it serves one llmpack at a time "
                           "(is another one using it?), or it is a stock llama.cpp rpc-server, which llmpack does "
                           "not use (it lets anyone in)") from None
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
    """One RpcError line for the first report outside the bounds; nothing when all are plausible."""
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
