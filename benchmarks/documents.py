"""Documents end to end: does the person get the fact, and a source that points at it?

Through the real server (the demo model, Qwen2.5-Coder 0.5B Instruct, with the server's default
context, as `./dev demo` serves it) and the real API (the openai client, streamed, temperature
0), on the seeded set of benchmarks/document_set.py: PDFs of 10-400 pages, DOCX, Markdown, HTML,
CSV, two files at once, questions plain, asking for the place, paraphrased, and follow-ups.
For each reply:

- fact: the planted answer is in the reply;
- server source: the sources (`delta.sources`) that support the sentence holding the fact point
  at the fact's page / section / line (right), elsewhere (wrong: must never happen), or there is
  none (abstained);
- model text: the page or section the reply itself names, right or wrong (PDF and DOCX/Markdown);
- mark-only: a reply with no words beyond a mark or a page number ("[p. 96]");

and apart from the set: TTFT (first streamed content) of questions on a 300-page PDF already
indexed (sent by its file_id), and the time /v1/extract takes to read and index it, per 100 pages.

    ./dev bench documents [--cases 40] [--seed 90210]
    ./dev bench documents --corpus real    # benchmarks/doc_corpus.py, benchmarks/real_questions.py
    ./dev bench documents --corpus real --whole   # and "summarise this" of its longest PDF (whole_file.py)
    ./dev bench documents --corpus real --read-only   # only whether each answer is in what the model reads
    ./dev bench documents --corpus real --held-out    # questions on places the search was not tuned on
    ./dev bench documents --corpus real --web         # questions on saved web pages (SQLite's and Python's HTML docs)
    ./dev bench documents --corpus real --by-id       # files sent by their file_id, as the chat page sends them

`--corpus real` asks the questions written by reading real files (Debian's documentation
packages: typeset PDFs, text wrapped at 72 columns, German, Japanese) and prints the same
figures: facts, sources right / wrong / abstained, mark-only replies, TTFT p50/p95 (every file
read once through /v1/extract first, as the page does when a file is dropped, so TTFT is the
question's), and for each question whether the file was read whole or searched.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import quote

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from document_set import PDF, SEED, Case, Maker, cases  # noqa: E402

from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.core.attachments import READ_HEADER  # noqa: E402
from llmpack.runtime.documents.attribution import _MARK  # noqa: E402

MAX_TOKENS = 160
_BARE_PAGE = re.compile(r"\[\s*\d{1,4}\s*\]|^\W*\d{1,4}\W*$")
_PAGE = re.compile(r"\b(?:p\.|pp\.|pages?)\s*(\d{1,4})", re.I)


def part(name: str, data: bytes, media: str) -> dict:
    return {"type": "file", "file": {"filename": name,
                                     "file_data": f"data:{media};base64,{base64.b64encode(data).decode()}"}}


def ask(client, messages: list) -> tuple[str, list[dict], float, list[dict]]:
    """(reply, server sources, seconds to the first content, what was read of each searched
    file: the X-Llmpack-Read header) of one streamed question."""
    start, first, text, sources = time.perf_counter(), None, [], []
    raw = client.chat.completions.with_raw_response.create(model="demo", messages=messages, temperature=0,
                                                           max_tokens=MAX_TOKENS, stream=True)
    read = json.loads(raw.headers.get(READ_HEADER) or "[]")
    for chunk in raw.parse():
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            first = first or time.perf_counter()
            text.append(delta.content)
        sources = (delta.model_extra or {}).get("sources") or sources
    return "".join(text), sources, (first or time.perf_counter()) - start, read


def run_case(client, case: Case) -> tuple[str, list[dict], float, list[dict]]:
    content = [part(*f) for f in case.files]
    if case.first_question:
        messages = [{"role": "user", "content": [*content, {"type": "text", "text": case.first_question}]}]
        first, *_ = ask(client, messages)
        messages += [{"role": "assistant", "content": first}, {"role": "user", "content": case.question}]
    else:
        messages = [{"role": "user", "content": [*content, {"type": "text", "text": case.question}]}]
    return ask(client, messages)


def _norm(s: str) -> str:
    return re.sub(r"[\s,]+", "", s.lower())


def _spots(reply: str, answer: str) -> list[int]:
    """Where the answer stands in the reply (ignoring case, spaces and thousands commas), as a
    word of its own where it begins or ends with a letter or digit: "NewDocumentCommand" is not
    in "RenewDocumentCommand", nor "200" in "2008". (A Japanese answer has no such edges.)"""
    low, norm = reply.lower(), _norm(answer)
    pattern = r"[\s,]*".join(map(re.escape, norm))
    if norm[:1].isascii() and norm[:1].isalnum():
        pattern = r"(?<![a-z0-9])" + pattern
    if norm[-1:].isascii() and norm[-1:].isalnum():
        pattern += r"(?![a-z0-9])"
    return [m.start() for m in re.finditer(pattern, low)]


def _right(src: dict, case: Case) -> bool:
    w = case.where
    if src["file"] != w.file:
        return False
    if w.page:
        return src["page"] == w.page
    if w.section:
        return src["section"] == w.section
    return bool(src["lines"]) and src["lines"][0] <= w.line <= src["lines"][1]


def mark_only(reply: str) -> bool:
    """A reply that names a place and says nothing else: "[p. 96]", "[96]", "Page 96.", "96"."""
    rest = _BARE_PAGE.sub(" ", _MARK.sub(" ", reply))
    return bool(reply.strip()) and not re.search(r"\w", rest)


def _read(case: Case, read: list[dict]) -> bool:
    """Whether the model was given the fact's place: its file read whole (no report), or the
    fact's page / section / lines among the parts read of it. Tells retrieval misses from
    misreadings."""
    w = case.where
    report = next((r for r in read if r["filename"] == w.file), None)
    if report is None:
        return True
    for p in report["parts"]:
        if w.page and p["page"] == w.page:
            return True
        if w.section and (p["label"] == "§ " + w.section or p["heading"].endswith(w.section[-80:])):
            return True
        m = re.fullmatch(r"lines? (\d+)(?:-(\d+))?", p["label"])
        if w.line and m and int(m.group(1)) <= w.line <= int(m.group(2) or m.group(1)):
            return True
    return False


def judge(case: Case, reply: str, sources: list[dict], read: list[dict]) -> dict:
    spots = _spots(reply, case.answer)
    fact_sources = [s for s in sources if any(s["reply_start"] <= p < s["reply_end"] for p in spots)]
    out = {"fact": bool(spots), "mark_only": mark_only(reply), "empty": not reply.strip(),
           "server": None, "model": None, "read": _read(case, read)}
    if spots:
        out["server"] = ("abstained" if not fact_sources else
                         "right" if all(_right(s, case) for s in fact_sources) else "wrong")
    if case.where.page:
        named = {int(n) for n in _PAGE.findall(reply)}
        out["model"] = None if not named else "right" if case.where.page in named else "wrong"
    elif case.where.section:
        title = case.where.section.split(". ", 1)[-1].lower()
        out["model"] = "right" if title in reply.lower() else None
    return out


def ttft(srv, client, seed: int, questions: int) -> tuple[list[float], float, int]:
    """TTFT of `questions` on a 300-page PDF indexed first, the seconds /v1/extract took, facts found."""
    m = Maker(seed + 1)
    facts = [m.fact() for _ in range(questions)]
    data, _pages = m.pdf("handbook.pdf", 300, [f[0] for f in facts])
    start = time.perf_counter()
    doc = requests.post(srv.url + "/v1/extract", data=data, timeout=600,
                        headers={"Content-Type": PDF, "X-Filename": quote("handbook.pdf")}).json()
    indexing = time.perf_counter() - start
    assert doc.get("searched"), doc
    ref = {"type": "file", "file": {"filename": "handbook.pdf", "file_id": doc["file_id"]}}
    times, found = [], 0
    for _text, q, _para, answer in facts:
        reply, _, t, _ = ask(client, [{"role": "user", "content": [ref, {"type": "text", "text": q}]}])
        times.append(t)
        found += bool(_spots(reply, answer))
        print(f"  ttft {t:5.2f} s  fact {'yes' if _spots(reply, answer) else 'NO '}  {reply[:90]!r}", flush=True)
    return times, indexing, found


def percentiles(times: list[float]) -> tuple[float, float]:
    """(p50, p95) of `times`."""
    q = sorted(times)
    return statistics.median(q), q[min(len(q) - 1, round(0.95 * (len(q) - 1)))]


def pct(n: int, d: int) -> str:
    return f"{n / d:6.1%} ({n}/{d})" if d else "   n/a"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=40, help="chats in the set (about 15 s each on 2 cores)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--ttft", type=int, default=6, help="questions on the 300-page PDF for TTFT")
    ap.add_argument("--corpus", choices=("generated", "real"), default="generated",
                    help="generated: benchmarks/document_set.py; real: Debian's documentation (doc_corpus.py)")
    ap.add_argument("--only", default="", help="real corpus: only the questions of these kinds (comma-separated); "
                    "'whole': only the whole-file question")
    ap.add_argument("--whole", action="store_true", help="real corpus: also a question about all of its longest PDF "
                    "(benchmarks/whole_file.py)")
    ap.add_argument("--read-only", action="store_true", help="real corpus: only whether each answer is in what "
                    "the model would read (the server's search, the demo model's tokens), no model run: seconds")
    ap.add_argument("--held-out", action="store_true", help="real corpus: the held-out questions "
                    "(real_questions.HELD_OUT: files and places the search rules were not made on) instead")
    ap.add_argument("--web", action="store_true", help="real corpus: the questions on saved web pages "
                    "(real_questions.WEB: sqlite3-doc's and python3.11-doc's HTML) instead")
    ap.add_argument("--by-id", action="store_true", help="real corpus: send each file by the file_id /v1/extract "
                    "gave, as the chat page does, instead of its bytes with every question (as an API client may)")
    args = ap.parse_args()
    if args.corpus == "real" and args.read_only:
        from real_corpus import run_read
        return run_read(args)
    if args.corpus == "real":
        from real_corpus import run_real   # lazy: the generated set needs none of it
        return run_real(args)
    os.environ["LLMPACK_DATA_DIR"] = tempfile.mkdtemp(prefix="llmpack-bench-docs-")
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    t = time.perf_counter()
    todo = cases(args.seed, args.cases)
    print(f"{len(todo)} chats made in {time.perf_counter() - t:.1f} s (seed {args.seed})", flush=True)
    from server_fixtures import live_server   # lazy: making the set needs no server

    results = []
    with live_server(demo_model_path("qwen")) as srv:
        began = time.perf_counter()
        client = srv.openai().with_options(timeout=900)   # a long prompt on two busy cores can take minutes
        print(f"demo model ready, n_ctx {srv.engine.n_ctx}", flush=True)
        for i, case in enumerate(todo, 1):
            reply, sources, _, read = run_case(client, case)
            got = judge(case, reply, sources, read)
            results.append((case, got))
            w = case.where
            place = f"p. {w.page}" if w.page else f"§ {w.section[:24]}" if w.section else f"line {w.line}"
            shown = ", ".join(s["label"].split(" · ")[-1] for s in sources) or "-"
            print(f"[{i}/{len(todo)} {time.perf_counter() - began:5.0f} s] {case.kind:9s} {case.phrasing:10s} "
                  f"{place:28s} read {'yes' if got['read'] else 'NO '} fact {'yes' if got['fact'] else 'NO '} server {got['server'] or '-':9s} "
                  f"model {got['model'] or '-':5s} sources [{shown}] {reply[:70]!r}", flush=True)
        times, indexing, found = ttft(srv, client, args.seed, args.ttft)
    report(results, times, indexing, found, args)


def report(results: list, times: list[float], indexing: float, found: int, args) -> None:
    n = len(results)
    facts = [g for _, g in results if g["fact"]]
    server = Counter(g["server"] for g in facts)
    print(f"\n{n} chats, demo model, temperature 0, seed {args.seed}")
    print(f"  fact in reply            {pct(len(facts), n)}")
    read = [g for _, g in results if g["read"]]
    print(f"  fact's place given to the model {pct(len(read), n)}; fact in reply when given "
          f"{pct(sum(g['fact'] for g in read), len(read))}")
    print(f"  server source right      {pct(server['right'], len(facts))}   wrong {server['wrong']}   "
          f"abstained {server['abstained']}")
    for unit in ("page", "section"):
        picked = [(c, g) for c, g in results if (c.where.page if unit == "page" else c.where.section)]
        named = Counter(g["model"] for _, g in picked)
        print(f"  model text names the {unit:7s} right {pct(named['right'], len(picked))}   wrong {named['wrong']}")
    print(f"  mark-only replies        {sum(g['mark_only'] for _, g in results)}   empty {sum(g['empty'] for _, g in results)}")
    by: dict[str, list] = defaultdict(list)
    for c, g in results:
        by[c.kind].append(g)
        by["phrasing: " + c.phrasing].append(g)
    for key, gs in sorted(by.items()):
        f = [g for g in gs if g["fact"]]
        print(f"    {key:22s} fact {pct(len(f), len(gs))}  server right {pct(sum(g['server'] == 'right' for g in f), len(f))}")
    if times:
        p50, p95 = percentiles(times)
        print(f"  TTFT, 300-page PDF after indexing: p50 {p50:.2f} s, p95 {p95:.2f} s "
              f"({len(times)} questions; fact in {found})")
    print(f"  /v1/extract of the 300-page PDF (read + index): {indexing:.2f} s, {indexing / 3:.2f} s per 100 pages")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
