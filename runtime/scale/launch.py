"""`llmpack serve --ray [ADDRESS] MODEL`: the model served by replicas on a Ray cluster, behind Ray
Serve's HTTP proxy, with the single-machine API (deployments.py; the server itself is handed in by
the CLI: served.py) and prefix-affinity routing (router.py). Ray is an optional extra
(`pip install 'llmpack[ray]'`); a built file does not carry it.

Ray is started quiet and closed: usage stats off (set before Ray is imported), no dashboard, the
proxy on 127.0.0.1 unless --host says otherwise. ADDRESS joins a running cluster (`ray start
--head` on one machine, `ray start --address` on the others: docs/SCALING.md), with a warning
when it has no token authentication; without it a one-machine Ray is started for this process
and stopped with it, every listener on 127.0.0.1 and behind llmpack's own token (ray_security.py).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from llmpack import signals
from llmpack.errors import LlmpackError
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.scale import ray_security, replica_loopback
from llmpack.runtime.scale.bridge import APP_NAME
from llmpack.runtime.scale.served import ServedApp

DEFAULT_PORT = 8000            # Ray Serve's
INGRESS_MAX_ONGOING = 4096     # the ingress only forwards; the replicas' limit is what counts
ROUTING_STATS_S = 2.0          # how often each replica reports its engine's load to the router
CONSTRUCTOR_TRIES = 3          # a replica that cannot load the model fails the start after this many tries
HEAD_RESOURCE = "node:__internal_head__"   # Ray's marker resource of the head node
# --replicas auto: Ray Serve's autoscaler on ongoing requests per replica. A replica is "full" at
# its engine's slots (max_ongoing_requests); it asks for another one at half of them, within seconds.
AUTOSCALE = {"upscale_delay_s": 3.0, "downscale_delay_s": 120.0, "metrics_interval_s": 1.0,
             "look_back_period_s": 5.0}


DEFAULT_THREADS = 4           # llama.cpp threads (= Ray CPUs) per replica, when the nodes have that many
START_POLL_S = 0.5


class RayUnavailable(LlmpackError):
    pass


class RayStartError(LlmpackError):
    """The replicas cannot start on this cluster; the message says what was asked, what the cluster
    has, and which flag to change."""


@dataclass
class RaySettings:
    """What `serve --ray` adds to the single-machine ServeConfig."""
    address: str | None = None          # a running cluster ("auto", "ray://...", "HOST:6379"); None: start one here
    replicas: int | None = 1            # None: autoscaling between min_replicas and max_replicas
    min_replicas: int = 1
    max_replicas: int = 4
    threads: int | None = None          # llama.cpp threads per replica = CPUs Ray reserves for it (None: fit)
    host: str = "127.0.0.1"             # Ray Serve's HTTP proxy
    port: int = DEFAULT_PORT
    router: str = "prefix"              # "prefix" (router.PrefixAffinityRouter) or "pow2" (Ray's default policy)
    init_kwargs: dict = field(default_factory=dict)   # extra ray.init arguments (tests: a Cluster's address)


def import_ray() -> Any:
    """Ray, quiet: usage stats off before its first import; a clear line when it is missing."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING", "0")
    try:
        import ray   # lazy: the optional extra
        from ray import serve   # noqa: F401 - ray[serve], not only ray
    except ImportError as exc:
        raise RayUnavailable(f"`serve --ray` needs Ray Serve ({exc.name} is missing): "
                             "pip install 'llmpack[ray]'") from None
    return ray


def fit(settings: RaySettings, node_cpus: list[float]) -> RaySettings:
    """`settings` with threads and replicas the cluster can hold (`node_cpus`: each live node's
    CPUs), or RayStartError naming the flag. Ray places a replica only on one node with all its CPUs
    free, so it would wait forever, and every request get a 503, for a replica no node can hold."""
    largest = int(max(node_cpus, default=0))
    if largest < 1:
        raise RayStartError("the Ray cluster has no node with a CPU to run a replica on")
    asked = settings.threads
    threads = asked if asked is not None else min(DEFAULT_THREADS, largest)
    if threads > largest:
        raise RayStartError(f"each replica asks Ray for {threads} CPUs (--threads {threads}), but the largest node "
                            f"of this cluster has {largest}: use --threads {largest} or fewer")
    holds = sum(int(c) // threads for c in node_cpus)   # replicas of `threads` CPUs the nodes hold at once
    if settings.replicas is not None and settings.replicas > holds:
        raise RayStartError(f"--replicas {settings.replicas} with {threads} thread(s) each needs "
                            f"{settings.replicas * threads} CPUs on nodes that hold whole replicas; this cluster "
                            f"({', '.join(f'{int(c)}' for c in node_cpus)} CPUs per node) holds {holds}: use "
                            f"--replicas {holds} or fewer, or fewer --threads")
    if settings.replicas is None and settings.min_replicas > holds:
        raise RayStartError(f"--min-replicas {settings.min_replicas} with {threads} thread(s) each is more than "
                            f"this cluster holds ({holds}): lower --min-replicas or --threads")
    top = settings.max_replicas if settings.replicas is not None else min(settings.max_replicas, holds)
    return dataclasses.replace(settings, threads=threads, max_replicas=max(top, settings.min_replicas))


def node_cpus() -> list[float]:
    """Each live node's CPUs, as Ray counts them."""
    import ray   # lazy: see import_ray

    return [float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]


def build_app(model: ModelFile, config: Any, settings: RaySettings, served: ServedApp, max_ongoing: int,
              api_key: str | None, cors: bool | tuple[str, ...]) -> Any:
    """The Ray Serve application: Ingress -> LlmpackReplica (bound, not yet running)."""
    from ray import serve   # lazy: see import_ray
    from ray.serve.config import RequestRouterConfig

    from llmpack.runtime.scale.deployments import Ingress, LlmpackReplica   # lazy: imports starlette (Ray's)

    scaling: dict[str, Any]
    if settings.replicas is None:
        scaling = {"autoscaling_config": {"min_replicas": settings.min_replicas,
                                          "max_replicas": settings.max_replicas,
                                          "initial_replicas": settings.min_replicas,
                                          "target_ongoing_requests": max(1, max_ongoing // 2), **AUTOSCALE}}
    else:
        scaling = {"num_replicas": settings.replicas}
    # both honour HttpCall.replica (the ingress's /health and /metrics ask every replica)
    policy = {"prefix": "PrefixAffinityRouter", "pow2": "PowerOfTwoRouter"}[settings.router]
    # affinity holds until the holder has a full batch (max_ongoing) more in flight than the least-loaded
    # replica: a replica without the prefix pays its whole prefill for every request that reaches it
    # while it computes it (measured: docs/BENCHMARKS.md, "Scaling out"); SGLang's threshold is 32
    kwargs = {"imbalance": max_ongoing} if settings.router == "prefix" else {}
    router = {"request_router_config": RequestRouterConfig(
        request_router_class=f"llmpack.runtime.scale.router:{policy}", request_routing_stats_period_s=ROUTING_STATS_S,
        request_router_kwargs=kwargs)}
    replica = serve.deployment(LlmpackReplica, name="replica", max_ongoing_requests=max_ongoing,
                               ray_actor_options={"num_cpus": settings.threads},
                               health_check_period_s=5, health_check_timeout_s=30,
                               graceful_shutdown_timeout_s=5, max_constructor_retry_count=CONSTRUCTOR_TRIES,
                               **scaling, **router)
    # the ingress lives beside the proxy on the head node: a lost worker node takes replicas with it,
    # never the HTTP side of the streams it was not serving
    ingress = serve.deployment(Ingress, name="ingress", max_ongoing_requests=INGRESS_MAX_ONGOING,
                               ray_actor_options={"num_cpus": 0, "resources": {HEAD_RESOURCE: 0.001}})
    options = {"host": settings.host, "port": settings.port, "api_key": api_key, "cors": cors}
    config = dataclasses.replace(config, threads=settings.threads)   # what Ray reserves is what llama.cpp uses
    size = Path(model.path).stat().st_size
    return ingress.bind(replica.bind(model, size, config, options, served), options, served)


def connect(settings: RaySettings, say: Callable[[str], None] = print) -> RaySettings:
    """Connect to (or start) Ray; `settings` fitted to the cluster it finds (fit). A Ray started
    here, or one at a loopback ADDRESS, stays on 127.0.0.1; one started here has llmpack's own
    token and private folder (ray_security). Joining a cluster without token authentication says
    so (OPEN_CLUSTER_WARNING)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        _init(settings, say)
    return fit(settings, node_cpus())


_started: list[ray_security.LocalHead] = []   # the Ray this process started, for stop() to clear away


def _init(settings: RaySettings, say: Callable[[str], None]) -> None:
    kwargs: dict[str, Any] = {}
    if ray_security.on_this_machine(settings.address):
        ray_security.keep_on_loopback()   # before Ray is imported
        kwargs["_node_ip_address"] = ray_security.LOOPBACK
    if settings.address is None:
        head = ray_security.local_head()
        head.apply()
        kwargs.update(head.init_kwargs())
        _started.append(head)
    ray = import_ray()
    if settings.address is None:   # Serve's replica gRPC server on 127.0.0.1 too (replica_loopback)
        kwargs["runtime_env"] = replica_loopback.runtime_env()
    try:
        # "local": a Ray of its own, never one that RAY_ADDRESS names
        ray.init(address=settings.address or "local", include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **{**kwargs, **settings.init_kwargs})
    except ConnectionError:
        if ray_security.refuses_us(settings.address):
            raise RayStartError(f"the Ray cluster at {settings.address} refused this connection: it needs its token. "
                                "Set RAY_AUTH_MODE=token and give Ray the cluster's token (RAY_AUTH_TOKEN_PATH, "
                                "or ~/.ray/auth_token): docs/SCALING.md, \"A real cluster\"") from None
        raise
    if settings.address is not None:
        gcs = ray.get_runtime_context().gcs_address
        if ray_security.answers_without_token(gcs):
            say(ray_security.OPEN_CLUSTER_WARNING.format(address=settings.address))


def start(model: ModelFile, config: Any, settings: RaySettings, served: ServedApp, *, max_ongoing: int,
          api_key: str | None = None, cors: bool | tuple[str, ...] = False,
          say: Callable[[str], None] = print) -> str:
    """Connect to (or start) Ray, start Serve's proxy and the app; returns the base URL once every
    replica has loaded the model, or raises RayStartError as soon as one cannot be placed or load."""
    from ray import serve   # lazy: see import_ray

    settings = connect(settings, say)
    serve.start(proxy_location="HeadOnly", http_options={"host": settings.host, "port": settings.port})
    app = build_app(model, config, settings, served, max_ongoing, api_key, cors)
    serve._run(app, name=APP_NAME, route_prefix="/", _blocking=False)   # pinned ray 2.60.0: deploy, do not wait
    wait_running(settings)
    return f"http://{settings.host}:{settings.port}"


def wait_running(settings: RaySettings) -> None:
    """Until the app runs, watching Serve's own status: a deployment that failed (a replica that
    cannot load the model, CONSTRUCTOR_TRIES times) or that Ray cannot place ends the start with
    Serve's reason, instead of a proxy answering 503 forever. Sleeps in short steps, so Ctrl+C
    stops it at once."""
    from ray import serve   # lazy: see import_ray

    while True:
        app = serve.status().applications.get(APP_NAME)
        status = str(getattr(app, "status", ""))
        if status.endswith("RUNNING"):
            return
        for name, dep in (getattr(app, "deployments", None) or {}).items():
            message = (dep.message or "").strip()
            if str(dep.status).endswith(("DEPLOY_FAILED", "UNHEALTHY")) or "Resources required" in message:
                raise RayStartError(f"the {name} deployment cannot start on this Ray cluster: "
                                    f"{message.splitlines()[0] if message else dep.status}"
                                    f" (threads per replica: --threads {settings.threads}; replicas: --replicas)")
        if status.endswith("DEPLOY_FAILED"):
            raise RayStartError(f"Ray Serve could not deploy llmpack: {getattr(app, 'message', '') or status}")
        time.sleep(START_POLL_S)


def stop(local: bool = False) -> None:
    """Stop Serve and leave Ray. A Ray started here is shut down with its processes, and its temp
    folder removed; Serve's own graceful shutdown (seconds per replica) is skipped there, so
    Ctrl+C ends the process at once."""
    import ray   # lazy: see import_ray
    from ray import serve

    try:
        if not local and ray.is_initialized():
            serve.shutdown()
    finally:
        ray.shutdown()
        while _started:
            _started.pop().remove()


def serve_ray(model: ModelFile, config: Any, settings: RaySettings, served: ServedApp,
              say: Callable[[str], None] = print) -> int:
    """`llmpack serve --ray`: start, say where, serve until Ctrl+C (or SIGTERM), then stop Serve and Ray."""
    previous = signals.install(_interrupt, ("SIGINT", "SIGTERM"))
    try:
        say(f"llmpack: connecting to {settings.address or 'a Ray started on this machine'} (Ctrl+C to stop)")
        settings = connect(settings, say)
        how = (f"{settings.replicas} replica(s)" if settings.replicas is not None
               else f"{settings.min_replicas} to {settings.max_replicas} replicas (autoscaling)")
        say(f"llmpack: starting {how} of {model.path.name}, {settings.threads} thread(s) each, {settings.router} "
            "routing; this loads the model once per replica")
        url = start(model, config, settings, served, max_ongoing=config.parallel, api_key=config.api_key,
                    cors=config.cors, say=say)
        say(f"llmpack: OpenAI-compatible API at {url}/v1 (Ray Serve; Ctrl+C to stop)")
        say(f"LLMPACK_LISTENING {url}")
        if settings.host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
            say("llmpack: WARNING: Ray Serve's proxy listens on the network WITHOUT an API key; add --api-key KEY")
        sys.stdout.flush()
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        say("llmpack: stopping")
        return 0
    finally:
        try:
            stop(local=settings.address is None)
        finally:
            signals.restore(previous)


def _interrupt(signum: int, frame: Any) -> None:
    """Ctrl+C and SIGTERM stop serve_ray the same way, at any moment. Set by hand, not left to
    Python: a process started with SIGINT ignored (what a shell does to a background job of a
    script) never gets Python's KeyboardInterrupt, so `kill -INT` did nothing and SIGTERM left
    the local Ray's processes running."""
    raise KeyboardInterrupt
