"""Which PDF text extractor, measured on the real corpus (benchmarks/doc_corpus.py's typeset PDFs:
the LaTeX guides, the Debian Reference in German and Japanese, GNU Octave's 1,158-page manual):
pypdfium2 (Google's PDFium, a C++ library in a wheel: what llmpack uses), pypdf (pure Python:
what it used until 2026-12-07) and pdfminer.six.

For each: time per 100 pages (one core, the corpus's PDFs), words read, the share of the real
questions' answers found on their page (real_questions.py: the extracted page must hold the answer),
the share of words run together (a "word" of 25+ letters, as "Thisfamilyofcommandsareused"
where a justified line lost its spaces), the size it adds (its installed packages), and what it
does with hostile files (a truncated PDF, junk with a PDF header, a page whose content never ends).

    python benchmarks/pdf_extractors.py      # pypdf comes with the test extras; pip install pdfminer.six too
"""
from __future__ import annotations

import importlib.metadata as md
import io
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_corpus  # noqa: E402
from real_questions import QUESTIONS  # noqa: E402

PDFS = ["clsguide.pdf", "usrguide.pdf", "lppl.pdf", "debian-reference.de.pdf", "debian-reference.ja.pdf", "octave.pdf"]
_RUN_TOGETHER = re.compile(r"[^\W\d_]{25,}")


def pypdf_pages(data: bytes) -> list[str]:
    import pypdf
    return [p.extract_text() or "" for p in pypdf.PdfReader(io.BytesIO(data)).pages]


def pdfium_pages(data: bytes) -> list[str]:
    import pypdfium2 as pdfium
    doc = pdfium.PdfDocument(data)
    try:
        return [doc[i].get_textpage().get_text_range() for i in range(len(doc))]
    finally:
        doc.close()


def pdfminer_pages(data: bytes) -> list[str]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTTextContainer
    return ["".join(el.get_text() for el in page if isinstance(el, LTTextContainer))
            for page in extract_pages(io.BytesIO(data))]


EXTRACTORS = {"pypdfium2 (used)": (pdfium_pages, ["pypdfium2", "pypdfium2_raw"]), "pypdf": (pypdf_pages, ["pypdf"]),
              "pdfminer.six": (pdfminer_pages, ["pdfminer"])}
DISTS = {"pypdf": ["pypdf"], "pypdfium2 (used)": ["pypdfium2"], "pdfminer.six": ["pdfminer.six", "charset-normalizer",
                                                                         "cryptography", "cffi", "pycparser"]}


def _norm(s: str) -> str:
    return re.sub(r"[\s,‐-]+", "", s.lower())


def size_mb(dists: list[str]) -> float:
    total = 0
    for d in dists:
        try:
            total += sum((f.locate().stat().st_size for f in md.distribution(d).files or []
                          if f.locate().is_file()), 0)
        except md.PackageNotFoundError:
            pass
    return total / 2**20


HOSTILE = {
    "truncated": lambda good: good[: len(good) // 3],
    "junk after header": lambda good: b"%PDF-1.7\n" + bytes(range(256)) * 400,
    "endless page": lambda good: (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]"
                                  b"/Count 1>>endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
                                  b"/Resources<</Font<</F1<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>>>>>>>endobj\n"
                                  b"4 0 obj<</Length 2000000>>stream\n" + b"BT /F1 1 Tf (x) Tj ET q Q " * 80000
                                  + b"\nendstream endobj\ntrailer<</Root 1 0 R>>\n%%EOF"),
}


def hostile(name: str, good: bytes) -> str:
    """What the extractor does with each hostile file, in a child process with a 20 s limit."""
    out = []
    for what, make in HOSTILE.items():
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import pdf_extractors as X; "
                f"data = sys.stdin.buffer.read(); pages = X.EXTRACTORS[{name!r}][0](data); print(sum(map(len, pages)))")
        start = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-c", code], input=make(good), capture_output=True, timeout=20)
            took = time.perf_counter() - start
            if r.returncode == 0:
                out.append(f"{what}: {int(r.stdout or 0):,} chars in {took:.1f} s")
            else:
                err = (r.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1][:60]
                out.append(f"{what}: refused in {took:.1f} s ({err})")
        except subprocess.TimeoutExpired:
            out.append(f"{what}: still running at 20 s (killed)")
    return "; ".join(out)


def main() -> None:
    files = {n: doc_corpus.path(n).read_bytes() for n in PDFS}
    asked = [q for q in QUESTIONS if q.file in PDFS and q.pages]
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("| extractor | s per 100 pages | words | answers on their page | words run together | size added | hostile files |")
    print("|---|---|---|---|---|---|---|")
    for name, (fn, _mods) in EXTRACTORS.items():
        pages, took, n = {}, 0.0, 0
        for f, data in files.items():
            start = time.perf_counter()
            pages[f] = fn(data)
            took += time.perf_counter() - start
            n += len(pages[f])
        found = sum(any(_norm(a) in _norm(pages[q.file][p - 1]) for a in q.answer.split("|") for p in q.pages)
                    for q in asked)
        words = [w for ps in pages.values() for p in ps for w in p.split()]
        joined = sum(1 for w in words if _RUN_TOGETHER.search(w))
        print(f"| {name} | {100 * took / n:.2f} | {len(words):,} | {found}/{len(asked)} | {joined / max(1, len(words)):.2%} "
              f"({joined}) | {size_mb(DISTS[name]):.1f} MB | {hostile(name, files['lppl.pdf'])} |", flush=True)


if __name__ == "__main__":
    main()
