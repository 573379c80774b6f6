"""The engine: one thread that turns queued requests into one llama_decode per step.

`add_request` and `abort` may be called from any thread (HTTP handlers); they only touch
thread-safe queues. Everything else - scheduler, block manager, llama.cpp - is owned by
the engine thread, so there are no locks on the hot path.
"""
from __future__ import annotations

import queue
import random
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Callable

import numpy as np

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.embeddings import Embedder
from llmpack.runtime.engine.grammar_sampler import check_with_llama
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.model_runner import DecodeError, ModelRunner
from llmpack.runtime.engine.outputs import CompletionOutput, RequestOutput
from llmpack.runtime.engine.request import EngineDeadError, PromptTooLongError, QueueFullError, Request, RequestStream
from llmpack.runtime.engine.sampler import SequenceSampler, compute_logprobs
from llmpack.runtime.engine.sampling_params import InvalidParameterError, SamplingParams
from llmpack.runtime.engine.scheduler import Scheduler
from llmpack.runtime.engine.sequence import Sequence
from llmpack.runtime.hardware.placement import backend_report, plan_offload
from llmpack.runtime.hardware.rpc import RpcWorkerLost, on_worker_lost
from llmpack.runtime.model.model_info import ModelInfo

__all__ = ["EngineConfig", "EngineStats", "LLMEngine", "EngineDeadError", "PromptTooLongError", "QueueFullError",
           "Request", "RequestStream"]


@dataclass(slots=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    requests_finished_total: int


class LLMEngine:
    def __init__(self, config: EngineConfig, progress: Callable[[float], bool | None] | None = None,
                 info: ModelInfo | None = None) -> None:
        """`info`: the model's header, when the caller has read it (`--gpu-layers auto` needs it)."""
        self.config = config
        plan = plan_offload(config.gpu_layers, config.model_path, config.n_ctx, config.device, info,
                            offset=config.model_offset, length=config.model_length, rpc=config.rpc)
        self.runner = ModelRunner(config, plan.n_gpu_layers, plan.handles(), progress, plan.split())
        self.backend = backend_report(plan, self.runner)   # what /health and the start-up line say
        self.n_ctx = self.runner.n_ctx
        self.n_vocab = self.runner.n_vocab
        self.model_name = self.runner.meta("general.name") or str(config.model_path)
        self.bos_prefix = self._find_bos_prefix()
        num_blocks = self.n_ctx // config.block_size
        self.max_model_len = num_blocks * config.block_size
        self.bm = BlockManager(num_blocks, config.block_size, self.runner.n_seq_max, self.runner,
                               config.enable_prefix_cache)
        self.scheduler = Scheduler(self.bm, config.max_num_seqs, self.runner.n_batch)   # llama.cpp's cap
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._aborts: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._pending = 0                      # requests in the inbox, not yet seen by the loop
        self._pending_lock = threading.Lock()
        self._requests: dict[str, Request] = {}
        self._wakeup = threading.Event()
        self._stop = False
        self.failure: str | None = None        # why the engine thread stopped, once it has
        self.embedder: Embedder | None = None  # /v1/embeddings' context, made on first use
        self._embedder_lock = threading.Lock()
        self._piece_cache: dict[int, bytes] = {}
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_finished_total = 0
        self.steps = 0
        self.tokens_computed_total = 0         # prompt and generated tokens run through llama_decode
        self._thread = threading.Thread(target=self._loop, name="llmpack-engine", daemon=True)
        # a dead RPC worker leaves llama_decode blocked for good: end every request saying which
        self._forget_rpc = (on_worker_lost(lambda why: self._die(why, RpcWorkerLost(why))) if plan.remote
                            else lambda: None)
        self._thread.start()

    # ---- public, thread-safe --------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.runner.tokenize(text, add_special, parse_special)

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return self.runner.token_bytes(token, special)

    def check_grammar(self, gbnf: str) -> None:
        """Raise GrammarError when llama.cpp cannot parse `gbnf` (the server checks before queueing)."""
        check_with_llama(gbnf, self.runner.vocab)

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]:
        """Embeddings from a second context on the same weights, opened on first use
        (engine/embeddings.py); callers take turns inside the Embedder."""
        with self._embedder_lock:
            if self.embedder is None:
                self.embedder = Embedder(self.runner.model, min(self.n_ctx, 2048), self.runner.cfg.n_threads)
        return list(self.embedder.embed(inputs))

    def tokenize_prompt(self, text: str) -> list[int]:
        """Tokenize a rendered prompt that may already start with the BOS text (chat templates
        write it): the model's BOS is added only when missing, never doubled."""
        ids = self.runner.tokenize(text, add_special=False, parse_special=True)
        prefix = self.bos_prefix
        return prefix + ids if prefix and ids[:len(prefix)] != prefix else ids

    def _find_bos_prefix(self) -> list[int]:
        """The ids the tokenizer puts in front of any text (usually [BOS], or nothing)."""
        with_special = self.runner.tokenize("Hello", add_special=True, parse_special=False)
        plain = self.runner.tokenize("Hello", add_special=False, parse_special=False)
        k = len(with_special) - len(plain)
        return list(with_special[:k]) if k > 0 and with_special[k:] == plain else []

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, prompt_progress: bool = False) -> RequestStream:
        """Queue a request. `prompt_progress`: the stream also gets an output with no `outputs`
        after each step that advanced the prompt's prefill without finishing it (a long prompt
        is read over several steps under the token budget)."""
        params = params or SamplingParams()
        params.validate()
        if params.grammar is not None:   # parse it here: on the engine thread a bad one would be fatal
            check_with_llama(params.grammar, self.runner.vocab)
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise InvalidParameterError("prompt", "is empty")
        if len(ids) + 1 > self.max_model_len:
            raise PromptTooLongError(len(ids), self.max_model_len)
        seed = params.seed if params.seed is not None else random.getrandbits(31)
        req = Request(request_id or uuid.uuid4().hex, prompt if isinstance(prompt, str) else None, ids, params, seed,
                      prompt_progress=prompt_progress)
        with self._pending_lock:
            if self.failure is not None:
                raise EngineDeadError(f"the engine has stopped ({self.failure}); restart the server")
            if self._pending + self.scheduler.num_waiting >= self.config.max_waiting:
                raise QueueFullError(f"{self.config.max_waiting} requests are already waiting; try again shortly")
            self._pending += 1
            self._inbox.put(req)
        self._wakeup.set()
        return RequestStream(self, req)

    def abort(self, request_id: str) -> None:
        self._aborts.put(request_id)
        self._wakeup.set()

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=self.scheduler.num_running, num_waiting=self.scheduler.num_waiting + self._pending,
            kv_blocks_used=self.bm.num_used_blocks,
            kv_blocks_total=self.bm.num_blocks, prefix_cache_queries=self.bm.prefix_queries,
            prefix_cache_hits=self.bm.prefix_hits, num_preemptions=self.scheduler.num_preemptions,
            prompt_tokens_total=self.prompt_tokens_total, generation_tokens_total=self.generation_tokens_total,
            requests_finished_total=self.requests_finished_total)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Block until no request is queued or running (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self._pending or self.scheduler.has_work():
            if self.failure is not None:
                raise EngineDeadError(self.failure)
            if time.monotonic() > deadline:
                raise TimeoutError("engine still busy")
            time.sleep(0.01)

    def shutdown(self) -> None:
        self._stop = True
        self._wakeup.set()
        self._thread.join(timeout=30 if self.failure is None else 1)
        self._forget_rpc()
        if self._thread.is_alive():   # still inside llama.cpp (a lost RPC worker): freeing would crash it
            return
        if self.embedder is not None:   # its context uses the engine's model: free it first
            self.embedder.close()
        self.runner.close()

    # ---- engine thread --------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop:
                self._drain_inbox()
                if not self.scheduler.has_work():
                    self._wakeup.wait(0.5)
                    self._wakeup.clear()
                    continue
                try:
                    self._step()
                except Exception as exc:  # one bad step fails the requests in it, not the engine
                    traceback.print_exc()
                    print(f"llmpack: error: a decode step failed ({exc!r}); its requests were ended with an "
                          f"error, the engine goes on", file=sys.stderr, flush=True)
                    self._fail_all(f"internal engine error: {exc}")
        except BaseException as exc:  # noqa: BLE001 - the engine cannot go on: say so to everyone
            cause = exc.__cause__ or exc.__context__
            reason = f"{type(exc).__name__}: {exc}"
            self._die(reason + (f" (while handling {type(cause).__name__}: {cause})" if cause else ""), exc)
        else:
            self._die("the server is shutting down", None)

    def _die(self, reason: str, exc: BaseException | None) -> None:
        """The engine thread is ending. Refuse new requests, and end every known request -
        running, queued, or still in the inbox - so that no caller waits forever. Touches only
        the requests, not the scheduler, whose state may be what broke."""
        with self._pending_lock:
            self.failure = reason
        if exc is not None:
            traceback.print_exception(exc)
            print(f"llmpack: error: the engine stopped: {reason}. Every request now fails; restart llmpack. "
                  f"(Set LLMPACK_DEBUG=1 for llama.cpp's own log.)", file=sys.stderr, flush=True)
        pending = list(self._requests.values())
        while True:
            try:
                pending.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        error = None if exc is None else f"the engine stopped: {reason}"
        for req in pending:
            req.outbox.put(req.final_output(error))

    def _drain_inbox(self) -> None:
        while True:
            try:
                req = self._inbox.get_nowait()
            except queue.Empty:
                break
            self._requests[req.request_id] = req
            self.prompt_tokens_total += len(req.prompt_token_ids)
            self.scheduler.add(self._new_sequence(req, 0, list(req.prompt_token_ids)))
            with self._pending_lock:
                self._pending -= 1
        while True:
            try:
                rid = self._aborts.get_nowait()
            except queue.Empty:
                break
            req = self._requests.get(rid)
            if req is not None:
                self._abort_request(req)

    def _new_sequence(self, req: Request, index: int, tokens: list[int]) -> Sequence:
        p = req.params
        seq = Sequence(request=req, index=index, token_ids=tokens, num_prompt_tokens=len(req.prompt_token_ids),
                       sampler=SequenceSampler(p, req.seed + index, self.runner.vocab),
                       detok=Detokenizer(p.stop, p.include_stop_str_in_output))
        req.seqs.append(seq)
        return seq

    def _step(self) -> None:
        chunks = self.scheduler.schedule()
        if not chunks:
            return
        tokens: list[int] = []
        positions: list[int] = []
        seq_ids: list[int] = []
        want: list[bool] = []
        for c in chunks:
            s, n = c.seq, c.num_tokens
            tokens += s.token_ids[c.start:c.start + n]
            positions += range(c.start, c.start + n)
            seq_ids += [s.llama_seq] * n
            want += [False] * (n - 1) + [c.samples]
        try:
            self.runner.decode(tokens, positions, seq_ids, want)
        except DecodeError as exc:
            # Our accounting keeps llama.cpp from running out of cells; if it ever does,
            # recompute the newest sequence later rather than failing everyone.
            if exc.status != 1 or self.scheduler.num_running < 2:
                raise
            self.scheduler.preempt_newest()
            return
        self.steps += 1
        self.tokens_computed_total += len(tokens)
        for c in chunks:
            c.seq.num_computed_tokens += c.num_tokens
            self.bm.commit(c.seq)
        deltas: dict[Request, list[CompletionOutput]] = {}
        end = 0
        for c in chunks:
            end += c.num_tokens
            if c.samples:
                row = self.runner.logits_row(end - 1)
                self._sample_and_append(c.seq, row, deltas)
        for req, outs in deltas.items():
            self._emit(req, outs)
        for c in chunks:
            if not c.samples and c.seq.request.prompt_progress and c.seq.index == 0 \
                    and c.seq.num_output_tokens == 0 and c.seq.request not in deltas:
                self._emit(c.seq.request, [])   # prefill progress: no new text yet

    def _sample_and_append(self, seq: Sequence, row, deltas: dict[Request, list[CompletionOutput]]) -> None:
        req, p = seq.request, seq.request.params
        lp_row = row.copy() if p.logprobs is not None else None
        if seq.sampler.has_penalties:
            seq.sampler.apply_penalties(row, seq.token_ids, seq.output_token_ids)
        token = seq.sampler.sample(row, self._remaining(seq))
        fork_now = p.n > 1 and not req.forked
        self._append(seq, token, lp_row, deltas)
        if fork_now:
            req.forked = True
            for j in range(1, p.n):
                child = self._new_sequence(req, j, list(req.prompt_token_ids))
                child_token = child.sampler.sample(row, self._remaining(child))
                self.scheduler.fork(seq, child)
                self._append(child, child_token, lp_row, deltas)

    def _remaining(self, seq: Sequence) -> int:
        """How many tokens seq may still generate, the next one included."""
        room = self.max_model_len - seq.num_tokens
        max_tokens = seq.request.params.max_tokens
        return room if max_tokens is None else min(room, max_tokens - seq.num_output_tokens)

    def _append(self, seq: Sequence, token: int, lp_row, deltas: dict[Request, list[CompletionOutput]]) -> None:
        req, p = seq.request, seq.request.params
        seq.token_ids.append(token)
        self.generation_tokens_total += 1
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
        out = CompletionOutput(index=seq.index, token_ids=[token])
        if lp_row is not None:
            out.logprobs = [compute_logprobs(lp_row, token, p.logprobs, self._piece_text)]
        if (not p.ignore_eos and self.runner.is_eog(token)) or token in p.stop_token_ids:
            out.text = seq.detok.flush()
            self._finish(seq, out, "stop", token)
        else:
            out.text = seq.detok.add(self._piece(token))
            if seq.detok.stopped_by is not None:
                self._finish(seq, out, "stop", seq.detok.stopped_by)
            elif (p.max_tokens is not None and seq.num_output_tokens >= p.max_tokens) \
                    or seq.num_tokens >= self.max_model_len:
                out.text += seq.detok.flush()
                self._finish(seq, out, "length", None)
        deltas.setdefault(req, []).append(out)

    def _finish(self, seq: Sequence, out: CompletionOutput, reason: str, stop_reason) -> None:
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        out.finish_reason, out.stop_reason = reason, stop_reason
        self.scheduler.finish(seq)
        seq.sampler.close()

    def _emit(self, req: Request, outs: list[CompletionOutput]) -> None:
        finished = req.forked or req.params.n == 1
        finished = finished and len(req.seqs) == req.params.n and all(s.is_finished for s in req.seqs)
        head = req.seqs[0]
        req.outbox.put(RequestOutput(
            request_id=req.request_id, outputs=outs, finished=finished, prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids, num_prompt_tokens=len(req.prompt_token_ids),
            num_cached_tokens=min(head.num_cached_tokens, len(req.prompt_token_ids)),
            num_generated_tokens=sum(s.num_output_tokens for s in req.seqs),
            num_processed_prompt_tokens=min(head.num_computed_tokens, len(req.prompt_token_ids)),
            time_to_first_token=None if head.first_token_time is None else head.first_token_time - req.arrival_time))
        if finished:
            self._retire(req)

    def _retire(self, req: Request) -> None:
        self._requests.pop(req.request_id, None)
        self.requests_finished_total += 1

    def _abort_request(self, req: Request, error: str | None = None) -> None:
        outs = []
        for seq in req.seqs:
            if not seq.is_finished:
                out = CompletionOutput(index=seq.index, text=seq.detok.flush())
                self._finish(seq, out, "abort", None)
                outs.append(out)
        req.outbox.put(RequestOutput(
            request_id=req.request_id, outputs=outs, finished=True, prompt=req.prompt,
            prompt_token_ids=req.prompt_token_ids, num_prompt_tokens=len(req.prompt_token_ids),
            num_generated_tokens=sum(s.num_output_tokens for s in req.seqs), error=error))
        self._retire(req)

    def _fail_all(self, message: str) -> None:
        for req in list(self._requests.values()):
            self._abort_request(req, error=message)

    # ---- tokens to text ---------------------------------------------------------------------
    def _piece(self, token: int) -> bytes:
        piece = self._piece_cache.get(token)
        if piece is None:
            piece = self._piece_cache[token] = self.runner.token_bytes(token)
        return piece

    def _piece_text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", errors="replace")
