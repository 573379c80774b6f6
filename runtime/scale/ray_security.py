"""Ray as `serve --ray` runs it: token authentication set by llmpack, never left to Ray's default.

Ray 2.60's `ray.init()` turns token authentication on for a local head, but keeps the token in
`~/.ray/auth_token` with mode 0644 and its session folders 0777: any other user of the computer
could read the token and run code as this user through the cluster (issue 36). And
`ray start` turns it on only where a token already exists, so a cluster made by hand may have
none at all: whoever reaches its ports runs code on it (ShadowRay, CVE-2023-48022).

So, before Ray is imported:
* a Ray started here gets `RAY_AUTH_MODE=token` and llmpack's own token, a 0600 file in llmpack's
  private data folder (`RAY_AUTH_TOKEN_PATH`), and its temp folder inside one of ours made 0700
  (short, in the system's temp folder: Ray puts Unix sockets under it, whose paths may not exceed
  107 bytes; Ray makes its own folder 0777);
* joining a cluster with no token anywhere in reach gets a warning that names the risk.

What Ray 2.60 cannot do is listen on 127.0.0.1 only: its C++ gRPC servers (GCS, raylet, core
workers) bind every interface whatever the node address (docs/ARCHITECTURE.md, threat model), so
the token is what stands between them and the LAN.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from llmpack.paths import data_dir, private_file, private_folder

TOKEN_FILE = "ray-auth-token"
UNAUTHENTICATED = ("llmpack: WARNING: the Ray cluster at {address} seems to run without token authentication "
                   "(no RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token here): anyone who can reach its "
                   "ports can run code on every node as you (ShadowRay, CVE-2023-48022). Start it with "
                   "RAY_AUTH_MODE=token and one token on every node: docs/SCALING.md")


def token_path() -> Path:
    """llmpack's Ray token, 0600 in its private data folder, made once."""
    path = private_folder(data_dir()) / TOKEN_FILE
    if not path.exists():
        private_file(path)
        path.write_text(secrets.token_hex(32), encoding="ascii")
    return private_file(path)


def secure_local_ray() -> dict:
    """The environment and ray.init arguments of a Ray started on this machine: token
    authentication with llmpack's token, and a private temp folder. Returns the init kwargs."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path())
    os.environ.pop("RAY_AUTH_TOKEN", None)   # the file above is the one token
    # Ray makes its temp folder 0777 itself: it goes inside one of ours, 0700, which no one else can enter
    temp = Path(tempfile.mkdtemp(prefix="llmpack-ray-")) / "ray"
    return {"_temp_dir": str(temp)}


def has_token() -> bool:
    """Whether this process would present a Ray token when it joins a cluster."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    given = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(given).is_file() if given else (Path.home() / ".ray" / "auth_token").is_file()


def warning_for(address: str) -> str | None:
    """The warning for joining `address` with no token at hand, or None."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" or has_token():
        return None
    return UNAUTHENTICATED.format(address=address)
