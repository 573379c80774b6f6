"""A two-column PDF page is read in reading order (documents/columns.py): a page drawn row by
row across both columns comes out left column then right, with each sentence whole; a page
drawn column by column, as TeX and word processors draw it, and a one-column page keep PDFium's
text as it is."""
from __future__ import annotations

import zlib

from doc_files import make_pdf
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents.words import sentences

# lines as a 10-point column sets them, about 45 characters
LEFT = ["The harbour office on the east quay opens at", "seven in the morning on working days and",
        "closes at noon on Saturdays and on holidays.", "Its ferry tickets are sold at the window by",
        "the gate, and season tickets at the office.", "Bicycles travel free of charge on all ferries."]
RIGHT = ["The night market on the square by the old", "tram shed runs every Friday from April to",
         "October, from six in the evening to midnight.", "Stalls are booked at the town hall a week",
         "ahead at the latest, and cost nine crowns.", "Dogs must be kept on a lead at the market."]


def line(x: int, y: int, text: str) -> bytes:
    return b"BT /F1 11 Tf %d %d Td (%s) Tj ET" % (x, y, text.encode("cp1252"))


def two_columns(rows: list[tuple[str, str]], by_row: bool) -> bytes:
    """A one-page PDF with two columns of Helvetica lines; `by_row`: the stream draws each row
    across both columns, else the left column first, then the right."""
    ops = []
    if by_row:
        for i, (a, b) in enumerate(rows):
            ops += [line(56, 740 - 14 * i, a), line(320, 740 - 14 * i, b)]
    else:
        ops += [line(56, 740 - 14 * i, a) for i, (a, _) in enumerate(rows)]
        ops += [line(320, 740 - 14 * i, b) for i, (_, b) in enumerate(rows)]
    return page_pdf(ops)


def page_pdf(ops: list[bytes]) -> bytes:
    """A one-page PDF that draws `ops` with Helvetica as /F1."""
    stream = zlib.compress(b"\n".join(ops))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
            b"/Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    out, offsets = b"%PDF-1.4\n", []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)


def whole_sentences(text: str) -> list[str]:
    return [" ".join(text[a:b].split()) for a, b in sentences(text)]


def test_a_page_drawn_row_by_row_across_two_columns_is_read_column_by_column():
    text = D.extract("news.pdf", two_columns(list(zip(LEFT, RIGHT)), by_row=True)).text
    said = whole_sentences(text)
    assert ("The harbour office on the east quay opens at seven in the morning on working days and closes at "
            "noon on Saturdays and on holidays.") in said
    assert ("The night market on the square by the old tram shed runs every Friday from April to October, from "
            "six in the evening to midnight.") in said
    assert text.index("Bicycles") < text.index("The night market")   # the left column is read first


def test_a_page_drawn_column_by_column_keeps_its_text():
    doc = D.extract("news.pdf", two_columns(list(zip(LEFT, RIGHT)), by_row=False))
    said = whole_sentences(doc.text)
    assert "Stalls are booked at the town hall a week ahead at the latest, and cost nine crowns." in said
    assert doc.text.index("Bicycles") < doc.text.index("The night market")


def test_a_page_drawn_word_by_word_is_one_column():
    """Some producers draw every word on its own: the stream crosses the middle on every line,
    but the words after it start anywhere, not at a column's margin."""
    ops, y = [], 740
    for sentence in LEFT + RIGHT:
        x = 56
        for word in (sentence + " " + sentence).split():
            ops.append(line(x, y, word))
            x += 6 * len(word) + 5
        y -= 14
    text = D.extract("words.pdf", page_pdf(ops)).text
    first = text.split("\n")[0].split()
    assert first == (LEFT[0] + " " + LEFT[0]).split()


def test_a_one_column_page_keeps_its_text():
    page = "\n".join(LEFT + RIGHT)
    assert " ".join(D.extract("one.pdf", make_pdf([page])).text.split()) == " ".join(page.split())
