"""Spec for the two stores that grow with use (issue 36, finding 8): each has a total bound, counted
in bytes of what the file holds, and forgets the oldest past it.

- The Responses store (runtime/server/responses/store.py): one conversation up to MAX_ENTRY_BYTES
  of UTF-8, all of one model's up to MAX_MODEL_BYTES; the oldest are dropped, other models' stay.
- The documents index (runtime/documents/index.py): the text of every long document
  together up to MAX_INDEX_BYTES; a new document past it makes the index forget the documents used
  longest ago, and `Indexed.forgot` names them (the page says so: tests/test_browser_long_documents.py).

Files written before the sizes were kept are measured once when opened.

All three SQLite stores (those two and the saved chats) open one way (llmpack/stores.py): this
user's only, WAL, a busy timeout, and a cap on the file that a write cannot pass."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from llmpack import stores
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import index as I
from llmpack.runtime.chats.chats import ChatStore, clean_chat
from llmpack.runtime.server.responses import store as S


def conversation(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ------------------------------------------------------------------ Responses store

def test_a_stored_response_is_measured_in_bytes_not_characters(tmp_path: Path):
    """3 million CJK characters are under 8 million characters but 9 MB of UTF-8: too big to keep."""
    store = S.ResponseStore(tmp_path / "r.sqlite3")
    wide = "漢" * 3_000_000
    assert len(wide) < S.MAX_ENTRY_BYTES < len(wide.encode())
    with pytest.raises(S.StoreError) as info:
        store.put("model", "resp_wide", conversation(wide), {"id": "resp_wide"})
    msg = str(info.value)
    assert "\n" not in msg and f"{S.MAX_ENTRY_BYTES >> 20} MB" in msg and "store: false" in msg, msg
    assert store.get("model", "resp_wide") is None
    narrow = "x" * 3_000_000   # the same count of characters in ASCII is kept
    store.put("model", "resp_narrow", conversation(narrow), {"id": "resp_narrow"})
    assert store.get("model", "resp_narrow")[0][0]["content"] == narrow


def test_each_model_has_a_total_and_the_oldest_go_first(tmp_path: Path):
    store = S.ResponseStore(tmp_path / "r.sqlite3", total_bytes=1 << 20)
    entry = "é" * 150_000            # 300 KB of UTF-8 each (150 K characters): three fit in 1 MiB, four do not
    for i in range(6):
        store.put("model", f"resp_{i}", conversation(entry), {"id": f"resp_{i}"})
    store.put("other", "resp_other", conversation(entry), {"id": "resp_other"})
    assert [store.get("model", f"resp_{i}") is not None for i in range(6)] == [False] * 3 + [True] * 3
    assert store.get("other", "resp_other") is not None     # another model's total is its own
    with sqlite3.connect(store.path) as con:
        (held,) = con.execute("SELECT SUM(LENGTH(CAST(messages AS BLOB)) + LENGTH(CAST(response AS BLOB))) "
                              "FROM responses WHERE model = 'model'").fetchone()
    assert held <= store.total_bytes


def test_the_default_total_is_far_below_what_the_count_alone_allowed():
    """1,000 responses of 8 MB was 8 GB per model; the total keeps a model's store to MAX_MODEL_BYTES."""
    store = S.ResponseStore(Path("unused.sqlite3"))
    assert store.total_bytes == S.MAX_MODEL_BYTES <= 256 << 20 < S.MAX_RESPONSES * S.MAX_ENTRY_BYTES


def test_a_store_written_before_sizes_were_kept_is_measured_and_bounded(tmp_path: Path):
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as con:   # the schema of earlier versions: no size column
        con.execute("CREATE TABLE responses (model TEXT NOT NULL, id TEXT NOT NULL, created REAL NOT NULL, "
                    "messages TEXT NOT NULL, response TEXT NOT NULL, PRIMARY KEY (model, id))")
        for i in range(3):
            con.execute("INSERT INTO responses VALUES ('model', ?, ?, ?, '{}')",
                        (f"resp_{i}", float(i), '[{"role": "user", "content": "' + "ü" * 150_000 + '"}]'))
    store = S.ResponseStore(path, total_bytes=700_000)
    store.put("model", "resp_new", conversation("ü" * 150_000), {"id": "resp_new"})
    assert [store.get("model", f"resp_{i}") is not None for i in range(3)] == [False, False, True]
    assert store.get("model", "resp_new") is not None


# ------------------------------------------------------------------ documents index

def text_doc(name: str, topic: str, words: int = 6000) -> D.Document:
    body = "\n".join(f"Paragraph {i} about {topic}: " + " ".join(f"{topic}{i % 97}" for _ in range(12))
                     for i in range(words // 12))
    return D.extract(name, body.encode())


def held_bytes(index: I.DocumentIndex) -> int:
    with sqlite3.connect(index.path) as con:
        return con.execute("SELECT COALESCE(SUM(LENGTH(CAST(heading AS BLOB)) + LENGTH(CAST(text AS BLOB))), 0) "
                           "FROM chunks").fetchone()[0] + con.execute(   # and each document's whole text
            "SELECT COALESCE(SUM(LENGTH(CAST(text AS BLOB))), 0) FROM texts").fetchone()[0]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_index_forgets_the_documents_used_longest_ago_past_its_cap(data_dir: Path):
    first, second, third = (text_doc(f"{t}.txt", t) for t in ("alpha", "bravo", "charlie"))
    probe = I.DocumentIndex(data_dir / "probe.sqlite3")
    one = held_bytes_of(probe, first)
    index = I.DocumentIndex(max_bytes=int(one * 2.5))   # two documents fit, three do not
    a = index.add(first, "model")
    b = index.add(second, "model")
    assert a.forgot == () and b.forgot == ()
    index.claim(a.id, "model")                          # alpha is used again: bravo is now the oldest
    c = index.add(third, "model")
    assert c.forgot == ("bravo.txt",)
    assert index.get(b.id) is None and index.get(a.id) is not None and index.get(c.id) is not None
    assert index.search([b.id], "bravo5") == []          # its search terms went with it
    assert index.search([a.id], "alpha5") and index.search([c.id], "charlie5")
    assert held_bytes(index) <= index.max_bytes
    with sqlite3.connect(index.path) as con:
        con.execute("INSERT INTO chunk_text (chunk_text) VALUES ('integrity-check')")   # FTS5 agrees with chunks
        assert con.execute("SELECT COUNT(*) FROM chunks WHERE doc = ?", (b.id,)).fetchone() == (0,)
        assert con.execute("SELECT COUNT(*) FROM owners WHERE doc = ?", (b.id,)).fetchone() == (0,)


def held_bytes_of(index: I.DocumentIndex, doc: D.Document) -> int:
    index.add(doc, "probe")
    return held_bytes(index)


def test_a_document_bigger_than_the_whole_index_is_refused_in_one_line(data_dir: Path):
    index = I.DocumentIndex(max_bytes=10_000)
    keep = index.add(text_doc("small.txt", "small", words=200), "model")
    with pytest.raises(I.IndexUnusable) as info:
        index.add(text_doc("huge.txt", "huge"), "model")
    msg = str(info.value)
    assert "\n" not in msg and "huge.txt" in msg and "attach a part of it" in msg, msg
    assert index.get(keep.id) is not None                 # nothing was forgotten for a file that was not kept


def test_the_default_cap_bounds_the_index():
    assert I.DocumentIndex().max_bytes == I.MAX_INDEX_BYTES <= 256 << 20


def test_an_index_written_before_sizes_were_kept_is_measured(data_dir: Path):
    old = I.DocumentIndex()
    first = old.add(text_doc("alpha.txt", "alpha"), "model")
    with sqlite3.connect(old.path) as con:   # as earlier versions wrote it: no bytes column
        con.execute("ALTER TABLE documents DROP COLUMN bytes")
    index = I.DocumentIndex(max_bytes=int(held_bytes(old) * 1.5))
    second = index.add(text_doc("bravo.txt", "bravo"), "model")
    assert second.forgot == ("alpha.txt",) and index.get(first.id) is None


# ------------------------------------------------------------------ one way to open a store

def test_the_three_stores_open_one_way(tmp_path: Path):
    """Each is private, in WAL, waits for another app's write, and has a cap on its file."""
    chats = ChatStore(tmp_path / "c" / "chats.sqlite3")
    responses = S.ResponseStore(tmp_path / "r" / "r.sqlite3")
    index = I.DocumentIndex(tmp_path / "d" / "documents.sqlite3")
    chats.put("model", clean_chat({"title": "t", "messages": [{"role": "user", "content": "hi"}]}, chat_id="c1"))
    responses.put("model", "resp_1", conversation("hi"), {"id": "resp_1"})
    index.add(text_doc("alpha.txt", "alpha", words=200), "model")
    for store in (chats, responses, index):
        assert (store.path.stat().st_mode & 0o777, store.path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
        with closing(store._connect()) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert con.execute("PRAGMA busy_timeout").fetchone()[0] == stores.BUSY_S * 1000
            pages = con.execute("PRAGMA max_page_count").fetchone()[0]
            size = con.execute("PRAGMA page_size").fetchone()[0]
            assert pages * size <= stores.MAX_FILE_BYTES


def test_a_write_past_the_files_cap_fails_and_keeps_what_was_there(tmp_path: Path):
    cap = 256 << 10
    store = stores.StoreFile(tmp_path / "s.sqlite3", "unused", "CREATE TABLE IF NOT EXISTS t (v BLOB);", max_bytes=cap)
    with closing(store.connect()) as con, con:
        con.execute("INSERT INTO t VALUES (?)", (b"kept",))
    with pytest.raises(sqlite3.OperationalError, match="full"), closing(store.connect()) as con, con:
        con.execute("INSERT INTO t VALUES (?)", (bytes(2 * cap),))
    with closing(store.connect()) as con:
        assert con.execute("SELECT v FROM t").fetchall() == [(b"kept",)]
    assert store.path.stat().st_size <= cap
