"""`./dev bench documents --corpus real`: the questions of benchmarks/real_questions.py on the files
of benchmarks/doc_corpus.py, through the real server and the openai client (documents.py's `ask`),
judged like the generated set: the fact in the reply, and the server's source for the sentence that
holds it right (the file and a page or line that states it), wrong, or abstained."""
from __future__ import annotations

import base64
import os
import re
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import quote

import requests

import doc_corpus
from documents import _spots, ask, mark_only, pct, percentiles
from real_questions import HELD_OUT, QUESTIONS, WEB, Question
from whole_file import FILE as WHOLE_FILE
from whole_file import run_whole

from llmpack.demo_models import demo_model_path

MEDIA = {".pdf": "application/pdf", ".txt": "text/plain", ".html": "text/html"}


def _media(name: str) -> str:
    return MEDIA[name[name.rfind("."):]]


def _spots_any(reply: str, answer: str) -> list[int]:
    return sorted(p for a in answer.split("|") for p in _spots(reply, a))


def _right(src: dict, q: Question) -> bool:
    if src["file"] != q.file:
        return False
    if q.pages:
        return src["page"] in q.pages
    if q.sections:
        return src.get("section") in q.sections
    lines = src.get("lines") or [0, 0]
    return bool(src.get("lines")) and lines[0] <= q.lines[1] and q.lines[0] <= lines[1]


def judge(q: Question, reply: str, sources: list[dict]) -> dict:
    spots = [] if q.unless and re.search(q.unless, reply, re.I) else _spots_any(reply, q.answer)
    fact_sources = [s for s in sources if any(s["reply_start"] <= p < s["reply_end"] for p in spots)]
    out = {"fact": bool(spots), "mark_only": mark_only(reply), "server": None,
           "wrong_sources": [s["label"] for s in fact_sources if not _right(s, q)]}
    if spots:
        out["server"] = ("abstained" if not fact_sources else
                         "right" if all(_right(s, q) for s in fact_sources) else "wrong")
    return out


def _todo(args) -> list[Question]:
    """The questions asked: the development set, with --held-out the questions written after
    the search rules were made, on places they were not made on (real_questions.HELD_OUT), or
    with --web the questions on saved web pages (real_questions.WEB)."""
    asked = HELD_OUT if args.held_out else WEB if args.web else QUESTIONS
    return [q for q in asked if not args.only or q.kind in args.only.split(",")]


def run_read(args) -> None:
    """Whether each question's answer is in what the model reads for it (documents/excerpts.py,
    EXCERPT_TOKENS less the note, counted in the demo model's tokens), before any model runs: a
    miss here is the search's, any other miss of `run_real` the model's."""
    import llama_cpp

    from llmpack.runtime.documents import excerpts, extract, reading
    from llmpack.runtime.documents.index import DocumentIndex

    vocab = llama_cpp.Llama(model_path=str(demo_model_path("qwen")), vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(vocab.tokenize(text.encode(), add_bos=False, special=False))
    index = DocumentIndex(Path(tempfile.mkdtemp(prefix="llmpack-bench-read-")) / "documents.sqlite3")
    todo = _todo(args)
    docs = {n: index.add(extract.extract(n, p.read_bytes()), "bench")
            for n, p in doc_corpus.files({n for q in todo for n in q.files}).items()}
    missed = []
    for i, q in enumerate(todo, 1):
        read = excerpts.read(index, [docs[n] for n in q.files], q.question,
                             reading.EXCERPT_TOKENS - reading.NOTE_TOKENS, count)
        text = "\n".join(r.body() for r in read)
        if not _spots_any(text, q.answer):
            missed.append(q)
            print(f"[{i}/{len(todo)}] {q.kind:10s} not read: {q.question[:80]!r}")
    print(f"\nanswer in what the model reads: {pct(len(todo) - len(missed), len(todo))} "
          f"({len(missed)} missed by the search)")


def run_real(args) -> None:
    os.environ["LLMPACK_DATA_DIR"] = tempfile.mkdtemp(prefix="llmpack-bench-real-")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    todo = _todo(args)
    whole = args.whole or "whole" in args.only.split(",")
    paths = doc_corpus.files({n for q in todo for n in q.files} | ({WHOLE_FILE} if whole else set()))
    data = {name: p.read_bytes() for name, p in paths.items()}
    from server_fixtures import live_server   # lazy: as documents.main

    results, times = [], []
    with live_server(demo_model_path("qwen")) as srv:
        client = srv.openai().with_options(timeout=900)
        print(f"demo model ready, n_ctx {srv.engine.n_ctx}", flush=True)
        ids = {}
        for name, raw in data.items():   # as the page does when a file is dropped: read (and index) it once
            t = time.perf_counter()
            got = requests.post(srv.url + "/v1/extract", data=raw, timeout=600,
                                headers={"Content-Type": _media(name), "X-Filename": quote(name)}).json()
            ids[name] = got.get("file_id")
            print(f"  {name:26s} {got.get('tokens', 0):>8,} tokens  searched {str(got.get('searched')):5s} "
                  f"whole_s {got.get('whole_s')}  /v1/extract {time.perf_counter() - t:5.2f} s", flush=True)
        began = time.perf_counter()
        for i, q in enumerate(todo, 1):
            content = [{"type": "file", "file": {"filename": n, "file_id": ids[n]} if args.by_id else
                        {"filename": n, "file_data": f"data:{_media(n)};base64,{base64.b64encode(data[n]).decode()}"}}
                       for n in q.files]
            messages = [{"role": "user", "content": [*content, {"type": "text", "text": q.first or q.question}]}]
            if q.first:
                first, *_ = ask(client, messages)
                messages += [{"role": "assistant", "content": first}, {"role": "user", "content": q.question}]
            reply, sources, ttft, read = ask(client, messages)
            got = judge(q, reply, sources)
            got["searched"] = bool(read)
            results.append((q, got))
            times.append(ttft)
            shown = ", ".join(s["label"].split(" · ")[-1] for s in sources) or "-"
            print(f"[{i}/{len(todo)} {time.perf_counter() - began:5.0f} s] {q.kind:10s} ttft {ttft:5.2f} s "
                  f"{'searched' if read else 'whole   '} fact {'yes' if got['fact'] else 'NO '} "
                  f"server {got['server'] or '-':9s} sources [{shown}] {re.sub(chr(10), ' ', reply)[:80]!r}", flush=True)
        if whole:
            run_whole(client, paths[WHOLE_FILE])
    if results:
        report(results, times)


def report(results: list, times: list[float]) -> None:
    n = len(results)
    facts = [g for _, g in results if g["fact"]]
    server = Counter(g["server"] for g in facts)
    print(f"\nreal corpus: {n} questions, demo model, temperature 0")
    print(f"  fact in reply            {pct(len(facts), n)}")
    print(f"  server source right      {pct(server['right'], len(facts))}   wrong {server['wrong']}   "
          f"abstained {server['abstained']}")
    for q, g in results:
        if g["server"] == "wrong":
            print(f"    wrong: {q.question[:60]!r} -> {g['wrong_sources']}")
    print(f"  mark-only replies        {sum(g['mark_only'] for _, g in results)}")
    print(f"  read whole {sum(not g['searched'] for _, g in results)}, searched {sum(g['searched'] for _, g in results)}")
    by: dict[str, list] = defaultdict(list)
    for q, g in results:
        by[q.kind].append(g)
    for key, gs in sorted(by.items()):
        f = [g for g in gs if g["fact"]]
        print(f"    {key:12s} fact {pct(len(f), len(gs))}  server right {pct(sum(g['server'] == 'right' for g in f), len(f))}")
    if times:
        p50, p95 = percentiles(times)
        print(f"  TTFT p50 {p50:.2f} s, p95 {p95:.2f} s ({len(times)} questions)")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
