"""Ray kept to this machine and behind a token (issue 36): what `serve --ray`, the Ray tests and
`./dev bench scale` all use, so that they run Ray the same way.

**On loopback.** `ray.init(_node_ip_address="127.0.0.1")` is not enough: Ray 2.60 turns a
loopback node address into the machine's network address (`services.resolve_ip_for_localhost`)
unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, the switch Ray uses on Windows and macOS to stay
on 127.0.0.1. Ray reads it once, when it is imported, and every Ray process started afterwards
inherits it; with it, every listener of a local head (GCS, raylet, object manager, core workers,
dashboard agent, runtime-env agent, metrics exporters, Serve's controller and proxy) binds
127.0.0.1, but for one that Ray 2.60 hard-codes to `[::]`: Ray Serve's inter-deployment gRPC
server in each replica process, which refuses a call without the token (tests/test_ray_security.py,
docs/ARCHITECTURE.md's threat model). The switch must not be set to join a cluster on other
machines: their nodes call back into this one.

**A token.** Ray 2.60 turns token authentication on for a local `ray.init()` by itself, with a
token in `~/.ray/auth_token` that it writes with the default mode (0644 under umask 022): any
other user of the computer could read it and run code as this user through the cluster. A local
head here sets `RAY_AUTH_MODE=token` itself and points Ray at llmpack's own token
(`RAY_AUTH_TOKEN_PATH`: 0600 in the private data folder, made once), and Ray's temp folder
(sessions, logs, sockets) goes inside a 0700 folder made for each start: Ray makes its own 0777.
`RAY_TMPDIR` points at that folder too, so that what Ray writes to its default folder (the
`ray_current_cluster` address file of `ray.cluster_utils.Cluster`, AIR's file locks) lands there,
not in a shared /tmp/ray, which the address file also needs to exist.

**Joining a cluster** (`serve --ray ADDRESS`) leaves the cluster's settings alone, but says so
loudly when its GCS answers a call that carries no token (answers_without_token).
"""
from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from llmpack.errors import LlmpackError
from llmpack.paths import data_dir, private_file, private_folder

LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"   # "0": Ray keeps a local node on 127.0.0.1
AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_ENV = "RAY_AUTH_TOKEN"                          # Ray prefers it to the file: never ours
TMPDIR_ENV = "RAY_TMPDIR"                             # Ray's default folder is $RAY_TMPDIR/ray
TOKEN_BYTES = 32                                      # 256 bits, as `ray get-auth-token --generate`
TOKEN_FILE = "ray-auth-token"
OPEN_CLUSTER_WARNING = (
    "llmpack: WARNING: the Ray cluster at {address} has no token authentication: anyone who can reach its "
    "ports can run any code on it as the user who started each node (ShadowRay, CVE-2023-48022). Turn on "
    "Ray's token authentication on every node (RAY_AUTH_MODE=token, the same token everywhere) and keep the "
    "cluster on a private network: docs/SCALING.md, \"A real cluster\".")


class RaySecurityError(LlmpackError):
    """Ray's private folder or token cannot be used; the message says what to do."""


def on_this_machine(address: str | None) -> bool:
    """A Ray started here (no ADDRESS) or one at a loopback ADDRESS: its nodes stay on 127.0.0.1."""
    if not address:
        return True
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", LOOPBACK, "::1") or host.startswith("127.")


def keep_on_loopback() -> None:
    """Ray's local nodes on 127.0.0.1 for this process and every Ray process it starts. Ray reads
    the switch once, when it is imported (`ray_constants.ENABLE_RAY_CLUSTER`), and
    `services.get_node_ip_address` looks at that constant at each call: where Ray was imported
    first (a test session that imported it elsewhere), the constant is given the value the switch
    would have given it. Ray processes started afterwards read the switch themselves."""
    os.environ[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False   # pinned ray 2.60.0


@dataclass(frozen=True)
class LocalHead:
    """A Ray head started by this process: llmpack's token and a temp folder of its own."""
    token_file: Path  # 0600 in llmpack's data folder (0700), made once
    temp_dir: Path    # Ray's `_temp_dir`, inside a folder made 0700 for this start (Ray makes its own 0777)

    def env(self) -> dict[str, str]:
        """The environment of this process and of every Ray process it starts."""
        return {LOOPBACK_ENV: "0", AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(self.token_file),
                TMPDIR_ENV: str(self.temp_dir.parent)}

    def init_kwargs(self) -> dict:
        """`ray.init` arguments of a local head."""
        return {"_node_ip_address": LOOPBACK, "_temp_dir": str(self.temp_dir)}

    def node_args(self) -> dict:
        """`ray.cluster_utils.Cluster` node arguments (the tests' clusters of fake nodes)."""
        return {"node_ip_address": LOOPBACK, "temp_dir": str(self.temp_dir)}

    def apply(self) -> dict[str, str | None]:
        """Sets env() in os.environ (and drops RAY_AUTH_TOKEN, which Ray would prefer to our file);
        returns what was there before, for set_env to put back."""
        keep_on_loopback()
        return set_env({**self.env(), TOKEN_ENV: None})

    def remove(self) -> None:
        """Ray's files of this start (sessions, logs, sockets), once its processes have stopped."""
        shutil.rmtree(self.temp_dir.parent, ignore_errors=True)


def token_path(folder: Path | None = None) -> Path:
    """llmpack's Ray token, made once: 0600 in its private data folder (or `folder`), both
    checked and narrowed at every start (llmpack.paths); PathsError or RaySecurityError, one line,
    when they cannot be used."""
    path = private_folder(Path(folder) if folder else data_dir()) / TOKEN_FILE
    if not path.exists():
        private_file(path)
        path.write_text(secrets.token_hex(TOKEN_BYTES), encoding="ascii")
    private_file(path, create=False)
    if not path.read_text(encoding="ascii").strip():
        raise RaySecurityError(f"the Ray token file {path} is empty: delete it and start again")
    return path


def local_head(folder: Path | None = None) -> LocalHead:
    """A local head's token (token_path) and a new temp folder for Ray. The temp folder is in
    /tmp, not in the data folder: Ray puts Unix sockets under it, whose paths may not pass 107
    bytes (a long home folder name, or macOS's Application Support, would), and it collects logs
    that nothing would ever clean there. mkdtemp makes it 0700 under a random name that nobody
    can make first."""
    temp = Path(tempfile.mkdtemp(prefix="llmpack-ray-", dir=None if os.name == "nt" else "/tmp")) / "ray"
    return LocalHead(token_file=token_path(folder), temp_dir=temp)


def set_env(values: Mapping[str, str | None]) -> dict[str, str | None]:
    """Sets (None: removes) environment variables, refreshing what a Ray already imported in this
    process cached from them (its config and token, as Ray's own `ray.init` does); returns the old
    values, so set_env(old) undoes it."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config   # lazy: Ray, the optional extra

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    return before


GCS_CALL = "/ray.rpc.NodeInfoGcsService/GetClusterId"   # the first call every Ray client makes


def answers_without_token(address: str, method: str = GCS_CALL, timeout_s: float = 10.0) -> bool | None:
    """Whether the Ray gRPC server at HOST:PORT answers `method` (an empty request) sent without
    a token: True (no authentication), False (refused for want of a token), None (no answer
    either way: TLS, unreachable). A plain gRPC channel, outside Ray's own client, which would
    add this process's token."""
    import grpc   # lazy: a dependency of Ray, the optional extra

    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        try:
            call(b"", timeout=timeout_s)
            return True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            return None


def refuses_us(address: str | None) -> bool:
    """Whether a cluster this process failed to join is one that wants a token (a HOST:PORT
    address whose GCS refuses a call without one): then the failure was ours, not the network's."""
    if not address or "://" in address or ":" not in address:
        return False
    return answers_without_token(address) is False
