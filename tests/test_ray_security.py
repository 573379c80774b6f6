"""Ray as `serve --ray` starts it (issue 36): token authentication with llmpack's own token, kept
0600 in llmpack's private folder (not Ray's world-readable ~/.ray/auth_token), a private temp
folder, a client with the wrong token refused; joining a cluster with no token in reach warns."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from needs import skip_or_fail

try:
    import ray  # noqa: F401
except ImportError:
    skip_or_fail("ray[serve] is not installed (pip install 'llmpack[ray]')", module=True)

from llmpack.runtime.scale import ray_security


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "home").mkdir()
    return tmp_path


def test_the_token_is_private_and_made_once(home) -> None:
    first = ray_security.token_path()
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    assert len(first.read_text()) == 64 and ray_security.token_path().read_text() == first.read_text()


def test_joining_a_cluster_with_no_token_warns_naming_the_risk(home, monkeypatch) -> None:
    warning = ray_security.warning_for("10.0.0.5:6379")
    assert warning and "CVE-2023-48022" in warning and "RAY_AUTH_MODE=token" in warning
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert ray_security.warning_for("10.0.0.5:6379") is None


HEAD = textwrap.dedent("""
    import json, os, sys, time
    from llmpack.runtime.scale import ray_security
    kw = ray_security.secure_local_ray()
    import ray
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
             _node_ip_address="127.0.0.1", num_cpus=1, **kw)
    print(json.dumps({"address": ray.get_runtime_context().gcs_address, "temp": kw["_temp_dir"]}), flush=True)
    sys.stdin.read()   # until the test is done
""")
CLIENT = textwrap.dedent("""
    import sys, ray
    try:
        ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc)
        sys.exit(3)
    print("CONNECTED", ray.cluster_resources().get("CPU"))
""")


def test_a_local_head_needs_llmpacks_token(home) -> None:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        started = json.loads(head.stdout.readline())
        assert stat.S_IMODE(Path(started["temp"]).parent.stat().st_mode) == 0o700   # Ray makes its own 0777
        assert not (home / "home" / ".ray" / "auth_token").exists()   # Ray's world-readable default unused
        token = (home / "data" / ray_security.TOKEN_FILE).read_text()

        def client(**extra: str) -> subprocess.CompletedProcess:
            clean = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
            return subprocess.run([sys.executable, "-c", CLIENT, started["address"]], capture_output=True, text=True,
                                  env={**clean, **extra}, timeout=120)
        wrong = client(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64)
        assert wrong.returncode != 0 and "CONNECTED" not in wrong.stdout, wrong.stdout + wrong.stderr[-2000:]
        right = client(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        assert "CONNECTED" in right.stdout, right.stdout + right.stderr[-2000:]
    finally:
        head.stdin.close()
        head.wait(timeout=60)
