"""A question about the whole of a file too long to read (documents/overview.py): told from a
question about one place of it in several languages, the file cut into parts in order that cover
it all, each part summarised by the real engine in one round, the summaries kept in the index so
the next such question reads no part again, and the round's progress shown while it runs."""
from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time

import pytest
import requests

from doc_files import make_pdf
from long_docs import contract_pages
from llmpack.runtime.documents import extract, overview
from llmpack.runtime.documents.index import DocumentIndex
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import LiveServer

# A handbook whose chapters are about different things, wrapped at 70 columns as typeset text is:
# an answer drawn from the whole file names chapters from its end, not only its beginning.
TOPICS = [("Beekeeping", "hive", "bees", "honey"), ("Volcanoes", "lava", "crater", "eruption"),
          ("Railways", "locomotive", "track", "signal"), ("Cheese making", "curd", "rennet", "whey"),
          ("Astronomy", "telescope", "planet", "orbit"), ("Sailing", "mast", "rudder", "keel"),
          ("Bookbinding", "spine", "glue", "folio"), ("Glassblowing", "furnace", "molten glass", "pipe")]


def handbook_pages(pages_per_chapter: int = 5) -> list[str]:
    out = []
    for n, (title, *words) in enumerate(TOPICS, 1):
        for p in range(pages_per_chapter):
            sentences = [f"Chapter {n}. {title}." if p == 0 else ""]
            for i in range(18):
                a, b, c = words[i % 3], words[(i + 1) % 3], words[(i + 2) % 3]
                sentences.append(f"In {title.lower()} the {a} and the {b} matter, and a careful worker checks the "
                                 f"{c} on day {i + 1 + p * 18} before going on with the next step of the work.")
            text = " ".join(s for s in sentences if s)
            lines, line = [], ""
            for word in text.split():   # wrapped at 70 columns: sentences run across lines
                if len(line) + len(word) + 1 > 70:
                    lines.append(line)
                    line = word
                else:
                    line = f"{line} {word}".strip()
            out.append("\n".join([*lines, line]))
    return out


HANDBOOK = make_pdf(handbook_pages())


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    index = DocumentIndex(tmp_path_factory.mktemp("index") / "documents.sqlite3")
    pages, _ = contract_pages(pages=60, fact_page=30)
    contract = index.add(extract.extract("contract.pdf", make_pdf(pages)), "m")
    handbook = index.add(extract.extract("handbook.pdf", HANDBOOK), "m")
    return index, contract, handbook


WHOLE = ["Summarise this document.", "What is this file about?", "Give me an overview of the whole PDF.",
         "List every chapter.", "What are the main points?", "tl;dr", "What does it cover?",
         "Fasse das Dokument zusammen.", "Worum geht es in diesem Handbuch?", "Résume ce document.",
         "¿De qué trata este documento?", "この文書を要約してください。", "这份文件的主要内容是什么？",
         "Summarise the handbook."]
ONE_PLACE = ["What does a careful worker check on day 40 in sailing?", "Summarise the chapter on volcanoes.",
             "Summarise page 12.", "Tell me more.", "What is this?", "Which chapter covers rennet?",
             "How is the rudder checked?"]


@pytest.mark.parametrize("question", WHOLE)
def test_a_question_about_all_of_the_file_is_told(indexed, question):
    index, _, handbook = indexed
    assert overview.about_whole(index, [handbook], question)


@pytest.mark.parametrize("question", ONE_PLACE)
def test_a_question_about_one_place_is_searched(indexed, question):
    index, _, handbook = indexed
    assert not overview.about_whole(index, [handbook], question)


def test_a_summary_asked_of_something_the_file_states_in_a_few_places_is_searched(indexed):
    index, contract, _ = indexed
    assert not overview.about_whole(index, [contract], "Summarise what the file says about the emergency generator.")
    assert overview.about_whole(index, [contract], "Summarise the file.")


def test_the_parts_cover_the_file_in_order(indexed):
    index, contract, _ = indexed
    hits = index.first(contract.id, contract.chunks)
    how = overview.plan(hits, 0.2, read_tokens=10**6)
    parts = overview.cut(hits, how)
    assert how.keep == 1 and 1 < len(parts) <= overview.MAX_PARTS and len(parts) == how.parts
    assert [(p.no, p.of) for p in parts] == [(i, len(parts)) for i in range(1, len(parts) + 1)]
    assert parts[0].page == 1 and parts[-1].last_page == 60
    assert all(b.page == a.last_page + 1 for a, b in zip(parts, parts[1:]))   # no page twice, none left out
    assert all(p.label == f"pp. {p.page}-{p.last_page}" for p in parts)
    assert overview.cut(hits, how) == parts   # the same cut again: kept summaries match their parts


def test_a_file_longer_than_the_round_reads_is_skimmed_everywhere(indexed):
    index, contract, _ = indexed
    hits = index.first(contract.id, contract.chunks)
    whole = sum(len(h.text) for h in hits) * 0.25
    how = overview.plan(hits, 0.25, read_tokens=int(whole / 5))
    assert how.keep < 1 and how.stride == 1   # halved until what skimming keeps fits
    parts = overview.cut(hits, how)
    assert parts[0].page == 1 and parts[-1].last_page == 60
    assert whole / 10 < sum(len(p.text) for p in parts) * 0.25 <= whole / 5 * 1.1   # what the round reads: the budget
    first = hits[len(hits) // 2].text
    assert overview.skim(first, 0.125) and first.startswith(overview.skim(first, 0.125))


def test_a_books_index_is_not_read_for_its_summary(tmp_path):
    """The Octave manual's summary gave two of its 16 parts to its function index ("isfield . . .
    120"), a list of words the model summarised as such. The index's pages stay in the last part's
    span, and the contents at the front, which outline the book, are read."""
    contents = ["Contents", *(f"{n} {title} " + ". " * 30 + str(n * 5) for n, (title, *_) in enumerate(TOPICS, 1))]
    words = sorted(w for _, *ws in TOPICS for w in ws)
    index_pages = ["\n".join(["Index", *(f"{w} " + ". " * 30 + str(7 + i) for i, w in enumerate(words))])] * 3
    pages = ["\n".join(contents), *handbook_pages(2), *index_pages]
    index = DocumentIndex(tmp_path / "documents.sqlite3")
    book = index.add(extract.extract("book.pdf", make_pdf(pages)), "m")
    hits = index.first(book.id, book.chunks)
    parts = overview.cut(hits, overview.plan(hits, 0.25, read_tokens=10**6))
    text = "\n".join(p.text for p in parts)
    assert "1 Beekeeping . . ." in text and "8 Glassblowing . . ." in text
    assert "bees . . ." not in text and "rudder . . ." not in text
    assert parts[-1].last_page == len(pages) and all(p.text.strip() for p in parts)


def test_a_file_too_long_even_for_a_sentence_a_chunk_reads_every_nth_chunk_over_all_of_it(indexed):
    """The Octave manual (1,158 pages, 2,408 chunks): a sentence of every chunk was 39,395 tokens
    where the round reads 26,000, and each part was cut at what fits the context, so the last
    fifth of every part's pages went unread. Now every other chunk (or every n-th) is read, so each
    part reads its pages to the end, and the round reads no more than its budget."""
    index, contract, _ = indexed
    hits = index.first(contract.id, contract.chunks)
    floor = sum(min(len(h.text), 300) for h in hits) * 0.25   # a first sentence of each, at most
    how = overview.plan(hits, 0.25, read_tokens=int(floor / 4))
    assert how.keep == 1 / 64 and how.stride > 1 and how.skimmed
    assert overview.Plan.of_key(how.key) == how
    assert overview.Plan.of_key("4x0.5x900") is None and overview.Plan.of_key("4x0.5x900x2") is None   # cut with index lines
    parts = overview.cut(hits, how)
    assert parts[0].page == 1 and parts[-1].last_page == 60
    assert all(b.page == a.last_page + 1 for a, b in zip(parts, parts[1:]))   # every page in a part
    assert sum(len(p.text) for p in parts) * 0.25 <= floor / 4 * 1.2
    kept = [i for i in range(len(hits)) if i % how.stride == 0]
    for p in parts:   # each part reads to its end: its last chunk read is in its text
        last = max(i for i in kept if hits[i].page <= p.last_page)
        assert overview.skim(hits[last].text, how.keep)[:40] in p.text, p.label


def test_no_part_is_longer_than_the_context_allows(indexed):
    index, contract, _ = indexed
    hits = index.first(contract.id, contract.chunks)
    how = overview.plan(hits, 0.25, read_tokens=10**6, part_tokens=300)
    assert all(len(p.text) * 0.25 <= 300 for p in overview.cut(hits, how))
    assert how.keep < 1   # 16 parts of 300 tokens cannot hold the whole file


def file_part(data: bytes, name: str = "handbook.pdf", **extra) -> dict:
    return {"type": "file", "file": {"filename": name, "file_data": "data:application/pdf;base64,"
                                     + base64.b64encode(data).decode(), **extra}}


def ask(srv: LiveServer, part: dict, question: str, max_tokens: int = 4):
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": [part, {"type": "text", "text": question}]}]}
    return srv.post("/v1/chat/completions", body, timeout=600)


def test_the_whole_file_is_summarised_once_and_kept(chat_server: LiveServer, chat_data):
    """The tiny model writes nonsense, but it is the real engine: every part's request runs, the
    round shows its progress while it runs, and the next question reads the kept summaries."""
    pages, _ = contract_pages(pages=120)
    data = make_pdf(pages)
    seen: list[dict] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.extend(requests.get(chat_server.url + "/v1/documents/reading", timeout=10).json()["reading"])
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        resp = ask(chat_server, file_part(data, "contract.pdf"), "Summarise this document.")
    finally:
        done.set()
        watcher.join()
    assert resp.status_code == 200, resp.text
    [read] = json.loads(resp.headers["X-Llmpack-Read"])
    assert read["summarised"] is True and read["filename"] == "contract.pdf" and read["pages"] == 120
    parts = read["parts"]
    assert parts[0]["page"] == 1 and parts[-1]["last_page"] == 120 and len(parts) >= 2
    assert seen and all(r["filename"] == "contract.pdf" and r["parts"] == len(parts) for r in seen)
    assert max(r["done"] for r in seen) >= 1 and requests.get(chat_server.url + "/v1/documents/reading", timeout=10).json() == {"reading": []}
    with sqlite3.connect(chat_data / "documents.sqlite3") as con:
        kept = [t for (t,) in con.execute("SELECT text FROM summaries ORDER BY part")]
    assert len(kept) == len(parts)
    # the answer read every part's summary, not the first few
    summaries = sum(len(chat_server.engine.tokenize(t, add_special=False, parse_special=False)) for t in kept)
    assert resp.json()["usage"]["prompt_tokens"] > summaries

    before = chat_server.engine.stats().requests_finished_total
    again = ask(chat_server, {"type": "file", "file": {"filename": "contract.pdf", "file_id": read["file_id"]}},
                "Give me an overview of the file.")
    assert again.status_code == 200 and json.loads(again.headers["X-Llmpack-Read"])[0]["summarised"] is True
    assert chat_server.engine.stats().requests_finished_total == before + 1   # the answer only: no part read again


def test_a_question_about_one_place_of_the_same_file_is_still_searched(chat_server: LiveServer):
    pages, needle = contract_pages(pages=120)
    resp = ask(chat_server, file_part(make_pdf(pages), "contract.pdf"), needle.question)
    [read] = json.loads(resp.headers["X-Llmpack-Read"])
    assert resp.status_code == 200 and "summarised" not in read and read["matched"] is True
