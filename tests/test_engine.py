"""The engine against real llama.cpp: continuous batching, paged KV, prefix cache,
preemption, n>1, stops and aborts. After every step (`on_step`, on the engine thread) and every
test (the `consistent` fixture) the block manager and llama.cpp's memory must agree."""
from __future__ import annotations

import pytest
from engine_invariants import check_consistency
from helpers.sampling import greedy

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine, PromptTooLongError
from llmpack.runtime.llm import collect
from llmpack.runtime.engine.sampling_params import SamplingParams

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes needs",
    "In 1969, the first humans",
    "A haiku about the autumn wind:",
]


def assert_same_or_near_tie(alone, together, top: int = 5, max_gap: float = 1.0) -> None:
    """Greedy outputs must match token for token, except where llama.cpp's batched
    arithmetic flips a near-tie: llama.cpp's CPU kernels are not batch-invariant, with flash
    attention on (the default) or off (measured: logits of one sequence move by up to ~0.8
    when 3 or 8 sequences share a decode step instead of 1, with or without weight repacking;
    16 prompts x 48 greedy tokens, batched vs alone: 9/16 identical with flash attention,
    5/16 without). So, like vLLM's check_logprobs_close,
    at the first differing token each side's choice must be in the other's top-5 and
    within max_gap nats of its best; after that the continuations legitimately differ.
    A batching bug (wrong logits row, attention leaking across sequences) fails this at
    once, because the chosen tokens are then unrelated to the other run's candidates."""
    assert len(alone) == len(together), f"{len(alone)} outputs alone, {len(together)} together"
    for a, t in zip(alone, together):
        # greedy(24) ignores EOS, so both sides run to max_tokens whatever they chose
        assert len(a.token_ids) == len(t.token_ids), f"{len(a.token_ids)} tokens alone, {len(t.token_ids)} together"
        for i, (x, y) in enumerate(zip(a.token_ids, t.token_ids)):
            if x == y:
                continue
            la, lt = a.logprobs[i], t.logprobs[i]
            top_a = {tok: lp for tok, _, lp in la.top[:top]}
            top_t = {tok: lp for tok, _, lp in lt.top[:top]}
            assert y in top_a and x in top_t, f"token {i}: {x} vs {y} are not near-ties ({la.top[:3]} / {lt.top[:3]})"
            assert la.logprob - top_a[y] < max_gap and lt.logprob - top_t[x] < max_gap
            break


def run_alone(engine: LLMEngine, prompt, params: SamplingParams) -> str:
    return collect(engine.add_request(prompt, params)).outputs[0].text


def run_together(engine: LLMEngine, prompts, params: SamplingParams) -> list[str]:
    streams = [engine.add_request(p, params) for p in prompts]
    return [collect(s).outputs[0].text for s in streams]


@pytest.fixture(scope="module")
def engine(demo_model):
    eng = LLMEngine(EngineConfig(model_path=str(demo_model), n_ctx=4096, max_num_seqs=32, gpu_layers=0))
    eng.on_step = check_consistency      # after every step, on the engine thread
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def small_engine(demo_model):
    """A deliberately tiny KV pool: 256 cells = 16 blocks of 16 tokens."""
    eng = LLMEngine(EngineConfig(model_path=str(demo_model), n_ctx=256, max_num_seqs=16, gpu_layers=0))
    eng.on_step = check_consistency
    yield eng
    eng.shutdown()


def assert_consistent(eng: LLMEngine) -> None:
    eng.wait_idle()
    check_consistency(eng)
    assert eng.stats().kv_blocks_used == 0, "finished requests must release every block (cached ones are free)"


@pytest.fixture(autouse=True)
def consistent(request):
    yield
    for name in ("engine", "small_engine"):
        if name in request.fixturenames:
            assert_consistent(request.getfixturevalue(name))


@pytest.mark.demo
def test_eight_concurrent_greedy_requests_match_each_run_alone(engine):
    params = greedy(24, logprobs=5)
    alone = [collect(engine.add_request(p, params)).outputs[0] for p in PROMPTS]
    steps_before = engine.steps
    streams = [engine.add_request(p, params) for p in PROMPTS]
    together = [collect(s).outputs[0] for s in streams]
    assert_same_or_near_tie(alone, together)
    # batched: 24 tokens each for 8 requests took about 24 steps, not 8 x 24
    assert engine.steps - steps_before <= 24 + 4


@pytest.mark.demo
def test_prefix_cache_hit_gives_the_same_output_and_skips_the_cached_prefill(engine):
    # longer than Gemma 3's 512-token sliding window, so the SWA layers' cells must survive too
    system = " ".join(f"Rule {i}: answer politely and precisely." for i in range(90))
    prompt = engine.tokenize(system + "\nQuestion: what is the tallest mountain?\nAnswer:")
    assert len(prompt) > 600
    miss_before = engine.tokens_computed_total
    miss = collect(engine.add_request(prompt, greedy(16, logprobs=5)))
    miss_computed = engine.tokens_computed_total - miss_before
    hit_before = engine.tokens_computed_total
    hit = collect(engine.add_request(prompt, greedy(16, logprobs=5)))
    hit_computed = engine.tokens_computed_total - hit_before
    # the hit computes only the prompt's tail, in a smaller batch than the miss's prefill, so
    # (flash attention on) its logits may differ by rounding: the same, or a near-tie flip.
    # Reusing the wrong cells would make the tokens unrelated and fail this at once.
    assert_same_or_near_tie([miss.outputs[0]], [hit.outputs[0]])
    assert miss.num_cached_tokens == 0
    assert hit.num_cached_tokens == (len(prompt) - 1) // 16 * 16
    assert hit_computed == miss_computed - hit.num_cached_tokens
    stats = engine.stats()
    assert stats.prefix_cache_hits >= hit.num_cached_tokens


@pytest.mark.demo
def test_prompt_progress_outputs_follow_each_prefill_step(engine):
    """add_request(prompt_progress=True): an output with no text after every step that read part
    of the prompt, the processed count growing to the whole prompt by the first token; without
    the flag the stream is only text, as before."""
    prompt = engine.tokenize(" ".join(f"Line {i}: the paste goes on." for i in range(160)))
    budget = engine.scheduler.prefill_chunk
    assert len(prompt) > 2 * budget
    outs = list(engine.add_request(prompt, greedy(4), prompt_progress=True))
    reading = [o for o in outs if not o.outputs and not o.finished]
    steps = -(-len(prompt) // budget)
    assert [o.num_processed_prompt_tokens for o in reading] == [budget * k for k in range(1, steps)]
    first = next(o for o in outs if o.outputs)
    assert outs.index(first) == len(reading) and first.num_processed_prompt_tokens == len(prompt)
    plain = list(engine.add_request(prompt[1:], greedy(4)))
    assert all(o.outputs for o in plain)


@pytest.mark.demo
def test_requests_that_cannot_all_fit_complete_through_preemption(small_engine):
    prompts = [f"Item {i}: a short story about the number {i} begins with" for i in range(16)]
    params = greedy(40, logprobs=5)
    alone = [collect(small_engine.add_request(p, params)).outputs[0] for p in prompts]
    preemptions_before = small_engine.stats().num_preemptions
    streams = [small_engine.add_request(p, params) for p in prompts]
    together = [collect(s).outputs[0] for s in streams]
    assert small_engine.stats().num_preemptions > preemptions_before
    assert all(len(t.token_ids) == 40 and t.finish_reason == "length" for t in together)
    assert_same_or_near_tie(alone, together)


@pytest.mark.demo
def test_n_samples_share_the_prompt_kv(engine):
    def prompt(topic: str) -> list[int]:   # fresh text each time, so the prefix cache can't help
        return engine.tokenize(f"Write three different names for a pet {topic}. Here is one idea, then another:" * 3)

    one = SamplingParams(temperature=0.9, max_tokens=8, ignore_eos=True, seed=7)
    engine.bm.peak_used_blocks = 0
    engine.bm.enable_prefix_cache = False   # 4 separate requests that share nothing, however they arrive
    try:
        run_together(engine, [prompt("goldfish")] * 4, one)
    finally:
        engine.bm.enable_prefix_cache = True
    peak_separate = engine.bm.peak_used_blocks

    engine.wait_idle()
    engine.bm.peak_used_blocks = 0
    shared = collect(engine.add_request(prompt("hamster"), SamplingParams(n=4, temperature=1.5, max_tokens=8,
                                                                         ignore_eos=True, seed=7)))
    peak_shared = engine.bm.peak_used_blocks

    assert len(shared.outputs) == 4
    assert all(len(o.token_ids) == 8 and o.finish_reason == "length" for o in shared.outputs)
    assert len({o.text for o in shared.outputs}) > 1, "samples with distinct seeds should differ"
    assert peak_shared < peak_separate
    assert shared.num_cached_tokens == 0


@pytest.mark.demo
def test_same_seed_gives_the_same_sample(engine):
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=16, seed=1234)
    assert run_alone(engine, PROMPTS[2], params) == run_alone(engine, PROMPTS[2], params)


@pytest.mark.demo
def test_stop_string_split_across_tokens_never_leaks(engine):
    prompt = engine.tokenize(PROMPTS[2])
    base = collect(engine.add_request(prompt, greedy(30)))
    pieces = [engine._piece(t).decode("utf-8", "replace") for t in base.outputs[0].token_ids]
    # a stop string made of the end of one token and the start of the next
    k = next(i for i in range(2, len(pieces) - 1) if len(pieces[i].strip()) >= 2 and len(pieces[i + 1].strip()) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    text = base.outputs[0].text
    expected = text[:text.index(stop)]
    deltas = []
    final = None
    for out in engine.add_request(prompt, greedy(30, stop=[stop])):
        deltas += [o.text for o in out.outputs]
        final = out
    assert "".join(deltas) == expected
    assert stop not in "".join(deltas)
    assert final.outputs[0].finish_reason == "stop" and final.outputs[0].stop_reason == stop


@pytest.mark.demo
def test_abort_mid_generation_frees_the_sequence(engine):
    stream = engine.add_request(engine.tokenize(PROMPTS[0]), greedy(2000))
    received = [stream.get(timeout=30) for _ in range(3)]
    assert not received[-1].finished
    stream.abort()
    last = None
    for last in stream:
        pass
    assert last.finished and last.outputs[-1].finish_reason == "abort"


@pytest.mark.demo
def test_finish_reasons_length_and_context_limit(engine):
    out = collect(engine.add_request(PROMPTS[0], greedy(5)))
    assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 5
    with pytest.raises(PromptTooLongError) as err:
        engine.add_request(list(range(10, 10 + engine.max_model_len)), greedy(5))
    assert str(engine.max_model_len) in str(err.value)


def test_multibyte_characters_split_across_byte_tokens_stream_whole(tiny_model):
    """The tiny model's vocabulary spells CJK text with byte-fallback tokens, one byte each:
    the engine's detokenizer must never hand out half a character."""
    from llmpack.runtime.engine.detokenizer import Detokenizer

    eng = LLMEngine(EngineConfig(model_path=str(tiny_model), n_ctx=256, max_num_seqs=4, gpu_layers=0))
    eng.on_step = check_consistency
    try:
        text = "日本語 and é"
        ids = eng.tokenize(text, add_special=False)
        assert len(ids) > len(text)                 # some characters span several tokens
        d = Detokenizer([])
        pieces = [eng._piece(t) for t in ids]
        deltas = [d.add(p) for p in pieces]
        assert "\ufffd" not in "".join(deltas) and "".join(deltas) + d.flush() == text
        # after each token the stream has handed out exactly the characters whose last byte has
        # arrived: none held back, none cut (a trailing partial UTF-8 sequence is what "ignore" drops)
        for n in range(1, len(pieces) + 1):
            assert "".join(deltas[:n]) == b"".join(pieces[:n]).decode("utf-8", errors="ignore"), n
        out = collect(eng.add_request(ids, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)))
        assert len(out.outputs[0].token_ids) == 12
        assert_consistent(eng)
    finally:
        eng.shutdown()


def test_a_progress_callback_that_says_stop_abandons_the_load(tiny_model):
    """Ctrl+C during a load: the server's progress() returns False and llama.cpp gives up at its
    next callback instead of loading the rest of the model (tests/test_server_lifecycle.py has the
    server's side)."""
    from llmpack.runtime.engine.model_runner import ModelLoadError

    seen: list[float] = []
    with pytest.raises(ModelLoadError):
        LLMEngine(EngineConfig(model_path=str(tiny_model), n_ctx=256, max_num_seqs=4, gpu_layers=0),
                  progress=lambda f: seen.append(f) or False)
    assert len(seen) == 1 and seen[0] < 1.0

    seen.clear()   # a progress that returns None (a plain reporter) does not stop it
    eng = LLMEngine(EngineConfig(model_path=str(tiny_model), n_ctx=256, max_num_seqs=4, gpu_layers=0),
                    progress=seen.append)
    try:
        assert seen and seen[-1] == 1.0
    finally:
        eng.shutdown()
