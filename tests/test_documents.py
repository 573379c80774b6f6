"""Spec for runtime/documents/extract.py: what an attached file becomes, and the one line a user reads
when it cannot be attached. Files are made byte by byte in tests/doc_files.py."""
from __future__ import annotations

import io
import time
import tracemalloc
import zipfile

import pytest

from doc_files import PNG_1PX, docx_from_body, encrypted_pdf, make_docx, make_pdf
from llmpack.errors import LlmpackError
from llmpack.runtime.documents import extract as D


def refusal(name: str, data: bytes, **kw) -> str:
    with pytest.raises(D.DocumentError) as info:
        D.extract(name, data, **kw)
    message = str(info.value)
    assert isinstance(info.value, LlmpackError) and "\n" not in message and name in message
    return message


@pytest.mark.parametrize("name, data, text", [
    ("notes.txt", "line one\r\nline two\r\n".encode(), "line one\nline two\n"),
    ("README.md", "# Title\n\n*é* ✓".encode(), "# Title\n\n*é* ✓"),
    ("table.csv", b"\xef\xbb\xbfa,b\n1,2\n", "a,b\n1,2\n"),                 # the BOM is dropped
    ("data.json", b'{"k": [1, 2]}', '{"k": [1, 2]}'),
    ("page.html", b"<h1>Hi</h1>", "<h1>Hi</h1>"),                           # as it is, sent as plain text
    ("main.py", b"def f():\n\treturn 1\n", "def f():\n\treturn 1\n"),
    ("wide.txt", "UTF-16 too".encode("utf-16"), "UTF-16 too"),               # with its BOM
])
def test_text_files_are_read_as_utf8_text(name, data, text):
    doc = D.extract(name, data, media_type="text/plain" if name.endswith(".html") else "")
    assert (doc.kind, doc.text, doc.size, doc.pages) == ("text", text, len(data), [])


def test_a_declared_text_type_wins_over_the_name_but_not_over_the_bytes():
    """The chat page sends a PDF's extracted text as text/plain under the PDF's name."""
    assert D.extract("notes.pdf", b"Already text.", media_type="text/plain").kind == "text"
    assert D.extract("notes.txt", make_pdf(["Real PDF."]), media_type="text/plain").text == "Real PDF."


def test_binary_junk_and_other_encodings_are_refused():
    assert "is binary data" in refusal("app.bin", bytes(range(256)) * 4)
    assert "is not UTF-8 text" in refusal("odd.txt", b"caf\x81 cr\x8dme")   # bytes no code page here defines
    assert "save other text as UTF-8" in refusal("odd.txt", b"caf\x81 cr\x8dme")
    assert "is binary data, not text" in refusal("ctl.txt", b"ab\x01\x02\x03\x04cd" * 10)


def test_text_saved_in_an_older_code_page_is_read():
    """texlive's tools/README.txt ends in Latin-1, as 117 of 2,922 text files of two Debian
    documentation packages do; Notepad's "ANSI" on a Western Windows is windows-1252."""
    assert D.extract("README.txt", b'"Hello world!".\n\n\nLars Hellstr\xf6m,\n20 July 2003\n').text == \
        '"Hello world!".\n\n\nLars Hellström,\n20 July 2003\n'
    assert D.extract("quote.txt", "\u201cQuoted\u201d \u2013 50 \u20ac".encode("cp1252")).text == "\u201cQuoted\u201d \u2013 50 \u20ac"


def test_images_are_sent_as_pictures_not_documents():
    for name in ("photo.png", "scan.JPG", "no-extension"):
        assert f"{name} is an image, not a document: send it as an image_url part to a model started with its " \
               "vision projector (--mmproj)" in refusal(name, PNG_1PX)


def _zip(*names: str) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n in names:
            z.writestr(n, "<x/>")
    return out.getvalue()


OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)


@pytest.mark.parametrize("name, data, media, said", [
    ("budget.xlsx", _zip("[Content_Types].xml", "xl/workbook.xml"), "", "a spreadsheet, which llmpack cannot read: "
     "save the sheet as CSV (File > Save As > CSV UTF-8) and attach that"),
    ("Budget", _zip("xl/workbook.xml"), "", "a spreadsheet"),                       # the bytes tell, with no name
    ("talk.pptx", _zip("ppt/presentation.xml"), "", "a presentation, which llmpack cannot read: save it as PDF"),
    ("letter.odt", _zip("mimetype", "content.xml"), "", "an OpenDocument text"),
    ("report.doc", OLE2, "application/msword", "an old Word document (.doc), which llmpack cannot read: open it in "
     "Word or LibreOffice and save it as .docx or PDF"),
    ("mail.msg", OLE2, "", "an Outlook message (.msg)"),
    ("unnamed", OLE2, "", "an Office 97-2003 file"),
    ("note.rtf", b"{\\rtf1\\ansi\\deff0 {\\fonttbl {\\f0 Arial;}} Hello\\par}", "text/rtf",
     "a Rich Text file (.rtf), which llmpack cannot read: open it in WordPad"),
    ("photos.zip", _zip("a.jpg"), "application/zip", "an archive of files, which llmpack cannot read: unpack it"),
])
def test_kinds_people_attach_that_are_not_read_say_what_to_save_them_as(name, data, media, said):
    """Refused in one line that names the kind and the way out, not "binary data" (an .xlsx) nor
    read as markup (an .rtf: WordPad's own format)."""
    message = refusal(name, data, media_type=media)
    assert message.startswith(f"{name} is {said}") and "\n" not in message, message


def test_declared_plain_text_is_read_as_it_is_whatever_the_name():
    assert D.extract("note.rtf", b"{\\rtf1 Hello}", media_type="text/plain").text == "{\\rtf1 Hello}"
    assert D.extract("graph.dot", b"digraph { a -> b }").text == "digraph { a -> b }"   # Graphviz, not Word


def test_a_200_mb_file_is_refused_before_anything_reads_it():
    message = refusal("video.mp4", bytes(200 * 1024 * 1024))
    assert message == "video.mp4 is 200 MB; files can be at most 32 MB: attach a shorter part of it"


def test_pdf_text_comes_page_by_page():
    doc = D.extract("report.pdf", make_pdf(["The code word is PELICAN.\nSecond line.", "Page two (of two)."]))
    assert doc.kind == "pdf" and doc.pages == ["The code word is PELICAN.\nSecond line.", "Page two (of two)."]
    assert doc.text == "The code word is PELICAN.\nSecond line.\n\nPage two (of two)."


def test_a_scanned_pdf_says_it_has_no_text_layer():
    assert "has no text layer (it looks scanned" in refusal("scan.pdf", make_pdf(["", ""]))


def test_an_encrypted_pdf_asks_for_a_copy_without_the_password():
    message = refusal("locked.pdf", encrypted_pdf())
    assert message == ("locked.pdf is password-protected; open it, save a copy without the password, "
                       "and attach that")


def test_a_word_hyphenated_at_a_pdf_line_end_is_joined():
    """PDFium joins such a word and marks its hyphen (U+FFFE); the page keeps one rule for every
    file (layout.dehyphenate), and no U+FFFE reaches the model or a source."""
    text = D.extract("a.pdf", make_pdf(["The harbour office keeps the environ-\nment of the quay clean."])).text
    assert text == "The harbour office keeps the environment\nof the quay clean."


def test_a_pdf_of_punctuation_alone_has_no_text_layer():
    """A figure saved as PDF whose only text is an ellipsis (gridslides' ctrivial.pdf) is no document."""
    assert "has no text layer" in refusal("figure.pdf", make_pdf(["\u2026", "3"]))


def test_a_damaged_pdf_is_one_line():
    assert "damaged or not really a PDF" in refusal("broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog")


def test_docx_paragraphs_and_tabs():
    doc = D.extract("letter.docx", make_docx(["Dear Ann,", "Name:\tBob", "", "Bye"]))
    assert (doc.kind, doc.text) == ("docx", "Dear Ann,\nName:\tBob\n\nBye")


def test_a_docx_with_50000_paragraphs_is_read_whole():
    """Streamed, so it is quick; whether it fits the model is the caller's question (tokens)."""
    doc = D.extract("long.docx", make_docx([f"Paragraph {i}." for i in range(50_000)]))
    lines = doc.text.split("\n")
    assert len(lines) == 50_000 and lines[-1] == "Paragraph 49999."


def test_a_docx_compression_bomb_is_refused_by_its_unpacked_size():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("word/document.xml", "w", force_zip64=True) as f:
            block = b" " * (1 << 20)
            for _ in range((D.MAX_DOCX_XML_BYTES >> 20) + 1):
                f.write(block)
    assert "a compression bomb?" in refusal("bomb.docx", out.getvalue())


def test_a_zip_that_is_not_a_docx():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("hello.txt", "hi")
    assert "is not a Word document (.docx)" in refusal("fake.docx", out.getvalue())


def test_extraction_gives_up_at_its_deadline():
    """The deadline is checked between pages; one already past stops at the first page."""
    message = refusal("slow.pdf", make_pdf(["a", "b"]), deadline=time.monotonic() - 1)
    assert message == ("reading slow.pdf took longer than 20 s, so llmpack gave up; attach a part of it (fewer pages) "
                       "or copy its text in")


def test_a_larger_file_may_take_longer():
    """A 1,158-page manual (4.6 MB) took pypdf 17-23 s on 2 cores, and a fixed 20 s refused it;
    PDFium reads it in 2 s, but a laptop, a large DOCX or HTML file still needs the room."""
    assert D.time_limit(10_000) == pytest.approx(20.1, abs=0.05)
    assert D.time_limit(int(4.6 * (1 << 20))) == pytest.approx(66)
    assert D.time_limit(D.MAX_FILE_BYTES) == pytest.approx(340)    # a hostile file is still bounded by its size


def test_the_prompt_shape():
    assert D.format_message([("a.txt", "Alpha\n"), ("b.pdf", "Beta")], "  What is this?  ") == \
        "## File: a.txt\n\nAlpha\n\n## File: b.pdf\n\nBeta\n\n---\n\nWhat is this?"
    assert D.format_message([("a.txt", "Alpha")], "") == "## File: a.txt\n\nAlpha"


def refusal_and_peak(name: str, data: bytes) -> tuple[str, int]:
    """The refusal's line and the peak memory Python allocated while reading the file."""
    tracemalloc.start()
    try:
        return refusal(name, data), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_docx_that_declares_entities_is_refused_before_any_is_expanded():
    """A 3 KB DOCX with one entity used a million times once took 640 MB; Word never writes a DTD."""
    laughs = docx_from_body("<w:p><w:r><w:t>" + "&a;" * 1_000_000 + "</w:t></w:r></w:p>",
                            prolog='<!DOCTYPE w:document [<!ENTITY a "' + "x" * 290 + '">]>')
    assert len(laughs) < 8000
    message, peak = refusal_and_peak("laughs.docx", laughs)
    assert "declares XML entities (a DOCTYPE), which Word never writes" in message
    assert peak < 32 << 20, peak
    assert "DOCTYPE" in refusal("dtd.docx", docx_from_body("<w:p/>", prolog="<!DOCTYPE w:document>"))


def test_docx_text_is_counted_as_it_arrives():
    """60 runs of a million characters in one paragraph are refused while they are read, not once
    the paragraph ends (by then they took 60 MB and more)."""
    huge = docx_from_body("<w:p>" + ("<w:r><w:t>" + "y" * 1_000_000 + "</w:t></w:r>") * 60 + "</w:p>")
    message, peak = refusal_and_peak("huge.docx", huge)
    assert "holds more than 4,000,000 characters" in message and peak < 40 << 20, peak


def test_the_docx_deadline_is_checked_at_every_event(monkeypatch):
    """Not every 4,096 elements: one element can hold megabytes of text."""
    checks = []
    real = D._Deadline.check
    monkeypatch.setattr(D._Deadline, "check", lambda deadline, name: (checks.append(1), real(deadline, name)))
    D.extract("runs.docx", docx_from_body("<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 1000))
    assert len(checks) >= 4000     # the start and end of p, r and t
    assert "took longer than" in refusal("late.docx", docx_from_body("<w:p/>"), deadline=time.monotonic() - 1)
