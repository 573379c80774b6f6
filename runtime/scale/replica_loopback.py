"""Ray Serve's replica gRPC server on 127.0.0.1 for a local head (issue 46).

Why: with ray_security's switch every listener of a Ray started by `serve --ray` is on loopback
but one. Ray 2.60's `Replica._on_initialized` (serve/_private/replica.py) starts each replica's
inter-deployment gRPC server on `"[::]:0"`, with no setting to change it: every interface of the
computer, for a cluster that is this one process's and that nothing outside it may call. That
server refuses a call without the token, but it should not be reachable at all.

How: Ray runs a `runtime_env`'s `worker_process_setup_hook` in every worker process before the
worker takes any task or actor, so before a replica starts. `setup` (that hook) swaps the
module-level name `add_port_to_grpc_server` in Ray's replica module for one that binds
127.0.0.1 where Ray asks for `[::]:0` and says so on the worker's log (MARK, which the tests read).

Ray is pinned (pyproject's `ray[serve]==2.60.0`), and this patch is only right for the source
it was written against: `check` finds that exact call, once, in `_on_initialized`, and no other
`[::]` or `0.0.0.0` in the module; otherwise it raises RayBindMoved, in the driver before Ray starts anything
(runtime_env) and again in each worker. A Ray upgrade that moves the bind fails the start, and
tests/test_ray_security.py, instead of listening on every interface unnoticed.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

from llmpack.errors import LlmpackError

LOOPBACK = "127.0.0.1"
EVERYWHERE = "[::]:0"
SITE = f'add_port_to_grpc_server(self._server, "{EVERYWHERE}")'   # in Replica._on_initialized, Ray 2.60.0
MARK = "llmpack: Ray Serve's replica gRPC server listens on 127.0.0.1:"


class RayBindMoved(LlmpackError):
    """The Ray installed is not the one this patch was written for."""


def check(module_source: str, method_source: str) -> None:
    """RayBindMoved unless Ray's replica module binds `[::]` exactly once, at SITE, in
    `_on_initialized` (`method_source`): the one call setup rebinds."""
    if method_source.count(SITE) != 1 or module_source.count("[::]") != 1 or "0.0.0.0" in module_source:
        raise RayBindMoved("this Ray's Serve replicas bind their gRPC server differently from Ray 2.60.0, which "
                           "llmpack keeps on 127.0.0.1 (runtime/scale/replica_loopback.py): install the pinned "
                           "Ray with pip install 'llmpack[ray]'")


def _replica_module() -> Any:
    from ray.serve._private import replica   # lazy: Ray, the optional extra

    check(inspect.getsource(replica), inspect.getsource(replica.Replica._on_initialized))
    return replica


def on_loopback(bind: Callable[[Any, str], int]) -> Callable[[Any, str], int]:
    """`bind` (Ray's add_port_to_grpc_server), with `[::]:0` turned into 127.0.0.1:0."""
    def add_port(server: Any, address: str) -> int:
        if address != EVERYWHERE:
            return bind(server, address)
        port = bind(server, f"{LOOPBACK}:0")
        print(f"{MARK}{port}", file=sys.stderr, flush=True)   # the worker's log file
        return port

    add_port.llmpack_loopback = True   # type: ignore[attr-defined] - setup runs once per process; tests look
    return add_port


def setup() -> None:
    """The worker_process_setup_hook: Ray's replica module with its gRPC bind on loopback."""
    replica = _replica_module()
    if not getattr(replica.add_port_to_grpc_server, "llmpack_loopback", False):
        replica.add_port_to_grpc_server = on_loopback(replica.add_port_to_grpc_server)


def runtime_env() -> dict[str, str]:
    """The `ray.init(runtime_env=...)` of a local head (Serve hands the driver's runtime_env to every
    deployment); RayBindMoved here, before any worker starts, when the installed Ray moved its bind."""
    _replica_module()
    return {"worker_process_setup_hook": f"{__name__}.setup"}
