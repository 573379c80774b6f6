"""A Ray started by `llmpack serve --ray` stays on this machine and behind llmpack's own token
(issues 36 and 46): every listening socket of its processes is on 127.0.0.1, Ray Serve's replica
gRPC server included, which Ray 2.60 binds to every interface and llmpack's worker setup hook moves
(runtime/scale/replica_loopback.py), and which refuses a caller without the token; the head's GCS refuses a
client without the token; the token is 0600 and Ray's files sit in a 0700 folder of llmpack's
data folder, never in ~/.ray; joining a cluster without authentication prints a warning naming
the risk. Everything runs as real processes: `serve --ray` and Ray clusters in subprocesses."""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from needs import skip_or_fail

from llmpack.runtime.scale import ray_security, replica_loopback

ray_security.keep_on_loopback()   # before Ray is imported: it reads the switch once

try:
    import ray  # noqa: F401
    from ray import serve  # noqa: F401
except ImportError:
    skip_or_fail("ray[serve] is not installed (pip install 'llmpack[ray]')", module=True)

import psutil   # Ray's own copy (ray/thirdparty_files), on the path once Ray is imported

import listener_fuzz
import listener_process
from ggufs import CHATML_TEMPLATE, write_tiny_model
from helpers.ports import free_port

WAIT_S = 240
# Ray Serve's inter-deployment gRPC server in each replica process, which Ray 2.60 binds to "[::]:0"
# (serve/_private/replica.py, `_on_initialized`) and replica_loopback moves to 127.0.0.1. It is built
# with Ray's token interceptor, so it must refuse this call.
REPLICA_CALL = "/ray.serve.ASGIService/HandleRequest"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any Ray token setting, with HOME in a fresh folder (so that
    ~/.ray/auth_token is one this test can look at)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", **extra}


def short_folder() -> Path:
    # Ray's sockets live under its temp folder, and an AF_UNIX path has 107 bytes: pytest's tmp_path is too long
    return Path(tempfile.mkdtemp(prefix="llmpack-ray-"))


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("raysec") / "chat.gguf", chat_template=CHATML_TEMPLATE, seed=3)


@pytest.fixture(scope="module")
def served(model):
    """`llmpack serve --ray MODEL` with its own data folder and HOME, running until the module ends."""
    root = short_folder()
    data, home = root / "data", root / "home"
    home.mkdir()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmpack", "serve", "--ray", str(model), "--threads", "1",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=clean_env(home, LLMPACK_DATA_DIR=str(data)), start_new_session=True)
    out = []
    try:
        started = time.monotonic()
        for line in proc.stdout:
            out.append(line)
            if line.startswith("LLMPACK_LISTENING"):
                break
            assert time.monotonic() - started < WAIT_S, "".join(out)[-3000:]
        assert proc.poll() is None, "".join(out)[-3000:]
        proc.port = port   # Ray Serve's proxy: the ingress
        yield proc, data, home
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def listeners(session: int) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of the processes in `session`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) != session:
                continue
            name = proc.name() if proc.name().startswith("ray::") else Path(proc.cmdline()[0]).name
            found += [(c.laddr.ip, c.laddr.port, name) for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except (psutil.Error, ProcessLookupError, IndexError):
            continue
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_every_listener_of_a_local_head_is_on_loopback(served) -> None:
    proc, _, _ = served
    found = listeners(proc.pid)
    names = {name for _, _, name in found}
    assert {"gcs_server", "raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names, found
    assert [(ip, port, name) for ip, port, name in found if not loopback(ip)] == [], "listening beyond 127.0.0.1"
    # the replica gRPC servers exist, moved by the hook (each worker's log names its port), and refuse a stranger
    replicas = {port for _, port, name in found if name.startswith("ray::ServeReplica")}
    moved = hooked_ports(proc.pid)
    assert len(moved) >= 2 and moved <= replicas, (moved, found)   # the ingress's replica and the model's
    for port in moved:
        assert ray_security.answers_without_token(f"127.0.0.1:{port}", REPLICA_CALL) is False, port


def hooked_ports(session: int) -> set[int]:
    """The ports replica_loopback's hook bound on 127.0.0.1, from the MARK lines of Ray's worker logs."""
    gcs = next(p for p in psutil.process_iter() if p.name() == "gcs_server" and os.getsid(p.pid) == session)
    logs = Path(next(a for a in gcs.cmdline() if a.startswith("--log_dir=")).split("=", 1)[1])
    ports = set()
    for log in logs.glob("worker-*.err"):
        ports |= {int(line[len(replica_loopback.MARK):]) for line in log.read_text(errors="replace").splitlines()
                  if line.startswith(replica_loopback.MARK)}
    return ports


def test_the_hook_patches_the_bind_of_the_installed_ray_and_fails_when_it_moves() -> None:
    """Ray is pinned (2.60.0): the hook finds the one `[::]:0` of Serve's replica module where it was
    written to find it, or refuses to start, so a Ray upgrade that moves the bind fails here."""
    import inspect

    from ray.serve._private import replica

    module, method = inspect.getsource(replica), inspect.getsource(replica.Replica._on_initialized)
    replica_loopback.check(module, method)   # the installed Ray is the one the hook was written for
    moved = [(module.replace(replica_loopback.SITE, "add_port_to_grpc_server(self._server, addr)"),
              method.replace(replica_loopback.SITE, "add_port_to_grpc_server(self._server, addr)")),
             (module + '\nserver.add_insecure_port("0.0.0.0:0")', method),
             (module + '\nserver.add_insecure_port("[::]:0")', method),
             (module, method.replace("_server,", "_grpc_server,"))]
    for changed in moved:
        with pytest.raises(replica_loopback.RayBindMoved, match="bind their gRPC server differently"):
            replica_loopback.check(*changed)
    calls = []
    bind = replica_loopback.on_loopback(lambda server, address: calls.append(address) or 4321)
    assert bind(None, "[::]:0") == 4321 and bind(None, "127.0.0.1:7") == 4321
    assert calls == ["127.0.0.1:0", "127.0.0.1:7"]


def gcs_address(session: int) -> str:
    return next(f"127.0.0.1:{port}" for _, port, name in listeners(session) if name == "gcs_server")


def test_the_head_refuses_a_client_without_its_token(served) -> None:
    proc, data, home = served
    gcs = gcs_address(proc.pid)
    assert ray_security.answers_without_token(gcs) is False
    code = "import ray; ray.init(address='%s', log_to_driver=False); print('JOINED', ray.cluster_resources()['CPU'])"
    loop = {ray_security.LOOPBACK_ENV: "0"}
    stranger = subprocess.run([sys.executable, "-c", code % gcs], env=clean_env(home, **loop), capture_output=True,
                              text=True, timeout=WAIT_S)
    assert stranger.returncode != 0 and "JOINED" not in stranger.stdout, stranger.stdout[-2000:]
    assert "token" in stranger.stderr.lower(), stranger.stderr[-2000:]
    token = data / ray_security.TOKEN_FILE
    owner = subprocess.run([sys.executable, "-c", code % gcs], capture_output=True, text=True, timeout=WAIT_S,
                           env=clean_env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), **loop))
    assert "JOINED" in owner.stdout, owner.stderr[-2000:]   # the same call with the token gets in


def test_the_token_and_rays_files_are_private_and_never_in_dot_ray(served) -> None:
    proc, data, home = served
    token = data / ray_security.TOKEN_FILE
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text()) == 64
    gcs = next(p for p in psutil.process_iter() if p.name() == "gcs_server" and os.getsid(p.pid) == proc.pid)
    logs = Path(next(a for a in gcs.cmdline() if a.startswith("--log_dir=")).split("=", 1)[1])
    temp = logs.parent.parent   # <temp>/session_.../logs: Ray's temp folder, which Ray makes 0777 ...
    assert stat.S_IMODE(temp.parent.stat().st_mode) == 0o700   # ... inside one of llmpack's that nobody else enters
    assert not (home / ".ray").exists()


def test_the_token_is_made_once_and_narrowed_again_at_each_start(tmp_path) -> None:
    first = ray_security.local_head(tmp_path)
    secret = first.token_file.read_text()
    first.token_file.chmod(0o644)
    again = ray_security.local_head(tmp_path)
    assert again.token_file.read_text() == secret
    assert stat.S_IMODE(again.token_file.stat().st_mode) == 0o600
    assert again.env()[ray_security.TOKEN_PATH_ENV] == str(again.token_file)
    for head in (first, again):   # each start has a temp folder of its own, removed with it
        assert stat.S_IMODE(head.temp_dir.parent.stat().st_mode) == 0o700
        head.remove()
        assert not head.temp_dir.parent.exists()


def test_joining_a_head_without_its_token_is_one_line_naming_what_to_set(served, model) -> None:
    proc, _, home = served
    joined = subprocess.run([sys.executable, "-m", "llmpack", "serve", "--ray", gcs_address(proc.pid), str(model),
                             "--port", str(free_port())], env=clean_env(home), capture_output=True, text=True,
                            timeout=WAIT_S)
    assert joined.returncode not in (0, None)
    assert "refused this connection: it needs its token. Set RAY_AUTH_MODE=token" in joined.stdout + joined.stderr, \
        (joined.stdout + joined.stderr)[-2000:]
    assert "Traceback" not in joined.stdout + joined.stderr


INGRESS_FUZZ = 1000   # of listener_fuzz's seeded stream; benchmarks/fuzz_listeners.py sends 10,000


def test_the_ingress_answers_a_protocol_fuzz_and_then_serves_as_before(served, capsys) -> None:
    """Ray's ingress runs the single server's guards and reads each body for the router (issue 46):
    no hostile request gets a 5xx or hangs there, and the replicas answer as before afterwards."""
    proc, _, _ = served
    target = listener_fuzz.Target("127.0.0.1", proc.port)
    greedy = listener_process.greedy_text(target)
    report = listener_fuzz.run(target, INGRESS_FUZZ, seed=46)
    with capsys.disabled():
        print(f"\nfuzz (Ray ingress): {report.summary()}")
    assert report.problems == [], "\n".join(report.problems[:20])
    assert listener_process.greedy_text(target) == greedy
    assert proc.poll() is None


OPEN_CLUSTER = """
import os, sys
from llmpack.runtime.scale import ray_security, replica_loopback
ray_security.keep_on_loopback()
os.environ[ray_security.TMPDIR_ENV] = os.path.dirname(sys.argv[1])   # Ray's default folder is the temp_dir, not /tmp/ray
from ray.cluster_utils import Cluster
c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                  "node_ip_address": "127.0.0.1", "temp_dir": sys.argv[1]})
print(c.address, flush=True)
sys.stdin.read()
"""


def test_joining_a_cluster_without_token_authentication_warns_of_shadowray(model) -> None:
    root = short_folder()
    (root / "home").mkdir()
    cluster = subprocess.Popen([sys.executable, "-c", OPEN_CLUSTER, str(root / "ray")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True,
                               env=clean_env(root / "home", RAY_AUTH_MODE="disabled"))
    try:
        address = cluster.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        assert ray_security.answers_without_token(address) is True
        # --threads 4 on a 2-CPU node: the start ends right after connecting, with the fitting error
        joined = subprocess.run([sys.executable, "-m", "llmpack", "serve", "--ray", address, str(model),
                                 "--threads", "4", "--port", str(free_port())], env=clean_env(root / "home"),
                                capture_output=True, text=True, timeout=WAIT_S)
        out = joined.stdout + joined.stderr
        assert f"the Ray cluster at {address} has no token authentication: anyone who can reach its ports can " \
               "run any code on it" in out, out[-2000:]
        assert "ShadowRay, CVE-2023-48022" in out and "RAY_AUTH_MODE=token" in out
        assert "use --threads 2 or fewer" in out, out[-2000:]
    finally:
        stop(cluster, signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)
