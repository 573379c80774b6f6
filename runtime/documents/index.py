"""The document index: chunks of long documents in SQLite FTS5, ranked by BM25.

One file, `documents.sqlite3`, in the per-user data folder next to the saved chats (its own
file, so the chat store's schema and this one change apart), opened as every store is
(llmpack/stores.py: this user's only, WAL, a busy timeout, a cap on the file). One index serves
every llmpack app of this user (an app may name its own folder: core/files.py):

    documents  id ("doc-" + 32 hex of the content's SHA-256), name, kind, pages, chunks, chars, created, used
    owners     (document, model key): which models' chats use it; `--forget` removes one model's
               rows and then every document no model owns any more
    chunks     the pieces (documents/chunks.py): ord, page, label, heading, text
    texts      the document as it was read (text, its pages' lengths, headings, size), so a chat that
               sends only its `file_id` can have it read whole (`document`): the chat page sends
               each file once, short ones too, and its `file_id` in every later turn
    summaries  what a model wrote of each part of a document for a question about the whole file
               (documents/overview.py), by model and by how the file was cut (`plan`), so the
               next such question reads them instead of the file
    chunk_text FTS5 over (heading, text, grams), external content = chunks, Porter stemming over
               unicode61 with diacritics folded, so "keeps" finds "keep" and "resume" finds "résumé";
               `grams` holds the pairs of characters of the chunk's Chinese or Japanese runs
               (documents/scripts.py), which unicode61 would take as one word each (empty for
               other text), and a question's CJK words are asked for as their pairs

A document is stored in one transaction: a file that fails half-way (bad input, a full disk,
the app closed) leaves nothing behind. The index is bounded: the text it keeps (`bytes`, UTF-8)
stays under MAX_INDEX_BYTES, and a document that would take it past the cap makes room by
forgetting the documents used longest ago, in the same transaction; `Indexed.forgot` names them,
so the page can say which file was forgotten and why. A chat that used one still holds its text
and sends it again with its `file_id`, and it is indexed anew then. The same content is stored once however often it is
sent: its id is its hash, which is what the chat page keeps in a saved chat (`file_id`), so
reopening a chat next week searches the index built when the file was attached.

Why FTS5 and BM25, not the model's embeddings: see docs/BENCHMARKS.md (retrieval). It is in
every CPython's sqlite3 we ship (docs/PORTABILITY.md), indexes 300 pages in well under a second
and needs no second model.
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from llmpack.stores import StoreFile
from llmpack.runtime.documents.chunks import Chunk, chunk, line_range
from llmpack.runtime.documents.extract import Document, DocumentError
from llmpack.runtime.documents.scripts import bigrams, grams, split_word

INDEX_FILE = "documents.sqlite3"
MAX_QUERY_TERMS = 32
# The text of every document together, in UTF-8 bytes (a 300-page book is about 1 MB); the file
# is about twice that with FTS5's terms. Over it, the documents used longest ago are forgotten.
MAX_INDEX_BYTES = 256 << 20
SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, pages INTEGER NOT NULL,
    chunks INTEGER NOT NULL, chars INTEGER NOT NULL, created INTEGER NOT NULL, used INTEGER NOT NULL,
    bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS owners (
    doc TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE, model TEXT NOT NULL, PRIMARY KEY (doc, model));
CREATE INDEX IF NOT EXISTS owners_by_model ON owners (model);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, doc TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, page INTEGER NOT NULL, label TEXT NOT NULL, heading TEXT NOT NULL, text TEXT NOT NULL,
    grams TEXT NOT NULL DEFAULT '', UNIQUE (doc, ord));
CREATE INDEX IF NOT EXISTS chunks_by_page ON chunks (doc, page);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_text USING fts5(
    heading, text, grams, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS texts (
    doc TEXT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE, text TEXT NOT NULL, pages TEXT NOT NULL,
    headings TEXT NOT NULL, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS summaries (
    doc TEXT NOT NULL REFERENCES documents (id) ON DELETE CASCADE, model TEXT NOT NULL, plan TEXT NOT NULL,
    part INTEGER NOT NULL, text TEXT NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (doc, model, plan, part));
"""
# A file written before `grams` existed: the column is added, filled, and the search terms rebuilt
# (FTS5's columns cannot be altered), once; PRAGMA user_version says it was done.
GRAMS_VERSION = 1
ADD_GRAMS = ("ALTER TABLE chunks ADD COLUMN grams TEXT NOT NULL DEFAULT ''",
             "DROP TABLE chunk_text")
# Words that match nearly every chunk: leaving them out of the query keeps BM25 on the words that
# say what the question is about (FTS5 would weigh them down, but each still has to be looked up).
STOPWORDS = frozenset("""a about above after again all am an and any are as at be been before being below between
both but by can could did do does doing down during each few for from further had has have having he her here
hers him his how i if in into is it its itself just many me more most much my no nor not now of off on once only or other
our ours out over own same she should so some such than that the their theirs them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would
you your yours file document text page pages say says said tell""".split())
# A file written before `bytes` existed: the column is added and filled once from its chunks.
ADD_BYTES = ("ALTER TABLE documents ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0",
             "UPDATE documents SET bytes = (SELECT COALESCE(SUM(LENGTH(CAST(heading AS BLOB)) + "
             "LENGTH(CAST(text AS BLOB))), 0) FROM chunks WHERE chunks.doc = documents.id) + "
             "COALESCE((SELECT LENGTH(CAST(text AS BLOB)) FROM texts WHERE texts.doc = documents.id), 0)")
_WORD = re.compile(r"\w+", re.UNICODE)
_PAGE_REF = re.compile(r"\b(?:pages?|pp?\.)\s*(\d{1,5})(?:\s*(?:-|–|to|and)\s*(\d{1,5}))?", re.I)


class IndexUnusable(DocumentError):
    """The index cannot be used (no FTS5 in this SQLite, a folder that cannot be written); one line."""


@dataclass(frozen=True, slots=True)
class Indexed:
    """A document in the index."""
    id: str
    name: str
    kind: str
    pages: int     # PDF pages; 0 for other kinds
    chunks: int
    chars: int
    forgot: tuple[str, ...] = ()   # names of the documents forgotten to make room for this one


@dataclass(frozen=True, slots=True)
class Hit:
    """One chunk found for a question; `score` is BM25's (lower is better), 0 when not ranked."""
    doc: str
    ord: int
    page: int
    label: str
    heading: str
    text: str
    score: float = 0.0


def doc_id(doc: Document) -> str:
    """The id of a document's content: the same text (and pages, and headings) is the same id,
    whatever its file was called or how it was sent."""
    h = hashlib.sha256(doc.kind.encode())
    for part in (doc.pages or [doc.text]):
        h.update(b"\0" + part.encode("utf-8", "surrogatepass"))
    for at, level, title in doc.headings:
        h.update(f"\1{at}:{level}:{title}".encode("utf-8", "surrogatepass"))
    return "doc-" + h.hexdigest()[:32]


def fts5_available() -> bool:
    """Whether this Python's sqlite3 has FTS5 (the stub's self-test reports it for each target)."""
    with closing(sqlite3.connect(":memory:")) as con:
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
        except sqlite3.OperationalError:
            return False
    return True


def query_terms(question: str) -> list[str]:
    """The words of a question that the index is asked for, most telling first (longest, as a
    cheap stand-in for rarity), at most MAX_QUERY_TERMS."""
    words = dict.fromkeys(w for word in (m.group().lower() for m in _WORD.finditer(question))
                          for piece, cjk in split_word(word) for w in (bigrams(piece) if cjk else [piece])
                          if w not in STOPWORDS and (len(w) > 1 or w.isdigit() or cjk))
    return sorted(words, key=len, reverse=True)[:MAX_QUERY_TERMS]


def page_refs(question: str, last_page: int) -> list[int]:
    """Pages a question names ("page 212", "p. 12", "pages 3-5"), within the document."""
    out: list[int] = []
    for m in _PAGE_REF.finditer(question):
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        if first <= last <= first + 5:
            out += [p for p in range(first, last + 1) if 1 <= p <= last_page and p not in out]
    return out


class DocumentIndex:
    """The index file; opened on first use (a server whose page never gets a long document never
    creates it). Safe from any thread: one connection per call."""

    def __init__(self, path: Path | None = None, max_bytes: int = MAX_INDEX_BYTES) -> None:
        self.max_bytes = max_bytes
        # the file holds the text about twice over (FTS5's terms), and room to make room in
        self._file = StoreFile(path, INDEX_FILE, SCHEMA, _upgrade, max_bytes=max(4 * max_bytes, 64 << 20),
                               unusable=IndexUnusable)

    @property
    def path(self) -> Path:
        return self._file.path

    def _connect(self) -> sqlite3.Connection:
        try:
            return self._file.connect()
        except sqlite3.OperationalError as exc:
            if "fts5" in str(exc).lower():
                raise IndexUnusable("this program's SQLite has no full-text search (FTS5), so long documents "
                                    "cannot be searched; attach a shorter part of the file") from None
            raise IndexUnusable(f"cannot use the document index {self.path} ({exc}); free some disk space, or set "
                                "LLMPACK_DATA_DIR to a folder you can write to") from None

    def add(self, doc: Document, owner: str) -> Indexed:
        """Store `doc` (once per content) and mark it used by `owner` (a model key)."""
        key, now = doc_id(doc), int(time.time() * 1000)
        whole = len(doc.text.encode("utf-8", "surrogatepass"))   # its text, kept to be read whole (`texts`)
        try:
            with closing(self._connect()) as con, con:
                # the check and the insert in one write transaction: two requests (or two apps) adding
                # the same file at once both found it missing, and the second failed on its id
                con.execute("BEGIN IMMEDIATE")
                found = self._get(con, key)
                if found is None:
                    pieces = chunk(doc)
                    if not pieces:
                        raise IndexUnusable(f"{doc.name} holds no text to search; copy its text in instead")
                    size = sum(len(c.heading.encode("utf-8", "surrogatepass")) +
                               len(c.text.encode("utf-8", "surrogatepass")) for c in pieces)
                    # a Chinese or Japanese text's pairs take room too, and so does the text kept whole
                    size += len(grams(doc.text).encode()) + whole
                    if size > self.max_bytes:
                        raise IndexUnusable(f"{doc.name} holds {size / (1 << 20):.0f} MB of text, more than the "
                                            f"document index keeps ({self.max_bytes >> 20} MB); attach a part of it")
                    forgot = self._make_room(con, size)
                    con.execute("INSERT INTO documents (id, name, kind, pages, chunks, chars, created, used, bytes) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (key, doc.name, doc.kind, len(doc.pages), len(pieces), len(doc.text), now, now, size))
                    _insert(con, key, pieces)
                    _keep_text(con, key, doc)
                    found = Indexed(key, doc.name, doc.kind, len(doc.pages), len(pieces), len(doc.text), forgot)
                else:
                    con.execute("UPDATE documents SET used = ? WHERE id = ?", (now, key))
                    if _keep_text(con, key, doc):   # stored by a release that kept only its parts
                        con.execute("UPDATE documents SET bytes = bytes + ? WHERE id = ?", (whole, key))
                con.execute("INSERT OR IGNORE INTO owners (doc, model) VALUES (?, ?)", (key, owner))
        except sqlite3.Error as exc:   # the transaction is rolled back: nothing half-stored
            raise IndexUnusable(f"could not save {doc.name} in the document index ({exc}); free some disk space "
                              "and attach it again") from None
        return found

    def document(self, key: str) -> Document | None:
        """Document `key` as it was read, to be read whole (its pages and headings give its
        sources their pages and sections); None when the index has forgotten it, or when a
        release that kept only its parts stored it."""
        with closing(self._connect()) as con:
            row = con.execute("SELECT d.name, d.kind, t.text, t.pages, t.headings, t.size FROM documents d "
                              "JOIN texts t ON t.doc = d.id WHERE d.id = ?", (key,)).fetchone()
        if row is None:
            return None
        name, kind, text, lengths, headings, size = row
        pages, at = [], 0
        for n in json.loads(lengths):   # PDF pages are joined by a blank line (extract.py)
            pages.append(text[at:at + n])
            at += n + 2
        doc = Document(name, kind, text, size, pages, [tuple(h) for h in json.loads(headings)])
        return doc if doc_id(doc) == key else None   # pages that were not joined as extract.py joins them

    def _make_room(self, con: sqlite3.Connection, size: int) -> tuple[str, ...]:
        """Forget the documents used longest ago until `size` more bytes fit under the cap; their names."""
        total = con.execute("SELECT COALESCE(SUM(bytes), 0) FROM documents").fetchone()[0]
        forgot: list[str] = []
        if total + size <= self.max_bytes:
            return ()
        for key, name, held in con.execute("SELECT id, name, bytes FROM documents ORDER BY used, created").fetchall():
            _drop(con, key)
            forgot.append(name)
            total -= held
            if total + size <= self.max_bytes:
                break
        return tuple(forgot)

    def claim(self, key: str, owner: str) -> None:
        """Mark a stored document used by `owner` now (a chat sent it again by its file_id)."""
        with closing(self._connect()) as con, con:
            con.execute("UPDATE documents SET used = ? WHERE id = ?", (int(time.time() * 1000), key))
            con.execute("INSERT OR IGNORE INTO owners (doc, model) SELECT id, ? FROM documents WHERE id = ?",
                        (owner, key))

    def get(self, key: str) -> Indexed | None:
        with closing(self._connect()) as con:
            return self._get(con, key)

    @staticmethod
    def _get(con: sqlite3.Connection, key: str) -> Indexed | None:
        row = con.execute("SELECT id, name, kind, pages, chunks, chars FROM documents WHERE id = ?", (key,)).fetchone()
        return Indexed(*row) if row else None

    def search(self, keys: Sequence[str], question: str, limit: int = 64) -> list[Hit]:
        """The chunks of documents `keys` that best match `question`, best first (BM25 with the
        heading weighted twice the body: a section named like the question is a strong sign).
        Chunks that hold every word of the question come before those that hold only some: BM25
        alone can rank a chunk that repeats two common words of the question ("night market",
        "changed its manager") above the one that holds all of them."""
        terms = query_terms(question)
        if not terms or not keys:
            return []
        quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
        found: dict[tuple[str, int], Hit] = {}
        for match in ([" AND ".join(quoted)] if len(quoted) > 1 else []) + [" OR ".join(quoted)]:
            for h in self._ranked(keys, match, limit):
                found.setdefault((h.doc, h.ord), h)
        return list(found.values())[:limit]

    def _ranked(self, keys: Sequence[str], match: str, limit: int) -> list[Hit]:
        marks = ",".join("?" * len(keys))
        with closing(self._connect()) as con:
            rows = con.execute(
                "SELECT c.doc, c.ord, c.page, c.label, c.heading, c.text, bm25(chunk_text, 2.0, 1.0, 1.0) AS score "
                f"FROM chunk_text JOIN chunks c ON c.id = chunk_text.rowid WHERE chunk_text MATCH ? "
                f"AND c.doc IN ({marks}) ORDER BY score LIMIT ?", (match, *keys, limit)).fetchall()
        return [Hit(*r) for r in rows]

    def on_pages(self, key: str, pages: Iterable[int]) -> list[Hit]:
        """The chunks of the given pages, in page order."""
        pages = list(pages)
        if not pages:
            return []
        with closing(self._connect()) as con:
            rows = con.execute(f"SELECT doc, ord, page, label, heading, text FROM chunks WHERE doc = ? AND page IN "
                               f"({','.join('?' * len(pages))}) ORDER BY ord", (key, *pages)).fetchall()
        return [Hit(*r) for r in rows]

    def at_line(self, key: str, line: int) -> Hit | None:
        """The chunk of a document cut by lines ("lines 120-161") that holds `line`."""
        with closing(self._connect()) as con:
            for ord_, label in con.execute("SELECT ord, label FROM chunks WHERE doc = ? AND label LIKE 'line%' "
                                           "ORDER BY ord", (key,)):
                first, last = line_range(label)
                if first <= line <= last:
                    row = con.execute("SELECT doc, ord, page, label, heading, text FROM chunks WHERE doc = ? AND "
                                      "ord = ?", (key, ord_)).fetchone()
                    return Hit(*row)
        return None

    def around(self, found: Sequence[tuple[str, int]]) -> list[Hit]:
        """The chunks right after and right before each of `found` ((document, ord) pairs, best
        first), in that order: the next chunk first, since a matched sentence leads into it."""
        wanted = list(dict.fromkeys((key, o + step) for key, o in found for step in (1, -1) if o + step >= 0))
        if not wanted:
            return []
        with closing(self._connect()) as con:
            rows = {(r[0], r[1]): Hit(*r) for r in con.execute(
                "SELECT doc, ord, page, label, heading, text FROM chunks WHERE (doc, ord) IN "
                f"(VALUES {','.join(['(?, ?)'] * len(wanted))})", [v for pair in wanted for v in pair]).fetchall()}
        return [rows[w] for w in wanted if w in rows]

    def spread(self, keys: Sequence[str], words: Sequence[str]) -> dict[str, int]:
        """How many chunks of documents `keys` hold each of `words` (query_terms' form): a word in
        a few chunks points at a place, one in most of them or none says nothing of where."""
        marks = ",".join("?" * len(keys))
        out = {}
        with closing(self._connect()) as con:
            for w in words:
                out[w] = con.execute(
                    f"SELECT count(*) FROM chunk_text JOIN chunks c ON c.id = chunk_text.rowid WHERE chunk_text MATCH ? "
                    f"AND c.doc IN ({marks})", ('"' + w.replace('"', '""') + '"', *keys)).fetchone()[0]
        return out

    def summaries(self, key: str, model: str) -> dict[str, dict[int, str]]:
        """The summaries `model` wrote of document `key`'s parts: plan -> part -> text."""
        out: dict[str, dict[int, str]] = {}
        with closing(self._connect()) as con:
            for plan, part, text in con.execute("SELECT plan, part, text FROM summaries WHERE doc = ? AND model = ? "
                                                "ORDER BY created", (key, model)):
                out.setdefault(plan, {})[part] = text
        return out

    def keep_summary(self, key: str, model: str, plan: str, part: int, text: str) -> None:
        """Keep one part's summary (nothing when the document has been forgotten meanwhile)."""
        with closing(self._connect()) as con, con:
            if con.execute("SELECT 1 FROM documents WHERE id = ?", (key,)).fetchone():
                con.execute("INSERT OR REPLACE INTO summaries VALUES (?, ?, ?, ?, ?, ?)",
                            (key, model, plan, part, text, int(time.time() * 1000)))

    def first(self, key: str, n: int) -> list[Hit]:
        """The first `n` chunks: what a question that names nothing in the document gets."""
        with closing(self._connect()) as con:
            rows = con.execute("SELECT doc, ord, page, label, heading, text FROM chunks WHERE doc = ? "
                               "ORDER BY ord LIMIT ?", (key, n)).fetchall()
        return [Hit(*r) for r in rows]

    def usage(self, owner: str) -> tuple[int, int]:
        """(documents only `owner` uses, bytes of their text): what `--forget` would remove.
        Creates nothing when there is no index yet."""
        if not self.path.is_file():
            return 0, 0
        with closing(self._connect()) as con:
            n, size = con.execute(
                "SELECT COUNT(DISTINCT d.id), COALESCE(SUM(LENGTH(CAST(c.text AS BLOB))), 0) FROM documents d "
                "JOIN chunks c ON c.doc = d.id WHERE EXISTS (SELECT 1 FROM owners o WHERE o.doc = d.id AND "
                "o.model = ?) AND NOT EXISTS (SELECT 1 FROM owners o WHERE o.doc = d.id AND o.model != ?)",
                (owner, owner)).fetchone()
        return int(n), int(size)

    def forget(self, owner: str) -> int:
        """Drop `owner`'s claim on every document and delete the documents nobody claims any more
        (their chunks and search terms with them); how many documents went."""
        if not self.path.is_file():
            return 0
        with closing(self._connect()) as con, con:
            con.execute("DELETE FROM owners WHERE model = ?", (owner,))
            con.execute("DELETE FROM summaries WHERE model = ?", (owner,))   # what that model wrote
            gone = [r[0] for r in con.execute("SELECT id FROM documents d WHERE NOT EXISTS "
                                              "(SELECT 1 FROM owners o WHERE o.doc = d.id)").fetchall()]
            for key in gone:
                _drop(con, key)
        try:
            with closing(self._connect()) as con:
                con.execute("VACUUM")   # give the space back: the text of a 300-page file is megabytes
        except sqlite3.OperationalError:   # another app has the file busy: the rows are gone all the same
            pass
        return len(gone)


def _upgrade(con: sqlite3.Connection) -> None:
    """An index an earlier release wrote: the documents' sizes, then the CJK pairs (`grams`)."""
    _add_bytes(con)
    if con.execute("PRAGMA user_version").fetchone()[0] < GRAMS_VERSION:
        _add_grams(con)


def _add_bytes(con: sqlite3.Connection) -> None:
    if "bytes" not in {r[1] for r in con.execute("PRAGMA table_info(documents)")}:
        with con:
            for statement in ADD_BYTES:
                con.execute(statement)


def _drop(con: sqlite3.Connection, key: str) -> None:
    """Delete one document: its search terms (FTS5's external content needs them told), chunks, owners."""
    con.execute("INSERT INTO chunk_text (chunk_text, rowid, heading, text, grams) "
                "SELECT 'delete', id, heading, text, grams FROM chunks WHERE doc = ?", (key,))
    con.execute("DELETE FROM documents WHERE id = ?", (key,))


def _keep_text(con: sqlite3.Connection, key: str, doc: Document) -> bool:
    """Keep `doc` whole beside its chunks (once); whether it was not kept before."""
    pages = json.dumps([len(p) for p in doc.pages])
    return con.execute("INSERT OR IGNORE INTO texts (doc, text, pages, headings, size) VALUES (?, ?, ?, ?, ?)",
                       (key, doc.text, pages, json.dumps(doc.headings), doc.size)).rowcount > 0


def _insert(con: sqlite3.Connection, key: str, pieces: list[Chunk]) -> None:
    for c in pieces:
        pairs = grams(c.heading + "\n" + c.text)
        rowid = con.execute("INSERT INTO chunks (doc, ord, page, label, heading, text, grams) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, c.ord, c.page, c.label, c.heading, c.text, pairs)).lastrowid
        con.execute("INSERT INTO chunk_text (rowid, heading, text, grams) VALUES (?, ?, ?, ?)",
                    (rowid, c.heading, c.text, pairs))


def _add_grams(con: sqlite3.Connection) -> None:
    """An index written before `grams`: add the column, fill it, rebuild the search terms."""
    with con:
        if "grams" not in {r[1] for r in con.execute("PRAGMA table_info(chunks)")}:
            for statement in ADD_GRAMS:
                con.execute(statement)
            fts = SCHEMA.index("CREATE VIRTUAL TABLE")
            con.execute(SCHEMA[fts:SCHEMA.index(";", fts)])
            for rowid, heading, text in con.execute("SELECT id, heading, text FROM chunks").fetchall():
                pairs = grams(heading + "\n" + text)
                if pairs:
                    con.execute("UPDATE chunks SET grams = ? WHERE id = ?", (pairs, rowid))
            con.execute("INSERT INTO chunk_text (chunk_text) VALUES ('rebuild')")
        con.execute(f"PRAGMA user_version = {GRAMS_VERSION}")
