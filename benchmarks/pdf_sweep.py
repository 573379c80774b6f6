"""Every PDF of two Debian documentation packages read as a person's attachments are: through the
sandbox (runtime/documents/sandbox.py: one worker, its time limit and memory cap), one file
after another. What a real corpus finds that a handful of guides does not: the 1,000-page
manual that waits (or is refused), the figure that comes out as no text, the reader that
crashes.

texlive-latex-extra-doc (593 MB: 2,935 PDFs of LaTeX package manuals, slides, examples and
figures) and octave-doc (GNU Octave's 1,158-page manual and its reference cards), pinned in
benchmarks/doc_corpus.py, fetched once into the cache.

    python benchmarks/pdf_sweep.py            # prints the totals, the slowest files and the refusals
    python benchmarks/pdf_sweep.py --jsonl F  # and one line per file into F (to compare two runs)
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_corpus  # noqa: E402

from llmpack.runtime.documents import extract as D  # noqa: E402
from llmpack.runtime.documents.sandbox import Sandbox  # noqa: E402

PACKAGES = ("texlive-latex-extra-doc", "octave-doc")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jsonl", type=Path, help="also write one JSON line per file here")
    args = ap.parse_args()
    files = sorted(p for name in PACKAGES for p in doc_corpus.unpacked(doc_corpus.PACKAGES[name]).rglob("*.pdf"))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    out = args.jsonl.open("w") if args.jsonl else None
    box = Sandbox(workers=1)
    rows = []
    try:
        for path in files:
            data = path.read_bytes()
            start = time.monotonic()
            row = {"file": str(path.relative_to(doc_corpus.CACHE)), "mb": len(data) / 2**20}
            try:
                doc = box.extract(path.name, data, media_type="application/pdf")
                words = doc.text.split()
                row.update(ok=True, pages=len(doc.pages), words=len(words),
                           run_together=sum(1 for w in words if len(w) >= 25 and w.isalpha()))   # a justified line's lost spaces
            except D.DocumentError as exc:
                row.update(ok=False, refused=str(exc))
            row["s"] = time.monotonic() - start
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
    finally:
        box.close()
        if out:
            out.close()
    read = [r for r in rows if r["ok"]]
    refused = [r for r in rows if not r["ok"]]
    print(f"{len(rows):,} PDFs: {len(read):,} read ({sum(r['pages'] for r in read):,} pages, "
          f"{sum(r['words'] for r in read):,} words, {sum(r['run_together'] for r in read):,} run together), "
          f"{len(refused)} refused; {sum(r['s'] for r in rows):.0f} s in all")
    for r in sorted(rows, key=lambda r: -r["s"])[:5]:
        print(f"  slowest: {Path(r['file']).name:40s} {r['s']:6.1f} s  {r['mb']:5.1f} MB  {r.get('pages', '-')} pages")
    kinds: dict[str, int] = {}
    for r in refused:
        kind = re.sub(r"^\S+ ", "", r["refused"])[:60]
        kinds[kind] = kinds.get(kind, 0) + 1
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  refused {n:4d}: ... {kind}")


if __name__ == "__main__":
    main()
