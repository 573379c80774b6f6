"""A real corpus for the documents benchmark: files nobody here wrote, from Debian's documentation
packages, fetched at bench time with `apt-get download`, pinned by version and SHA-256, unpacked
with `dpkg -x` into the cache (~/.cache/llmpack/doc-corpus), never committed.

- clsguide.pdf, usrguide.pdf, lppl.pdf: the LaTeX team's typeset guides and licence
  (texlive-latex-base-doc): running footers, page numbers, contents pages with dot leaders,
  words hyphenated at the margin, margin notes;
- standards.txt: the GNU Coding Standards as makeinfo writes plain text (gnu-standards), wrapped
  at 72 columns, its contents at the top;
- debian-reference.de.txt, debian-reference.ja.txt: the Debian Reference in German and in
  Japanese (debian-reference-de, -ja), indented and wrapped, the Japanese without spaces; their
  typeset PDFs, and GNU Octave's 1,158-page manual (octave-doc), for the PDF extractors' benchmark;
- limits.html, fileformat2.html, datatype3.html, lockingv3.html, faq.html, lang_select.html:
  pages of SQLite's own documentation (sqlite3-doc, public domain) as a browser saves them:
  menus, scripts, inline SVG diagrams (lang_select.html is 1.58 MB, mostly drawings), tables of
  fields, numbered and bold headings (the `--web` questions);
- json.html, functools.html, secrets.html: Python's library reference as Sphinx writes it
  (python3.11-doc): menus as `<div role="navigation">`, a "¶" link after every heading, API
  entries as definition lists, code examples in `<pre>` (`--web` too).

    python benchmarks/doc_corpus.py      # fetch, check, unpack; print the files
    python benchmarks/doc_corpus.py lppl.pdf    # only the packages of these files (.ci/run: the tests' PDF)
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("LLMPACK_CACHE", Path.home() / ".cache" / "llmpack")) / "doc-corpus"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str   # of the .deb


PACKAGES = {p.name: p for p in [
    Package("texlive-latex-base-doc", "2022.20230122-3",
            "122dbbe00bd22f872b1837eb86bd76fbac6ec84dd4f5f0c76cc9c18484485848"),
    Package("gnu-standards", "2022.03.23-0.1", "2087dda531c69d8505856a45e0334746f3f25211a237c95d375eed13a7d8c201"),
    Package("debian-reference-de", "2.100", "3b0ce65fd63e75ddf8eb07ca36293425135080e690a07e06a6ac8bc8040ef0aa"),
    Package("debian-reference-ja", "2.100", "f67140e0b994409413bd5fcc8dfcce832445c99d724401f0275fa238daf30325"),
    Package("sqlite3-doc", "3.40.1-2+deb12u2", "466e30d7066e2641fa13e56bc662a2ad521b8cc9c17dde9c9dac3d4f105e32f2"),
    Package("python3.11-doc", "3.11.2-6+deb12u9", "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"),
    Package("octave-doc", "7.3.0-2", "b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5"),
    Package("texlive-latex-extra-doc", "2022.20230122-4",   # 593 MB: benchmarks/pdf_sweep.py only
            "d222fc748216b216c5659078e8b9b2537242f5fd63af14957f999d33164ecb27"),
]}

# name in the benchmark -> (package, path inside it; a .gz is unpacked)
FILES = {
    "clsguide.pdf": ("texlive-latex-base-doc", "usr/share/doc/texlive-doc/latex/base/clsguide.pdf"),
    "usrguide.pdf": ("texlive-latex-base-doc", "usr/share/doc/texlive-doc/latex/base/usrguide.pdf"),
    "lppl.pdf": ("texlive-latex-base-doc", "usr/share/doc/texlive-doc/latex/base/lppl.pdf"),
    "fntguide.pdf": ("texlive-latex-base-doc", "usr/share/doc/texlive-doc/latex/base/fntguide.pdf"),   # held out
    "standards.txt": ("gnu-standards", "usr/share/doc/gnu-standards/standards.text.gz"),
    "debian-reference.de.txt": ("debian-reference-de", "usr/share/debian-reference/debian-reference.de.txt.gz"),
    "debian-reference.ja.txt": ("debian-reference-ja", "usr/share/debian-reference/debian-reference.ja.txt.gz"),
    # the PDF extractors' benchmark only: the same books typeset, and a 1,158-page manual
    "debian-reference.de.pdf": ("debian-reference-de", "usr/share/debian-reference/debian-reference.de.pdf"),
    "debian-reference.ja.pdf": ("debian-reference-ja", "usr/share/debian-reference/debian-reference.ja.pdf"),
    "octave.pdf": ("octave-doc", "usr/share/doc/octave/octave.pdf"),
    **{page: ("sqlite3-doc", f"usr/share/doc/sqlite3/{page}") for page in (
        "limits.html", "fileformat2.html", "datatype3.html", "lockingv3.html", "faq.html", "lang_select.html")},
    **{page: ("python3.11-doc", f"usr/share/doc/python3.11/html/library/{page}")
       for page in ("json.html", "functools.html", "secrets.html")},
}


class CorpusError(RuntimeError):
    pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpacked(pkg: Package) -> Path:
    """The package's files, fetched, checked and unpacked once."""
    root = _root(pkg)
    if (root / ".done").is_file():
        return root
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    deb = debs / f"{pkg.name}_{pkg.version.split(':')[-1]}_all.deb"
    if not deb.is_file():
        try:
            subprocess.run(["apt-get", "download", f"{pkg.name}={pkg.version}"], cwd=debs, check=True,
                           capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise CorpusError(f"apt-get download {pkg.name}={pkg.version} failed "
                              f"({getattr(exc, 'stderr', '') or exc}); run 'apt-get update' first") from None
    if _sha256(deb) != pkg.sha256:
        deb.unlink()
        raise CorpusError(f"{deb.name} does not have the pinned SHA-256 {pkg.sha256}; deleted it, run again")
    tmp = Path(tempfile.mkdtemp(dir=CACHE))
    subprocess.run(["dpkg", "-x", str(deb), str(tmp)], check=True)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    (root / ".done").write_text(pkg.sha256)
    return root


def _root(pkg: Package) -> Path:
    return CACHE / f"{pkg.name}_{pkg.version}"


def cached(name: str) -> Path:
    """Where a corpus file is once fetched (a .gz: its package's copy), fetching nothing; the
    tests that read it check for it here (tests/needs.py)."""
    pkg, inner = FILES[name]
    return _root(PACKAGES[pkg]) / inner


def path(name: str) -> Path:
    """A corpus file by its benchmark name, unpacked (a .gz inflated beside it)."""
    unpacked(PACKAGES[FILES[name][0]])
    src = cached(name)
    if src.suffix != ".gz":
        return src
    out = src.with_name(name)
    if not out.is_file():
        out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


def files(names: set[str] | None = None) -> dict[str, Path]:
    return {name: path(name) for name in FILES if names is None or name in names}


if __name__ == "__main__":
    unknown = set(sys.argv[1:]) - set(FILES)
    if unknown:
        sys.exit(f"no corpus file named {', '.join(sorted(unknown))}; the files are {', '.join(FILES)}")
    try:
        found = files(set(sys.argv[1:]) or None)
    except CorpusError as exc:
        sys.exit(str(exc))
    for name, p in found.items():
        print(f"{name:28s} {p.stat().st_size:>10,} bytes  {p}")
    sys.exit(0)
