"""The documents and questions of `./dev bench documents`, made from a seed (never the tests' seeds).

Every case is one chat: files, one question (or a first question and a follow-up in the same
chat), the fact the reply must state (`answer`, a string found once in the files) and where it
stands (`Where`: the file, and its page, section or line). The files are filler prose about
made-up towns (tests/long_docs.py) with facts planted at random places, including the last
paragraph of a page and the rows of a table:

- PDFs of 10 to 400 pages (a fact in a sentence, or in a row of a table laid out as text);
- DOCX with Heading 1 sections; Markdown with `##` sections; HTML with one paragraph a line;
- CSV with the fact in a row of a 300-row table;
- two files at once, the question needing one of them.

Questions come in four phrasings: `plain`, `place` (asks where the file says it), `paraphrase`
(shares few words with the fact), `follow-up` (a second question in a chat that asked another).
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from doc_files import make_docx, make_pdf  # noqa: E402
from long_docs import FACILITIES, filler, places  # noqa: E402

SEED = 90_210
FIRST = ["Anna", "Tomas", "Ilse", "Rowan", "Mirela", "Jonas", "Petra", "Oskar", "Lena", "Viktor"]
LAST = ["Brady", "Fenwick", "Okafor", "Lindqvist", "Moreau", "Castell", "Ibsen", "Varga", "Halloran", "Sato"]
# (fact, question, paraphrase sharing few words with the fact): {p} town, {f} facility, {a} the answer
FACTS = [
    ("The serial number of the boiler in the {p} {f} is {a}.",
     "What is the serial number of the boiler in the {p} {f}?",
     "Which identifier is stamped on the heating unit at {p}'s {f}?"),
    ("The spare key to the {f} in {p} is kept in locker {a}.",
     "Where is the spare key to the {f} in {p} kept?",
     "If I lose my key to the {p} {f}, where do I find another one?"),
    ("The {f} in {p} is insured by Crowvale Mutual under policy {a}.",
     "Under which policy number is the {f} in {p} insured?",
     "What cover protects the {p} {f} against damage?"),
    ("The night manager of the {f} in {p} is {a}.",
     "Who is the night manager of the {f} in {p}?",
     "Who is in charge of the {p} {f} after dark?"),
    ("The water reserve of the {f} in {p} holds {a} litres.",
     "How many litres does the water reserve of the {f} in {p} hold?",
     "How much water is stored for emergencies at the {p} {f}?"),
]
PLACE_ASK = {"page": " Say which page says so.", "section": " Say which section says so.",
             "line": " Say where in the file it says so."}


@dataclass(frozen=True)
class Where:
    file: str
    page: int = 0          # PDF
    section: str = ""      # DOCX / Markdown heading
    line: int = 0          # HTML / CSV line (from 1)


@dataclass
class Case:
    kind: str
    phrasing: str
    files: list[tuple[str, bytes, str]]   # (name, bytes, media type)
    question: str
    answer: str
    where: Where
    first_question: str = ""              # follow-up: asked first, in the same chat
    pages: int = 0                        # the PDF's pages, for the report
    extra: dict = field(default_factory=dict)


def _answer(rng: random.Random, i: int) -> str:
    n = rng.randrange(1000, 9999)
    letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(2))
    return [f"{letters}-{n}", f"{rng.randrange(10, 99)}{letters[0]}", f"{letters}{n}-{rng.randrange(10, 99)}",
            f"{rng.choice(FIRST)} {rng.choice(LAST)}", f"{rng.randrange(2, 99)},{rng.randrange(100, 999)}"][i % len(FACTS)]


class Maker:
    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.towns = places(self.rng, 40)
        self.used: set[str] = set()
        self.n = 0

    def fact(self) -> tuple[str, str, str, str]:
        """(fact sentence, question, paraphrase, answer), each answer unique in the whole set."""
        i = self.n
        self.n += 1
        while True:
            fill = {"p": self.rng.choice(self.towns), "f": self.rng.choice(FACILITIES), "a": _answer(self.rng, i)}
            if fill["a"] not in self.used and (fill["p"], fill["f"]) not in self.used:
                break
        self.used |= {fill["a"], (fill["p"], fill["f"])}
        text, q, para = (s.format(**fill) for s in FACTS[i % len(FACTS)])
        return text, q, para, fill["a"]

    def question(self, phrasing: str, q: str, para: str, unit: str) -> str:
        return para if phrasing == "paraphrase" else q + (PLACE_ASK[unit] if phrasing == "place" else "")

    # ---------------------------------------------------------------- files
    def pdf(self, name: str, n_pages: int, facts: list[str], *, table: bool = False) -> tuple[bytes, list[int]]:
        """A PDF of `n_pages`; each fact on a random page, half of them in the page's last paragraph
        (the cut between chunks and pages), or as a row of a table when `table`."""
        rng = self.rng
        where = rng.sample(range(1, n_pages + 1), len(facts))
        pages = []
        for n in range(1, n_pages + 1):
            paras = [filler(rng, self.towns, rng.randint(3, 4)) for _ in range(4)]
            for fact, page in zip(facts, where):
                if page != n:
                    continue
                if table:
                    rows = [f"{rng.choice(self.towns)} {rng.choice(FACILITIES)}: inspected {rng.randrange(1, 28)} "
                            f"{rng.choice(['May', 'June', 'July'])}, result {rng.choice(['pass', 'fail', 'pending'])}."
                            for _ in range(5)]
                    rows.insert(rng.randrange(len(rows) + 1), fact)
                    paras.insert(rng.randrange(len(paras) + 1), "Inspection table:\n" + "\n".join(rows))
                else:
                    paras.insert(len(paras) if rng.random() < 0.5 else rng.randrange(len(paras)), fact)
            pages.append("\n".join(paras))
        return make_pdf(pages), where

    def sections(self, n: int, facts: list[str], kind: str) -> tuple[list[tuple[str, str]], list[str]]:
        rng = self.rng
        at = rng.sample(range(n), len(facts))
        out = []
        for s in range(n):
            paras = [filler(rng, self.towns, rng.randint(2, 4)) for _ in range(rng.randint(2, 5))]
            for fact, where in zip(facts, at):
                if where == s:
                    paras.insert(rng.randrange(len(paras) + 1), fact)
            out.append((f"{s + 1}. {rng.choice(self.towns)} {kind}", paras))
        return [(t, "\n".join(p)) for t, p in out], [out[i][0] for i in at]

    def docx(self, n: int, facts: list[str]) -> tuple[bytes, list[str]]:
        secs, titles = self.sections(n, facts, "report")
        paras: list = []
        for title, body in secs:
            paras += [("Heading1", title)] + body.split("\n")
        return make_docx(paras), titles

    def markdown(self, n: int, facts: list[str]) -> tuple[bytes, list[str]]:
        secs, titles = self.sections(n, facts, "notes")
        return "\n\n".join(f"## {t}\n\n{b}" for t, b in secs).encode(), titles

    def html(self, n: int, fact: str) -> tuple[bytes, int]:
        lines = ["<!doctype html>", "<html><head><title>Town bulletin</title></head><body>", "<h1>Town bulletin</h1>"]
        paras = [f"<p>{filler(self.rng, self.towns, self.rng.randint(2, 3))}</p>" for _ in range(n)]
        at = self.rng.randrange(n)
        paras.insert(at, f"<p>{fact}</p>")
        lines += paras + ["</body></html>"]
        return "\n".join(lines).encode(), lines.index(f"<p>{fact}</p>") + 1

    def csv(self, n: int, town: str, facility: str, serial: str) -> tuple[bytes, int]:
        rng = self.rng
        rows = ["id,town,facility,inspector,serial,litres"]
        at = rng.randrange(n)
        for i in range(n):
            if i == at:
                rows.append(f"{i + 1},{town},{facility},{rng.choice(FIRST)} {rng.choice(LAST)},{serial},"
                            f"{rng.randrange(100, 9000)}")
                continue
            while True:
                t, f = rng.choice(self.towns), rng.choice(FACILITIES)
                if (t, f) != (town, facility):
                    break
            rows.append(f"{i + 1},{t},{f},{rng.choice(FIRST)} {rng.choice(LAST)},"
                        f"{rng.choice('KLMNPRST')}{rng.choice('KLMNPRST')}-{rng.randrange(1000, 9999)},"
                        f"{rng.randrange(100, 9000)}")
        return ("\n".join(rows) + "\n").encode(), at + 2


PHRASINGS = ["plain", "place", "paraphrase"]
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def cases(seed: int = SEED, size: int = 40) -> list[Case]:
    """`size` cases in a fixed mix of kinds (PDFs the most), phrasings taking turns."""
    m = Maker(seed)
    kinds = ["pdf", "pdf-table", "docx", "markdown", "pdf", "html", "csv", "two-files", "pdf", "follow-up"]
    out = []
    for i in range(size):
        kind, phrasing = kinds[i % len(kinds)], PHRASINGS[(i // len(kinds) + i) % len(PHRASINGS)]
        out.append(_case(m, kind, "follow-up" if kind == "follow-up" else phrasing, i))
    return out


def _case(m: Maker, kind: str, phrasing: str, i: int) -> Case:
    rng = m.rng
    if kind in ("pdf", "pdf-table", "follow-up"):
        n = rng.choice([10, 25, 60, 120, 200, 300, 400]) if kind != "follow-up" else rng.choice([40, 150, 300])
        (text, q, para, a), (text2, q2, _, _) = m.fact(), m.fact()
        data, pages = m.pdf(f"manual-{i}.pdf", n, [text, text2], table=kind == "pdf-table")
        name = f"manual-{i}.pdf"
        if kind == "follow-up":   # asks the second fact first, then the first as a follow-up
            return Case(kind, phrasing, [(name, data, PDF)], "And " + q[0].lower() + q[1:], a, Where(name, page=pages[0]),
                        first_question=q2, pages=n)
        return Case(kind, phrasing, [(name, data, PDF)], m.question(phrasing, q, para, "page"), a,
                    Where(name, page=pages[0]), pages=n)
    if kind in ("docx", "markdown"):
        text, q, para, a = m.fact()
        n = rng.choice([20, 60, 150])
        data, titles = m.docx(n, [text]) if kind == "docx" else m.markdown(n, [text])
        name = f"report-{i}.docx" if kind == "docx" else f"notes-{i}.md"
        return Case(kind, phrasing, [(name, data, DOCX if kind == "docx" else "text/markdown")],
                    m.question(phrasing, q, para, "section"), a, Where(name, section=titles[0]))
    if kind == "html":
        text, q, para, a = m.fact()
        data, _ = m.html(rng.choice([40, 120, 300]), text)
        name = f"bulletin-{i}.html"
        # read as a browser shows it (documents/webpage.py), the page is one section under its <h1>
        return Case(kind, phrasing, [(name, data, "text/html")], m.question(phrasing, q, para, "section"), a,
                    Where(name, section="Town bulletin"))
    if kind == "csv":
        town, facility = rng.choice(m.towns), rng.choice(FACILITIES)
        serial = f"{rng.choice('KLMNPRST')}{rng.choice('KLMNPRST')}-{rng.randrange(1000, 9999)}"
        data, line = m.csv(300, town, facility, serial)
        name = f"inventory-{i}.csv"
        q = f"What is the serial of the {facility} in {town}?"
        # not "Which code identifies the ... in the list?": the table's `id` column is such a code
        # too, and the demo model (a coder) answered with the id or "the code checks the town column"
        para = f"Which maker's number is stamped on the {town} {facility}'s equipment?"
        return Case(kind, phrasing, [(name, data, "text/csv")], m.question(phrasing, q, para, "line"), serial,
                    Where(name, line=line))
    # two files: a PDF and a DOCX, the fact in one of them
    (text, q, para, a), (other, *_rest) = m.fact(), m.fact()
    n = rng.choice([30, 120, 300])
    in_pdf = rng.random() < 0.5
    pdf, pages = m.pdf(f"manual-{i}.pdf", n, [text if in_pdf else other])
    docx, titles = m.docx(40, [other if in_pdf else text])
    files = [(f"manual-{i}.pdf", pdf, PDF), (f"report-{i}.docx", docx, DOCX)]
    where = Where(files[0][0], page=pages[0]) if in_pdf else Where(files[1][0], section=titles[0])
    return Case(kind, phrasing, files, m.question(phrasing, q, para, "page" if in_pdf else "section"), a, where,
                pages=n)
