"""Long documents: does the model read the part that answers the question?

Three generated documents far longer than the context (tests/long_docs.py): a 300-page PDF,
a DOCX of 200 headed sections and a Markdown file of 200 sections, with 50 facts planted at
known places (17 + 17 + 16); 15 of the questions say it in other words than the fact does.
For each question, what the model would read (runtime/documents/excerpts.read, with
reading.EXCERPT_TOKENS and the real tokenizer of the demo instruct model) is checked for the
fact. Compared in the same run:

- `first N pages`: what the chat page did before: the document's beginning, as much as fits in
  all that a 4,096-token context keeps for files (more than the excerpts get);
- `BM25`: the FTS5 index, as served;
- `BM25 + embeddings`: BM25's best RERANK chunks reordered by cosine similarity of the model's
  own /v1/embeddings vectors (question against chunk), and the same mixed with BM25's order by
  reciprocal rank fusion. Kept in the product only if it beats BM25 alone.

Also: the time to index 300 pages (chunking + FTS5 insert), beside the time PDFium takes to read
the same PDF, and the time per question of each method.

    ./dev bench retrieval [--rerank 8] [--questions 50]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from doc_files import make_docx, make_pdf  # noqa: E402
from long_docs import filler, needles, pages_with, places  # noqa: E402

from llmpack.demo_models import demo_model_path  # noqa: E402
from llmpack.runtime.documents import excerpts as E  # noqa: E402
from llmpack.runtime.documents import extract as D  # noqa: E402
from llmpack.runtime.documents.index import DocumentIndex  # noqa: E402
from llmpack.runtime.documents.reading import EXCERPT_TOKENS, NOTE_TOKENS  # noqa: E402

N_CTX = 4096
BUDGET = max(N_CTX - 1024, N_CTX // 2)     # server/attachments.budget: what files may take
READ = min(BUDGET, EXCERPT_TOKENS) - NOTE_TOKENS   # what one question reads of a searched file (reading.arrange)


def sectioned(seed: int, n: int, towns: list[str], planted: dict, kind: str) -> list[tuple[str, str]]:
    """(heading, text) sections; `planted` maps a section number to its needle."""
    rng = random.Random(seed)
    out = []
    for s in range(1, n + 1):
        paras = [filler(rng, towns, rng.randint(3, 4)) for _ in range(4)]
        if s in planted:
            paras.insert(rng.randrange(len(paras) + 1), planted[s].text)
        out.append((f"{s}. {rng.choice(towns)} {kind}", "\n".join(paras)))
    return out


def corpus() -> list[tuple[D.Document, list]]:
    rng = random.Random(2025)
    towns = places(rng, 40)
    used: set[str] = set()
    pdf_needles = needles(rng, towns, 17, 300, used=used)
    pdf = D.extract("records.pdf", make_pdf(pages_with(pdf_needles, 300, 1, towns)))
    docx_needles = needles(rng, towns, 17, 200, used=used)
    docx_sections = sectioned(2, 200, towns, {n.where: n for n in docx_needles}, "annual report")
    docx = D.extract("reports.docx", make_docx([p for h, t in docx_sections for p in (("Heading1", h), *t.split("\n"))]))
    md_needles = needles(rng, towns, 16, 200, used=used)
    md_sections = sectioned(3, 200, towns, {n.where: n for n in md_needles}, "operations")
    md = D.extract("handbook.md", "\n\n".join(f"## {h}\n\n{t}" for h, t in md_sections).encode())
    return [(pdf, pdf_needles), (docx, docx_needles), (md, md_needles)]


class Model:
    """The demo instruct model behind `llmpack run`: its tokenizer and /v1/embeddings."""

    def __init__(self, url: str) -> None:
        self.url, self._counts = url, {}

    def count(self, text: str) -> int:
        if text not in self._counts:
            r = requests.post(self.url + "/tokenize", json={"content": text, "parse_special": False}, timeout=60)
            self._counts[text] = len(r.json()["tokens"])
        return self._counts[text]

    def embed(self, texts: list[str]) -> np.ndarray:
        r = requests.post(self.url + "/v1/embeddings", json={"input": texts}, timeout=600)
        r.raise_for_status()
        return np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


class Reranked:
    """The index with search() reordered by embedding similarity (fuse=False) or by reciprocal
    rank fusion of BM25's order and the embeddings' (fuse=True)."""

    def __init__(self, index: DocumentIndex, model: Model, top: int, fuse: bool) -> None:
        self.index, self.model, self.top, self.fuse = index, model, top, fuse
        self._vectors: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str):
        return getattr(self.index, name)

    def search(self, keys, question: str, limit: int = 64):
        hits = self.index.search(keys, question, limit)
        head, tail = hits[:self.top], hits[self.top:]
        if len(head) < 2:
            return hits
        new = [h.text for h in head if h.text not in self._vectors]
        if new:
            self._vectors.update(zip(new, self.model.embed(new)))
        q = self.model.embed([question])[0]
        sims = [float(self._vectors[h.text] @ q) for h in head]
        by_sim = sorted(range(len(head)), key=lambda i: -sims[i])
        if self.fuse:
            rank = {i: r for r, i in enumerate(by_sim)}
            order = sorted(range(len(head)), key=lambda i: -(1 / (60 + i) + 1 / (60 + rank[i])))
        else:
            order = by_sim
        return [head[i] for i in order] + tail


def first_pages(doc: D.Document, model: Model) -> str:
    """The beginning of the document that fits the budget, whole pages (or 4,000-character parts)."""
    parts = doc.pages or [doc.text[i:i + 4000] for i in range(0, len(doc.text), 4000)]
    room, out = BUDGET - model.count(D.format_message([(doc.name, "")], "")), []
    for p in parts:
        room -= model.count(p + "\n\n")
        if room < 0:
            break
        out.append(p)
    return "\n\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rerank", type=int, default=8, help="BM25's best chunks the embeddings reorder")
    ap.add_argument("--questions", type=int, default=50, help="fewer for a quick look (the figures need 50)")
    ap.add_argument("--max-seconds", type=float, default=3600, help="stop the embedding reranks after this long "
                    "(each question embeds --rerank chunks: minutes under load on 2 cores)")
    args = ap.parse_args()
    os.environ["LLMPACK_DATA_DIR"] = tempfile.mkdtemp(prefix="llmpack-bench-")
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    docs = corpus()
    pdf_bytes = make_pdf(pages_with([], 300, 7, places(random.Random(7))))
    read_s = min(_timed(lambda: D.extract("p.pdf", pdf_bytes)) for _ in range(3))
    pdf_doc = D.extract("p.pdf", pdf_bytes)
    build_s = []
    for i in range(3):
        index = DocumentIndex(Path(os.environ["LLMPACK_DATA_DIR"]) / f"build{i}.sqlite3")
        build_s.append(_timed(lambda: index.add(pdf_doc, "bench")))
    print(f"index build, 300 pages ({len(pdf_doc.text):,} characters): {min(build_s):.3f} s "
          f"(PDFium reading the same PDF: {read_s:.3f} s; ratio {min(build_s) / read_s:.2f})")
    from server_fixtures import live_server   # lazy: corpus() and the index need no model server

    index = DocumentIndex()
    indexed = [(index.add(doc, "bench"), nds) for doc, nds in docs]
    with live_server(demo_model_path("qwen"), "--ctx", str(N_CTX), "--parallel", "1") as srv:
        model = Model(srv.url)
        rerankers = {"BM25 + embeddings": Reranked(index, model, args.rerank, fuse=False),
                     "BM25 + embeddings (fused)": Reranked(index, model, args.rerank, fuse=True)}
        hits = {m: [] for m in ["first N pages", "BM25", *rerankers]}
        times: dict[str, list[float]] = {m: [] for m in ["BM25", *rerankers]}
        fixable = 0   # BM25 misses whose fact is among the chunks a rerank reorders: all it could win
        deadline = time.monotonic() + args.max_seconds
        questions = [(ix, doc, nd) for (ix, nds), (doc, _) in zip(indexed, docs) for nd in nds][:args.questions]
        heads = {doc.name: first_pages(doc, model) for doc, _ in docs}
        for ix, doc, nd in questions:
            hits["first N pages"].append(nd.answer in heads[doc.name])
            ok, t = _read(index, ix, nd, model)
            hits["BM25"].append(ok)
            times["BM25"].append(t)
            top = index.search([ix.id], nd.question, args.rerank)
            fixable += not ok and any(nd.answer in h.text for h in top)
        for ix, doc, nd in questions:   # the slow part, as far as --max-seconds allows
            if time.monotonic() > deadline:
                break
            for name, source in rerankers.items():
                ok, t = _read(source, ix, nd, model)
                hits[name].append(ok)
                times[name].append(t)
    total = len(questions)
    print(f"{total} questions over 3 documents; each reads {READ} tokens of excerpts; 'first N pages' gets "
          f"{BUDGET} tokens (all a {N_CTX}-token context keeps for files)")
    print(f"BM25 misses whose fact is in BM25's best {args.rerank} (the most a rerank of them could win): {fixable}")
    base = sum(hits["BM25"]) / total
    for name, got in hits.items():
        n, asked = sum(got), len(got)
        if not asked:
            print(f"  {name:28s} not measured: --max-seconds ran out")
            continue
        bm25 = sum(hits["BM25"][:asked]) / asked
        t = f", {statistics.median(times[name]) * 1000:,.0f} ms per question (median)" if name in times else ""
        print(f"  {name:28s} hit rate {n / asked:6.1%}  ({n}/{asked}; {n / asked / (bm25 or base):.2f}x BM25 on the "
              f"same {asked}){t}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def _read(source, ix, nd, model: Model) -> tuple[bool, float]:
    t = time.perf_counter()
    read = E.read(source, [ix], nd.question, READ, model.count)
    return any(nd.answer in h.text for r in read for h in r.hits), time.perf_counter() - t


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
