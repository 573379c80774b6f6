"""`./dev bench documents --corpus real --whole`: a question about the whole of the corpus's
longest typeset PDF (clsguide.pdf, 33 pages, ~16,000 tokens: too long for the demo model's 8k
context), answered three ways through the real server and the openai client:

- searched, as before documents/overview.py (`"read": "excerpts"`: the 512 tokens that best
  match the question, which for "summarise this" is mostly the file's beginning);
- from the summaries of all its parts, the first time (the map round runs);
- the same question again (the summaries are kept in the index: no part is read again).

For each: seconds to the first word and to the end, and how many of the file's sections the
answer covers, judged against the PDF's own outline (pypdf): a section is covered when a word of
its title that is not common to the whole guide (class, package, command, LaTeX ...) stands in
the answer, as a rough stem."""
from __future__ import annotations

import base64
import json
import time

import pypdf

from llmpack.runtime.documents.words import terms

FILE = "clsguide.pdf"
QUESTION = "Summarise this document."
MAX_TOKENS = 400
COMMON = set(terms("latex class classes package packages command commands writers writing file files option options "
                   "etc the and for"))


def outline(path) -> list[tuple[int, str]]:
    """(level, title) of the PDF's bookmarks, level 0 for chapters."""
    out = []

    def walk(items, level):
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
            else:
                out.append((level, item.title))
    walk(pypdf.PdfReader(str(path)).outline, 0)
    return [(lv, t) for lv, t in out if t not in ("Contents", "References")]


def covered(answer: str, titles: list[str]) -> int:
    said = set(terms(answer))
    return sum(bool((set(terms(t)) - COMMON) & said) for t in titles)


def ask(client, data: bytes, read: str) -> tuple[str, float, float, dict]:
    part = {"type": "file", "file": {"filename": FILE, "read": read,
                                     "file_data": "data:application/pdf;base64," + base64.b64encode(data).decode()}}
    start, first, text = time.perf_counter(), None, []
    raw = client.chat.completions.with_raw_response.create(
        model="demo", temperature=0, max_tokens=MAX_TOKENS, stream=True,
        messages=[{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}])
    read_header = json.loads(raw.headers.get("X-Llmpack-Read") or "[{}]")[0]
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            text.append(chunk.choices[0].delta.content)
    end = time.perf_counter()
    return "".join(text), (first or end) - start, end - start, read_header


def run_whole(client, path) -> None:
    data = path.read_bytes()
    items = outline(path)
    chapters = [t for lv, t in items if lv == 0]
    sections = [t for lv, t in items if lv == 1]
    print(f"\nwhole-file question on {FILE} ({len(pypdf.PdfReader(str(path)).pages)} pages, {len(chapters)} chapters, "
          f"{len(sections)} sections): {QUESTION!r}, max_tokens {MAX_TOKENS}")
    for label, read in (("searched (512 tokens, as before)", "excerpts"), ("summaries, first time", "auto"),
                        ("summaries, kept", "auto")):
        answer, ttft, total, header = ask(client, data, read)
        how = (f"{len(header.get('parts', []))} parts summarised" + (", skimmed" if header.get("skimmed") else "")
               if header.get("summarised") else f"{len(header.get('parts', []))} passages")
        print(f"  {label:34s} first word {ttft:6.1f} s  end {total:6.1f} s  chapters {covered(answer, chapters)}/"
              f"{len(chapters)}  sections {covered(answer, sections)}/{len(sections)}  ({how})", flush=True)
        print("    " + answer.replace("\n", " ")[:600], flush=True)
