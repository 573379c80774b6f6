"""The per-step trace: one JSON line per step with what it held and where its time went, and the
summary that names where the time outside llama_decode goes."""
from __future__ import annotations

import json

from engine_invariants import run_checked

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.step_trace import PHASES
from llmpack.runtime.engine.trace_summary import main as summary_main
from llmpack.runtime.engine.trace_summary import summarize


def test_each_step_writes_one_line_saying_what_it_did(tiny_model, tmp_path, capsys):
    path = tmp_path / "steps.jsonl"
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=256, max_num_seqs=2, gpu_layers=0, speculative="off",
                                 trace_steps=str(path)), background=False)
    try:
        params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
        a = eng.add_request([300 + i for i in range(100)], params)
        b = eng.add_request([400 + i for i in range(100)], params)
        c = eng.add_request([200 + i for i in range(30)], params)   # waits: max_num_seqs=2
        steps = run_checked(eng)
    finally:
        eng.shutdown()
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert len(lines) == steps == eng.steps
    first = lines[0]
    assert first["prefill"] == {a.request_id: 100, b.request_id: 100} and first["decode"] == {}
    assert first["waiting"] == 1 and first["running"] == 2
    assert set(first["ms"]) == set(PHASES) and first["ms"]["llama_decode"] > 0
    assert first["kv"]["used"] == 14 and first["kv"]["used"] + first["kv"]["free"] == 16   # 2 x 7 blocks
    assert lines[1]["decode"] == {a.request_id: 1, b.request_id: 1}
    # c is admitted the step after a and b finish... and its prompt read beside nothing else
    admitted = next(rec for rec in lines if c.request_id in rec["prefill"])
    assert admitted["prefill"][c.request_id] == 30
    assert sum(rec["decode"].get(c.request_id, 0) for rec in lines) == 19
    assert [rec["step"] for rec in lines] == list(range(1, steps + 1))

    summary = summarize(path.read_text().splitlines())
    assert summary.steps == steps and summary.prefill_tokens == 230 and summary.decode_rows == 3 * 19
    assert summary.wall_ms + 1.0 >= sum(summary.phase_ms.values())   # phases are parts of the wall time
    assert summary_main([str(path)]) == 0
    text = capsys.readouterr().out
    assert "outside llama_decode" in text and "between steps" in text and "schedule" in text


def test_the_summary_tool_says_what_is_wrong_with_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert summary_main([str(bad)]) == 2
    assert "cannot read the step trace" in capsys.readouterr().err


def test_llmpack_bench_summarises_only_the_steps_its_run_added(tmp_path):
    """`llmpack bench URL --trace FILE` reads the server's trace from where it stood when a run
    began, so each workload's summary covers that workload's steps alone."""
    from llmpack.bench.report import trace_since

    def line(step: int, rows: int, prefill: int) -> str:
        return json.dumps({"step": step, "t": step * 0.1, "decode": {"r": rows} if rows else {},
                           "prefill": {"r": prefill} if prefill else {},
                           "ms": dict.fromkeys(PHASES, 1.0), "kv": {"used": step, "free": 0, "cached": 0},
                           "preempted": 0, "running": 1, "waiting": 0}) + "\n"

    path = tmp_path / "steps.jsonl"
    path.write_text(line(1, 0, 500) + line(2, 1, 0))
    start = path.stat().st_size
    with path.open("a") as f:
        f.write(line(3, 4, 0) + line(4, 4, 100))
    s = trace_since(path, start)
    assert (s.steps, s.decode_rows, s.prefill_tokens, s.mixed_steps, s.peak_kv_used) == (2, 8, 100, 1, 4)
    assert s.phase_ms["llama_decode"] == 2.0


def test_llmpack_run_writes_the_trace_and_health_shows_speculative(tiny_chat_model, tmp_path):
    import requests
    from server_fixtures import live_server

    path = tmp_path / "serve-steps.jsonl"
    with live_server(tiny_chat_model, "--trace-steps", str(path), "--speculative", "ngram") as srv:
        health = requests.get(srv.url + "/health", timeout=10).json()
        assert health["speculative"] == {"mode": "ngram", "draft_tokens": 0, "accepted_tokens": 0}
        r = srv.post("/v1/completions", {"prompt": "the cat sat on the mat", "max_tokens": 6, "temperature": 0})
        assert r.status_code == 200
    lines = [json.loads(raw) for raw in path.read_text().splitlines()]
    assert lines and sum(sum(rec["decode"].values()) for rec in lines) >= 5
    assert any(rec["prefill"] for rec in lines)


def test_a_trace_file_that_cannot_be_written_is_one_clear_line(capsys):
    import pytest

    from llmpack.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "model.gguf", "--trace-steps", "/no/such/folder/steps.jsonl"])
    err = capsys.readouterr().err
    assert "cannot write to /no/such/folder/steps.jsonl" in err and "folder that exists" in err
