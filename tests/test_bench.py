"""`llmpack bench` against real servers: `llmpack run` on a tiny model (and llama-server, when
benchmarks/peers.py has built it)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from server_fixtures import live_server

from llmpack.bench.runner import percentile
from llmpack.cli import main

SMALL = ["--concurrency", "1,3", "--num-prompts", "3", "--output-len", "5", "--input-len", "8",
         "--system-len", "20", "--long-len", "200", "--no-progress"]


def bench_json(capsys, url: str, *flags: str) -> tuple[int, dict]:
    rc = main(["bench", url, "--json", *SMALL, *flags])
    return rc, json.loads(capsys.readouterr().out)


def check_results(doc: dict, workloads: list[str]) -> None:
    runs = doc["results"]
    assert [(r["workload"], r["concurrency"]) for r in runs] == \
        [(w, c) for w in workloads for c in ([1] if w == "long" else [1, 3])]
    for r in runs:
        assert r["errors"] == 0 and r["requests"] == 3, r["first_errors"]
        assert r["output_tokens"] == 3 * 5                  # ignore_eos: every reply is exactly 5 tokens
        assert r["output_tok_s"] > 0 and r["duration_s"] > 0
        ttft, tpot, itl = r["ttft_s"], r["tpot_s"], r["itl_s"]
        assert 0 < ttft["p50"] <= ttft["p99"] <= r["e2e_s"]["p99"]
        assert 0 < tpot["p50"] <= tpot["p99"] and 0 < itl["p50"] <= itl["p99"]
    long_run = next(r for r in runs if r["workload"] == "long")
    short_run = next(r for r in runs if r["workload"] == "random")
    assert long_run["prompt_tokens_mean"] > 4 * short_run["prompt_tokens_mean"]


def test_bench_against_llmpack_run(tiny_chat_model: Path, capsys):
    with live_server(tiny_chat_model, "--api-key", "k") as srv:
        rc, doc = bench_json(capsys, srv.url, "--api-key", "k")
        assert rc == 0
        assert doc["model"] == srv.model_id
        check_results(doc, ["random", "chat", "long"])
        # the chat workload's shared system prompt is served from the prefix cache
        assert srv.engine.stats().prefix_cache_hits > 0


def test_bench_table_and_errors(tiny_chat_model: Path, capsys):
    with live_server(tiny_chat_model) as srv:
        rc = main(["bench", srv.url + "/v1", "--workload", "random", *SMALL])
        out = capsys.readouterr().out
        assert rc == 0
        header = out.splitlines()[1].split()
        assert header[:6] == ["workload", "conc", "reqs", "err", "prompt", "tok/s"]
        assert sum(1 for line in out.splitlines() if line.startswith("random ")) == 2
        # prompts longer than the context: every request is refused, and the table says so
        rc = main(["bench", srv.url, "--workload", "random", *SMALL, "--input-len", str(2 * srv.engine.n_ctx)])
        out = capsys.readouterr().out
        assert rc == 1 and "maximum context length" in out and " 3    3 " in out   # 3 requests, 3 errors


def test_bench_says_clearly_when_nothing_listens(capsys):
    rc = main(["bench", "http://127.0.0.1:9", *SMALL])
    assert rc == 2 and "cannot reach an OpenAI-compatible server" in capsys.readouterr().err


def test_percentiles_interpolate_like_numpy():
    assert percentile([1.0], 99) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 99) == 99.0


@pytest.mark.needs("llama-server")
def test_bench_against_llama_server(tiny_chat_model: Path, capsys):
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from servers import find_llama_server, start_llama_server

    proc, url = start_llama_server(find_llama_server(), tiny_chat_model, ctx=2048, parallel=4)
    try:
        rc, doc = bench_json(capsys, url)
        assert rc == 0
        check_results(doc, ["random", "chat", "long"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_peers_judges_issue_30s_targets():
    """benchmarks/peers.py's verdicts: 1.2x llama-server with TTFT no worse, 0.95x the bare loop,
    TTFT alone for the long prompt."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from peers import verdict

    from llmpack.bench.runner import Percentiles, RunStats

    def stats(tok_s: float, ttft: float) -> RunStats:
        return RunStats("random", "", 16, 16, 0, 1.0, 64, tok_s, 1.0, 16.0, Percentiles(ttft, ttft, ttft),
                        None, None, None, [])

    assert verdict("16 streams", 1.2, "no worse", stats(250, 0.5), stats(200, 0.5), 260)[1] is True
    assert verdict("16 streams", 1.2, "no worse", stats(230, 0.5), stats(200, 0.5), 240)[1] is False   # 1.15x
    assert verdict("16 streams", 1.2, "no worse", stats(250, 0.6), stats(200, 0.5), 260)[1] is False   # TTFT worse
    words, met = verdict("16 streams", 1.2, "no worse", stats(250, 0.5), stats(200, 0.5), 300)
    assert met is False and "0.83x (>= 0.95)" in words                                                 # bare loop
    assert verdict("long", None, "only", stats(10, 4.0), stats(12, 4.1), None)[1] is True
    assert verdict("1 stream", None, None, stats(70, 0.1), stats(80, 0.1), None)[1] is None


def test_the_documents_judge_counts_an_answer_only_as_a_word_of_its_own():
    """benchmarks/documents.py's `_spots`: a reply naming another command that contains the
    answer ("RenewDocumentCommand" for "NewDocumentCommand") or a longer number does not hold
    the fact; spaces, case and thousands commas aside, and answers without word edges, it does."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from documents import _spots

    assert _spots("The command `NewDocumentCommand` issues an error", "NewDocumentCommand") == [13]
    assert _spots("The command `RenewDocumentCommand` issues an error", "NewDocumentCommand") == []
    assert _spots("It was released in 2008.", "200") == [] and _spots("about 200 packages", "200") == [6]
    assert _spots("Lines of 1,200 words", "1200") == [9] and _spots("Use \\sbox instead", "\\sbox") == [4]
    assert _spots("Both --help and --version", "help") == [7]
    assert _spots("パスワードを他人に教えてはいけません", "教え") == [9]


def test_the_real_corpus_judge_does_not_count_the_answers_words_in_another_clause():
    """benchmarks/real_corpus.py's `judge`: asked who the Current Maintainer is when nobody is
    nominated, a reply that copies LPPL clause 3(b) ("... not reachable and the Copyright Holder
    agrees ...") holds the answer's words but not the fact, and its source is not judged."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from real_corpus import judge
    from real_questions import QUESTIONS

    q = next(q for q in QUESTIONS if q.question.startswith("Who is the Current Maintainer"))
    source = {"file": "lppl.pdf", "page": 5, "label": "lppl.pdf · p. 5", "reply_start": 0, "reply_end": 200}
    copied = judge(q, "The Current Maintainer is not reachable and the Copyright Holder agrees that ...", [source])
    assert copied["fact"] is False and copied["server"] is None and copied["wrong_sources"] == []
    stated = judge(q, "If nobody is nominated, it is the Copyright Holder.", [{**source, "page": 2}])
    assert stated["fact"] is True and stated["server"] == "right"


def test_a_web_page_answer_is_judged_by_the_section_that_states_it():
    """benchmarks/real_corpus.py's `judge` for `--web`: the string limit's 1,000,000,000 is also
    the SQL statement limit's, so only the string limit's section is the right place."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from real_corpus import judge
    from real_questions import WEB

    q = next(q for q in WEB if "string or BLOB" in q.question)
    reply = "The default maximum length is 1,000,000,000 bytes."
    source = {"file": "limits.html", "page": None, "section": "Maximum length of a string or BLOB",
              "label": "limits.html · § Maximum length of a string or BLOB", "reply_start": 0, "reply_end": len(reply)}
    assert judge(q, reply, [source])["server"] == "right"
    other = {**source, "section": "Maximum Length Of An SQL Statement"}
    assert judge(q, reply, [other])["server"] == "wrong"
