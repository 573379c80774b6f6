"""The engine, in nano-vllm's / vLLM v1's shape: `step()` = schedule, run, process.

- the Scheduler decides admissions, preemptions and finishes (stops included);
- plan_batch lays the scheduled chunks out as one BatchPlan, and the ModelRunner runs llama_decode on it;
- the OutputProcessor samples, detokenizes and emits each request's deltas.

`LLMEngine` runs `step()` on its own thread (or, with background=False, leaves calling it to
its owner: tests drive it that way). `add_request`, `abort`, `tokenize` and `check_grammar`
may be called from any thread (HTTP handlers); they only touch thread-safe queues and the
grammar cache's lock. Everything else - scheduler, block manager, llama.cpp's memory - is owned
by the thread that steps, so there are no locks on the hot path.

A step that fails fails only its own sequences: a transient llama_decode refusal (no KV cells,
aborted) preempts them to be retried once; anything else ends their requests with an error.
Queued and other running requests go on.
"""
from __future__ import annotations

import queue
import random
import sys
import threading
import time
import traceback
import uuid
from typing import Callable

import numpy as np

from llmpack.runtime.engine.batch_planner import plan_batch
from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.embeddings import Embedder
from llmpack.runtime.engine.latency import GAP_BUCKETS, STEP_BUCKETS, Histogram
from llmpack.runtime.engine.model_runner import DecodeError, ModelRunner
from llmpack.runtime.engine.multimodal import MultimodalPrompt, check_media_fit, load_multimodal, media_prompt
from llmpack.runtime.engine.output_processor import OutputProcessor
from llmpack.runtime.engine.parsed_grammars import ParsedGrammars
from llmpack.runtime.engine.outputs import EngineStats, RequestOutput
from llmpack.runtime.engine.request import EngineDeadError, PromptTooLongError, QueueFullError, RequestStream
from llmpack.runtime.engine.sampler import SequenceSampler
from llmpack.runtime.engine.sampling_params import InvalidParameterError, SamplingParams
from llmpack.runtime.engine.scheduler import Scheduler, SchedulerOutput
from llmpack.runtime.engine.sequence import Request, Sequence
from llmpack.runtime.engine.speculative import NgramDrafter
from llmpack.runtime.engine.step_sizer import StepSizer
from llmpack.runtime.engine.step_trace import StepTrace
from llmpack.runtime.hardware.placement import backend_report, plan_offload
from llmpack.runtime.hardware.rpc_client import RpcWorkerLost, on_worker_lost
from llmpack.runtime.model.model_info import ModelInfo

__all__ = ["EngineConfig", "EngineStats", "LLMEngine", "EngineDeadError", "PromptTooLongError", "QueueFullError",
           "Request", "RequestStream"]

TRANSIENT_DECODE_STATUS = (1, 2)   # llama_decode: 1 = no KV cells for the batch, 2 = aborted


class LLMEngine:
    def __init__(self, config: EngineConfig, progress: Callable[[float], bool | None] | None = None,
                 info: ModelInfo | None = None, background: bool = True) -> None:
        """`info`: the model's header, when the caller has read it (`--gpu-layers auto` needs it).
        `background`: step on the engine's own thread; False: the caller calls `step()`."""
        self.config = config
        plan = plan_offload(config.gpu_layers, config.model_path, config.n_ctx, config.device, info,
                            offset=config.model_offset, length=config.model_length,
                            memory_fraction=config.gpu_memory_utilization, rpc=config.rpc)
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
        self._wakeup = threading.Event()
        self.mm = load_multimodal(config, self.runner, self._wakeup.set)   # the projector's side, or None
        self.scheduler = Scheduler(self.bm, config.max_num_seqs, self.runner.n_batch, self.runner.n_ubatch,
                                   self.runner.is_eog, self.max_model_len, self.mm,
                                   target_s=config.target_gap_ms / 1e3, sizer=StepSizer())
        self.drafter = NgramDrafter(config.speculative, max(0, self.runner.n_outputs_max - config.max_num_seqs))
        if config.speculative != "off":
            self.scheduler.drafter = self.drafter
        self.output = OutputProcessor(self.runner, self.scheduler, self._new_sequence, self._retire, self.drafter)
        self.trace = StepTrace(config.trace_steps)
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._aborts: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._pending = 0                      # requests in the inbox, not yet seen by the stepping thread
        self._pending_lock = threading.Lock()
        self.grammars = ParsedGrammars(self.runner.vocab)
        self._requests: dict[str, Request] = {}
        self._stop = False
        self.failure: str | None = None        # why the engine thread stopped, once it has
        self.embedder: Embedder | None = None  # /v1/embeddings' context, made on first use
        self._embedder_lock = threading.Lock()
        self.prompt_tokens_total = 0
        self.requests_finished_total = 0
        self.failed_steps_total = 0
        self.steps = 0
        self.tokens_computed_total = 0         # prompt and generated tokens run through llama_decode
        self.step_seconds = Histogram(STEP_BUCKETS)        # each step, scheduling to outputs
        self.token_gap_seconds = Histogram(GAP_BUCKETS)    # between a sequence's consecutive tokens
        # a dead RPC worker leaves llama_decode blocked for good: end every request saying which
        self._forget_rpc = (on_worker_lost(lambda why: self._die(why, RpcWorkerLost(why))) if plan.remote
                            else lambda: None)
        # called on the stepping thread after every step (tests check invariants with it)
        self.on_step: Callable[[LLMEngine], None] | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="llmpack-engine", daemon=True)
            self._thread.start()

    # ---- public, thread-safe --------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.runner.tokenize(text, add_special, parse_special)

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return self.runner.token_bytes(token, special)

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

    # ---- pictures and sound: the projector is a member (self.mm, multimodal.py) ---------------
    @property
    def media_kinds(self) -> frozenset[str]:
        return self.mm.projector.kinds if self.mm is not None else frozenset()

    @property
    def audio_sample_rate(self) -> int:
        return self.mm.projector.sample_rate if self.mm is not None else 0

    def media_prompt(self, parts: list) -> MultimodalPrompt:
        return media_prompt(self.mm, parts, self.bos_prefix)

    def check_grammar(self, gbnf: str) -> None:
        """Have llama.cpp parse a GBNF grammar now (raises GrammarError when it refuses it). The
        parse is kept for the add_request that follows with that grammar: one parse per request."""
        self.grammars.check(gbnf)

    def add_request(self, prompt: str | list[int] | MultimodalPrompt, params: SamplingParams | None = None,
                    request_id: str | None = None, prompt_progress: bool = False,
                    cache_salt: str | None = None) -> RequestStream:
        """Queue a request. `prompt_progress`: the stream also gets an output with no `outputs`
        after each step that advanced the prompt's prefill without finishing it (a long prompt
        is read over several steps). `cache_salt`: requests with different salts never share
        prefix-cache blocks (one user's cached prompt cannot be probed by another's timing)."""
        params = params or SamplingParams()   # checked when it was made (sampling_params.py): trusted here
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise InvalidParameterError("cache_salt", "must be a string")
        mm = prompt if isinstance(prompt, MultimodalPrompt) else None   # a prompt with pictures or sound
        ids = check_media_fit(mm, self.runner.n_ubatch) if mm is not None else \
            self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise InvalidParameterError("prompt", "is empty")
        if len(ids) + 1 > self.max_model_len:
            raise PromptTooLongError(len(ids), self.max_model_len)
        # parsed here, on the caller's thread: on the engine thread a bad grammar would be fatal
        seed = params.seed if params.seed is not None else random.getrandbits(31)
        req = Request(request_id or uuid.uuid4().hex, prompt if isinstance(prompt, str) else None, ids, params, seed,
                      prompt_progress=prompt_progress, cache_salt=cache_salt, mm=mm)
        if params.grammar is not None:   # parsed here: on the engine thread a bad grammar would be fatal
            req.grammar_parses = self.grammars.take(params.grammar, params.n)
        with self._pending_lock:
            refused = None
            if self.failure is not None:
                refused = EngineDeadError(f"the engine has stopped ({self.failure}); restart the server")
            elif self._pending + self.scheduler.num_waiting >= self.config.max_waiting:
                refused = QueueFullError(f"{self.config.max_waiting} requests are already waiting; try again shortly")
            else:
                self._pending += 1
                self._inbox.put(req)
        if refused is not None:
            self.grammars.free(req.grammar_parses)
            raise refused
        self._wakeup.set()
        return RequestStream(self, req)

    def abort(self, request_id: str) -> None:
        self._aborts.put(request_id)
        self._wakeup.set()

    def stats(self) -> EngineStats:
        bm, sched, drafter = self.bm, self.scheduler, self.drafter
        return EngineStats(
            num_running=sched.num_running, num_waiting=sched.num_waiting + self._pending,
            kv_blocks_used=bm.num_used_blocks, kv_blocks_total=bm.num_blocks, prefix_cache_queries=bm.prefix_queries,
            prefix_cache_hits=bm.prefix_hits, num_preemptions=sched.num_preemptions,
            prompt_tokens_total=self.prompt_tokens_total, generation_tokens_total=self.output.generation_tokens_total,
            requests_finished_total=self.requests_finished_total, speculative=self.config.speculative,
            spec_draft_tokens_total=drafter.drafted_total, spec_accepted_tokens_total=drafter.accepted_total,
            failed_steps_total=self.failed_steps_total, step_seconds=self.step_seconds.snapshot(),
            token_gap_seconds=self.token_gap_seconds.snapshot(), target_gap_s=sched.target_s or 0.0,
            prompt_tok_s=sched.sizer.measured_tok_s)

    def is_alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

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
        if self._thread is not None:
            self._thread.join(timeout=30 if self.failure is None else 1)
        self._forget_rpc()
        if self._thread is not None and self._thread.is_alive():   # inside llama.cpp (a lost RPC worker)
            return
        if self.embedder is not None:   # its context uses the engine's model: free it first
            self.embedder.close()
        self.mm and self.mm.close()     # so does the projector
        self.trace.close()
        self.grammars.close()
        self.runner.close()

    # ---- one step ---------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Take in new requests and aborts, then run one step: schedule, build and decode the
        batch, sample and emit. Returns the outputs emitted (also put in each request's stream).
        Only the thread that owns the engine may call it (its own, unless background=False)."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            raise RuntimeError("this engine steps on its own thread; create it with background=False to step it")
        self._drain_inbox()
        outputs = self._step()
        self.output.flush()
        if self.on_step is not None:
            self.on_step(self)
        return outputs

    def _step(self) -> list[RequestOutput]:
        trace = self.trace
        trace.start()
        out = self.scheduler.schedule()
        if not out.chunks:
            self.output.flush()
            self.mm and self._thread and self._wakeup.wait(0.5)   # only images being encoded: the encoder wakes us
            return []
        trace.lap("schedule")
        try:     # picture and sound rows first; a failure there (undone by decode_media) fails only this step
            starts = self.mm.decode_media(out.chunks) if self.mm is not None else None
        except Exception as exc:  # noqa: BLE001
            return self._step_failed(out, exc)
        plan = plan_batch(out.chunks, starts)
        trace.lap("build")
        self.output.flush()               # the last step's outputs: their threads wake during the decode
        trace.lap("emit")
        try:
            if plan.tokens:
                self.runner.decode(plan)
        except Exception as exc:  # noqa: BLE001 - a failed step fails its own sequences, not the engine
            if starts is not None:   # this step's image rows are in llama.cpp: take them out again
                self.mm.undo_media(out.chunks, starts)
            return self._step_failed(out, exc)
        trace.lap("llama_decode")
        self.steps += 1
        self.tokens_computed_total += sum(c.num_tokens for c in out.chunks)
        try:
            outputs = self.output.process(out.chunks, plan)
        except Exception as exc:  # noqa: BLE001
            return self._step_failed(out, exc)
        trace.lap("emit")
        trace.move(self.output.sample_s, "emit", "sample")
        step_ms = sum(trace.ms.values())
        if not any(c.is_prefill for c in out.chunks):   # a decode-only step: what drafting is judged on
            self.drafter.observe_step(plan.n_outputs, any(c.draft for c in out.chunks), step_ms)
        self._observe_timing(out, step_ms / 1e3)
        trace.write(self.steps, out, self)
        return outputs

    def _observe_timing(self, out: SchedulerOutput, seconds: float) -> None:
        """What the step cost teaches the scheduler (step_sizer.py), and the histograms /metrics shows."""
        decode_rows = sum(not c.is_prefill for c in out.chunks)
        extra = sum(c.num_tokens for c in out.chunks if c.is_prefill) + sum(len(c.draft) for c in out.chunks)
        self.scheduler.sizer.observe(decode_rows, extra, seconds)
        self.step_seconds.observe(seconds)
        now = time.perf_counter()
        for c in out.chunks:
            if c.samples:
                seq = c.seq
                if seq.last_token_time is not None:
                    self.token_gap_seconds.observe(now - seq.last_token_time)
                seq.last_token_time = now

    def _step_failed(self, out: SchedulerOutput, exc: Exception) -> list[RequestOutput]:
        """End the step's requests with an error, or - for a transient refusal, once per
        sequence - preempt them to be recomputed. Nothing else is touched."""
        self.failed_steps_total += 1
        transient = isinstance(exc, DecodeError) and exc.status in TRANSIENT_DECODE_STATUS
        traceback.print_exception(exc)
        outputs: list[RequestOutput] = []
        failed: list[str] = []
        for c in reversed(out.chunks):     # preempted ones queue first, in their old order
            seq = c.seq
            if seq.is_finished:
                continue
            seq.num_failed_steps += 1
            if transient and seq.num_failed_steps == 1:
                self.scheduler.preempt(seq)
            elif seq.request.request_id in self._requests:
                failed.append(seq.request.request_id)
                outputs.append(self._abort_request(seq.request, error=f"internal engine error: {exc}"))
        print(f"llmpack: error: a decode step failed ({exc!r}); "
              + (f"{len(failed)} of its requests were ended with an error" if failed else "its requests will be retried")
              + "; the other requests go on", file=sys.stderr, flush=True)
        self.trace.write(self.steps, out, self, failed=failed or None)
        return outputs

    # ---- the engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop:
                self._drain_inbox()
                if not self.scheduler.has_work():
                    self.output.flush()
                    self._wakeup.wait(0.5)
                    self._wakeup.clear()
                    continue
                self._step()
                if self.on_step is not None:
                    self.on_step(self)
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
        try:
            self.output.flush()           # what was emitted before the end still arrives first
        except Exception:  # noqa: BLE001 - the closing outputs below matter more
            pass
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
            seq = self._new_sequence(req, 0, list(req.prompt_token_ids))
            self.mm and self.mm.on_arrival(seq, self.bm)   # start encoding the images the prefix cache lacks
            self.scheduler.add(seq)
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
        for req, why in self.mm.failed() if self.mm is not None else ():   # images that could not be encoded
            if req.request_id in self._requests:
                self._abort_request(req, error=why)

    def _new_sequence(self, req: Request, index: int, tokens: list[int]) -> Sequence:
        p = req.params
        smpl = req.grammar_parses.pop(0) if req.grammar_parses else None
        seq = Sequence(request=req, index=index, token_ids=tokens, num_prompt_tokens=len(req.prompt_token_ids),
                       sampler=SequenceSampler(p, req.seed + index, self.runner.vocab, smpl),
                       detok=Detokenizer(p.stop, p.include_stop_str_in_output), cache_salt=req.cache_salt)
        req.seqs.append(seq)
        return seq

    def _retire(self, req: Request) -> None:
        self.grammars.free(req.grammar_parses)   # samples that never started (an abort)
        self._requests.pop(req.request_id, None)
        self.requests_finished_total += 1

    def _abort_request(self, req: Request, error: str | None = None) -> RequestOutput:
        return self.output.end_request(req, "abort", error)

    def _piece(self, token: int) -> bytes:
        return self.output.piece(token)
