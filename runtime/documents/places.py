"""The places of documents a model was given, for the server to attribute its reply to.

A `Place` is one piece of text the model read, with where it is: the file, the page (PDF), the
section (a heading of a DOCX, Markdown or HTML file) or the lines (plain text), and the label a reader
cites ("p. 97", "§ Termination", "lines 120-161"). Two kinds of request give them:

- a file read whole: its chunks (documents/chunks.py), so a whole 30-page PDF still points at
  its page rather than at the file;
- a file searched: exactly the chunks the question read (excerpts.Reading.hits), in the order
  the model read them (best match first).

`offset` is where the place's text starts in the document's whole text, when the server has it
(Anthropic's `char_location` counts from the start of the document).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmpack.runtime.documents.chunks import chunk, line_range
from llmpack.runtime.documents.extract import Document
from llmpack.runtime.documents.index import Hit, doc_id


@dataclass(frozen=True, slots=True)
class Place:
    file: str              # the file's name as sent
    file_id: str           # the content's id ("doc-" + hash): the index's id, the same for a file read whole
    doc_index: int         # which file of the request, from 0, in message order (Anthropic's document_index)
    label: str             # "p. 97", "§ Termination", "lines 120-161"
    text: str              # what the model read here
    page: int = 0          # PDF page from 1; 0 when the file has no pages
    heading: str = ""      # "Contract > 12. Termination": the headings above the text
    first_line: int = 0    # the line of the file the text starts on (plain text cut by lines); 0 otherwise
    offset: int | None = None   # where `text` starts in the document's whole text, when known

    @property
    def section(self) -> str | None:
        """The innermost heading, whole (the label may shorten it)."""
        return self.heading.rsplit(" > ", 1)[-1] if self.heading else None


def of_document(doc: Document, doc_index: int, file_id: str | None = None) -> list[Place]:
    """The places of a file read whole: its chunks."""
    key = file_id or doc_id(doc)
    out, cursor = [], 0
    for c in chunk(doc):
        at = doc.text.find(c.text, cursor)
        if at >= 0:
            cursor = at + len(c.text)
        out.append(Place(doc.name, key, doc_index, c.label, c.text, c.page, c.heading, _first_line(c.label),
                         at if at >= 0 else None))
    return out


def of_hits(hits: Sequence[Hit], name: str, file_id: str, doc_index: int, doc: Document | None) -> list[Place]:
    """The places of a searched file: the chunks the question read, in the order it read them."""
    out = []
    for h in hits:
        at = doc.text.find(h.text) if doc is not None else -1
        out.append(Place(name, file_id, doc_index, h.label, h.text, h.page, h.heading, _first_line(h.label),
                         at if at >= 0 else None))
    return out


def _first_line(label: str) -> int:
    return line_range(label)[0]
