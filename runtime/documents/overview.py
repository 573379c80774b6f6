"""Questions about the whole of a file too long to read whole: "summarise this", "what is this
about", "list every chapter".

A searched file gives a question the 320 tokens that best match it. A question about the whole
file matches no part better than another, so search gave its beginning, and the answer spoke
of the first pages only (GPT4All's LocalDocs, LM Studio and Open WebUI answer so too). Such a
question is answered in two rounds here:

1. map: the file is cut, in order, into at most MAX_PARTS parts, and the model summarises each
   part in a few sentences; every part is a request of its own and all are submitted together,
   so the engine batches them (one part's summary is written while the next part is read);
2. reduce: the answer reads the parts' summaries, in order and under their places ("pp. 9-12"),
   then the question. It is drawn from the whole file, and its sources name the parts.

The summaries are kept in the index (`summaries`, by model and by how the file was cut), so the
next such question about the same file reads them at once. A round reads at most what the
engine reads in READ_S at the prompt speed it measured on this computer: a longer file is
skimmed, each chunk keeping its first sentences in proportion, and where even a sentence a chunk
is too much, only every n-th chunk (a whole 600-page manual would take half an hour on 2 CPU
cores; skimmed, every part of it is still seen; the Octave manual's 1,158 pages take ~5 minutes,
the summaries' writing beside the reading included).

Which questions: one that asks for a summary, an overview or a list of everything (CUES, in the
languages the page is used in) *and* names nothing that stands in one place of this file, told by
how its other words fall in the file's chunks. A word in a quarter of the chunks or fewer points
at a place, and then search answers better: "summarise the section on fonts" is about that
section, "summarise the GNU coding standards" of that file is about all of it. Words that name
the file itself ("this guide", its file name, the words of its title) and other languages'
function words point nowhere. A
question without such a cue ("tell me more", "what is this?") is searched as before: a false
"whole" costs minutes on a slow computer, a false "searched" one answer from the best parts.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.index import DocumentIndex, Hit, Indexed, page_refs, query_terms
from llmpack.runtime.documents.chunks import line_range
from llmpack.runtime.documents.places import Place
from llmpack.runtime.documents.words import sentences

MAX_PARTS = 16           # summaries one answer reads: 16 x SUMMARY_TOKENS fits a 4k context's room
PART_TOKENS = 1200       # a part the 0.5B demo model still summarises as a whole (about 4 PDF pages)
MAX_PART_TOKENS = 2048   # the longest part, however long the file: a round reads MAX_PARTS of them at most
SUMMARY_TOKENS = 96      # what one part's summary may take (max_tokens of its request)
READ_S = 150.0           # the longest a map round reads for, at the engine's measured prompt speed
MIN_READ_TOKENS = 8000   # ... but never less than this (a first question, before any speed is measured)
CUT = "i"                # how chunks are read for the map round (in Plan.key): "i", without index lines
POINT_SHARE = 0.25       # a word in at most this share of the chunks (and in at least one) points at a place
# Asking for a summary, an overview or a list of everything, in the languages the page is used in.
CUES = re.compile(r"\w*(?:"
    r"summar|overview|outline|\bgist\b|\btl;?dr\b|main (?:points?|ideas?|topics?|themes?)"
    r"|key (?:points?|ideas?|takeaways?)|what (?:is|are) (?:this|these|it|they|the \w+) (?:\w+ )?about|\babout what\b"
    r"|what (?:does|do) (?:it|this|these|the \w+) (?:\w+ )?cover|what(?:'s| is) in (?:it|this|the \w+)\b"
    r"|(?:list|name) (?:all|every|each)|every (?:chapter|section|part)|all (?:the )?(?:chapters|sections|parts)"
    r"|zusammenfass|fasse?.{0,40}zusammen|überblick|worum geht|inhaltlich|résum|de quoi parle|aperçu|en bref"
    r"|resum|de qué trata|riassun|di cosa parla|panoramica|samenvat|overzicht|podsumuj|streszcz"
    r"|要約|概要|まとめ|要旨|何について|总结|總結|摘要|概述|概括|主要内容|讲了什么|講了什麼)\w*", re.I)
# Words that name the file itself, not a place in it ("this guide", "the manual"), and the function
# words of the other languages the page is used in (the index's stop words are English).
FILE_WORDS = frozenset("""der die das den dem des ein eine einer einem einen es ist sind war in im ins zu zum zur
von vom mit auf für über um was wer wie wo worum dies diese dieser dieses diesem diesen bitte mir mich uns
le la les un une des du de ce cet cette ces est sont en au aux pour sur dans qui que quoi quel quelle moi
el los las una unos unas del al es son en por para sobre este esta esto estos qué que cuál me
il lo gli uno di da nel nella della questo questa che cosa sono per mi
het een dit deze wat waar over van voor mij ons
guide manual handbook book paper report article pdf doc docx txt readme chapter chapters
section sections part parts whole entire contents list every all everything summary summarise summarize overview
leitfaden handbuch dokument datei buch bericht artikel kapitel abschnitt ganze gesamte
guía manual libro documento archivo informe artículo capítulo manuel livre fichier rapport chapitre
guida libro documento rapporto capitolo handleiding boek bestand rapport hoofdstuk
give tell show explain describe write make briefly brief short quick please""".split())
TITLE_CHARS = 160        # the start of a file, where its title stands: its words name the file


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a file for the map round: chunks `first`..`last` (ords), their text as read."""
    no: int                  # from 1
    of: int
    label: str               # "pp. 9-12", "lines 1-420", "§ Install - § Upgrade"
    text: str
    page: int = 0            # its first PDF page (0: no pages)
    last_page: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    """How a file is cut for the map round: `parts` parts, each chunk kept to `keep` of its text
    (1: whole), only every `stride`-th chunk read (1: all), no part longer than `chars`
    characters (what fits the context). Its `key` names the summaries a model wrote of the file
    cut so, and how chunks are read for it (CUT): summaries kept under another key were written of
    other text, and are written again."""
    parts: int
    keep: float
    chars: int
    stride: int = 1

    @property
    def key(self) -> str:
        return f"{self.parts}x{self.keep:g}x{self.chars}x{self.stride}x{CUT}"

    @property
    def skimmed(self) -> bool:
        return self.keep < 1 or self.stride > 1

    @classmethod
    def of_key(cls, key: str) -> Plan | None:
        try:
            parts, keep, chars, stride, cut = key.split("x")
            return cls(int(parts), float(keep), int(chars), int(stride)) if cut == CUT else None
        except (ValueError, TypeError):
            return None


class Summariser(Protocol):
    """What the map round needs of the engine (core/summaries.py): run the parts' prompts
    together, hold one file's round at a time, and tell the page how far it is."""

    def run(self, prompts: Sequence[str]) -> Iterator[tuple[int, str]]:
        """(index of the prompt, the model's summary) of each prompt, as each one is done."""
        ...

    def lock(self, key: str) -> AbstractContextManager:
        """Held while a file's parts are summarised: a second question about it waits and reads them."""
        ...

    def progress(self, doc: Indexed, parts: Sequence[Part], done: int) -> None:
        """`done` of `parts` are summarised; done == len(parts) or a failure ends the round."""
        ...

    def finished(self, doc: Indexed) -> None:
        """The round is over (done, failed or abandoned)."""
        ...


@dataclass(slots=True)
class Overview:
    """One file's summaries, ready for the answer: the parts, what the model wrote of each, and
    whether the file was skimmed."""
    doc: Indexed
    parts: list[Part]
    summaries: list[str]
    skimmed: bool

    def section(self, room: int, count: Callable[[str], int]) -> tuple[str, str]:
        """(heading, text) for documents.format_message: LEAD, then the summaries in order under
        their parts' places, within `room` tokens (each cut to its share, whole sentences first)."""
        how = "skimmed" if self.skimmed else "read whole"
        head = f"{self.doc.name} (summaries of all {len(self.parts)} parts, in order; the file was {how} for them)"
        share = max(room // max(1, len(self.parts)) - 8, 16)
        blocks = [f"[{p.label}]\n{_within(s, share, count)}" for p, s in zip(self.parts, self.summaries)]
        return head, LEAD.format(name=self.doc.name) + "\n\n" + "\n\n".join(blocks)

    def places(self, doc_index: int) -> list[Place]:
        """The parts as places to attribute the answer to: a claim drawn from a part's summary
        names that part ("pp. 9-12, summary"); what a reader opens is the summary itself."""
        return [Place(self.doc.name, self.doc.id, doc_index, f"{p.label}, summary", s, p.page, "", 0, None)
                for p, s in zip(self.parts, self.summaries) if s]

    def report(self) -> dict:
        """What the reply says the model read of this file (X-Llmpack-Read): every part, summarised."""
        return {"file_id": self.doc.id, "filename": self.doc.name, "pages": self.doc.pages, "chunks": self.doc.chunks,
                "matched": True, "summarised": True, "skimmed": self.skimmed,
                "parts": [{"label": p.label, "page": p.page, "last_page": p.last_page, "heading": ""} for p in self.parts]}


# Before the summaries, not after them: with a note after them ("answer from these summaries ...")
# the 0.5B demo model answered "summarise this" of clsguide.pdf with its second part's summary
# alone (1 of 6 chapters named); told first to use every part, it named 4 of 6 (BENCHMARKS).
LEAD = ("Below are summaries of every part of {name}, in order. Answer from every part, from the first to the last, "
        "not only the first.")


def about_whole(index: DocumentIndex, docs: Sequence[Indexed], question: str) -> bool:
    """Whether `question` asks about the whole of these files rather than a place in them (the
    module docstring says how it is told)."""
    if not docs or not question.strip():
        return False
    if any(page_refs(question, d.pages) for d in docs if d.pages):
        return False   # "summarise page 12": search reads that page
    if CUES.search(question) is None:
        return False   # before any look into the index: most questions ask for no summary
    titles = " ".join(h.text[:TITLE_CHARS] for d in docs for h in index.first(d.id, 1))
    own = {w for w in query_terms(" ".join(d.name.replace("_", " ") for d in docs) + " " + titles) if len(w) > 2}
    rest = CUES.sub(" ", question)   # the words besides the asking for a summary
    words = [w for w in query_terms(rest) if w not in FILE_WORDS and w not in own and not _cjk(w)]
    if not words:
        return True
    chunks = sum(d.chunks for d in docs)
    spread = index.spread([d.id for d in docs], words)
    return not any(1 <= n <= max(2, chunks * POINT_SHARE) for n in spread.values())


def _cjk(word: str) -> bool:
    """A pair of Chinese or Japanese characters (query_terms' form of such text): too rough to
    say whether a question names a place ("この文書を" gives "の文", "文書", "書を")."""
    return any("\u3040" <= ch <= "\u30ff" or "\u3400" <= ch <= "\u9fff" for ch in word)


def plan(hits: Sequence[Hit], per_char: float, read_tokens: int, part_tokens: int = MAX_PART_TOKENS) -> Plan:
    """How to cut a file of these chunks (`per_char`: tokens per character of its text) so a round
    reads at most `read_tokens`, and no part more than `part_tokens` (the context's room): the
    largest share of each chunk, in halves, that fits, and parts of about PART_TOKENS of what is
    kept, at most MAX_PARTS. A skimmed chunk keeps at least its first sentence, so a manual of
    2,408 chunks (the Octave manual's 1,158 pages) kept 39,395 tokens at 1/32 where 26,000 were
    planned, and each part's text was cut at `chars`, dropping the last fifth of its pages; when
    even that is too much, only every `stride`-th chunk is read, evenly over the file."""
    part_tokens = min(part_tokens, MAX_PART_TOKENS)
    limit = min(read_tokens, MAX_PARTS * part_tokens * 0.8)
    texts = [_readable(h) for h in hits]
    keep, read, spans = 1.0, max(1.0, sum(map(len, texts)) * per_char), None
    while read > limit and keep > 1 / 64:
        keep /= 2
        spans = spans or [(len(t), sentences(t)) for t in texts]
        read = max(1.0, sum(_skim_end(n, s, keep) for n, s in spans) * per_char)   # what skimming really keeps
    stride = max(1, math.ceil(read / limit))
    parts = max(1, min(MAX_PARTS, math.ceil(len(hits) / stride), math.ceil(read / stride / PART_TOKENS)))
    return Plan(parts, keep, int(part_tokens / max(per_char, 1e-3)), stride)


def cut(hits: Sequence[Hit], how: Plan) -> list[Part]:
    """The parts of a file (its chunks `hits`, in order) cut as `how` says: chunks skimmed to
    `keep` of their text, then grouped in order into parts of about equal length, whole pages. It depends on
    the text and `how` only, so summaries kept under `how.key` match the parts cut again."""
    texts = ["" if i % how.stride else _readable(h) if how.keep >= 1 else skim(_readable(h), how.keep)
             for i, h in enumerate(hits)]
    sizes = [max(1, len(t)) for t in texts]
    total, parts, start, run = sum(sizes), [], 0, 0
    for i, n in enumerate(sizes):
        run += n
        last = i == len(hits) - 1
        whole_page = last or not hits[i].page or hits[i + 1].page != hits[i].page   # a page is never split
        if last or (whole_page and run >= total * (len(parts) + 1) / how.parts and len(parts) < how.parts - 1):
            parts.append((start, i))
            start = i + 1
    out = []
    for no, (a, b) in enumerate(parts, 1):
        body = "\n\n".join(_with_heading(hits[i], texts[i]) for i in range(a, b + 1) if texts[i])[:how.chars]
        pages = [h.page for h in hits[a:b + 1] if h.page]
        out.append(Part(no, len(parts), _label(hits[a], hits[b]), body, pages[0] if pages else 0,
                        pages[-1] if pages else 0))
    return out


def prompt(name: str, part: Part, skimmed: bool) -> str:
    """What the model reads to summarise one part: the task first, then the text (as LEAD, the
    0.5B model follows an instruction it reads before the text). The summary does not depend on
    the question, so the next whole-file question about this file reads the same summaries."""
    what = "the first sentences of each passage of " if skimmed else ""
    return (f"Summarise part {part.no} of {part.of} of the file {name} ({part.label}) in two or three sentences: "
            "name the sections or topics it covers and state its main points. Write in the language of the text. "
            f"Give only the summary. Here is {what}its text:\n\n{part.text}")


def summary(part: Part, text: str) -> str:
    """The model's summary of `part`, or the part's own first sentences where the model wrote
    nothing or only repeated the prompt back (the 0.5B demo model did, for 1 part in 16)."""
    text = text.strip()
    if len(text) < 20 or text.startswith(("Summarise part", f"Part {part.no} of")) or text[:60] in part.text:
        return skim(part.text, min(1.0, 400 / max(1, len(part.text))))
    return text


def read(index: DocumentIndex, doc: Indexed, owner: str, *, count: Callable[[str], int], read_tokens: int,
         part_tokens: int, summariser: Summariser) -> Overview:
    """`doc`'s parts and their summaries: those `owner`'s model already wrote (any cut, kept in
    the index), else written now by `summariser` (the parts it lacks, all at once). A part's
    prompt takes at most `part_tokens` of the file's text."""
    with summariser.lock(doc.id):
        hits = index.first(doc.id, doc.chunks)
        kept = index.summaries(doc.id, owner)
        for key, texts in reversed(list(kept.items())):   # the newest complete set first
            how = Plan.of_key(key)
            if how is not None and set(texts) == set(range(1, how.parts + 1)):
                parts = cut(hits, how)
                if len(parts) == how.parts:
                    return Overview(doc, parts, [texts[p.no] for p in parts], how.skimmed)
        sample = "\n\n".join(h.text for h in hits[::max(1, len(hits) // 8)][:8])   # over the file, not its start
        per_char = count(sample) / max(1, len(sample))   # tokens per character of this file's text
        how = plan(hits, per_char, read_tokens, part_tokens)
        parts = cut(hits, how)
        how = Plan(len(parts), how.keep, how.chars, how.stride)
        have = kept.get(how.key, {})
        summaries = {p.no: have[p.no] for p in parts if p.no in have}
        todo = [p for p in parts if p.no not in summaries]
        summariser.progress(doc, parts, len(summaries))
        try:
            for i, text in summariser.run([prompt(doc.name, p, how.skimmed) for p in todo]):
                part = todo[i]
                summaries[part.no] = summary(part, text)
                index.keep_summary(doc.id, owner, how.key, part.no, summaries[part.no])
                summariser.progress(doc, parts, len(summaries))
        finally:
            summariser.finished(doc)
        return Overview(doc, parts, [summaries.get(p.no, "") for p in parts], how.skimmed)


def _skim_end(n: int, spans: Sequence[tuple[int, int]], keep: float) -> int:
    """Where `skim` cuts a text of `n` characters and these sentences: the plan counts a
    skimmed file with it without cutting every chunk, and `skim` cuts with it."""
    want, out = max(1, int(n * keep)), 0
    for a, b in spans:
        if out and out + (b - a) > want:
            break
        out = b
        if out >= want:
            break
    return min(out, max(want, 300)) if out else want


def skim(text: str, keep: float) -> str:
    """The first sentences of `text`, about `keep` of it, at least the first one (cut at 300
    characters when that one is longer)."""
    return text[:_skim_end(len(text), sentences(text), keep)].strip()


def _within(text: str, tokens: int, count: Callable[[str], int]) -> str:
    if count(text) <= tokens:
        return text
    out = ""
    for a, b in sentences(text):
        if out and count(text[:b]) > tokens:
            break
        out = text[:b]
    return out if out and count(out) <= tokens else text[:tokens * 3].rsplit(" ", 1)[0] + "…"


def _readable(hit: Hit) -> str:
    """What the map round reads of a chunk: its text without index lines (layout.without_index),
    which say nothing of what the file is about; a chunk of the index alone is left out."""
    return layout.without_index(hit.text)


def _with_heading(hit: Hit, text: str) -> str:
    return f"({hit.heading})\n{text}" if hit.heading and not hit.page else text


def _label(a: Hit, b: Hit) -> str:
    if a.page:
        return f"p. {a.page}" if a.page == b.page else f"pp. {a.page}-{b.page}"
    first, last = line_range(a.label)[0], line_range(b.label)[1]
    if first and last:
        return f"lines {first}-{last}"
    return a.label if a.label == b.label else f"{a.label} - {b.label}"
