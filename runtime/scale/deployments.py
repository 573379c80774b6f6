"""The two Ray Serve deployments of `llmpack serve --ray`.

Both get the server from above (served.py: the CLI hands in `ServedApp`; nothing here imports it).

* `LlmpackReplica` (one per replica, `num_cpus` = its llama.cpp threads): llmpack's own engine and
  the single-machine WSGI app, loaded once; `handle(call)` replays an HTTP request into that app
  (bridge.run_wsgi) and streams back what it writes. Continuous batching, the paged KV cache, the
  prefix cache, structured output, tools and embeddings are the engine's, unchanged.
* `Ingress` (0 CPUs, Ray's HTTP proxy in front): runs the single server's guards first (Host,
  another web site, the route's body limit, the API key: `ServedApp.gate`, on the same app's
  routes, so nothing is read from a stranger before the single server would read it), then
  reads each request once, computes its prompt's
  prefix keys and passes it through a DeploymentHandle, whose request router (router.py) picks the
  replica. It answers nothing itself; when the replica it chose dies before answering, it tries
  another one, and when a replica dies mid-answer it ends the stream with an error event naming why.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from llmpack import heap
from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.scale import aggregate
from llmpack.runtime.scale.aggregate import Answer
from llmpack.runtime.scale.bridge import APP_NAME, HttpCall, HttpHead, prefix_keys, prompt_text, run_wsgi
from llmpack.runtime.scale.served import ServedApp, Worded

_END = object()
ASK_S = 5.0               # how long /health and /metrics wait for each replica's own answer
HEAD_TRIES = 3            # replicas tried for one request that none has started answering
REPLICA_GONE = ("The replica serving this request stopped (its process or node went away) before it finished; "
                "send the request again: the other replicas are still serving.")


def _kept_heap() -> heap.HeapKeeper:
    """A replica's process serves like the single server and keeps its heap the same way
    (llmpack/heap.py): set before the replica allocates what it serves with."""
    heap.tune()
    keeper = heap.HeapKeeper()
    keeper.start()
    return keeper


class LlmpackReplica:
    """One engine and the single-machine app. `model` must be readable at the same path on every
    node (shared storage, or the same copy): checked here with its size, so a node without it says so."""

    def __init__(self, model: ModelFile, size: int, config: Any, options: dict, served: ServedApp) -> None:
        import ray   # lazy: the driver imports this module before Ray is set up
        from ray import serve

        self.heap = _kept_heap()
        path = Path(model.path)
        node = ray.get_runtime_context().get_node_id()[:12]
        if not path.is_file() or path.stat().st_size != size:
            raise RuntimeError(f"node {node} has no copy of {path} ({size} bytes): put the model at the same path "
                               "on every node of the Ray cluster (or on storage they share)")
        self.app, self.engine = served.replica(model, config, options,
                                               lambda line: print(line, file=sys.stderr, flush=True))   # Ray's log
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

    def answer(self, call: HttpCall) -> Answer:
        """One replica's own answer to a fanned-out request (/health, /metrics), with its engine's
        load: the ingress combines every replica's (aggregate.py)."""
        head, chunks = None, []
        for item in run_wsgi(self.app, call, threading.Event()):
            if isinstance(item, HttpHead):
                head = item
            else:
                chunks.append(item)
        return Answer(self.tag[0][1], head.status if head else 502, b"".join(chunks), self.tag[1][1],
                      self.record_routing_stats())

    def record_routing_stats(self) -> dict:
        """Ray Serve asks each replica for this every few seconds and hands it to the request router
        (RunningReplica.routing_stats): the engine's load as the engine counts it."""
        s = self.engine.stats()
        return {"kv_blocks_used": s.kv_blocks_used, "kv_blocks_total": s.kv_blocks_total,
                "num_running": s.num_running, "num_waiting": s.num_waiting,
                "generation_tokens": s.generation_tokens_total, "requests_finished": s.requests_finished_total}

    def check_health(self) -> None:
        """Ray's health check: an engine that stopped takes its replica with it (Ray starts another)."""
        failure = self.engine.failure
        if failure is not None:
            raise RuntimeError(f"the engine stopped: {failure}")

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


class Ingress:
    """Ray's HTTP proxy -> the chosen replica's `handle`, streamed back as it comes."""

    def __init__(self, replicas: Any, options: dict, served: ServedApp) -> None:
        self.heap = _kept_heap()
        self.replicas = replicas.options(stream=True)
        self.plain = replicas
        self.port = options["port"]
        self.gate = served.gate(options)   # the single server's guards on its own routes and error shapes

    async def __call__(self, request: Request) -> Response:
        method, path = request.method, request.url.path
        length = request.headers.get("content-length")
        refused = self.gate.refusal(method, path, request.headers, request.headers.get("host", ""),
                                    int(length) if (length or "").isdigit() else None)
        if refused is not None:
            return _worded(refused)
        limit = self.gate.body_limit(method, path)
        body = bytearray()
        async for chunk in request.stream():   # a body without Content-Length stops at the same limit
            body += chunk
            if len(body) > limit:
                return _worded(self.gate.too_large(method, path, request.headers, limit))
        body = bytes(body)
        client = request.client.host if request.client else "127.0.0.1"
        call = HttpCall(request.method, request.url.path, request.url.query, list(request.headers.items()), body,
                        client, ("127.0.0.1", self.port), prefix_keys(prompt_text(request.url.path, body)))
        if request.method == "GET" and request.url.path in aggregate.FANNED_OUT:
            return await self._every_replica(call, request)
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

    async def _every_replica(self, call: HttpCall, request: Request) -> Response:
        """/health and /metrics: the request answered by each replica, combined (aggregate.py)."""
        answers = await asyncio.gather(*(self._ask(call, rid) for rid in replica_ids()))
        if call.path == "/metrics":
            data, status, kind = aggregate.metrics(list(answers))
            return Response(data, status_code=status, media_type=kind)
        body, status = aggregate.health(list(answers), self.gate.authorized(request.headers))
        return Response(json.dumps(body), status_code=status, media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    async def _ask(self, call: HttpCall, replica: str) -> Answer:
        from ray.serve.context import _set_request_context   # lazy: see _is_gone (pinned ray 2.60.0)

        # Ray matches a routing decision to its request by the request's internal id, which every
        # call made for one HTTP request inherits: each call gets its own (this task's context only)
        _set_request_context(_internal_request_id=f"{uuid.uuid4()}")
        response = self.plain.answer.remote(dataclasses.replace(call, replica=replica))
        try:
            return await asyncio.wait_for(response, ASK_S)
        except asyncio.TimeoutError:
            response.cancel()   # a replica still starting is not routable yet: drop the queued call
            return Answer(replica, error=f"no answer within {ASK_S:.0f} s (starting, or too busy)")
        except Exception as exc:  # noqa: BLE001 - a replica that died while asked
            return Answer(replica, error=_why(exc))


def replica_ids() -> list[str]:
    """The ids of the replicas Ray has alive now (their actors' names end with them)."""
    import ray   # lazy: the driver imports this module before Ray is set up

    prefix = f"SERVE_REPLICA::{APP_NAME}#replica#"
    return sorted(a["name"].removeprefix(prefix) for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(prefix))


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


def _worded(answer: Worded) -> Response:
    status, headers, body = answer
    return Response(body, status_code=status, headers=dict(headers))


def _error(status: int, message: str) -> Response:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Response(json.dumps(body), status_code=status, media_type="application/json")
