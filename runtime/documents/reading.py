"""How a chat request's files are read: whole, or the parts that answer the latest question.

Each file part of a request says how it wants to be read (`"read"` on the part's `file` object;
README, "Files in chat requests"):

- `"auto"` (the default): whole when every file of the request fits the budget *and* the engine
  reads it quickly: at the prompt speed it measured on this computer (`prompt_tok_s`), the first
  word comes within FIRST_WORD_S. Otherwise the smaller files stay whole while they take at most
  half of the budget and the time, and the rest are indexed (documents/index.py) and searched. On 2
  CPU cores a 9-page PDF (3,757 tokens) read whole waited 24 s for its first word, searched about
  2 s, and the 0.5B demo model answered no better from the whole file; on a GPU "whole" wins more
  often. A searched file's report says why (`"searched": "slow"` with `whole_s`, the expected wait
  when read whole), so the page can offer to read it whole;
- `"whole"`: all of it, or HTTP 400 `attachments_too_long` when it does not fit; sent by its
  `file_id` alone, it is the index's copy of the file as it was read (`DocumentIndex.document`:
  its pages and headings, so its sources name them), which is how the chat page sends every file
  after the first turn;
- `"excerpts"`: always searched, even when it would fit (a long chat about one manual), and
  searched even for a question about the whole file (which `auto` answers from summaries of all
  its parts: documents/overview.py).

A searched file leaves a one-line stand-in in the message that carried it, and the parts that
best match the *latest* user message go into that message, under the file's name, within what
the context has left once everything else in the conversation is counted, and at most
EXCERPT_TOKENS (excerpts.read). The
same question over the same index picks the same parts, so a chat's earlier turns are not
re-read differently, and the reply's report (`Arranged.reports`) says which parts were read.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmpack.runtime.documents import excerpts, overview, places
from llmpack.runtime.documents.attribution import Attribution
from llmpack.runtime.documents.extract import Document, DocumentError, format_message
from llmpack.runtime.documents.index import DocumentIndex, Indexed

READ_MODES = ("auto", "whole", "excerpts")
PER_MESSAGE = 8          # tokens a chat template adds around each message (ChatML: 5), counted generously
MIN_EXCERPT_ROOM = 64    # tokens: less than this left for a searched file and the request is refused
# Tokens of excerpts one question reads at most, however large the context: the prompt time of
# a question about a long file. On 2 CPU cores the 0.5B demo model reads 100-200 prompt tokens a
# second (AVX2 / AVX-512): 2,048 tokens of excerpts took 11 s to the first word. Read as passages
# (excerpts.py), 320 tokens hold the sentence that answers and the sentences around it, and a few
# other candidates. On the real corpus the demo model stated more facts from 384 than from 512,
# and more from 320 than from 384 (fewer near-misses to copy instead), with the answer in what it
# read for all 62 questions at 320 and 384, 60 at 288 (docs/BENCHMARKS.md, "A slower computer,
# and a shorter reading" and "Headings, letters and 320 tokens").
EXCERPT_TOKENS = 320
# Characters a prefix of a file needs per token of budget to tell, counted alone, that the file is
# over it (count_upto): text in the demo model's tokens is 2-4 characters a token (prose, code, CJK).
MAX_CHARS_PER_TOKEN = 8
FIRST_WORD_S = 3.0       # the wait for a first word that `auto` keeps a file whole for
# The prompt speed assumed before the engine has measured one (the first request of a launch): the
# 0.5B demo model on 2 CPU cores, so a first question on a slow computer is not the slow one.
UNMEASURED_TOK_S = 200.0
NOTE_TOKENS = 32         # excerpts.note's line after the excerpts (about 25 tokens)
# Tokens of summaries a question about the whole of a file reads at most (documents/overview.py):
# every part's summary, about 10 s of prompt on 2 CPU cores for the demo model.
SUMMARY_ROOM = overview.MAX_PARTS * (overview.SUMMARY_TOKENS + 16)


class ReadingError(DocumentError):
    """A request whose files cannot be read as asked; `code` is the API error code."""

    def __init__(self, message: str, code: str = "attachments_too_long") -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Attached:
    """One file part of a request, once read: its text (`doc`) or only its place in the index
    (`indexed`, a `file_id` the index knows), and how it asks to be read."""
    name: str
    mode: str = "auto"
    doc: Document | None = None
    indexed: Indexed | None = None
    cost: int = 0                 # tokens when read whole (0 when only indexed)


@dataclass(slots=True)
class FileMessage:
    """A user message with file parts: its index in `messages`, its files, its own text."""
    at: int
    files: list[Attached]
    text: str


@dataclass(slots=True)
class Arranged:
    messages: list
    reports: list[dict] = field(default_factory=list)   # excerpts.Reading.report() per searched file
    # what the model was given of the files, to attribute its reply to (documents/attribution.py)
    attribution: Attribution = field(default_factory=lambda: Attribution([]))


def arrange(messages: list, file_messages: list[FileMessage], *, budget: int, count: Callable[[str], int],
            index: DocumentIndex, owner: str, prompt_tok_s: float | None = None,
            summariser: overview.Summariser | None = None) -> Arranged:
    """`messages` with each FileMessage's content written as text: whole files under their
    names, searched files as stand-ins, and the parts read for the latest question.
    `prompt_tok_s`: the engine's measured prompt speed (0: not measured yet), which limits what
    `auto` reads whole to what it reads within FIRST_WORD_S; None: no limit but the budget.
    `summariser`: the engine, to answer a question about the whole of a searched file from
    summaries of all its parts (documents/overview.py); None: such a question is searched too."""
    files = [f for m in file_messages for f in m.files]
    for f in files:
        if f.doc is not None:   # read whole, as asked: its exact count, which the error for too long names
            text = format_message([(f.doc.name, f.doc.text)], "")
            f.cost = count(text) if f.mode == "whole" else count_upto(text, budget, count)
    rate = None if prompt_tok_s is None else (prompt_tok_s if prompt_tok_s > 0 else UNMEASURED_TOK_S)
    quick = budget if rate is None else min(budget, int(rate * FIRST_WORD_S))
    whole, searched = _choose(files, budget, quick)
    is_whole = {id(f) for f in whole}
    for f in searched:
        if f.indexed is None:
            f.indexed = index.add(f.doc, owner)
        else:
            index.claim(f.indexed.id, owner)
    for f in whole:   # read whole from the index's copy: used now, so a full index forgets others first
        if f.indexed is not None:
            index.claim(f.indexed.id, owner)
    out = list(messages)
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    by_at = {m.at: m for m in file_messages}
    for m in file_messages:
        sections = [(f.doc.name, f.doc.text) if id(f) in is_whole else (_stand_in(f.indexed), "") for f in m.files]
        out[m.at] = {**messages[m.at], "content": format_message(sections, m.text)}
    question = by_at[last].text if last in by_at else _text(messages[last]) if last >= 0 else ""
    whole_places = [p for i, f in enumerate(files) if id(f) in is_whole for p in places.of_document(f.doc, i)]
    if not searched:
        return Arranged(out, attribution=Attribution(whole_places, question))
    used = sum(count(_text(x)) + PER_MESSAGE for x in out)
    room = budget - used
    names = ", ".join(dict.fromkeys(f.name for f in searched))
    if room < MIN_EXCERPT_ROOM:
        raise ReadingError(f"the conversation already fills this model's context, so there is no room left to read "
                           f"parts of {names}: start a new chat, or send fewer or shorter files")
    docs = list({f.indexed.id: f.indexed for f in searched}.values())
    first = {}   # a searched file's first part in the request: its name, place among the files and text
    for i, f in enumerate(files):
        if id(f) not in is_whole:
            first.setdefault(f.indexed.id, (f, i))
    if summariser is not None and all(f.mode == "auto" for f in searched) and overview.about_whole(index, docs, question):
        if all(f.doc is not None for f in searched) and sum(f.cost for f in files) <= budget:
            # it fits, only slowly: about the whole file, the whole file is the answer's best reading
            return arrange(messages, file_messages, budget=budget, count=count, index=index, owner=owner)
        # too long for the context: the summaries of all its parts (documents/overview.py)
        read_tokens = max(overview.MIN_READ_TOKENS, int((rate or UNMEASURED_TOK_S) * overview.READ_S)) // len(docs)
        views = [overview.read(index, d, owner, count=count, read_tokens=read_tokens, summariser=summariser,
                               part_tokens=max(256, budget - overview.SUMMARY_TOKENS - 256)) for d in docs]
        share = (min(room, SUMMARY_ROOM) - NOTE_TOKENS) // len(views)
        sections, note = [v.section(share, count) for v in views], ""
        read = [p for v in views for p in v.places(first[v.doc.id][1])]
        reports = [v.report() for v in views]
    else:
        readings = excerpts.read(index, docs, question, min(room, EXCERPT_TOKENS) - NOTE_TOKENS, count)
        if not readings:
            raise ReadingError(f"not even one part of {names} fits in what this model's context has left; start a "
                               "new chat, or send fewer or shorter files")
        sections, note = [r.section() for r in readings], excerpts.note(readings)
        # what the model read first comes first: the parts read for the question, then whole files
        read = [p for r in readings for p in places.of_hits(r.hits, first[r.doc.id][0].name, r.doc.id,
                                                            first[r.doc.id][1], first[r.doc.id][0].doc)]
        reports = [r.report() for r in readings]
        for r in reports:   # why it was searched: too long for the context, or too slow to read whole
            f = first[r["file_id"]][0]
            if f.mode == "auto" and f.doc is not None and f.cost <= budget and rate is not None:
                r.update(searched="slow", whole_s=round(f.cost / rate, 1))
            else:
                r.update(searched="excerpts" if f.mode == "excerpts" else "long")
    target = out[last]
    own = by_at[last].text if last in by_at else _text(target)
    before = [(f.doc.name, f.doc.text) for f in (by_at[last].files if last in by_at else []) if id(f) in is_whole]
    if note:
        sections[-1] = (sections[-1][0], sections[-1][1] + "\n\n" + note)
    out[last] = {**target, "content": format_message(before + sections, own)}
    return Arranged(out, reports, Attribution(read + whole_places, question))


def count_upto(text: str, limit: int, count: Callable[[str], int]) -> int:
    """count(text) where it is at most about `limit`; for a text far longer, the count of a prefix
    already over `limit` (fewer than the whole's): all the choice of whole or searched needs. A file
    sent with every question (file_data, as API clients send it) was tokenized whole each time: 1.2 s
    of the first word's wait for the 1 MB German Debian Reference on 2 CPU cores."""
    head = text[:limit * MAX_CHARS_PER_TOKEN]
    if len(head) < len(text):
        n = count(head)
        if n > limit + 8:      # the cut may split a word into a few more tokens than the whole has
            return n
    return count(text)


def _choose(files: list[Attached], budget: int, quick: int | None = None) -> tuple[list[Attached], list[Attached]]:
    """(read whole, searched), or ReadingError when files asked to be read whole do not fit.
    `auto` files are read whole only within `quick` tokens (what the engine reads within
    FIRST_WORD_S), files asked to be read whole whatever it takes."""
    quick = budget if quick is None else quick
    for f in files:
        if f.doc is None and f.mode == "whole":
            raise ReadingError(f"{f.name} was sent only by its file_id, which can be searched but not read whole; "
                               "send it as file_data", "invalid_file")
    whole = [f for f in files if f.mode == "whole"]
    auto = [f for f in files if f.mode == "auto" and f.doc is not None]
    if sum(f.cost for f in whole + auto) <= quick:
        whole += auto
    else:
        room = min(budget // 2, quick) - sum(f.cost for f in whole)
        for f in sorted(auto, key=lambda f: f.cost):
            if f.cost > room:
                break
            whole.append(f)
            room -= f.cost
    if sum(f.cost for f in whole) > budget:
        names = ", ".join(f.name for f in whole)
        raise ReadingError(f"the files to be read whole ({names}) take {sum(f.cost for f in whole):,} tokens, but "
                           f"this model leaves {budget:,} for files: send fewer pages, or let them be searched "
                           "(\"read\": \"auto\")")
    chosen = {id(f) for f in whole}
    return whole, [f for f in files if id(f) not in chosen]


def _stand_in(doc: Indexed) -> str:
    size = f"{doc.pages:,} pages" if doc.pages else f"{doc.chars:,} characters"
    return f"{doc.name} ({size}, too long to read whole: the parts that match each question are given with it)"


def _text(message: object) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
