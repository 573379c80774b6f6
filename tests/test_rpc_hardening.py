"""An RPC worker that strangers cannot use and a head cannot crash: each message here is sent by
hand (tests/rpc_wire.py) to a real `llmpack rpc-worker` on 127.0.0.1, which must refuse it by
closing that connection and then serve the next keyed connection as before.

One test per upstream fix backported in builder/patches/0005-rpc-server-bounds.patch (a graph node that names no
tensor, GET_ROWS and SET_ROWS shapes and indices, SSM_SCAN ids, COPY_TENSOR past its destination, a
tensor outside its buffer), the key handshake (no key, a wrong key, a silent peer, a peer that dribbles), and the
--cache folder (private, and a tampered entry is not used)."""
from __future__ import annotations

import os
import select
import socket
import stat
import struct
import sys
import threading
import time
from pathlib import Path

import pytest
from rpc_wire import (COPY_TENSOR, F32, GET_ALIGNMENT, HELLO, I32, I64, OP_GET_ROWS, OP_SET_ROWS, OP_SSM_SCAN,
                      SET_TENSOR_HASH, Closed, T, Wire, fnv1a, message)
from test_rpc import free_port, start_worker

from llmpack.runtime.hardware.rpc_key import MAGIC, NONCE, RpcKeyError, prove, recv_exactly
from llmpack.runtime.hardware.rpc_probe import QUEUE_WAIT_S as HANDSHAKE_S
from llmpack.runtime.hardware.rpc_probe import probe

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX modes, /proc")
KEY = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rpckey") / "key"
    path.write_bytes(KEY + b"\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def worker(keyfile, tmp_path_factory):
    """(port, process, cache folder): one keyed worker with --cache for the whole module."""
    port, cache = free_port(), tmp_path_factory.mktemp("rpccache")
    env = {**os.environ, "LLMPACK_RPC_KEY_FILE": str(keyfile), "LLMPACK_CACHE": str(cache)}
    proc = start_worker(port, 256, extra=["--cache"], env=env)
    yield port, proc, cache / "rpc"
    proc.kill()
    proc.wait(10)


def still_serves(port: int, proc) -> None:
    assert proc.poll() is None, "the worker died"
    with Wire(port, KEY) as w:
        assert w.alive()


def refused(w: Wire) -> bool:
    """The worker closed the connection instead of answering the next command."""
    try:
        return not w.alive()
    except AssertionError:
        return False


# ---------------------------------------------------------------- the key
def test_a_connection_without_the_key_is_closed_before_any_command(worker):
    port, proc, _ = worker
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:   # llama.cpp's own client: HELLO first
        sent = message(HELLO, bytes(24)) + message(GET_ALIGNMENT, struct.pack("<I", 0))
        s.sendall(sent + bytes(NONCE + 32 - len(sent)))   # as many bytes as the worker's key answer
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    assert got[:len(MAGIC)] == MAGIC and len(got) == len(MAGIC) + NONCE   # the challenge, then nothing: closed
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s, \
            pytest.raises(RpcKeyError, match="refused this computer's RPC key"):
        prove(s, b"not-the-key-" * 3, f"127.0.0.1:{port}")
    still_serves(port, proc)


def test_a_silent_peer_is_dropped_and_the_worker_serves_the_next(worker):
    port, proc, _ = worker
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.recv(len(MAGIC) + NONCE)
        assert s.recv(1) == b""   # closed by the worker (10 s), before this socket's own 30 s timeout raises
    still_serves(port, proc)


def test_a_dribbling_peer_is_dropped_at_the_handshake_deadline_and_a_keyed_head_behind_it_is_served(worker):
    """Issue 46, finding 3: the 10 s timeout was per read, so one byte every 8 s held the worker
    (which serves one connection at a time) for as long as the peer liked, and a keyed head's probe
    behind it failed. One deadline now covers the whole handshake."""
    port, proc, _ = worker
    started = time.monotonic()
    dribbler = socket.create_connection(("127.0.0.1", port), timeout=60)
    assert recv_exactly(dribbler, len(MAGIC) + NONCE)[:len(MAGIC)] == MAGIC
    dropped: list[float] = []

    def dribble() -> None:
        try:
            for _ in range(NONCE + 32):   # the whole answer, one byte every 2 s (128 s if never cut off)
                dribbler.sendall(b"x")
                readable, _, _ = select.select([dribbler], [], [], 2.0)
                if readable and dribbler.recv(1) == b"":
                    break
        except OSError:
            pass
        dropped.append(time.monotonic() - started)

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)   # the keyed head connects behind it and waits in the backlog
        probe(f"127.0.0.1:{port}", KEY)   # what `--rpc` does first: key, HELLO, reports
        served = time.monotonic() - started
        thread.join(HANDSHAKE_S + 5)
    finally:
        dribbler.close()
    assert dropped and dropped[0] < HANDSHAKE_S + 2.5, dropped   # at the deadline, not after 64 bytes
    assert served < HANDSHAKE_S + 2.5, served
    still_serves(port, proc)


# ---------------------------------------------------------------- upstream's fixes
def test_graph_compute_naming_no_tensor_is_refused(worker):
    """Upstream #25670: node id 0 (and an id no tensor has) made the worker dereference null."""
    port, proc, _ = worker
    for nodes in ([0], [7]):
        with Wire(port, KEY) as w:
            w.compute(nodes, [])
            assert refused(w)
    still_serves(port, proc)


def rows_setup(w: Wire):
    buf, base = w.alloc(4096)
    src0 = T(1, F32, buf, (4, 2, 1, 1), base)               # 2 rows of 4 floats
    w.set_tensor(src0, struct.pack("<8f", *range(8)))
    return buf, base, src0


def test_get_rows_with_mismatched_shapes_or_an_index_past_the_rows_is_refused(worker):
    """Upstream #26825 (shapes the kernel only assert()s: a read past src0) and an index past its rows."""
    port, proc, _ = worker
    with Wire(port, KEY) as w:   # the well-formed graph runs
        buf, base, src0 = rows_setup(w)
        ids = T(2, I32, buf, (1, 1, 1, 1), base + 256)
        w.set_tensor(ids, struct.pack("<i", 1))
        w.compute([3], [src0, ids, T(3, F32, buf, (4, 1, 1, 1), base + 512, OP_GET_ROWS, (1, 2))])
        assert w.alive()
        assert struct.unpack("<4f", w.get_tensor(T(3, F32, buf, (4, 1, 1, 1), base + 512), 16)) == (4, 5, 6, 7)
    for index, ids_ne in ((1, (1, 2, 1, 1)), (99, (1, 1, 1, 1)), (-1, (1, 1, 1, 1))):
        with Wire(port, KEY) as w:
            buf, base, src0 = rows_setup(w)
            ids = T(2, I32, buf, ids_ne, base + 256)
            w.set_tensor(ids, struct.pack("<i", index) * ids_ne[1])
            w.compute([3], [src0, ids, T(3, F32, buf, (4, 1, ids_ne[1], 1), base + 512, OP_GET_ROWS, (1, 2))])
            assert refused(w), (index, ids_ne)
    still_serves(port, proc)


def test_set_rows_writing_past_its_destination_is_refused(worker):
    """Upstream #26912: dst.ne[2] = 1 with src.ne[2] = 2 wrote a row past the destination."""
    port, proc, _ = worker
    for dst_ne2, index in ((2, 0), (1, 0), (2, 5)):
        with Wire(port, KEY) as w:
            buf, base = w.alloc(4096)
            rows = T(1, F32, buf, (4, 1, 2, 1), base)
            idx = T(2, I64, buf, (1, 1, 1, 1), base + 256)
            w.set_tensor(rows, struct.pack("<8f", *range(8)))
            w.set_tensor(idx, struct.pack("<q", index))
            dst = T(3, F32, buf, (4, 2, dst_ne2, 1), base + 512, OP_SET_ROWS, (1, 2))
            w.compute([3], [rows, idx, dst])
            if (dst_ne2, index) == (2, 0):
                assert w.alive()   # the well-formed graph runs
            else:
                assert refused(w), (dst_ne2, index)
    still_serves(port, proc)


def ssm_graph(w: Wire, ids_value: int) -> None:
    buf, base = w.alloc(4096)
    # d_state 2, head_dim 2, one head, one token, one sequence, one group (Mamba-2: A is {1, n_head})
    ts = [T(1, F32, buf, (2, 2, 1, 1), base), T(2, F32, buf, (2, 1, 1, 1), base + 64),
          T(3, F32, buf, (1, 1, 1, 1), base + 128), T(4, F32, buf, (1, 1, 1, 1), base + 192),
          T(5, F32, buf, (2, 1, 1, 1), base + 256), T(6, F32, buf, (2, 1, 1, 1), base + 320),
          T(7, I32, buf, (1, 1, 1, 1), base + 384)]
    for t in ts[:-1]:
        w.set_tensor(t, struct.pack(f"<{t.nbytes() // 4}f", *([0.5] * (t.nbytes() // 4))))
    w.set_tensor(ts[-1], struct.pack("<i", ids_value))
    node = T(8, F32, buf, (2 + 4, 1, 1, 1), base + 512, OP_SSM_SCAN, tuple(range(1, 8)), op_params=(1,))
    w.compute([8], [*ts, node])


def test_ssm_scan_ids_past_the_states_are_refused(worker):
    """Upstream #25765: SSM_SCAN reads and writes states at ids[i] * nb[3], unchecked."""
    port, proc, _ = worker
    with Wire(port, KEY) as w:
        ssm_graph(w, 0)
        assert w.alive()   # the well-formed graph runs
    for bad in (1, 1 << 20, -3):
        with Wire(port, KEY) as w:
            ssm_graph(w, bad)
            assert refused(w), bad
    still_serves(port, proc)


def test_copy_tensor_past_its_destination_is_refused(worker):
    """CVE-2026-137567's class: COPY_TENSOR wrote src's bytes from dst's start, checked only against
    the end of dst's buffer."""
    port, proc, _ = worker
    with Wire(port, KEY) as w:
        buf, base = w.alloc(4096)
        src = T(1, F32, buf, (8, 1, 1, 1), base)
        dst = T(2, F32, buf, (4, 1, 1, 1), base + 1024)
        assert w.call(COPY_TENSOR, T(1, F32, buf, (4, 1, 1, 1), base).pack() + dst.pack(), 1) == b"\x01"
        w.send(COPY_TENSOR, src.pack() + dst.pack())
        with pytest.raises(Closed):
            w.recv(8)
    still_serves(port, proc)


def test_a_tensor_outside_its_buffer_is_refused_not_aborted_on(worker):
    """A SET_TENSOR whose tensor lies past its buffer hit a GGML_ASSERT: abort() of the worker."""
    port, proc, _ = worker
    with Wire(port, KEY) as w:
        buf, base = w.alloc(256)
        w.set_tensor(T(1, F32, buf, (1024, 1, 1, 1), base), struct.pack("<f", 1.0))
        assert refused(w)
    still_serves(port, proc)


# ---------------------------------------------------------------- --cache
def test_the_cache_is_private_and_a_tampered_entry_is_not_used(worker):
    port, proc, cache = worker
    data = bytes(range(256)) * 4
    with Wire(port, KEY) as w:
        buf, base = w.alloc(4096)
        t = T(1, F32, buf, (256, 1, 1, 1), base)
        w.set_tensor(t, data, cache=True)
        assert w.alive()
        entry = cache / f"{fnv1a(data):016x}"
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700
        assert entry.is_file() and stat.S_IMODE(entry.stat().st_mode) == 0o600
        assert w.set_tensor_hash(t, fnv1a(data)) == 1   # the entry as written is used
        assert w.get_tensor(t, len(data)) == data
        raw = bytearray(entry.read_bytes())
        raw[-1] ^= 0xFF   # someone changes the weights on disk
        entry.write_bytes(bytes(raw))
        assert w.set_tensor_hash(t, fnv1a(data)) == 0   # not used: the head sends the tensor again
        assert not entry.exists()
        assert w.call(SET_TENSOR_HASH, t.pack() + struct.pack("<QQ", 0, fnv1a(data)), 1) == b"\x00"
    still_serves(port, proc)



# ---------------------------------------------------------------- where the key comes from
def test_a_worker_without_a_key_makes_a_private_one_that_a_head_here_finds(tmp_path, monkeypatch):
    env = {k: v for k, v in os.environ.items() if k not in ("LLMPACK_RPC_KEY_FILE", "LLMPACK_RPC_KEY")}
    env["LLMPACK_DATA_DIR"] = str(tmp_path)
    port = free_port()
    proc = start_worker(port, 64, env=env)
    try:
        path = tmp_path / "rpc-key"
        assert f"made a new key in {path}" in proc.log.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text().strip()) == 64
        for var in ("LLMPACK_RPC_KEY_FILE", "LLMPACK_RPC_KEY"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path))
        from llmpack.runtime.hardware.rpc_key import head_key

        with Wire(port, head_key()) as w:   # what `llmpack run --rpc` on this computer would prove
            assert w.alive()
        path.chmod(0o644)
        with pytest.raises(RpcKeyError, match=f"can be read by other users.*chmod 600 {path}"):
            head_key()
    finally:
        proc.kill()
        proc.wait(10)
