"""Attachments are read in a worker process (runtime/documents/sandbox.py) that is killed
at the deadline and runs under a memory limit: a PDF page that never ends costs one killed
worker, and the next attachment is read at once by a fresh one."""
from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from doc_files import bomb_pdf, endless_pdf, make_docx, make_pdf
from llmpack.runtime.documents import extract as D
from llmpack.errors import LlmpackError
from llmpack.runtime.documents.sandbox import GRACE_S, MEMORY_BYTES, MEMORY_ENV, Sandbox
from llmpack.runtime.sandbox import pool as P


@pytest.fixture
def sandbox():
    box = Sandbox(workers=1)
    yield box
    box.close()


def test_normal_files_come_back_whole(sandbox: Sandbox):
    doc = sandbox.extract("report.pdf", make_pdf(["Page one.", "Page two."]))
    assert (doc.kind, doc.pages, doc.text) == ("pdf", ["Page one.", "Page two."], "Page one.\n\nPage two.")
    assert sandbox.extract("notes.txt", "héllo".encode(), media_type="text/plain").text == "héllo"
    with pytest.raises(D.DocumentError, match="is binary data"):
        sandbox.extract("x.bin", bytes(range(256)) * 4)
    assert sandbox.started == 1          # one warm worker served all three


def test_a_docx_keeps_its_headings_through_the_worker(sandbox: Sandbox):
    """The headings are what a searched DOCX is cut and cited by ("§ Termination"): without them
    the server cut a DOCX by lines and its sources said "line 280"."""
    data = make_docx([("Heading1", "Terms"), "Pay within 30 days.", ("Heading2", "Termination"), "Ninety days."])
    doc = sandbox.extract("agreement.docx", data)
    assert doc.headings == D.extract("agreement.docx", data).headings == [(0, 1, "Terms"), (26, 2, "Termination")]


@pytest.mark.skipif(os.name == "nt", reason="a terminal's Ctrl+C reaches the process group on POSIX")
def test_ctrl_c_in_the_terminal_leaves_the_workers_to_the_server(sandbox: Sandbox, capfd):
    """Ctrl+C in a terminal sends SIGINT to the server and its warm workers alike; a worker that
    took it printed a KeyboardInterrupt traceback under "llmpack: stopped". It ignores it: the
    server ends its workers as it shuts down."""
    sandbox.extract("warm.txt", b"warm up", media_type="text/plain")
    [pid] = sandbox._pool.pids()
    os.kill(pid, signal.SIGINT)
    time.sleep(0.5)
    assert sandbox.extract("after.txt", b"still here", media_type="text/plain").text == "still here"
    assert sandbox._pool.pids() == [pid] and sandbox.started == 1
    assert "Traceback" not in capfd.readouterr().err


def test_a_page_that_never_ends_costs_one_killed_worker(sandbox: Sandbox):
    hostile = endless_pdf()
    sandbox.extract("warm.txt", b"warm up", media_type="text/plain")
    start = time.monotonic()
    with pytest.raises(D.DocumentError, match="took longer than"):
        sandbox.extract("endless.pdf", hostile, time_limit=2.0)
    assert time.monotonic() - start < 2.0 + GRACE_S + 3.0     # killed, not waited for
    start = time.monotonic()
    assert sandbox.extract("next.docx", make_docx(["Still here."])).text == "Still here."
    assert sandbox.started == 2 and time.monotonic() - start < 15


def test_a_larger_file_is_given_more_time(sandbox: Sandbox, monkeypatch):
    """The deadline grows with the file's size (D.time_limit): a fixed 20 s refused real manuals
    of 700 pages and more. Scaled down here: 1 s, and 3 s more per MB."""
    monkeypatch.setattr(D, "TIME_LIMIT_S", 1.0)
    monkeypatch.setattr(D, "SECONDS_PER_MB", 3.0)
    hostile = endless_pdf(draws=4_000, padding=1 << 20)   # 200 million operations: 25 s for PDFium here
    limit = D.time_limit(len(hostile))
    assert 4.0 < limit < 4.2
    sandbox.extract("warm.txt", b"warm up", media_type="text/plain")
    start = time.monotonic()
    with pytest.raises(D.DocumentError, match=f"reading big.pdf took longer than {limit:.0f} s"):
        sandbox.extract("big.pdf", hostile)
    assert limit <= time.monotonic() - start < limit + GRACE_S + 3.0   # its own limit, not 1 s


@pytest.mark.skipif(os.name == "nt", reason="setrlimit is POSIX; Windows uses a job object")
def test_a_pdf_compression_bomb_is_refused_for_its_memory_and_the_next_file_works():
    """PDFium unpacks a page's whole content stream: 2 MB of file that inflate to 400 MB of
    content need more than a 256 MB worker has. One line, and a fresh worker reads the next file."""
    box = Sandbox(workers=1, memory=256 << 20)
    try:
        with pytest.raises(D.DocumentError, match="bomb.pdf needs more memory to read than llmpack allows"):
            box.extract("bomb.pdf", bomb_pdf(400 << 20))
        assert box.extract("next.pdf", make_pdf(["Fine."])).text == "Fine."
        assert box.started == 2
    finally:
        box.close()


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize(("sig", "said"), [
    (signal.SIGSEGV, "reading.pdf could not be read: llmpack's reader failed on it, so the file may be damaged"),
    (signal.SIGBUS, "reading.pdf could not be read: llmpack's reader failed on it, so the file may be damaged"),
    (signal.SIGABRT, "reading.pdf needs more memory to read than llmpack allows"),   # PDFium at the cap (above)
    (signal.SIGKILL, "reading.pdf needs more memory to read than llmpack allows"),   # the kernel's OOM killer
])
def test_how_the_reader_died_is_what_the_person_is_told(sandbox: Sandbox, sig: int, said: str):
    """A reader that faults on a file (native code: PDFium) is a damaged file, not a big one: the
    pool used to call every dead worker "needs more memory". The worker dies here of the signal a
    fault or an out-of-memory end delivers, while it reads; the next file gets a fresh worker."""
    sandbox.extract("warm.txt", b"warm up", media_type="text/plain")
    [pid] = sandbox._pool.pids()
    threading.Timer(0.5, os.kill, (pid, sig)).start()
    start = time.monotonic()
    with pytest.raises(D.DocumentError) as caught:
        sandbox.extract("reading.pdf", endless_pdf(), time_limit=30)
    assert str(caught.value).startswith(said) and time.monotonic() - start < 5
    assert sandbox.extract("next.txt", b"fine", media_type="text/plain").text == "fine"
    assert sandbox.started == 2


def test_a_reader_that_raises_what_it_did_not_expect_is_a_damaged_file_and_the_worker_is_replaced(capfd):
    """A Python exception the job does not turn into its own sentence (a reader's bug on an odd
    file) ended the worker and was reported as memory. It is said as a failure on the file, its
    traceback goes to the server's console for a bug report, and a fresh worker takes the next job."""
    pool = P.Pool("binascii:crc32", workers=1, memory=256 << 20, max_answer=1 << 20)   # crc32(dict, ...): TypeError
    try:
        with pytest.raises(P.Crashed):
            pool.run({}, b"x", time_limit=10)
        assert "TypeError" in capfd.readouterr().err
        with pytest.raises(P.Crashed):
            pool.run({}, b"x", time_limit=10)
        assert pool.started == 2
    finally:
        pool.close()


@pytest.mark.skipif(os.name == "nt", reason="setrlimit is POSIX; Windows uses a job object")
def test_a_file_that_needs_too_much_memory_is_refused_and_the_next_one_works():
    """30 MB of emoji become 30 MB of bytes plus a 30 MB string: more than a 64 MB worker has."""
    box = Sandbox(workers=1, memory=64 << 20)
    try:
        with pytest.raises(D.DocumentError, match="needs more memory to read than llmpack allows"):
            box.extract("emoji.txt", "😀".encode() * (30 << 18), media_type="text/plain")
        assert box.extract("small.docx", make_docx(["Fine."])).text == "Fine."
        assert box.started == 2
    finally:
        box.close()


def test_the_memory_cap_is_set_by_llmpack_extract_memory_mb(monkeypatch: pytest.MonkeyPatch):
    """LLMPACK_EXTRACT_MEMORY_MB: the cap in MiB (the Windows test under Wine sets it low); a value
    that is no size is one line that says what to give, not a reader with no cap."""
    monkeypatch.setenv(MEMORY_ENV, "64")
    assert Sandbox(workers=1).memory == 64 << 20
    monkeypatch.delenv(MEMORY_ENV)
    assert Sandbox(workers=1).memory == MEMORY_BYTES
    for bad in ("lots", "-5", "8", "1.5"):
        monkeypatch.setenv(MEMORY_ENV, bad)
        with pytest.raises(LlmpackError, match=rf"{MEMORY_ENV}='{re.escape(bad)}': give the memory .* in MiB"):
            Sandbox(workers=1)


def test_the_workers_answer_is_held_to_the_text_limit_again(sandbox: Sandbox, monkeypatch):
    """The worker reads hostile files, so its answer is checked as if this process had read the
    file (issue 46): here the limit is lowered in this process only, and the worker's answer of
    ordinary length is over it; a malformed answer is refused the same way."""
    text = "A" * 5000
    assert sandbox.extract("big.txt", text.encode(), media_type="text/plain").text == text
    monkeypatch.setattr(D, "MAX_TEXT_CHARS", 4000)
    with pytest.raises(D.DocumentError, match="big.txt holds more than 4,000 characters of text"):
        sandbox.extract("big.txt", text.encode(), media_type="text/plain")
    from llmpack.runtime.documents.sandbox import _document
    good = {"name": "a.pdf", "kind": "pdf", "text": "x", "size": 1, "pages": ["x"], "headings": []}
    assert _document("a.pdf", good).text == "x"
    for bad in ({**good, "text": 3}, {**good, "pages": "x"}, {**good, "headings": [[1]]}, [], {"text": "x"}):
        with pytest.raises(D.DocumentError, match="its reader gave an answer llmpack cannot use"):
            _document("a.pdf", bad)
    with pytest.raises(D.DocumentError, match="has 5,001 pages"):
        _document("a.pdf", {**good, "pages": [""] * 5001})
