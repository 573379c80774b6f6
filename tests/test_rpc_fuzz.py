"""A seeded fuzz of a real keyed `llmpack rpc-worker`: 10,000 malformed or truncated messages across
every command (and unknown ones), each on its own authenticated connection so that it reaches the
parsers behind the key. The worker must never die, and afterwards a head must still get the same
greedy text through it as one process alone.

The messages are built from well-formed ones: sizes that lie, payloads cut short, fields replaced
by edge values (0, -1, 2^32-1, past the buffer, other types), graphs whose nodes name no tensor or
each other, and the ops whose kernels index memory by tensor values (GET_ROWS, SET_ROWS, SSM_SCAN)
with random shapes and indices. Ops whose kernels trust shapes without an index (MUL_MAT, ADD...)
are left out: a keyed head is trusted with those (docs/ARCHITECTURE.md, RPC workers)."""
from __future__ import annotations

import os
import random
import socket
import struct
import sys

import pytest
from rpc_wire import (COMMANDS, F16, F32, GRAPH_COMPUTE, I32, I64, OP_COUNT, OP_GET_ROWS, OP_GLU, OP_NONE,
                      OP_SET_ROWS, OP_SSM_SCAN, OP_UNARY, SET_TENSOR, T, TENSOR_BYTES, Wire, graph, message)
from test_rpc import GREEDY, free_port, model, start_worker  # noqa: F401 - model: the module's fixture

from llmpack.runtime.llm import LLM

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker is a Linux process here")
SEED, MESSAGES = 20261204, 10_000
KEY = b"fuzz-key-0123456789abcdef-fuzz-key"
EDGES = (0, 1, 2, 3, 4, 7, 8, 31, 64, 255, 4096, 1 << 20, (1 << 31) - 1, 1 << 31, (1 << 32) - 1)
FIXED = {0: 12, 1: 4, 2: 4, 3: 8, 4: 8, 5: 9, 7: TENSOR_BYTES + 16, 8: TENSOR_BYTES + 16, 9: 2 * TENSOR_BYTES,
         11: 4, 12: TENSOR_BYTES, 13: 4 + 11 * TENSOR_BYTES, 14: 24, 15: 0, 16: 4, 17: TENSOR_BYTES + 17}


class Fuzz:
    def __init__(self, rng: random.Random, buf: int, base: int):
        self.rng, self.buf, self.base = rng, buf, base
        self.last = b""   # the message sent last, to name in a failure

    def u32(self) -> int:
        return self.rng.choice(EDGES) if self.rng.random() < 0.7 else self.rng.getrandbits(32)

    def tensor(self, tid: int, op: int = OP_NONE, src: tuple[int, ...] = ()) -> T:
        r = self.rng
        ne = tuple(r.choice((1, 1, 2, 4)) for _ in range(4))
        t = T(tid, r.choice((F32, F32, F16, I32, I64)), self.buf, ne, self.base + 64 * r.randrange(32), op, src,
              op_params=tuple(r.choice((0, 1, -1, 1 << 30)) for _ in range(r.randrange(3))))
        for _ in range(r.choice((0, 0, 1, 2))):   # one or two fields bent out of shape
            what = r.randrange(8)
            if what == 0:
                t.type = r.randrange(48)
            elif what == 1:
                t.ne = tuple(self.u32() if r.random() < 0.3 else n for n in t.ne)
            elif what == 2:
                t.nb = tuple(self.u32() for _ in range(4))
            elif what == 3:
                t.data = r.choice((0, 1, self.base - 64, self.base + 4096, self.base + 4090, r.getrandbits(64)))
            elif what == 4:
                t.buffer = r.choice((0, 1, self.buf + 8, r.getrandbits(64)))
            elif what == 5:
                t.view_src = r.choice((0, tid, tid + 1, 1 << 40))
            elif what == 6:
                t.op = r.choice((OP_NONE, OP_GET_ROWS, OP_SET_ROWS, OP_SSM_SCAN, OP_COUNT + r.randrange(200)))
            else:
                t.op_params = tuple(r.getrandbits(31) * r.choice((1, -1)) for _ in range(4))
        return t

    def graph(self) -> bytes:
        r = self.rng
        n = r.randrange(1, 8)
        tensors = []
        for i in range(n):
            op = r.choice((OP_NONE, OP_NONE, OP_GET_ROWS, OP_SET_ROWS, OP_SSM_SCAN, OP_UNARY, OP_GLU,
                           OP_COUNT + r.randrange(100)))
            src = tuple(r.choice((0, r.randrange(1, n + 2))) for _ in range(7 if op == OP_SSM_SCAN else 3))
            t = self.tensor(i + 1, op, src)
            if op in (OP_UNARY, OP_GLU):   # only unknown sub-ops: a known one trusts its shapes (see above)
                t.op_params = (r.choice((30, 99, 1 << 30, -1)),)
            tensors.append(t)
        nodes = [r.choice((0, t.id, t.id, n + 5)) for t in r.sample(tensors, r.randrange(1, n + 1))]
        if r.random() < 0.2:
            nodes.append(0)
        payload = graph(nodes, tensors, device=r.choice((0, 0, 0, 1, 1 << 31)))
        if r.random() < 0.3:   # counts that lie about what follows
            n_nodes = r.choice((len(nodes) + 1, 0, (1 << 32) - 1, 1 << 20))
            payload = payload[:4] + struct.pack("<I", n_nodes) + payload[8:]
        return payload

    def payload(self, cmd: int) -> bytes:
        r = self.rng
        if cmd == GRAPH_COMPUTE:
            return self.graph()
        if cmd == SET_TENSOR:
            t = self.tensor(1)
            return t.pack() + struct.pack("<BQ", r.randrange(2), r.choice((0, 4, 4096, (1 << 64) - 1))) + \
                bytes(r.choice((0, 4, 64, 4100)))
        size = FIXED.get(cmd, r.randrange(64))
        out = bytearray()
        while len(out) < size:   # tensors where a request holds them, edge integers elsewhere
            if size - len(out) >= TENSOR_BYTES and r.random() < 0.8:
                out += self.tensor(len(out) + 1).pack()
            elif cmd in (0, 3, 4, 5) and len(out) == 0 and r.random() < 0.5:
                out += struct.pack("<Q", self.buf) if cmd != 0 else struct.pack("<I", 0)
            else:
                out += struct.pack("<I", self.u32())
        out = bytes(out[:size])
        if cmd == 0:   # never ask for real gigabytes: small, or more than any machine has
            out = struct.pack("<IQ", r.choice((0, 0, 1, 7)), r.choice((0, 1, 4096, 1 << 50, (1 << 64) - 1)))
        return out

    def message(self) -> bytes:
        r = self.rng
        cmd = r.choice(list(COMMANDS) + [18, 19, 200, 255])
        body = self.payload(cmd)
        how = r.random()
        if how < 0.15:   # a size that lies
            return struct.pack("<BQ", cmd, r.choice((0, len(body) + 1, len(body) - 1 if body else 1, 1 << 40,
                                                     (1 << 64) - 1))) + body
        if how < 0.3:    # cut short
            full = message(cmd, body)
            return full[:r.randrange(1, len(full))]
        if how < 0.4:    # random bytes of the right length
            return message(cmd, r.randbytes(len(body)))
        return message(cmd, body)


def send_one(port: int, fuzz: Fuzz, rng: random.Random) -> None:
    with Wire(port, KEY, timeout=60) as w:
        if rng.random() < 0.8:
            fuzz.buf, fuzz.base = w.alloc(4096)
            w.set_tensor(T(99, F32, fuzz.buf, (1024, 1, 1, 1), fuzz.base), rng.randbytes(4096))
        try:
            fuzz.last = fuzz.message()
            w.sock.sendall(fuzz.last)
            w.sock.shutdown(socket.SHUT_WR)   # a message cut short ends here instead of waiting for more
            while w.sock.recv(65536):
                pass
        except OSError:
            pass   # the worker refused it and closed (reset, broken pipe, not connected): what it should do


def test_ten_thousand_malformed_messages_leave_the_worker_serving_the_same_text(model, tmp_path):  # noqa: F811
    key = tmp_path / "key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    env = {**os.environ, "LLMPACK_RPC_KEY_FILE": str(key)}
    port = free_port()
    proc = start_worker(port, 1024, env=env)
    try:
        rng = random.Random(SEED)
        fuzz = Fuzz(rng, 0, 0)
        for i in range(MESSAGES):
            send_one(port, fuzz, rng)
            assert proc.poll() is None, (f"the worker died at message {i} ({fuzz.last[:400].hex()}): "
                                         f"{proc.log.read_text(errors='replace')[-3000:]}")
        with LLM(model, n_ctx=256, gpu_layers=0) as cpu:
            expected = cpu.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids
        os.environ["LLMPACK_RPC_KEY_FILE"] = str(key)
        try:
            with LLM(model, n_ctx=256, gpu_layers="all", rpc=(f"127.0.0.1:{port}",)) as llm:
                assert llm.generate("The quick brown fox", GREEDY)[0].outputs[0].token_ids == expected
        finally:
            del os.environ["LLMPACK_RPC_KEY_FILE"]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(10)
