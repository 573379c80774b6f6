"""Files attached to a chat, turned into text the model can read.

Types: text (plain, Markdown, CSV, JSON, source code) as it is, UTF-8 or an older code page; HTML
as the text a browser shows, with its headings (documents/webpage.py; sent as text/plain, a
page's source as it is); a web page saved as one file (.mhtml, .mht) as its page, a mail saved as
a file (.eml) as its headers and text (documents/mime.py); PDF through PDFium (pypdfium2: Chrome's
PDF library in a wheel, chosen by measurement over pypdf on 2,940 real PDFs: 14x faster, so a
1,158-page manual takes 2 s instead of 17-23 s, and it keeps the spaces of justified lines that
pypdf ran together; docs/BENCHMARKS.md, "PDF text extractors");
DOCX read straight from its XML with the standard library (`zipfile` + expat, event by event,
no DTD: fast, and no lxml or python-docx to bundle). Images, scanned
PDFs, encrypted PDFs, zip bombs and binary junk are refused with one line that says what to do.

Every extraction is bounded: `MAX_FILE_BYTES` in, `MAX_TEXT_CHARS` out, `MAX_PAGES` pages, and a
deadline (`time_limit`: more time for a larger file) checked between pages and at every XML event.
Within a PDF page nothing can stop PDFium (a page drawing a form a billion times, a stream that
unpacks to gigabytes), so the server runs `extract` in a child process that is killed at the
deadline, under a memory limit (`sandbox.py`).

How a document joins the user's message is `format_message`, documented in the README: each
file under a heading with its name, then the user's own text, so any chat template works and
a saved chat shows exactly what was sent.
"""
from __future__ import annotations

import codecs
import io
import locale
import re
import time
import zipfile
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError, iterparse   # styles.xml only, after its DTD check
from xml.parsers.expat import ExpatError, ParserCreate

from llmpack.errors import LlmpackError
from llmpack.runtime.documents import columns, layout, mime, webpage

MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_TEXT_CHARS = 4_000_000          # far more than any context holds (about a million tokens)
MAX_PAGES = 5000
MAX_DOCX_XML_BYTES = 256 * 1024 * 1024   # word/document.xml, uncompressed
# Reading time allowed: TIME_LIMIT_S, and SECONDS_PER_MB more for each MB of the file. A fixed 20 s
# refused real manuals when PDFs were read with pypdf (3-4 s a MB of a typeset PDF on this project's
# 2-core machines: octave.pdf, 1,158 pages in 4.6 MB, 17.5 s); PDFium reads it in 2 s, and the limit
# stays for a slow laptop, a large DOCX or HTML file. It still bounds a hostile file by its size (a
# 32 MB one: 5.7 min at most in one sandboxed worker).
TIME_LIMIT_S = 20.0
SECONDS_PER_MB = 10.0
TEXT_KINDS = ("text", "html", "pdf", "docx")
MAX_NAMED = 20                      # files attached to a mail named after its text, at most

_WORD = re.compile(r"\w")
_IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"II*\x00", b"MM\x00*")
_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".heic", ".heif", ".avif", ".svgz")


class DocumentError(LlmpackError):
    """A file that cannot be attached; the message names it and says what to do instead."""


@dataclass(slots=True)
class Document:
    name: str
    kind: str                 # text | html | pdf | docx
    text: str
    size: int                 # bytes of the file as sent
    pages: list[str] = field(default_factory=list)   # PDF: one entry per page (text joins them)
    # DOCX, HTML: (offset in text, level 1-9, title) of each heading, for documents/chunks.py
    headings: list[tuple[int, int, str]] = field(default_factory=list)


def time_limit(size: int) -> float:
    """Seconds that reading a file of `size` bytes may take (see SECONDS_PER_MB)."""
    return TIME_LIMIT_S + SECONDS_PER_MB * size / (1 << 20)


@dataclass(frozen=True, slots=True)
class _Deadline:
    """When reading must stop (a time.monotonic() value), and the limit to name when it does."""
    at: float
    seconds: float

    def check(self, name: str) -> None:
        if time.monotonic() > self.at:
            raise DocumentError(SLOW.format(name=name, seconds=f"{self.seconds:.0f}"))


# What a person is told when reading their file ran past its time limit (here or in sandbox.py).
SLOW = ("reading {name} took longer than {seconds} s, so llmpack gave up; attach a part of it (fewer pages) "
        "or copy its text in")


def extract(name: str, data: bytes, *, deadline: float | None = None, media_type: str = "") -> Document:
    """The text of one attached file, or DocumentError. `deadline` is a time.monotonic() value;
    by default, `time_limit(len(data))` from now."""
    limit = time_limit(len(data))
    deadline = _Deadline(deadline if deadline is not None else time.monotonic() + limit, limit)
    name = (name or "attachment").replace("\n", " ").replace("\r", " ").strip()[:200] or "attachment"
    if len(data) > MAX_FILE_BYTES:
        raise DocumentError(f"{name} is {_mb(len(data))}; files can be at most {_mb(MAX_FILE_BYTES)}: "
                            "attach a shorter part of it")
    lower, media_type = name.lower(), (media_type or "").lower()
    # The bytes decide first, then a declared text type (the chat page sends a PDF's extracted
    # text as text/plain under the PDF's name), then the name and the declared type.
    if data.startswith(b"%PDF-"):
        return _pdf(name, data, deadline)
    if data.startswith(b"PK\x03\x04") and (lower.endswith(".docx") or media_type.endswith("wordprocessingml.document")
                                           or _is_docx(data)):
        return _docx(name, data, deadline)
    if mime.is_mime(name, media_type, data):
        return _mime(name, data, deadline)
    if webpage.is_html(name, media_type, data):
        return _html(name, data, deadline)
    other = _other_format(lower, data) if media_type != "text/plain" else None
    if other is not None:   # a kind people attach that is not read here: what it is, and what to save it as
        raise DocumentError(f"{name} is {other[0]}, which llmpack cannot read: {other[1]}")
    if media_type.startswith("text/"):
        return _text(name, data)
    if lower.endswith(".pdf") or media_type == "application/pdf":
        return _pdf(name, data, deadline)
    if lower.endswith(_IMAGE_EXT) or media_type.startswith("image/") or data.startswith(_IMAGE_MAGIC) \
            or (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        raise DocumentError(f"{name} is an image, not a document: send it as an image_url part to a model started "
                            "with its vision projector (--mmproj), or attach text, PDF or DOCX files")
    return _text(name, data)


# Files people attach that are not read here, by name: what each is, and what to save it as. The
# bytes tell the old Office files (an OLE2 container), RTF and zipped Office files whatever the name.
_SAVE_AS = {
    "word": ("an old Word document (.doc)", "open it in Word or LibreOffice and save it as .docx or PDF"),
    "rtf": ("a Rich Text file (.rtf)", "open it in WordPad, Word or LibreOffice and save it as .docx or PDF"),
    "odt": ("an OpenDocument text", "open it in LibreOffice and save it as .docx or PDF"),
    "sheet": ("a spreadsheet", "save the sheet as CSV (File > Save As > CSV UTF-8) and attach that"),
    "slides": ("a presentation", "save it as PDF (File > Save As > PDF) and attach that"),
    "apple": ("an Apple iWork file", "export it as PDF (File > Export To > PDF) and attach that"),
    "ebook": ("an e-book", "save or print it as PDF, or copy its text in"),
    "outlook": ("an Outlook message (.msg)", "open it in Outlook and save it as HTML (File > Save As), then attach that"),
    "archive": ("an archive of files", "unpack it and attach the files in it"),
    "office97": ("an Office 97-2003 file (Word, Excel or PowerPoint)",
                 "open it and save it as .docx, PDF, or CSV for a sheet"),
}
_BY_NAME = {".doc": "word", ".rtf": "rtf", ".msg": "outlook", ".odt": "odt", ".ott": "odt",
            ".xls": "sheet", ".xlsx": "sheet", ".xlsm": "sheet", ".ods": "sheet", ".numbers": "apple",
            ".ppt": "slides", ".pptx": "slides", ".pps": "slides", ".ppsx": "slides", ".odp": "slides",
            ".pages": "apple", ".epub": "ebook", ".mobi": "ebook", ".azw3": "ebook",
            ".zip": "archive", ".7z": "archive", ".rar": "archive", ".tar": "archive", ".gz": "archive"}


def _other_format(lower: str, data: bytes) -> tuple[str, str] | None:
    """(what the file is, what to do) for a kind people attach that is not read here; None otherwise."""
    named = _BY_NAME.get(lower[lower.rfind("."):]) if "." in lower else None
    if data.startswith(b"{\\rtf"):
        return _SAVE_AS["rtf"]
    if data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):   # OLE2: .doc, .xls, .ppt (and .msg, ...)
        return _SAVE_AS[named or "office97"]
    if data.startswith(b"PK\x03\x04"):
        try:
            names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
        except (zipfile.BadZipFile, ValueError, OSError):
            names = set()
        for inner, kind in (("xl/workbook.xml", "sheet"), ("ppt/presentation.xml", "slides"), ("content.xml", "odt"),
                            ("Index/Document.iwa", "apple")):
            if inner in names:   # an OpenDocument sheet or slides is named so (.ods, .odp)
                return _SAVE_AS[named if kind == "odt" and named in ("sheet", "slides") else kind]
    return _SAVE_AS[named] if named else None


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KB"


# ---------------------------------------------------------------- text
def _text(name: str, data: bytes) -> Document:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raw, encoding = data, "utf-16"
    else:
        raw, encoding = data, "utf-8-sig"
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        binary = b"\x00" in data[:8192]
        text = None if binary else _legacy(data)
        if text is None:
            kind = "binary data" if binary else "not UTF-8 text"
            raise DocumentError(f"{name} is {kind}; attach text (UTF-8), Markdown, CSV, JSON, HTML, source code, "
                                "PDF or DOCX files (save other text as UTF-8 first)") from None
    if _binary(text):
        raise DocumentError(f"{name} is binary data, not text; attach text, Markdown, CSV, JSON, HTML, source code, "
                            "PDF or DOCX files")
    return Document(name, "text", _cap(name, text.replace("\r\n", "\n")), len(data))


def _legacy(data: bytes) -> str | None:
    """Text that is not UTF-8, in the code page it was most likely saved in, or None. Older text
    files are: 117 of 2,922 READMEs and sources in two Debian documentation packages are Latin-1
    ("Lars Hellstr\xf6m"), and Notepad's "ANSI" is the computer's own code page (cp1252 in Western
    Europe, cp932 in Japan). So: this computer's code page when it is not UTF-8, then windows-1252,
    as browsers read text with no charset; each strictly, so a file neither fits is still refused."""
    own = locale.getencoding() if hasattr(locale, "getencoding") else locale.getpreferredencoding(False)  # 3.10
    for codec in dict.fromkeys((own, "cp1252")):
        if codecs.lookup(codec).name in ("utf-8", "ascii"):
            continue
        try:
            return data.decode(codec)
        except UnicodeDecodeError:
            continue
    return None


# ---------------------------------------------------------------- HTML
def _html(name: str, data: bytes, deadline: _Deadline, charset: str | None = None) -> Document:
    """`charset`: the one a saved page's or mail's part declares (documents/mime.py), else the page's own."""
    source = _declared(data, charset) if charset else None
    source = source if source is not None else webpage.decode(data)
    if source is None:
        raise DocumentError(f"{name} is not UTF-8 and names a character set llmpack does not know; save the page "
                            "again as UTF-8, or as PDF or text")
    if _binary(source):   # bytes that are no text decode as windows-1252 too
        raise DocumentError(f"{name} is binary data, not a web page; attach text, Markdown, CSV, JSON, HTML, "
                            "source code, PDF or DOCX files")

    def check(chars: int) -> None:
        deadline.check(name)
        if chars > MAX_TEXT_CHARS:
            raise _too_long(name, chars)

    text, headings = webpage.read(source, check)
    if not text.strip():
        raise DocumentError(f"{name} is a web page with no text to read (its words may come from scripts or "
                            "pictures); copy its text in instead")
    return Document(name, "html", _cap(name, text), len(data), headings=headings)


def _declared(data: bytes, charset: str) -> str | None:
    try:
        return data.decode(charset, errors="replace")
    except LookupError:
        return None


# ---------------------------------------------------------------- a saved web page or mail (MIME)
def _mime(name: str, data: bytes, deadline: _Deadline) -> Document:
    try:
        found = mime.parts(data)
    except Exception:  # noqa: BLE001 - the email parser is lenient; what it still raises is a damaged file
        raise DocumentError(f"{name} could not be read as a saved web page or mail: it is damaged; open it and save "
                            "it again, or copy its text in") from None
    if found.page is not None:   # a web page saved as one file
        doc = _html(name, found.page, deadline, found.charset)
        doc.size = len(data)
        return doc
    if found.html is None and not (found.text or "").strip():
        raise DocumentError(f"{name} is a saved web page or mail with no text in it (it may hold only pictures or "
                            "attached files); attach those files on their own, or copy its text in")
    header = found.header + "\n\n" if found.header else ""
    names = found.attached[:MAX_NAMED] + ([f"{len(found.attached) - MAX_NAMED:,} more"] if len(found.attached) > MAX_NAMED
                                          else [])
    tail = "\n\nAttached to this mail, not read here: " + ", ".join(names) if names else ""
    if found.html is not None:   # a mail written in HTML: read as its page, under its header
        page = _html(name, found.html, deadline, found.charset)
        return Document(name, "html", _cap(name, header + page.text + tail), len(data),
                        headings=[(at + len(header), level, title) for at, level, title in page.headings])
    text = header + found.text.replace("\r\n", "\n") + tail
    if _binary(text):
        raise DocumentError(f"{name} is a mail whose text is binary data; attach text, PDF or DOCX files")
    return Document(name, "text", _cap(name, text), len(data))


def _binary(text: str) -> bool:
    """Whether decoded text is binary data: a NUL, or control characters in more than 1 % of it."""
    controls = sum(1 for c in text[:65536] if c < " " and c not in "\t\n\r\f")
    return "\x00" in text or controls > 0.01 * min(len(text), 65536)


def _cap(name: str, text: str) -> str:
    if len(text) > MAX_TEXT_CHARS:
        raise _too_long(name, len(text))
    return text


def _too_long(name: str, chars: int) -> DocumentError:
    return DocumentError(f"{name} holds more than {MAX_TEXT_CHARS:,} characters of text, far more than the model "
                         "can read; attach a part of it")


# ---------------------------------------------------------------- PDF
_PASSWORD = "{name} is password-protected; open it, save a copy without the password, and attach that"
_DAMAGED = ("{name} could not be read as a PDF: it is damaged or not really a PDF{why}; save it again as PDF, "
            "or copy its text in")


def _pdf(name: str, data: bytes, deadline: _Deadline) -> Document:
    # lazy: PDFium is only needed for PDFs and costs start-up time for every other launch
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:   # PDFium tries the empty password itself: many PDFs are "encrypted" only to set permissions
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise DocumentError(_PASSWORD.format(name=name)) from None
        raise DocumentError(_DAMAGED.format(name=name, why="")) from None
    try:
        n = len(pdf)
        if n > MAX_PAGES:
            raise DocumentError(f"{name} has {n:,} pages; llmpack reads at most {MAX_PAGES:,}: attach a part of it")
        pages, total = [], 0
        for i in range(n):
            deadline.check(name)
            text = _pdf_page(pdf[i])
            total += len(text)
            if total > MAX_TEXT_CHARS:
                raise _too_long(name, total)
            pages.append(text)
    except DocumentError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged page object
        raise DocumentError(_DAMAGED.format(name=name, why=f" ({type(exc).__name__})")) from None
    finally:
        pdf.close()
    pages = layout.clean_pages(pages)   # running headers, page numbers and line-end hyphens are not the text
    if not any(_WORD.search(p) for p in pages):   # nor is a page number alone (a figure labelled "2"), or a "…"
        raise DocumentError(f"{name} has no text layer (it looks scanned, or is only pictures); llmpack cannot read "
                            "images: run it through OCR, or copy the text in")
    return Document(name, "pdf", "\n\n".join(pages), len(data), pages)


def _pdf_page(page) -> str:
    """One page's text as PDFium reads it, with its lines as the page sets them. PDFium ends a
    line with CR LF, and joins a word hyphenated at a line end, marking the hyphen U+FFFE; it is
    put back as "-" and a line break, so layout.clean_pages decides, as for any file, whether it
    was a real hyphen ("debian-security") or only a break ("environ-" + "ment")."""
    textpage = page.get_textpage()
    try:
        text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n").replace("\ufffe", "-\n")
        left, _, right, _ = page.get_mediabox()   # the space the text's rectangles are in (before any rotation)
        return (columns.reorder_page(textpage, right - left) or text).strip()   # two columns drawn row by row
    finally:
        textpage.close()
        page.close()


# ---------------------------------------------------------------- DOCX
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main}"   # as expat names it
_ET_W = "{" + _W                                                      # as ElementTree names it (styles.xml)


def _is_docx(data: bytes) -> bool:
    try:
        return "word/document.xml" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _docx(name: str, data: bytes, deadline: _Deadline) -> Document:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        info = archive.getinfo("word/document.xml")
    except (zipfile.BadZipFile, KeyError, OSError, ValueError):
        raise DocumentError(f"{name} is not a Word document (.docx) that llmpack can open; save it again as .docx, "
                            "or as PDF or text") from None
    if info.file_size > MAX_DOCX_XML_BYTES:
        raise DocumentError(f"{name} unpacks to {_mb(info.file_size)} of XML, more than llmpack reads "
                            f"({_mb(MAX_DOCX_XML_BYTES)}; a compression bomb?): attach a part of it")
    reader = _DocxText(name, deadline, _heading_styles(archive))
    try:
        with archive.open(info) as f:
            stream = _Capped(f, MAX_DOCX_XML_BYTES, name)
            while chunk := stream.read(1 << 16):
                reader.parser.Parse(chunk, False)
            reader.parser.Parse(b"", True)
    except DocumentError:
        raise
    except (ExpatError, zipfile.BadZipFile, OSError, EOFError, ValueError, RecursionError):
        raise DocumentError(f"{name} is damaged (its document.xml cannot be read); save it again as .docx, "
                            "or as PDF or text") from None
    joined = "\n".join(reader.paragraphs)
    text = joined.strip()
    if not text:
        raise DocumentError(f"{name} holds no text (only pictures or objects?); copy its text in instead")
    lead = len(joined) - len(joined.lstrip())
    return Document(name, "docx", text, len(data), headings=[(max(0, at - lead), lvl, title)
                                                             for at, lvl, title in reader.headings])


_HEADING_ID = re.compile(r"(?:heading|titre|berschrift|kop|otsikko|rubrik|nadpis|naslov)\s*([1-9])$", re.I)
MAX_STYLES_XML_BYTES = 4 * 1024 * 1024


def _heading_level(style: str) -> int:
    """Heading level of a style id Word, LibreOffice and Google Docs write ("Heading2", "Title")."""
    if style.lower() in ("title", "titel", "titre"):
        return 1
    m = _HEADING_ID.search(style)
    return int(m.group(1)) if m else 0


def _heading_styles(archive: zipfile.ZipFile) -> dict[str, int]:
    """Style id -> heading level from word/styles.xml: a localized Word names its heading styles
    by id in its own language ("berschrift1") but always names them "heading N" inside. A styles
    part with a DTD, or one too large, is ignored (nothing in it is needed to read the text)."""
    try:
        info = archive.getinfo("word/styles.xml")
        if info.file_size > MAX_STYLES_XML_BYTES:
            return {}
        data = archive.read(info)[:MAX_STYLES_XML_BYTES]
    except (KeyError, zipfile.BadZipFile, OSError, ValueError, EOFError):
        return {}
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:   # entity expansion is a memory bomb; Word never writes one
        return {}
    out: dict[str, int] = {}
    try:
        for _, el in iterparse(io.BytesIO(data), events=("end",)):
            if el.tag == _ET_W + "style":
                name = el.find(_ET_W + "name")
                outline = el.find(f"{_ET_W}pPr/{_ET_W}outlineLvl")
                level = _heading_level(((name.get(_ET_W + "val") if name is not None else "") or "").replace(" ", ""))
                if not level and outline is not None and (outline.get(_ET_W + "val") or "").isdigit():
                    level = int(outline.get(_ET_W + "val")) + 1 if int(outline.get(_ET_W + "val")) < 9 else 0
                if level and el.get(_ET_W + "styleId"):
                    out[el.get(_ET_W + "styleId")] = level
                el.clear()
    except (ParseError, ValueError, RecursionError):
        return {}
    return out


class _DocxText:
    """Paragraph texts from word/document.xml, read with expat event by event. Word never writes
    a DTD, and a DTD is how XML multiplies text (one entity used a million times made a 3 KB file
    take 640 MB), so any <!DOCTYPE> or <!ENTITY> is refused before it is read. The text limit is
    counted as the text arrives, and the deadline checked at every event."""

    def __init__(self, name: str, deadline: _Deadline, levels: dict[str, int] | None = None) -> None:
        self.name, self.deadline = name, deadline
        self.levels = levels or {}          # heading style id -> level (_heading_styles)
        self.headings: list[tuple[int, int, str]] = []   # (offset in the joined text, level, title)
        self.level = 0                      # the paragraph being read is a heading of this level; 0: body
        self.offset = 0                     # where the next paragraph starts in "\n".join(paragraphs)
        self.paragraphs: list[str] = []
        self.run: list[str] = []
        self.total = 0
        self.in_text = False
        p = self.parser = ParserCreate(namespace_separator="}")
        p.buffer_text = False
        p.StartDoctypeDeclHandler = p.EntityDeclHandler = self._dtd
        p.StartElementHandler, p.EndElementHandler = self._start, self._end
        p.CharacterDataHandler = self._text

    def _dtd(self, *_: object) -> None:
        raise DocumentError(f"{self.name} declares XML entities (a DOCTYPE), which Word never writes and which can "
                            "make a small file unpack to gigabytes; save it again from Word, or as PDF or text")

    def _tick(self, added: int = 0) -> None:
        self.deadline.check(self.name)
        self.total += added
        if self.total > MAX_TEXT_CHARS:
            raise _too_long(self.name, self.total)

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        self._tick()
        if tag == _W + "t":
            self.in_text = True
        elif tag == _W + "pStyle":
            style = attrs.get(_W + "val") or ""
            self.level = self.levels.get(style, 0) or _heading_level(style)
        elif tag == _W + "outlineLvl" and (attrs.get(_W + "val") or "").isdigit() and int(attrs[_W + "val"]) < 9:
            self.level = int(attrs[_W + "val"]) + 1
        elif tag == _W + "tab":
            self.run.append("\t")
        elif tag in (_W + "br", _W + "cr"):
            self.run.append("\n")

    def _end(self, tag: str) -> None:
        self._tick(1 if tag == _W + "p" else 0)
        if tag == _W + "t":
            self.in_text = False
        elif tag == _W + "p":
            line = "".join(self.run)
            if self.level and line.strip():
                self.headings.append((self.offset, self.level, " ".join(line.split())))
            self.level, self.run = 0, []
            self.paragraphs.append(line)
            self.offset += len(line) + 1

    def _text(self, text: str) -> None:
        if self.in_text:
            self._tick(len(text))
            self.run.append(text)
        else:
            self._tick()


class _Capped(io.RawIOBase):
    """A read-only stream that refuses to deliver more than `limit` bytes: the zip header's
    size can lie, the inflated data cannot."""

    def __init__(self, f, limit: int, name: str) -> None:
        self.f, self.left, self.name = f, limit, name

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n if n is not None and n >= 0 else 1 << 20)
        self.left -= len(data)
        if self.left < 0:
            raise DocumentError(f"{self.name} unpacks to more than {_mb(MAX_DOCX_XML_BYTES)} of XML "
                                "(a compression bomb?); attach a part of it")
        return data


# ---------------------------------------------------------------- the prompt
def format_message(docs: list[tuple[str, str]], text: str) -> str:
    """The user turn that carries attachments: each file's name as a heading, then its text,
    then a rule and the user's own message (the README documents this shape)."""
    parts = [f"## File: {name}\n\n{body.strip()}" for name, body in docs]
    if text.strip():
        parts.append(f"---\n\n{text.strip()}")
    return "\n\n".join(parts)
