"""Ray kept to this machine and behind a token (issue 36): what `serve --ray`, the Ray tests and
`./dev bench scale` all use, so that they run Ray the same way.

**On loopback.** `ray.init(_node_ip_address="127.0.0.1")` is not enough: Ray 2.60 turns a
loopback node address into the machine's network address (`services.resolve_ip_for_localhost`)
unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, the switch Ray uses on Windows and macOS to stay
on 127.0.0.1. Ray reads it once, when it is imported, and every Ray process started afterwards
inherits it; with it, every listener of a local head (GCS, raylet, object manager, core workers,
dashboard agent, runtime-env agent, metrics exporters) binds 127.0.0.1 (tests/test_ray_security.py).
It must not be set to join a cluster on other machines: their nodes call back into this one.

**A token.** Ray 2.60 turns token authentication on for a local `ray.init()` by itself, with a
token in `~/.ray/auth_token` that it writes with the default mode (0644 under umask 022): any
other user of the computer could read it and run code as this user through the cluster. A local
head here sets `RAY_AUTH_MODE=token` itself and points Ray at llmpack's own token
(`RAY_AUTH_TOKEN_PATH`, 0600 in a 0700 folder of the data folder, made once), and Ray's temp
folder (sessions, logs, sockets) sits in that 0700 folder too: Ray makes its own folders 0777.

**Joining a cluster** (`serve --ray ADDRESS`) leaves the cluster's settings alone, but says so
loudly when its GCS answers a call that carries no token (answers_without_token).
"""
from __future__ import annotations

import os
import secrets
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
TOKEN_BYTES = 32                                      # 256 bits, as `ray get-auth-token --generate`
# what Ray appends to its temp folder for its longest socket: /session_<date>_<time>_<us>_<pid>/sockets/
# plasma_store.N, against the 107 bytes of an AF_UNIX path (Ray refuses a longer one when it starts)
SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store.9")
UNIX_PATH_MAX = 107
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
    """A Ray head started by this process: its token and its temp folder, both private."""
    home: Path        # 0700, in llmpack's data folder: the token, and usually Ray's temp folder
    temp_dir: Path    # Ray's `_temp_dir` (Ray makes it 0777; its parent keeps other users out)

    @property
    def token_file(self) -> Path:
        return self.home / "auth_token"

    def env(self) -> dict[str, str]:
        """The environment of this process and of every Ray process it starts."""
        return {LOOPBACK_ENV: "0", AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(self.token_file)}

    def init_kwargs(self) -> dict:
        """`ray.init` arguments of a local head."""
        return {"_node_ip_address": LOOPBACK, "_temp_dir": str(self.temp_dir)}

    def node_args(self) -> dict:
        """`ray.cluster_utils.Cluster` node arguments (the tests' clusters of fake nodes)."""
        return {"node_ip_address": LOOPBACK, "temp_dir": str(self.temp_dir)}

    def apply(self) -> dict[str, str | None]:
        """Sets env() in os.environ (and drops RAY_AUTH_TOKEN, which Ray would prefer to our file);
        returns what was there before, for restore()."""
        keep_on_loopback()
        return set_env({**self.env(), TOKEN_ENV: None})


def local_head(home: Path | None = None) -> LocalHead:
    """The private folder of a local head (`<data>/ray` by default) with its token, made once:
    0700 and 0600, checked and narrowed at every start (llmpack.paths). PathsError or
    RaySecurityError, one line each, when they cannot be used."""
    home = private_folder(Path(home) if home else data_dir() / "ray")
    token = home / "auth_token"
    if not token.exists():
        private_file(token)
        token.write_text(secrets.token_hex(TOKEN_BYTES), encoding="ascii")
    private_file(token, create=False)
    if not token.read_text(encoding="ascii").strip():
        raise RaySecurityError(f"the Ray token file {token} is empty: delete it and start again")
    return LocalHead(home=home, temp_dir=_temp_dir(home))


def _temp_dir(home: Path) -> Path:
    """Ray's temp folder: `<home>/tmp`; where that path is too long for Ray's sockets (a long
    home folder name, macOS's Application Support), a new folder of this user's own in /tmp
    (mode 0700 under a random name nobody can make first)."""
    preferred = home / "tmp"
    if os.name == "nt" or len(os.fsencode(preferred)) + SOCKET_TAIL <= UNIX_PATH_MAX:
        return preferred
    return Path(tempfile.mkdtemp(prefix="llmpack-ray-", dir="/tmp")) / "tmp"


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
