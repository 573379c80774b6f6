"""What reading attachments in a worker process costs, against reading them in the server's
own process (what llmpack did before the sandbox).

    .venv/bin/python benchmarks/extract_sandbox.py

Per small file (a 2-page PDF, a 20-paragraph DOCX, a 4 KB text): median of N of
`documents.extract` in this process vs `Sandbox.extract` with a warm worker (a pipe round trip),
and the one-off start of a worker. Target: a warm worker adds <= 5 ms per small file.
Prints figures; it is not a test.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from doc_files import make_docx, make_pdf  # noqa: E402
from llmpack.runtime.documents import extract as D  # noqa: E402
from llmpack.runtime.documents.sandbox import Sandbox  # noqa: E402

N = 50
FILES = {"report.pdf": make_pdf(["Page one of the report.", "Page two."]),
         "letter.docx": make_docx([f"Paragraph {i} of the letter." for i in range(20)]),
         "notes.txt": ("A line of notes.\n" * 240).encode()}


def median_ms(fn) -> float:
    times = []
    for _ in range(N):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    box = Sandbox(workers=1)
    start = time.perf_counter()
    box.extract("warm.txt", b"warm", media_type="text/plain")
    print(f"worker start (first file): {(time.perf_counter() - start) * 1000:.0f} ms")
    for name, data in FILES.items():
        direct = median_ms(lambda: D.extract(name, data))
        boxed = median_ms(lambda: box.extract(name, data))
        print(f"{name:12} in process {direct:6.2f} ms   worker {boxed:6.2f} ms   "
              f"+{boxed - direct:5.2f} ms ({boxed / direct:.2f}x)")
    box.close()


if __name__ == "__main__":
    main()
