"""The two Ray Serve deployments of `llmpack serve --ray`.

* `LlmpackReplica` (one per replica, `num_cpus` = its llama.cpp threads): llmpack's own engine and
  the single-machine Flask app, loaded once; `handle(call)` replays an HTTP request into that app
  (bridge.run_wsgi) and streams back what it writes. Continuous batching, the paged KV cache, the
  prefix cache, structured output, tools and embeddings are the engine's, unchanged.
* `Ingress` (0 CPUs, Ray's HTTP proxy in front): reads each request once, computes its prompt's
  prefix keys and passes it through a DeploymentHandle, whose request router (router.py) picks the
  replica. It answers nothing itself; when the replica it chose dies before answering, it tries
  another one, and when a replica dies mid-answer it ends the stream with an error event naming why.
"""
from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.scale.bridge import HttpCall, HttpHead, prefix_keys, prompt_text, run_wsgi

_END = object()
HEAD_TRIES = 3            # replicas tried for one request that none has started answering
REPLICA_GONE = ("The replica serving this request stopped (its process or node went away) before it finished; "
                "send the request again: the other replicas are still serving.")


class LlmpackReplica:
    """One engine and the single-machine app. `model` must be readable at the same path on every
    node (shared storage, or the same copy): checked here with its size, so a node without it says so."""

    def __init__(self, model: ModelFile, size: int, config: Any, options: dict) -> None:
        # lazy: the server's modules load in the replica's process, not in the driver's
        from llmpack.runtime.server.app import create_app
        from llmpack.runtime.server.http.options import ServerOptions
        from llmpack.runtime.server.http.state import ServerState
        from llmpack.runtime.server.lifecycle.prepare import build_model
        import ray
        from ray import serve

        path = Path(model.path)
        node = ray.get_runtime_context().get_node_id()[:12]
        if not path.is_file() or path.stat().st_size != size:
            raise RuntimeError(f"node {node} has no copy of {path} ({size} bytes): put the model at the same path "
                               "on every node of the Ray cluster (or on storage they share)")
        self.state = ServerState(config.display_name)
        self.app = create_app(self.state, ServerOptions(**options))
        self.model = build_model(model, config, warn=lambda line: print(line, file=sys.stderr, flush=True))   # Ray's log
        self.state.set_ready(self.model)
        # which replica and node answered, on every response: for operators (and the tests)
        self.tag = [("X-Llmpack-Replica", serve.get_replica_context().replica_id.unique_id),
                    ("X-Llmpack-Node", ray.get_runtime_context().get_node_id())]

    async def handle(self, call: HttpCall) -> AsyncIterator[HttpHead | bytes]:
        """Run one HTTP request through the app on a thread; a cancelled call (the client hung up,
        Ray cancels it) tells the app's disconnect watcher, which aborts the sequence and frees its KV."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancelled = threading.Event()

        def work() -> None:
            try:
                for item in run_wsgi(self.app, call, cancelled):
                    if isinstance(item, HttpHead):
                        item.headers += self.tag
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        threading.Thread(target=work, name="llmpack-ray-request", daemon=True).start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancelled.set()

    def record_routing_stats(self) -> dict:
        """Ray Serve asks each replica for this every few seconds and hands it to the request router
        (RunningReplica.routing_stats): the engine's load as the engine counts it."""
        s = self.model.engine.stats()
        return {"kv_blocks_used": s.kv_blocks_used, "kv_blocks_total": s.kv_blocks_total,
                "num_running": s.num_running, "num_waiting": s.num_waiting,
                "generation_tokens": s.generation_tokens_total}

    def check_health(self) -> None:
        """Ray's health check: an engine that stopped takes its replica with it (Ray starts another)."""
        failure = self.model.engine.failure
        if failure is not None:
            raise RuntimeError(f"the engine stopped: {failure}")

    def __del__(self) -> None:
        model = getattr(self, "model", None)
        if model is not None:
            model.engine.shutdown()


class Ingress:
    """Ray's HTTP proxy -> the chosen replica's `handle`, streamed back as it comes."""

    def __init__(self, replicas: Any, port: int) -> None:
        self.replicas = replicas.options(stream=True)
        self.port = port

    async def __call__(self, request: Request) -> Response:
        body = await request.body()
        client = request.client.host if request.client else "127.0.0.1"
        call = HttpCall(request.method, request.url.path, request.url.query, list(request.headers.items()), body,
                        client, ("127.0.0.1", self.port), prefix_keys(prompt_text(request.url.path, body)))
        for attempt in range(HEAD_TRIES):
            stream = self.replicas.handle.remote(call)
            try:
                head = await stream.__anext__()
            except StopAsyncIteration:
                return _error(502, "The replica closed the request without an answer.")
            except Exception as exc:  # noqa: BLE001 - a replica that died before answering: try another
                if attempt + 1 == HEAD_TRIES or not _is_gone(exc):
                    return _error(503, f"No replica could answer: {_why(exc)}")
                continue
            headers = {k: v for k, v in head.headers if k.lower() not in ("content-length", "transfer-encoding")}
            sse = headers.get("Content-Type", headers.get("content-type", "")).startswith("text/event-stream")
            return StreamingResponse(_rest(stream, sse), status_code=head.status, headers=headers)
        return _error(503, "No replica could answer.")


async def _rest(stream: Any, sse: bool) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            yield chunk
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the replica died mid-answer: say so, in-band
        if sse:
            error = {"error": {"message": f"{REPLICA_GONE} ({_why(exc)})", "type": "server_error",
                               "param": None, "code": "replica_lost"}}
            yield b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n"
    finally:
        stream.cancel()   # the client hung up (or we are done): the replica aborts the sequence


def _is_gone(exc: BaseException) -> bool:
    from ray import exceptions as rex   # lazy: the driver imports this module before Ray is set up

    return isinstance(exc, (rex.RayActorError, rex.ActorDiedError, rex.ActorUnavailableError,
                            rex.NodeDiedError, rex.WorkerCrashedError))


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip(": ")


def _error(status: int, message: str) -> Response:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Response(json.dumps(body), status_code=status, media_type="application/json")
