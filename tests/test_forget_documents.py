"""`--forget` (builder/forget.py) also removes the index of the long documents this program's
chats searched (runtime/documents/index.py), and only theirs. The whole --forget flow of
a built program (asking on a terminal, refusing while it runs) is tests/test_build_relaunch.py's."""
from __future__ import annotations

import io
from types import SimpleNamespace

from long_docs import contract_pages
from doc_files import make_pdf
from llmpack.builder.forget import forget
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents.index import DocumentIndex

SHA = "ab" * 32


def test_forget_removes_this_models_documents_and_keeps_others(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LLMPACK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    index = DocumentIndex()
    mine = index.add(D.extract("contract.pdf", make_pdf(contract_pages(pages=40, fact_page=17)[0])), SHA[:10])
    theirs = index.add(D.extract("notes.md", b"# Notes\n\nSomething else entirely."), "other-model")
    out = io.StringIO()
    assert forget(SimpleNamespace(model=SimpleNamespace(sha256=SHA), extra={}), yes=True, out=out) == 0
    said = out.getvalue()
    assert said.startswith("Removed the index of 1 long document its chats searched, in " + str(index.path)), said
    assert index.get(mine.id) is None and index.get(theirs.id) == theirs
    out = io.StringIO()
    assert forget(SimpleNamespace(model=SimpleNamespace(sha256=SHA), extra={}), yes=True, out=out) == 0
    assert out.getvalue().startswith("Nothing to remove")
