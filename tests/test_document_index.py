"""Spec for documents too long for the context (runtime/documents/chunks.py, index.py,
excerpts.py): pieces that keep their page or heading, an FTS5 index that stores a file whole or
not at all, private to this user, and the parts of it a question reads within a token budget.
No model here: budgets are counted with `words`, a stand-in tokenizer the functions take as a
parameter (the API tests count with the real one)."""
from __future__ import annotations

import os
import random
import re
import sqlite3
from contextlib import closing
import stat

import pytest

from doc_files import make_docx, make_pdf
from long_docs import contract_pages, filler, places
from llmpack.runtime.documents import chunks as C
from llmpack.runtime.documents import excerpts as E
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import index as I
from llmpack.runtime.documents import reading as R


def words(text: str) -> int:
    return len(text.split()) + 1


@pytest.fixture(scope="module")
def contract() -> tuple[D.Document, object]:
    pages, needle = contract_pages()
    return D.extract("contract.pdf", make_pdf(pages)), needle


@pytest.fixture
def index(tmp_path, monkeypatch) -> I.DocumentIndex:
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    return I.DocumentIndex()


def test_pdf_chunks_stay_on_their_page(contract):
    doc, needle = contract
    pieces = C.chunk(doc)
    assert {c.page for c in pieces} == set(range(1, 301))
    assert all(c.label == f"p. {c.page}" and c.text in doc.pages[c.page - 1] for c in pieces)
    assert max(len(c.text) for c in pieces) <= C.CHUNK_CHARS + C.MIN_CHUNK_CHARS
    assert [c.page for c in pieces if needle.text in c.text] == [217]
    # nothing lost: every word of every page is in some chunk of that page
    for n in (1, 217, 300):
        assert " ".join(c.text for c in pieces if c.page == n).split() == doc.pages[n - 1].split()


def test_docx_chunks_carry_their_heading_path():
    styles = ('<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
              '<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style></w:styles>')
    data = make_docx([("Title", "Lease"), "Parties and premises.", ("Heading1", "12. Termination"),
                      "Either side may end the lease with three months' notice.",
                      ("berschrift2", "12.1 Early exit"), "A fee of two months' rent applies."], styles=styles)
    doc = D.extract("lease.docx", data)
    assert [(lvl, title) for _, lvl, title in doc.headings] == [(1, "Lease"), (1, "12. Termination"),
                                                                  (2, "12.1 Early exit")]
    assert all(doc.text[at:].startswith(title) for at, _, title in doc.headings)
    pieces = C.chunk(doc)
    assert [(c.label, c.heading) for c in pieces] == [
        ("§ Lease", "Lease"), ("§ 12. Termination", "12. Termination"),
        ("§ 12.1 Early exit", "12. Termination > 12.1 Early exit")]
    assert "two months' rent" in pieces[-1].text


def test_a_styles_part_with_a_dtd_is_not_read():
    bomb = ('<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaaaaaaaa">]>'
            '<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">&a;</w:styles>')
    doc = D.extract("x.docx", make_docx([("Custom", "Heading?"), "Body."], styles=bomb))
    assert doc.text == "Heading?\nBody." and doc.headings == []


def test_markdown_headings_outside_code_and_plain_text_lines():
    md = "Intro line.\n\n# Setup\n\nInstall it.\n\n```sh\n# not a heading\n```\n\n## Windows\n\nRun setup.exe.\n"
    pieces = C.chunk(D.extract("guide.md", md.encode()))
    assert [(c.label, c.heading) for c in pieces] == [("the beginning", ""), ("§ Setup", "Setup"),
                                                      ("§ Windows", "Setup > Windows")]
    lines = "\n".join(f"row {i}: " + "x" * 40 for i in range(1, 101))
    labels = [c.label for c in C.chunk(D.extract("log.csv", lines.encode()))]
    spans = [tuple(map(int, label.removeprefix("lines ").split("-"))) for label in labels]
    assert spans[0][0] == 1 and spans[-1][1] == 100 and len(spans) > 3   # every line, each once, in order
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))


def test_the_index_is_private_and_stores_a_document_once(index, contract, monkeypatch):
    monkeypatch.setattr(os, "umask", os.umask)   # restored after the test
    old = os.umask(0o022)
    try:
        first = index.add(contract[0], "model-a")
        again = index.add(contract[0], "model-b")
    finally:
        os.umask(old)
    assert first == again and first.pages == 300 and first.id == I.doc_id(contract[0])
    assert stat.S_IMODE(index.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(index.path.parent.stat().st_mode) == 0o700
    for sidecar in index.path.parent.glob(index.path.name + "-*"):
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600, sidecar
    with sqlite3.connect(index.path) as con:
        assert con.execute("SELECT COUNT(*) FROM documents").fetchone() == (1,)
        assert con.execute("SELECT COUNT(*) FROM chunks").fetchone() == (first.chunks,)


def test_the_index_keeps_each_document_as_it_was_read(index, contract):
    """The chat page sends a file once and its file_id from then on: the index gives the file back
    as it was read, its pages and headings too, so a PDF read whole by its file_id still cites
    "p. 29", not lines of text. An index written before it kept whole texts gives nothing back
    (the page asks for the file again) until the file is attached again."""
    doc = contract[0]
    got = index.add(doc, "m")
    back = index.document(got.id)
    assert (back.name, back.kind, back.text, back.pages, back.size) == (doc.name, "pdf", doc.text, doc.pages, doc.size)
    lease = D.extract("lease.docx", make_docx([("Title", "Lease"), "Parties and premises.", ("Heading1", "12. Termination"),
                                               "Either side may end the lease with three months' notice."]))
    assert index.document(index.add(lease, "m").id).headings == lease.headings == [(0, 1, "Lease"),
                                                                                      (28, 1, "12. Termination")]
    assert index.document("doc-" + "0" * 32) is None
    with closing(sqlite3.connect(index.path)) as con, con:   # as a release that kept only the parts stored it
        con.execute("DELETE FROM texts WHERE doc = ?", (got.id,))
    assert index.get(got.id) == got and index.document(got.id) is None
    index.add(doc, "m")                                        # attached again: kept whole from then on
    assert index.document(got.id).pages == doc.pages
    assert index.forget("m") == 2 and index.document(got.id) is None
    with closing(sqlite3.connect(index.path)) as con:
        assert con.execute("SELECT COUNT(*) FROM texts").fetchone() == (0,)


def test_two_requests_adding_the_same_file_at_once_both_get_it(tmp_path):
    """Four API clients asking about the same PDF at once, or two tabs attaching it: each request
    adds it to the index. Both used to find it missing and the second failed on its id (a 500
    that said to free disk space); the check and the insert are now one write transaction."""
    import threading

    for trial in range(5):
        index = I.DocumentIndex(tmp_path / f"i{trial}.sqlite3")
        index.add(D.extract("warm.txt", b"The index file exists."), "m")
        doc = D.extract("notes.txt", (f"Trial {trial}. " + "The boiler is in the cellar. " * 800).encode())
        start, got, errors = threading.Barrier(2), [], []

        def add() -> None:
            start.wait()
            try:
                got.append(index.add(doc, "m").id)
            except I.IndexUnusable as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=add) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and got == [I.doc_id(doc)] * 2


def test_a_document_that_fails_half_way_leaves_nothing(index, contract, monkeypatch):
    calls = []

    def failing_insert(con, key, pieces):
        calls.append(key)
        con.execute("INSERT INTO chunks (doc, ord, page, label, heading, text) VALUES (?, 0, 1, 'p. 1', '', 'x')",
                    (key,))
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(I, "_insert", failing_insert)
    with pytest.raises(I.IndexUnusable) as info:
        index.add(contract[0], "model-a")
    assert calls and "\n" not in str(info.value) and "contract.pdf" in str(info.value)
    assert "free some disk space" in str(info.value)
    with sqlite3.connect(index.path) as con:
        assert con.execute("SELECT (SELECT COUNT(*) FROM documents) + (SELECT COUNT(*) FROM chunks) "
                           "+ (SELECT COUNT(*) FROM owners)").fetchone() == (0,)


def test_the_best_match_leads_and_its_neighbours_follow_it():
    """Picked in the order best, second best, then neighbours: each run is written from its best
    chunk on, then what came before it, so no neighbour's mark comes before the best match's."""
    def hit(o: int) -> I.Hit:
        return I.Hit("d", o, o // 2 + 1, f"p. {o // 2 + 1}", "", f"text {o}")
    picked = [hit(o) for o in (10, 40, 11, 9, 41, 39)]
    assert [h.ord for h in E._best_first(picked)] == [10, 11, 9, 40, 41, 39]


def test_one_sentence_that_holds_the_question_beats_chunks_that_scatter_its_words(index):
    """BM25 weighs a chunk as a bag of words: chunks that say "night" (market) and "manager"
    (changed its) in different sentences outrank the one sentence that answers. What the model
    reads is chosen by the sentences, so that sentence leads, under its own page."""
    rng = random.Random(4242)
    towns = places(rng)
    pages = [" ".join(filler(rng, towns, 4) for _ in range(3)) for _ in range(120)]
    town = max(towns, key=lambda t: sum(p.count(t) for p in pages))   # the town the filler names most
    fact = f"The night manager of the school in {town} is Mirela Halloran."
    pages[87] += "\n" + fact
    ix = index.add(D.extract("bulletin.pdf", make_pdf(pages)), "m")
    question = f"Who is the night manager of the school in {town}?"
    ranked = index.search([ix.id], question, E.CANDIDATES)
    assert fact not in ranked[0].text   # the case this is about: BM25 alone ranks another chunk first
    reading, = E.read(index, [ix], question, 400, words)
    assert fact in reading.hits[0].text and reading.hits[0].label == "p. 88"
    assert words(D.format_message([reading.section()], "")) <= 400


def test_a_csv_is_read_by_its_records_with_its_column_names(index):
    rng = random.Random(77)
    rows = ["id,town,facility,serial"] + [f"{i},{rng.choice(['Olford', 'Kesvale', 'Dundy'])} Quay,"
                                          f"{rng.choice(['library', 'bakery', 'bridge'])},SN-{1000 + i}" for i in range(1, 400)]
    rows[250] = "250,Marris Lane,tram shed,QX-7781"
    text = "\n".join(rows) + "\n"
    ix = index.add(D.extract("inventory.csv", text.encode()), "m")
    reading, = E.read(index, [ix], "What is the serial of the tram shed in Marris Lane?", 300, words)
    assert "its first line names the columns: id,town,facility,serial)" in reading.title()
    lines = text.split("\n")

    def span(label: str) -> tuple[int, int]:
        first, _, last = label.removeprefix("lines ").removeprefix("line ").partition("-")
        return int(first), int(last or first)
    for h in reading.hits:   # each passage's label names its own lines of the file
        first, last = span(h.label)
        assert h.text == "\n".join(lines[first - 1:last])
    first, last = span(reading.hits[0].label)   # the record asked about leads, under its line (251)
    assert "QX-7781" in reading.hits[0].text and first <= 251 <= last


def test_passages_of_one_chunk_share_its_mark():
    one = I.Hit("d", 4, 9, "p. 9", "", "First passage.")
    two = I.Hit("d", 4, 9, "p. 9", "", "Second passage.")
    nxt = I.Hit("d", 5, 9, "p. 9", "", "The next chunk of the page.")
    assert E.render([one, two, nxt]) == "[p. 9]\nFirst passage.\n…\nSecond passage.\nThe next chunk of the page.\n[end of p. 9]"


def test_the_question_finds_page_217(index, contract):
    doc, needle = contract
    ix = index.add(doc, "m")
    best = index.search([ix.id], needle.question)[0]
    assert (best.page, best.label) == (217, "p. 217") and needle.text in best.text
    reading, = E.read(index, [ix], needle.question, 600, words)
    assert any(needle.text in h.text for h in reading.hits) and reading.matched
    assert needle.text in reading.hits[0].text   # the best match first: its mark is the first one the model meets
    runs = [h.ord for h in reading.hits]
    assert len(set(runs)) == len(runs)
    section = D.format_message([reading.section()], needle.question)
    assert words(section) <= 600 + words(needle.question) + 2
    assert "[p. 217]\n" in section and "contract.pdf (300 pages, too long to read whole" in section
    assert re.search(r"\[p\. \d+\]", section).group() == "[p. 217]"
    report = reading.report()
    assert 217 in [p["page"] for p in report["parts"]] and report["file_id"] == ix.id and report["pages"] == 300


def test_a_named_page_is_read_and_an_unmatched_question_reads_the_beginning(index, contract):
    ix = index.add(contract[0], "m")
    named, = E.read(index, [ix], "What does page 12 say?", 2000, words)
    assert {h.page for h in named.hits} >= {12} and named.hits[0].page in (11, 12)
    vague, = E.read(index, [ix], "Summarise it for me", 2000, words)
    assert not vague.matched and vague.hits[0].label == "p. 1"
    assert "no part of it matches the question, so here is its beginning" in vague.title()


def test_the_budget_is_kept_for_any_size(index, contract):
    ix = index.add(contract[0], "m")
    for budget in (200, 700, 3000):
        readings = E.read(index, [ix], contract[1].question, budget, words)
        text = D.format_message([r.section() for r in readings], "")
        assert words(text) <= budget
    assert E.read(index, [ix], contract[1].question, 20, words) == []   # not even a heading fits
    small, = E.read(index, [ix], contract[1].question, 90, words)       # less than one chunk: the best, cut
    assert len(small.hits) == 1 and small.hits[0].page == 217 and "Kestrel Marine" in small.hits[0].text
    assert words(D.format_message([small.section()], "")) <= 90 and len(small.hits[0].text) < C.CHUNK_CHARS // 2


def test_forget_removes_what_only_that_model_used(index, contract):
    other = D.extract("notes.md", ("# Notes\n\n" + "Plain words here. " * 400).encode())
    shared = index.add(contract[0], "model-a")
    index.add(contract[0], "model-b")
    mine = index.add(other, "model-a")
    assert index.usage("model-a") == (1, sum(len(c.text.encode()) for c in C.chunk(other)))
    assert index.forget("model-a") == 1
    assert index.get(mine.id) is None and index.get(shared.id) == shared
    assert index.search([mine.id], "plain words") == []
    assert index.forget("model-b") == 1 and index.get(shared.id) is None
    with sqlite3.connect(index.path) as con:   # the FTS rows went with the chunks
        assert con.execute("SELECT COUNT(*) FROM chunk_text WHERE chunk_text MATCH 'generator'").fetchone() == (0,)


def test_forget_and_usage_create_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "none"))
    index = I.DocumentIndex()
    assert index.usage("m") == (0, 0) and index.forget("m") == 0 and not (tmp_path / "none").exists()


def test_this_python_has_fts5():
    assert I.fts5_available()


# ---------------------------------------------------------------- a request's files (reading.arrange)
def _arrange(index, messages, files_at, budget=3000):
    file_messages = [R.FileMessage(at, files, text) for at, files, text in files_at]
    return R.arrange(messages, file_messages, budget=budget, count=words, index=index, owner="m")


def test_files_that_fit_are_read_whole_as_before(index):
    note = D.extract("note.txt", b"The door code is 4711.")
    got = _arrange(index, [{"role": "user", "content": []}], [(0, [R.Attached("note.txt", doc=note)], "Code?")])
    assert got.messages[0]["content"] == D.format_message([("note.txt", "The door code is 4711.")], "Code?")
    assert got.reports == [] and not index.path.exists()   # nothing indexed for a file read whole


def test_a_file_too_long_is_searched_for_the_latest_question(index, contract):
    doc, needle = contract
    note = D.extract("note.txt", b"The door code is 4711.")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": []},
                {"role": "assistant", "content": "I have read the files."}, {"role": "user", "content": needle.question}]
    got = _arrange(index, messages, [(1, [R.Attached("contract.pdf", doc=doc), R.Attached("note.txt", doc=note)],
                                      "Two files.")])
    first, last = got.messages[1]["content"], got.messages[3]["content"]
    assert first.startswith("## File: contract.pdf (300 pages, too long to read whole: the parts that match each "
                            "question are given with it)") and "## File: note.txt\n\nThe door code is 4711." in first
    assert "[p. 217]" in last and needle.text in last and last.endswith("---\n\n" + needle.question)
    assert sum(words(m["content"]) + R.PER_MESSAGE for m in got.messages) <= 3000
    report, = got.reports
    assert report["filename"] == "contract.pdf" and 217 in [p["page"] for p in report["parts"]]
    assert index.get(report["file_id"]).pages == 300


def test_a_long_file_sent_with_every_question_is_not_counted_whole_each_time(index, contract):
    """The choice of whole or searched needs only to know that a file is over the budget: a 1 MB
    file sent as file_data with every question was tokenized whole each time (1.2 s of every
    first word on 2 CPU cores). A file asked to be read whole is counted exactly: its error says
    how many tokens it takes."""
    doc = contract[0]
    counted: list[int] = []

    def count(text: str) -> int:
        counted.append(len(text))
        return words(text)

    file_messages = [R.FileMessage(0, [R.Attached("contract.pdf", doc=doc)], "Who maintains the water tower?")]
    got = R.arrange([{"role": "user", "content": []}], file_messages, budget=3000, count=count, index=index, owner="m")
    assert got.reports[0]["filename"] == "contract.pdf"        # searched, as when counted whole
    assert max(counted) <= 3000 * R.MAX_CHARS_PER_TOKEN < len(doc.text) // 10
    whole = D.format_message([("contract.pdf", doc.text)], "")
    with pytest.raises(R.ReadingError, match=f"take {words(whole):,} tokens"):
        _arrange(index, [{"role": "user", "content": []}], [(0, [R.Attached("contract.pdf", "whole", doc)], "Q")])
    assert R.count_upto("short text " * 10, 3000, words) == words("short text " * 10) and R.count_upto(whole, 10**9, words) == words(whole)


def test_whole_and_excerpts_are_honoured(index, contract):
    doc = contract[0]
    with pytest.raises(R.ReadingError) as info:
        _arrange(index, [{"role": "user", "content": []}], [(0, [R.Attached("contract.pdf", "whole", doc)], "Q")])
    assert info.value.code == "attachments_too_long" and "contract.pdf" in str(info.value)
    assert "\"read\": \"auto\"" in str(info.value) and not index.path.exists()
    small = D.extract("guide.md", ("# Fees\n\nThe fee is 12 crowns.\n\n# Hours\n\nOpen at nine.\n").encode())
    got = _arrange(index, [{"role": "user", "content": []}],
                   [(0, [R.Attached("guide.md", "excerpts", small)], "What is the fee?")])
    assert "[§ Fees]" in got.messages[0]["content"] and got.reports[0]["parts"][0]["label"] == "§ Fees"
    known = index.get(got.reports[0]["file_id"])
    again = _arrange(index, [{"role": "user", "content": []}],
                     [(0, [R.Attached("guide.md", "auto", None, known)], "When does it open?")])
    assert "Open at nine." in again.messages[0]["content"]   # by its file_id alone
    with pytest.raises(R.ReadingError) as info:
        _arrange(index, [{"role": "user", "content": []}], [(0, [R.Attached("guide.md", "whole", None, known)], "")])
    assert info.value.code == "invalid_file" and "send it as file_data" in str(info.value)


def test_a_file_read_whole_by_its_file_id_is_the_file_as_it_was_read(index):
    """By its file_id, `whole` reads the index's copy: the same message as the file itself, and
    places on its pages (a PDF's text sent as text/plain would have only lines)."""
    pdf = D.extract("memo.pdf", make_pdf(["The door code is 4711.", "The boiler is in the cellar."]))
    known = index.add(pdf, "m")
    question = [{"role": "user", "content": []}]
    got = _arrange(index, question, [(0, [R.Attached("memo.pdf", "whole", index.document(known.id), known)],
                                      "Where is the boiler?")])
    assert got.messages[0]["content"] == D.format_message([("memo.pdf", pdf.text)], "Where is the boiler?")
    assert [(p.label, p.file_id) for p in got.attribution.places] == [("p. 1", known.id), ("p. 2", known.id)]
    as_text = D.extract("memo.pdf", pdf.text.encode(), media_type="text/plain")
    sent = _arrange(index, question, [(0, [R.Attached("memo.pdf", "whole", as_text)], "Where is the boiler?")])
    assert sent.messages == got.messages and [p.label for p in sent.attribution.places] == ["lines 1-3"]


def test_auto_reads_whole_only_what_the_measured_prompt_speed_reads_within_3_s(index, contract):
    """A file that fits the context is read whole only when the engine's measured prompt speed
    gives the first word within FIRST_WORD_S; else it is searched, and the report says the wait
    that reading it whole would take, for the page to offer."""
    pages = contract_pages()[0][:8]
    doc = D.extract("eight.pdf", make_pdf(pages))
    cost = words(D.format_message([(doc.name, doc.text)], ""))
    assert cost < 3000   # it fits the budget: before, `auto` always read it whole
    one = [(0, [R.Attached("eight.pdf", doc=doc)], "Who services the generator?")]
    fast = R.arrange([{"role": "user", "content": []}], [R.FileMessage(*one[0])], budget=3000, count=words,
                     index=index, owner="m", prompt_tok_s=cost)          # a GPU: the whole file in 1 s
    assert fast.reports == [] and doc.text in fast.messages[0]["content"]
    slow = R.arrange([{"role": "user", "content": []}], [R.FileMessage(*one[0])], budget=3000, count=words,
                     index=index, owner="m", prompt_tok_s=cost / 24)     # 2 cores: 24 s to the first word
    report, = slow.reports
    assert report["searched"] == "slow" and report["whole_s"] == 24.0 and doc.text not in slow.messages[0]["content"]
    unmeasured = R.arrange([{"role": "user", "content": []}], [R.FileMessage(*one[0])], budget=3000, count=words,
                           index=index, owner="m", prompt_tok_s=0.0)    # not measured yet: the slow guess
    assert unmeasured.reports[0]["searched"] == "slow"
    assert unmeasured.reports[0]["whole_s"] == round(cost / R.UNMEASURED_TOK_S, 1)
    # asked for whole, it is read whole however slow
    asked = R.arrange([{"role": "user", "content": []}], [R.FileMessage(0, [R.Attached("eight.pdf", "whole", doc)],
                                                                         "Q")],
                      budget=3000, count=words, index=index, owner="m", prompt_tok_s=1.0)
    assert asked.reports == [] and doc.text in asked.messages[0]["content"]


def test_a_full_conversation_leaves_no_room_and_says_so(index, contract):
    long_chat = [{"role": "user", "content": "word " * 2990}, {"role": "user", "content": []}]
    with pytest.raises(R.ReadingError) as info:
        _arrange(index, long_chat, [(1, [R.Attached("contract.pdf", doc=contract[0])], "Q?")])
    assert "start a new chat" in str(info.value) and "\n" not in str(info.value)


# debian-reference.ja.txt (Debian's debian-reference-ja), 1.1 and 1.1.1: no spaces between words
JA_PAGES = ["コンピューターシステムを学ぶことは新しい外国語を学ぶことに似ていると考えます。"
            "チュートリアルブックやドキュメントは役に立ちますが、あなた自身が実習する必要があります。",
            "Debian システムのインストール後に GNOME や KDE のようなデスクトップ環境を選ばなかった場合、"
            "ログイン (ユーザー名とパスワード) 画面が表示されます。"]


def test_japanese_text_is_found_by_a_word_inside_a_run(tmp_path):
    """FTS5's unicode61 takes a run of Japanese as one word; the index's pairs of characters
    find a word inside it (外国語, "foreign language"; パスワード, "password")."""
    index = I.DocumentIndex(tmp_path / "index.sqlite3")
    doc = D.Document("debian-reference.ja.pdf", "pdf", "\n\n".join(JA_PAGES), 100, JA_PAGES)
    got = index.add(doc, "m")
    assert [h.page for h in index.search([got.id], "外国語")] == [1]
    assert [h.page for h in index.search([got.id], "パスワードはどこで入力しますか")][:1] == [2]
    assert [h.page for h in index.search([got.id], "GNOME デスクトップ")][:1] == [2]


def test_an_index_written_before_pairs_of_characters_gains_them(tmp_path):
    path = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(path)) as con:   # the schema before `grams`, with one Japanese document
        con.executescript(I.SCHEMA.replace(",\n    grams TEXT NOT NULL DEFAULT ''", "").replace("text, grams,", "text,"))
        con.execute("INSERT INTO documents VALUES ('doc-ja', 'ja.txt', 'text', 0, 1, 10, 0, 0, 10)")
        con.execute("INSERT INTO chunks (id, doc, ord, page, label, heading, text) VALUES "
                    "(1, 'doc-ja', 0, 0, 'line 1', '', ?)", (JA_PAGES[0],))
        con.execute("INSERT INTO chunk_text (rowid, heading, text) VALUES (1, '', ?)", (JA_PAGES[0],))
        con.commit()
    index = I.DocumentIndex(path)
    assert [h.doc for h in index.search(["doc-ja"], "外国語")] == ["doc-ja"]
    # its search terms were rebuilt with the pairs: deleting it leaves the index whole
    assert index.forget("m") == 1 and index.get("doc-ja") is None and index.search(["doc-ja"], "外国語") == []
    with closing(sqlite3.connect(path)) as con:
        assert con.execute("INSERT INTO chunk_text (chunk_text) VALUES ('integrity-check')").rowcount == 1
