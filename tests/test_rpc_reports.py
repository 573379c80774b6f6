"""What an RPC worker reports about itself is bounded before the head uses it: the device count,
each device's memory, alignment and largest buffer. A fake worker (tests/rpc_wire.py) proves the
key and then answers what each test tells it, on the head's probe and on ggml's own connection,
which a hostile worker can answer differently (issue 46, finding 2: 1 to the probe and 3,000,000
to ggml kept the head at 100 % CPU for minutes, one device made per count)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rpc_wire import Reports, fake_worker

from llmpack.runtime.hardware.rpc import RpcError
from llmpack.runtime.hardware.rpc_client import add_servers

KEY = b"reports-key-0123456789abcdef-0123456789abcdef"


@pytest.fixture
def keyed(tmp_path, monkeypatch) -> dict:
    """The key file, in this process's environment and in the one returned for a child's."""
    path = tmp_path / "key"
    path.write_bytes(KEY + b"\n")
    path.chmod(0o600)
    monkeypatch.setenv("LLMPACK_RPC_KEY_FILE", str(path))
    return {**os.environ, "LLMPACK_RPC_KEY_FILE": str(path)}


@pytest.mark.parametrize("count, memory, alignment, says", [
    (100_000, (1 << 30, 1 << 30), 32, "a device count = 100000, outside 1..64"),
    (0, (1 << 30, 1 << 30), 32, "a device count = 0"),
    (1, (1 << 62, 1 << 62), 32, "device 0's total memory = 4611686018427387904"),
    (1, (1 << 31, 1 << 30), 32, "device 0's free memory = 2147483648, outside 0..its total"),
    (1, (1 << 30, 1 << 30), 0, "device 0's alignment = 0"),
    (1, (1 << 30, 1 << 30), 48, "device 0's alignment = 48"),
])
def test_a_worker_reporting_absurd_values_to_the_probe_is_refused_with_one_line(keyed, count, memory, alignment, says):
    srv, port = fake_worker(KEY, Reports(count, memory, alignment))
    with pytest.raises(RpcError) as err:
        add_servers([f"127.0.0.1:{port}"])
    message = str(err.value)
    assert f"the RPC worker at 127.0.0.1:{port} reports {says}" in message and "\n" not in message, message
    srv.close()


HEAD = """
import time
from llmpack.runtime.hardware.rpc import RpcError
from llmpack.runtime.hardware.rpc_client import add_servers
started = time.monotonic()
try:
    devices = add_servers(["127.0.0.1:{port}"])
    print("ACCEPTED", [(d.memory_free, d.memory_total) for d in devices])
except RpcError as exc:
    print(f"REFUSED in {{time.monotonic() - started:.3f}} s: {{exc}}")
"""


def head_against(reports: Reports, env: dict) -> tuple[str, float]:
    """A head (`add_servers`, in a child process: ggml's registry is process-wide) against a worker
    that tells its probe the truth and ggml's connection `reports`; (its last line, seconds)."""
    srv, port = fake_worker(KEY, Reports(), reports)
    try:
        out = subprocess.run([sys.executable, "-c", HEAD.format(port=port)], env=env, capture_output=True,
                             text=True, timeout=120)
    finally:
        srv.close()
    last = (out.stdout.strip().splitlines() or [f"exit {out.returncode}: {out.stderr[-2000:]}"])[-1]
    seconds = float(last.split(" in ")[1].split(" s")[0]) if last.startswith("REFUSED in ") else float("inf")
    return last, seconds


def test_three_million_devices_on_ggmls_connection_are_refused_in_under_a_second(keyed):
    last, seconds = head_against(Reports(count=3_000_000), keyed)
    assert last.startswith("REFUSED") and "told ggml a device count" in last and "will not use it" in last, last
    assert seconds < 1.0, last   # the probe and ggml's refusal; one device per count took minutes


@pytest.mark.parametrize("reports", [
    Reports(count=65),
    Reports(memory=(1 << 62, 1 << 62)),
    Reports(memory=(2 << 30, 1 << 30)),
    Reports(alignment=0),
    Reports(alignment=48),
    Reports(max_size=4096),
], ids=["count", "memory", "free-over-total", "alignment-0", "alignment-48", "largest-buffer"])
def test_a_report_out_of_bounds_on_ggmls_connection_is_refused_before_any_device(keyed, reports):
    last, _ = head_against(reports, keyed)
    assert last.startswith("REFUSED") and "out of bounds" in last, last


def test_a_worker_within_the_bounds_on_both_connections_is_used(keyed):
    last, _ = head_against(Reports(memory=(1 << 29, 1 << 30)), keyed)
    assert last == f"ACCEPTED [({1 << 29}, {1 << 30})]", last
