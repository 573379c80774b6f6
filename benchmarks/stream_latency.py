"""How soon a streamed chunk reaches the client, and how soon a client's hang-up frees the KV cache.

`llmpack run` in this process on the demo model (so each engine output is timed where it is
made, on the client's clock): for a streamed chat completion, the delay from each engine output
to the client reading it, median and max, and as a fraction of the time between tokens; then a
client that hangs up mid-stream: the time until the engine is idle with its KV blocks back, in
milliseconds and in tokens' worth of decoding.

These figures were printed by tests/test_server.py and tests/test_server_errors.py; the tests
now prove only the behaviour (each chunk is sent as it is made; a hang-up aborts the request).

    ./dev bench stream_latency [--tokens 120] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from server_fixtures import live_server, post_on_socket, sse_events, stream_post  # noqa: E402

from llmpack.demo_models import demo_model_path  # noqa: E402

ASK = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


class Timed:
    """An engine stream that notes when each output with text left the engine."""

    def __init__(self, stream, log: list[float]) -> None:
        self.stream, self.log = stream, log

    def __iter__(self):
        for out in self.stream:
            if any(c.text for c in out.outputs):
                self.log.append(time.perf_counter())
            yield out

    def abort(self) -> None:
        self.stream.abort()


def stream_delays(srv, tokens: int) -> tuple[list[float], list[float]]:
    """(engine output times, client read times) for one streamed reply."""
    engine, emitted, received = srv.engine, [], []
    real = engine.add_request
    engine.add_request = lambda *a, **kw: Timed(real(*a, **kw), emitted)
    try:
        body = {"model": srv.model_id, "messages": ASK, "max_tokens": tokens, "stream": True, "ignore_eos": True,
                "temperature": 0}
        with stream_post(srv.url + "/v1/chat/completions", body) as resp:
            for data in sse_events(resp):
                if data == "[DONE]":
                    break
                if json.loads(data)["choices"][0]["delta"].get("content"):
                    received.append(time.perf_counter())
    finally:
        del engine.add_request   # the instance attribute goes; the method is back
    assert len(emitted) == len(received), (len(emitted), len(received))
    return emitted, received


def abort_after_hangup(srv) -> tuple[float, int]:
    """Seconds from a streaming client's hang-up to an idle engine with its KV blocks back, and
    the tokens generated meanwhile."""
    engine = srv.engine
    base = engine.stats()
    sock = post_on_socket(srv.port, "/v1/completions", {"model": srv.model_id, "prompt": "Once upon a time",
                                                        "stream": True, "ignore_eos": True, "max_tokens": 1800})
    seen = b""
    while seen.count(b"\ndata: ") < 5:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    before = engine.stats().generation_tokens_total
    t0 = time.perf_counter()
    sock.shutdown(2)
    sock.close()
    while True:
        s = engine.stats()
        if s.num_running == 0 and s.num_waiting == 0 and s.kv_blocks_used <= base.kv_blocks_used:
            return time.perf_counter() - t0, s.generation_tokens_total - before
        time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with live_server(demo_model_path("gemma"), "--ctx", "2048") as srv:
        for run in range(1, args.repeat + 1):
            emitted, received = stream_delays(srv, args.tokens)
            delays = [r - e for e, r in zip(emitted, received)]
            between = statistics.median(b - a for a, b in zip(emitted, emitted[1:]))
            print(f"run {run}: stream delay over {len(delays)} chunks: median {statistics.median(delays) * 1000:.2f} ms, "
                  f"max {max(delays) * 1000:.2f} ms; median {100 * statistics.median(delays) / between:.2f}% "
                  f"of the {between * 1000:.1f} ms between tokens")
            took, extra = abort_after_hangup(srv)
            print(f"run {run}: hang-up to idle with KV freed: {took * 1000:.0f} ms "
                  f"({took / between:.1f} tokens' time; {extra} tokens generated meanwhile)")


if __name__ == "__main__":
    main()
