"""`serve --ray` fits itself to the cluster it finds (issue 38): threads per replica no more than a
node's CPUs, replicas no more than the nodes hold, and a start that cannot be placed ends within
30 s with one line naming what was asked, what the cluster has and the flag to change, instead of
a proxy answering 503 forever. Ctrl+C stops it at any moment, Ray included."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from needs import skip_or_fail

from llmpack.runtime.scale import ray_security

ray_security.keep_on_loopback()   # before Ray is imported: it reads the switch once

try:
    import ray  # noqa: F401
    from ray import serve  # noqa: F401
except ImportError:
    skip_or_fail("ray[serve] is not installed (pip install 'llmpack[ray]')", module=True)

from ggufs import CHATML_TEMPLATE, write_tiny_model

from llmpack.runtime.scale.launch import RaySettings, RayStartError, fit


def test_threads_default_to_what_the_largest_node_has_up_to_four() -> None:
    assert fit(RaySettings(), [2.0]).threads == 2
    assert fit(RaySettings(), [16.0, 2.0]).threads == 4
    assert fit(RaySettings(threads=3), [4.0]).threads == 3


def test_more_threads_than_any_node_has_is_one_line_naming_the_flag() -> None:
    with pytest.raises(RayStartError, match=r"asks Ray for 4 CPUs \(--threads 4\), but the largest node of this "
                                            r"cluster has 2: use --threads 2 or fewer"):
        fit(RaySettings(threads=4), [2.0, 2.0])


def test_more_replicas_than_the_nodes_hold_names_both_flags() -> None:
    with pytest.raises(RayStartError, match=r"--replicas 3 with 2 thread\(s\) each needs 6 CPUs.*holds 2: use "
                                            r"--replicas 2 or fewer"):
        fit(RaySettings(replicas=3, threads=2), [2.0, 3.0])


def test_replicas_auto_stops_at_what_the_cluster_holds() -> None:
    fitted = fit(RaySettings(replicas=None, max_replicas=8, threads=1), [2.0, 1.0])
    assert fitted.max_replicas == 3


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("rayfit") / "chat.gguf", chat_template=CHATML_TEMPLATE, seed=3)


def serve_ray(model: Path, *flags: str, sigint_ignored: bool = False) -> subprocess.Popen:
    # its own Ray's token goes to the model's folder, not to this user's data folder
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", "LLMPACK_DATA_DIR": str(model.parent)}
    # sigint_ignored: started as a shell starts a script's background job, with SIGINT ignored
    # (inherited through exec; Python then installs no KeyboardInterrupt of its own)
    return subprocess.Popen([sys.executable, "-m", "llmpack", "serve", str(model), "--port", "0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None)


@pytest.fixture
def two_cpu_cluster(tmp_path):
    """A Ray cluster of one 2-CPU node, as on a 2-core machine, whatever this machine has: on
    127.0.0.1 with a token, as `serve --ray` starts its own (ray_security)."""
    from ray.cluster_utils import Cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    head = ray_security.local_head(tmp_path)
    before = head.apply()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False, **head.node_args()})
    yield c
    c.shutdown()
    ray_security.set_env(before)
    head.remove()


def test_asking_for_more_cpus_than_a_node_has_ends_the_start_with_one_line(model, two_cpu_cluster) -> None:
    assert ray_security.answers_without_token(two_cpu_cluster.address) is False   # the token is on
    proc = serve_ray(model, "--ray", two_cpu_cluster.address, "--threads", "4")
    try:
        out, _ = proc.communicate(timeout=60)   # connecting takes most of it; the refusal comes at once
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode not in (0, None), out
    assert "asks Ray for 4 CPUs (--threads 4), but the largest node of this cluster has 2: use --threads 2 or " \
           "fewer" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
def test_ctrl_c_while_the_replicas_start_stops_everything(model, sigint_ignored: bool) -> None:
    proc = serve_ray(model, "--ray", sigint_ignored=sigint_ignored)
    said: list[str] = []
    try:
        started = time.monotonic()
        line = ""
        for line in proc.stdout:   # wait until it is deploying, then interrupt
            if "starting 1 replica(s)" in line:
                break
            assert time.monotonic() - started < 120, "serve --ray did not get as far as starting replicas"
        fitted = min(4, os.cpu_count() or 1)
        assert f"{fitted} thread(s) each" in line, line   # fitted to this machine's CPUs
        # read what it says while it stops: a full pipe would block its writes, and so its exit
        threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True).start()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("Ctrl+C did not stop serve --ray within 20 s; it said:\n" + "".join(said)[-3000:])
    time.sleep(2)   # Ray's processes exit after their driver
    leftover = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert not leftover, f"Ray processes left running after Ctrl+C: {leftover}"
