"""M-RoPE models (the Qwen2-VL family) through the engine, with the test-made Qwen2-VL model
(tests/vision_ggufs.py): an image's rows sit on a grid of positions at one temporal position
and advance the sequence's position by max(nx, ny), not by their number, and everything the
engine does by token index (block tables, prefix cache, forks, drafts, preemption) must hand
llama.cpp those positions. The reference for "positions right" is llama.cpp's own
mtmd_helper_eval_chunks on a fresh context."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_invariants import check_consistency, run_checked
from helpers.sampling import greedy
from mtmd_reference import mtmd_reference as reference
from picture_files import png
from test_engine import assert_same_or_near_tie
from vision_ggufs import write_tiny_mmproj, write_tiny_qwen2vl_mmproj, write_tiny_qwen2vl_model

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.media import MultimodalPrompt
from llmpack.runtime.llm import collect

W, H = 64, 48                  # 8 x 6 rows of 8 x 8 pixels: 48 rows, 8 positions
ROWS, N_POS = 48, 8


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("qwen2vl")
    return write_tiny_qwen2vl_model(folder / "tiny-qwen2vl.gguf"), write_tiny_qwen2vl_mmproj(folder / "mmproj.gguf")


def make_engine(files: tuple[Path, Path], **kw) -> LLMEngine:
    model, mmproj = files
    background = kw.pop("background", True)
    cfg = dict(n_ctx=1024, max_num_seqs=16, n_threads=2, gpu_layers=0, mmproj_path=str(mmproj), speculative="off")
    return LLMEngine(EngineConfig(str(model), **(cfg | kw)), background=background)


@pytest.fixture(scope="module")
def vlm(files) -> LLMEngine:
    eng = make_engine(files)
    yield eng
    eng.shutdown()


@pytest.fixture(autouse=True)
def consistent(request):
    yield
    if "vlm" in request.fixturenames:
        eng = request.getfixturevalue("vlm")
        eng.wait_idle()
        check_consistency(eng)
        assert eng.stats().kv_blocks_used == 0


def prompt(eng: LLMEngine, *parts) -> MultimodalPrompt:
    return eng.mm.projector.prompt(list(parts), eng.bos_prefix)


def ask(eng: LLMEngine, *parts, **kw):
    return collect(eng.add_request(prompt(eng, *parts), greedy(**kw)))


def mtmd_reference(eng: LLMEngine, mmproj: Path, text: str, image: bytes, n: int) -> tuple[list[int], list[int], np.ndarray]:
    """What llama.cpp itself makes of `text` (with one image marker) and `image`: its prompt's text
    tokens, its greedy continuation of n tokens and the log-probabilities of the first, through
    mtmd_tokenize and mtmd_helper_eval_chunks on a context of its own (same weights), one
    sequence, nothing of llmpack's in between."""
    return reference(eng, mmproj, text, image, n, marker="<image>", n_ctx=512, mrope=True)


@pytest.mark.parametrize("version", ["2", "2.5", "mlp"])
def test_the_engine_places_image_rows_as_llama_cpps_own_mtmd_helper_does(vlm: LLMEngine, files, version: str,
                                                                         tmp_path: Path) -> None:
    """Same prompt and picture: llmpack's engine and llama.cpp's mtmd_helper_eval_chunks reach the
    same next-token distribution and greedy text, for a Qwen2-VL and a Qwen2.5-VL projector. With
    token indices for positions the text after the image would sit 40 positions further on (48
    rows, 8 positions), and with the rows on a line instead of a grid the image itself would read
    differently: either moves the distribution by far more than the tolerance (checked)."""
    if version != "2":   # mlp: a LLaVA-style projector on the M-RoPE model: one row of n positions
        mmproj = (write_tiny_mmproj(tmp_path / "mmproj-mlp.gguf", n_embd_text=64) if version == "mlp" else
                  write_tiny_qwen2vl_mmproj(tmp_path / "mmproj-qwen25vl.gguf", version="2.5"))
        eng = make_engine((files[0], mmproj))
        try:
            return check_against_mtmd(eng, mmproj)
        finally:
            eng.shutdown()
    check_against_mtmd(vlm, files[1])


def check_against_mtmd(vlm: LLMEngine, mmproj: Path) -> None:
    image = png(W, H, seed=7)
    mm = prompt(vlm, "describe ", image, " it is the")
    grid = [img.grid for img in mm.spans]
    assert grid == [(16, 1)] if "mlp" in str(mmproj) else grid == [(8, 6)] and mm.spans[0].n_pos == N_POS
    ref_text, ref_tokens, ref_first = mtmd_reference(vlm, mmproj, "describe <image> it is the", image, 12)
    img = mm.spans[0]
    assert mm.token_ids[:img.start] + mm.token_ids[img.end:] == ref_text   # the same prompt
    out = collect(vlm.add_request(mm, greedy(12, logprobs=5))).outputs[0]
    first = out.logprobs[0]
    assert first.token_id == ref_tokens[0]
    gaps = [abs(lp - ref_first[tok]) for tok, _, lp in first.top]
    assert max(gaps) < 1e-3, f"first-token log-probabilities differ from llama.cpp's own by {max(gaps):.3f}"

    class Ref:   # the reference in the shape assert_same_or_near_tie reads
        token_ids, logprobs = ref_tokens, out.logprobs
    assert_same_or_near_tie([Ref], [out])
    assert out.token_ids[:4] == ref_tokens[:4]


def test_image_rows_count_as_prompt_tokens_and_text_continues_after_n_pos(vlm: LLMEngine) -> None:
    text_only = collect(vlm.add_request(vlm.tokenize_prompt("what is in the picture ? the answer is"), greedy()))
    mm = prompt(vlm, "what is in the picture ", png(W, H, seed=11), "? the answer is")
    img = mm.spans[0]
    assert mm.position(img.start) == mm.position(img.end - 1) == img.start
    assert mm.position(img.end) == img.start + N_POS
    with_image = collect(vlm.add_request(mm, greedy()))
    # mtmd wraps the rows in <|vision_start|> / <|vision_end|> text, which this vocabulary spells in pieces
    assert with_image.num_prompt_tokens >= text_only.num_prompt_tokens + ROWS
    assert with_image.num_prompt_tokens == len(mm.token_ids)
    assert len(with_image.outputs[0].token_ids) == 12


def test_two_pictures_give_different_greedy_continuations(vlm: LLMEngine) -> None:
    a = ask(vlm, "describe ", png(W, H, seed=1), " it is", max_tokens=16).outputs[0].token_ids
    b = ask(vlm, "describe ", png(W, H, seed=2), " it is", max_tokens=16).outputs[0].token_ids
    again = ask(vlm, "describe ", png(W, H, seed=1), " it is", max_tokens=16).outputs[0].token_ids
    assert a != b, "the image rows did not reach the model"
    assert a == again


def test_the_same_picture_next_turn_hits_the_cache_and_is_not_encoded_again(vlm: LLMEngine) -> None:
    turn1 = ["a long conversation about the weather and the sea " * 3, png(W, H, seed=21), " what is it ?"]
    encodes = vlm.mm.projector.encodes
    first = ask(vlm, *turn1, logprobs=5)
    assert vlm.mm.projector.encodes == encodes + 1
    turn2 = turn1 + [" and what colour ?"]
    second = ask(vlm, *turn2, logprobs=5)
    assert vlm.mm.projector.encodes == encodes + 1, "the picture was encoded again"
    img = prompt(vlm, *turn1).spans[0]
    # the hit covers the whole image: blocks after it carry its cells at their positions
    assert second.num_cached_tokens >= img.end
    assert first.num_cached_tokens <= img.start
    # and what it read from the cache is what it would have computed: a fresh engine, no cache
    fresh = make_engine(vlm_files(vlm), enable_prefix_cache=False)
    try:
        uncached = collect(fresh.add_request(prompt(fresh, *turn2), greedy(logprobs=5)))
    finally:
        fresh.shutdown()
    assert_same_or_near_tie([uncached.outputs[0]], [second.outputs[0]])


def vlm_files(eng: LLMEngine) -> tuple[Path, Path]:
    return Path(eng.config.model_path), Path(eng.config.mmproj_path)


def test_a_cache_hit_never_ends_inside_an_m_rope_image(vlm: LLMEngine) -> None:
    """The same text and picture, then different words: the blocks that match end inside the
    image (its last block holds the different words). All of the image's cells sit at one position
    and belong to that last block, so the hit is cut back to before the image, which is decoded
    again, whole - and the answer is the one computed without any cache."""
    bs = vlm.config.block_size

    def matching(text: str) -> tuple[MultimodalPrompt, int]:   # a prompt, and the tokens a hit could cover
        a, b = (prompt(vlm, text, png(W, H, seed=23), end) for end in (" ok", " no"))
        common = next(i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y)
        return a, common // bs * bs

    # mtmd writes <|vision_end|> after the rows: find a text length that puts the first differing
    # token in the image's last block
    text, mm, inside = next((t, *matching(t)) for t in ("word " * n for n in range(1, bs + 1))
                            if (lambda m, k: m.spans[0].start < k < m.spans[0].end)(*matching(t)))
    img = mm.spans[0]
    assert mm.resumable(inside) == img.start and mm.resumable(img.start) == img.start
    ask(vlm, text, png(W, H, seed=23), " ok")
    again = ask(vlm, text, png(W, H, seed=23), " no", logprobs=5)
    assert again.num_cached_tokens == img.start // bs * bs
    fresh = make_engine(vlm_files(vlm), enable_prefix_cache=False)
    try:
        uncached = collect(fresh.add_request(prompt(fresh, text, png(W, H, seed=23), " no"), greedy(logprobs=5)))
    finally:
        fresh.shutdown()
    assert_same_or_near_tie([uncached.outputs[0]], [again.outputs[0]])


def test_an_image_stream_among_eight_text_streams_leaves_their_text_unchanged(vlm: LLMEngine, files) -> None:
    """The image stream and 8 text streams in one engine stepped here, the engine's bookkeeping
    checked against llama.cpp's memory after every step; each stream's greedy text is what it is
    alone (up to llama.cpp's batch near-ties)."""
    texts = [f"the {w} of the world is" for w in ("water", "time", "people", "number", "word", "way", "day", "part")]
    params = greedy(24, logprobs=5)
    alone = [collect(vlm.add_request(vlm.tokenize_prompt(t), params)).outputs[0] for t in texts]
    image_alone = collect(vlm.add_request(prompt(vlm, "tell me ", png(W, H, seed=31), " now"), params)).outputs[0]
    eng = make_engine(files, background=False)
    try:
        streams = [eng.add_request(prompt(eng, "tell me ", png(W, H, seed=31), " now"), params)] + \
            [eng.add_request(eng.tokenize_prompt(t), params) for t in texts]
        run_checked(eng)
        together = [collect(s).outputs[0] for s in streams]
    finally:
        eng.shutdown()
    assert_same_or_near_tie(alone, together[1:])
    assert_same_or_near_tie([image_alone], together[:1])


def test_forks_drafts_and_preemption_keep_positions(vlm: LLMEngine, files) -> None:
    """n > 1 samples fork the prompt (seq_cp up to the position after the image), n-gram drafts
    are rejected by position (seq_rm), and a cache too small for every stream preempts and
    recomputes them (from their own cached blocks, at their positions) - each checked against
    llama.cpp's memory after every step, and the recomputed streams' text against each alone."""
    crowd_parts = [(f"{w} ", png(W, H, seed=50 + i), " is") for i, w in enumerate(("one", "two", "three"))]
    want = [ask(vlm, *p, max_tokens=30, logprobs=5).outputs[0] for p in crowd_parts]
    eng = make_engine(files, n_ctx=256, max_num_seqs=8, speculative="ngram", background=False)
    try:
        mm = prompt(eng, "say it again and again: ", png(W, H, seed=41), " again and again and again and")
        forked = eng.add_request(mm, SamplingParams(temperature=0.8, max_tokens=20, n=3, seed=5, ignore_eos=True))
        drafted = eng.add_request(prompt(eng, "say ", png(W, H, seed=41), " again and again and again and"),
                                  greedy(40))
        crowd = [eng.add_request(prompt(eng, *p), greedy(30, logprobs=5)) for p in crowd_parts]
        run_checked(eng)
        assert len(collect(forked).outputs) == 3
        assert eng.stats().spec_draft_tokens_total > 0, "nothing was drafted: the draft path went untested"
        assert eng.stats().num_preemptions > 0, "nothing was preempted: the recompute path went untested"
        assert len(collect(drafted).outputs[0].token_ids) == 40
        assert_same_or_near_tie(want, [collect(s).outputs[0] for s in crowd])
        assert eng.stats().kv_blocks_used == 0
    finally:
        eng.shutdown()


def test_n_samples_fork_the_image_prompt_at_its_positions(vlm: LLMEngine, files) -> None:
    """n = 3 greedy samples: the first reads the prompt, the others fork from it (seq_cp of every
    cell up to the position after the prompt, image included: checked against llama.cpp's memory
    after every step); all three continue as one alone."""
    parts = ("count: ", png(W, H, seed=81), " one two three")
    alone = ask(vlm, *parts, max_tokens=16, logprobs=5).outputs[0]
    eng = make_engine(files, background=False)
    try:
        stream = eng.add_request(prompt(eng, *parts), greedy(16, n=3, logprobs=5))
        run_checked(eng)
        samples = collect(stream).outputs
    finally:
        eng.shutdown()
    assert len(samples) == 3
    assert_same_or_near_tie([alone] * 3, samples)


def test_greedy_text_after_an_image_is_the_same_with_drafts_on_and_off(vlm: LLMEngine, files) -> None:
    """Drafts after an M-RoPE image sit at positions, not token indices: rejected ones are removed
    by position (else their cells stay and llama.cpp refuses the next step), accepted ones leave
    the text exactly as without drafting."""
    words = " the cat sat on the mat and the dog sat on the log" * 4
    parts = [("look ", png(W, H, seed=61), words), ("see ", png(W, H, seed=62), words + " again")]
    want = [ask(vlm, *p, max_tokens=48).outputs[0].token_ids for p in parts]
    on = make_engine(files, speculative="ngram")
    try:
        got = [ask(on, *p, max_tokens=48).outputs[0].token_ids for p in parts]
        assert on.stats().spec_draft_tokens_total > 0
        assert got == want
        on.wait_idle()
        check_consistency(on)
    finally:
        on.shutdown()



def test_over_http_a_qwen2vl_model_counts_the_image_and_caches_it_for_the_next_turn(tmp_path: Path) -> None:
    """`llmpack run` with the M-RoPE pair: OpenAI image_url parts count their rows in usage, and
    the second turn of the chat reads the picture from the prefix cache, encoded once."""
    import base64

    from ggufs import CHATML_TEMPLATE
    from server_fixtures import live_server

    model = write_tiny_qwen2vl_model(tmp_path / "tiny-qwen2vl-chat.gguf", chat_template=CHATML_TEMPLATE)
    mmproj = write_tiny_qwen2vl_mmproj(tmp_path / "mmproj.gguf")
    url = "data:image/png;base64," + base64.b64encode(png(W, H, seed=71)).decode()
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "what is it ?"},
                                          {"type": "image_url", "image_url": {"url": url}}]}]
    with live_server(model, "--mmproj", str(mmproj), "--ctx", "512") as srv:
        def chat(messages):
            return srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 8, "temperature": 0}).json()

        plain = chat([{"role": "user", "content": "what is it ?"}])
        first = chat(turn1)
        assert first["usage"]["prompt_tokens"] >= plain["usage"]["prompt_tokens"] + ROWS
        turn2 = turn1 + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "and the colour ?"}]
        second = chat(turn2)
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 16
        assert srv.engine.mm.projector.encodes == 1
        srv.engine.wait_idle()
        check_consistency(srv.engine)
