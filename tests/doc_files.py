"""Attachments made for the tests, byte by byte: text PDFs (one Helvetica text layer per page),
PDFs with no text, compression bombs, DOCX files. Nothing third-party, nothing downloaded."""
from __future__ import annotations

import io
import zipfile
import zlib


def make_pdf(pages: list[str], *, extra_stream: bytes | None = None) -> bytes:
    """A valid PDF whose page i shows pages[i] (lines split on newlines), Flate-compressed.
    `extra_stream`: raw bytes of one more Flate stream drawn on the first page (a bomb)."""
    objs: list[bytes | None] = []

    def add(body: bytes | None) -> int:
        objs.append(body)
        return len(objs)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    contents, kids = [], []
    for text in pages:
        ops = [b"BT /F1 12 Tf 15 TL 56 760 Td"]
        for line in text.split("\n"):
            esc = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(b"(" + esc.encode("cp1252") + b") Tj T*")
        ops.append(b"ET")
        data = zlib.compress(b"\n".join(ops)) if text else b""
        body = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
        contents.append(add(body))
        kids.append(add(None))
    bomb = None
    if extra_stream is not None:
        bomb = add(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(extra_stream) + extra_stream
                   + b"\nendstream")
    root_pages = add(None)
    for i, (cid, pid) in enumerate(zip(contents, kids)):
        content = b"[%d 0 R %d 0 R]" % (cid, bomb) if bomb and i == 0 else b"%d 0 R" % cid
        objs[pid - 1] = (b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R "
                         b">> >> /Contents " % (root_pages, font)) + content + b" >>"
    objs[root_pages - 1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids)
                            + b"] /Count %d >>" % len(kids))
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % root_pages)
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + (body or b"null") + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, catalog, xref)
    return bytes(out)


def bomb_pdf(unpacked: int = 200 * 1024 * 1024) -> bytes:
    """A one-page PDF with a text layer plus a stream that inflates to `unpacked` bytes."""
    z = zlib.compressobj(9)
    block = b"\0" * (1 << 20)
    data = b"".join(z.compress(block) for _ in range(unpacked >> 20)) + z.flush()
    return make_pdf(["Nothing to see here."], extra_stream=data)


def encrypted_pdf(text: str = "A secret.") -> bytes:
    """make_pdf(...) encrypted with a user password (pypdf, a test tool here, writes it; RC4 needs no extra library)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([text]))))
    writer.encrypt(user_password="letmein", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


_DOCX_TYPES = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
               '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
               '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
               '<Default Extension="xml" ContentType="application/xml"/>'
               '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.'
               'wordprocessingml.document.main+xml"/></Types>')
_DOCX_RELS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
              '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
              '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
              'officeDocument" Target="word/document.xml"/></Relationships>')


def make_docx(paragraphs: list[str | tuple[str, str]], *, styles: str | None = None) -> bytes:
    """A minimal valid .docx (Word opens it) with one paragraph per entry; tabs become <w:tab/>.
    An entry (style id, text) gets that paragraph style ("Heading1"); `styles` is the XML of
    word/styles.xml, for style ids that only it says are headings."""
    def para(entry: str | tuple[str, str]) -> str:
        style, text = entry if isinstance(entry, tuple) else ("", entry)
        runs = "<w:tab/>".join(f'<w:t xml:space="preserve">{_esc(part)}</w:t>' for part in text.split("\t"))
        ppr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        return f"<w:p>{ppr}<w:r>{runs}</w:r></w:p>"
    return docx_from_body("".join(map(para, paragraphs)), styles=styles)


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def docx_from_body(body: str, prolog: str = "", styles: str | None = None) -> bytes:
    """A .docx whose document.xml is `prolog` (e.g. a DOCTYPE) then a w:document around `body`
    (and `styles` as its word/styles.xml)."""
    doc = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n{prolog}<w:document {W_NS}>'
           f"<w:body>{body}</w:body></w:document>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", _DOCX_TYPES)
        z.writestr("_rels/.rels", _DOCX_RELS)
        z.writestr("word/document.xml", doc)
        if styles is not None:
            z.writestr("word/styles.xml", styles)
    return out.getvalue()


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


PNG_1PX = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def endless_pdf(draws: int = 40_000, moves: int = 50_000, padding: int = 0) -> bytes:
    """A 250 KB PDF whose one page never ends: it draws a form XObject `draws` times, and the form
    is `moves` transformations (`1 0 0 1 0 0 cm`) and one letter, parsed again and applied on
    every draw (2 billion operations with the defaults: PDFium does about 8 million a second on
    one core of the 2-core VM, so minutes). No limit of PDFium's stops it and it grows no memory:
    only a kill does. `padding`: bytes of an unused stream, for a larger file (as a manual's
    pictures are)."""
    z = zlib.compressobj(9)
    form = z.compress(b"1 0 0 1 0 0 cm " * moves + b"BT /F1 12 Tf (x) Tj ET") + z.flush()   # text: an extractor may skip a form without
    page = b"BT /F1 12 Tf 56 760 Td (Start.) Tj ET " + b"/X Do " * draws
    font = b"/Font << /F1 6 0 R >>"
    objs = [b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << %s >> /Filter /FlateDecode "
            b"/Length %d >>\nstream\n" % (font, len(form)) + form + b"\nendstream",
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(page), page),
            b"<< /Type /Page /Parent 4 0 R /MediaBox [0 0 612 792] /Resources << %s /XObject << /X 1 0 R >> >> "
            b"/Contents 2 0 R >>" % font,
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Catalog /Pages 4 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    if padding:
        objs.append(b"<< /Length %d >>\nstream\n" % padding + b"\0" * padding + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 5 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)
