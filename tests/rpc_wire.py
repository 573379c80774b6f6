"""llama.cpp's RPC protocol (v7, ggml-rpc.cpp of the pinned build) spoken by hand, for tests that
send a real worker what a hostile or broken head would: one message = a command byte, a u64 size,
the payload; an answer = a u64 size and the payload. Each Wire is one keyed connection (llmpack's
handshake, then HELLO), which the worker serves alone until it closes."""
from __future__ import annotations

import os
import socket
import struct
import threading
from dataclasses import dataclass

from llmpack.runtime.hardware.rpc_key import MAGIC, NONCE, prove, recv_exactly, tag

# rpc_cmd (ggml-rpc.cpp)
ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR = range(6)
SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE, GET_DEVICE_MEMORY = range(6, 12)
INIT_TENSOR, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT, GRAPH_RECOMPUTE, MEMSET_TENSOR = range(12, 18)
COMMANDS = range(18)
# ggml.h of the pinned build
F32, F16, Q4_0, I32, I64 = 0, 1, 2, 26, 27
OP_NONE, OP_ADD, OP_MUL_MAT, OP_GET_ROWS, OP_SET_ROWS, OP_SSM_SCAN, OP_UNARY, OP_GLU, OP_COUNT = 0, 2, 29, 40, 42, 77, 91, 100, 101
SIZES = {F32: 4, F16: 2, I32: 4, I64: 8}
TENSOR_BYTES = 296   # sizeof(rpc_tensor), packed


@dataclass
class T:
    """An rpc_tensor: contiguous strides unless nb is given."""
    id: int
    type: int = F32
    buffer: int = 0
    ne: tuple[int, int, int, int] = (1, 1, 1, 1)
    data: int = 0
    op: int = OP_NONE
    src: tuple[int, ...] = ()
    nb: tuple[int, int, int, int] | None = None
    op_params: tuple[int, ...] = ()
    view_src: int = 0
    name: bytes = b""
    flags: int | None = None   # None: GGML_TENSOR_FLAG_COMPUTE (16) for an op, as ggml marks graph nodes

    def strides(self) -> tuple[int, int, int, int]:
        if self.nb is not None:
            return self.nb
        size = SIZES.get(self.type, 4)
        nb0, nb1 = size, size * self.ne[0]
        return nb0, nb1, nb1 * self.ne[1], nb1 * self.ne[1] * self.ne[2]

    def nbytes(self) -> int:
        return SIZES.get(self.type, 4) * self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    def compute_flags(self) -> int:
        if self.flags is not None:
            return self.flags
        return 16 if self.op != OP_NONE else 0

    def pack(self) -> bytes:
        params = list(self.op_params) + [0] * (16 - len(self.op_params))
        src = list(self.src) + [0] * (10 - len(self.src))
        nb = (n & 0xFFFFFFFF for n in self.strides())   # rpc_tensor's nb are 32-bit, as the wire has them
        out = struct.pack("<QIQ4I4II16ii10QQQQ64si", self.id, self.type, self.buffer, *self.ne, *nb,
                          self.op, *params, self.compute_flags(), *src, self.view_src, 0, self.data, self.name, 1)
        assert len(out) == TENSOR_BYTES
        return out


def message(cmd: int, payload: bytes) -> bytes:
    return struct.pack("<BQ", cmd, len(payload)) + payload


def graph(nodes: list[int], tensors: list[T], device: int = 0) -> bytes:
    return (struct.pack("<II", device, len(nodes)) + b"".join(struct.pack("<Q", n) for n in nodes)
            + struct.pack("<I", len(tensors)) + b"".join(t.pack() for t in tensors))


class Closed(Exception):
    """The worker closed the connection (it refused what it was sent)."""


class Wire:
    def __init__(self, port: int, key: bytes, timeout: float = 30.0, hello: bool = True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        prove(self.sock, key, f"127.0.0.1:{port}")
        if hello:
            major = self.call(HELLO, bytes(24), 4 + 24)[0]
            assert major == 7

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def recv(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except (ConnectionResetError, socket.timeout):
                chunk = b""
            if not chunk:
                raise Closed(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def send(self, cmd: int, payload: bytes) -> None:
        self.sock.sendall(message(cmd, payload))

    def call(self, cmd: int, payload: bytes, answer: int) -> bytes:
        self.send(cmd, payload)
        size = struct.unpack("<Q", self.recv(8))[0]
        assert size == answer, (cmd, size, answer)
        return self.recv(size)

    def closed(self) -> bool:
        """Whether the worker has closed this connection (EOF), without sending anything more."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return True

    def alive(self) -> bool:
        """Whether the connection still answers a command (GET_ALIGNMENT of device 0)."""
        try:
            self.call(GET_ALIGNMENT, struct.pack("<I", 0), 8)
            return True
        except (Closed, BrokenPipeError, ConnectionResetError):
            return False

    def alloc(self, size: int) -> tuple[int, int]:
        """(remote buffer, its base address)."""
        ptr, got = struct.unpack("<QQ", self.call(ALLOC_BUFFER, struct.pack("<IQ", 0, size), 16))
        assert ptr and got >= size
        base = struct.unpack("<Q", self.call(BUFFER_GET_BASE, struct.pack("<Q", ptr), 8))[0]
        return ptr, base

    def set_tensor(self, t: T, data: bytes, offset: int = 0, cache: bool = False) -> None:
        self.send(SET_TENSOR, t.pack() + struct.pack("<BQ", int(cache), offset) + data)

    def get_tensor(self, t: T, size: int, offset: int = 0) -> bytes:
        return self.call(GET_TENSOR, t.pack() + struct.pack("<QQ", offset, size), size)

    def set_tensor_hash(self, t: T, fnv: int, offset: int = 0) -> int:
        return struct.unpack("<B", self.call(SET_TENSOR_HASH, t.pack() + struct.pack("<QQ", offset, fnv), 1))[0]

    def compute(self, nodes: list[int], tensors: list[T]) -> None:
        self.send(GRAPH_COMPUTE, graph(nodes, tensors))


def fnv1a(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


@dataclass
class Reports:
    """What a fake worker answers about itself on one connection."""
    count: int = 1
    memory: tuple[int, int] = (1 << 30, 1 << 30)   # (free, total)
    alignment: int = 32
    max_size: int = 1 << 40


def fake_worker(key: bytes, *connections: Reports) -> tuple[socket.socket, int]:
    """A worker that proves the key and then reports what it is told to: `connections[i]` on its
    i-th connection, the last one on any after (a head's probe, then ggml's own connection)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket, reports: Reports) -> None:
        worker_nonce = os.urandom(NONCE)
        conn.sendall(MAGIC + worker_nonce)
        head = recv_exactly(conn, NONCE + 32)
        conn.sendall(tag(key, b"llmpack-rpc worker", worker_nonce, head[:NONCE]))
        answers = {HELLO: bytes([7, 0, 0, 0]) + bytes(24), DEVICE_COUNT: struct.pack("<I", reports.count),
                   GET_DEVICE_MEMORY: struct.pack("<QQ", *reports.memory),
                   GET_ALIGNMENT: struct.pack("<Q", reports.alignment), GET_MAX_SIZE: struct.pack("<Q", reports.max_size)}
        while len(msg := recv_exactly(conn, 9)) == 9:
            cmd, size = struct.unpack("<BQ", msg)
            recv_exactly(conn, size)
            if cmd not in answers:
                return
            conn.sendall(struct.pack("<Q", len(answers[cmd])) + answers[cmd])

    def serve() -> None:
        with srv:
            for i in range(16):
                try:
                    conn = srv.accept()[0]
                except OSError:   # closed by the test
                    return
                with conn:
                    try:
                        answer(conn, connections[min(i, len(connections) - 1)])
                    except OSError:
                        pass

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]
