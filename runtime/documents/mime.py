"""Files that are MIME messages: a web page saved as one file (MHTML: .mhtml and .mht, what
Chrome and Edge call "Webpage, Single File", and Word's "Single File Web Page") and a mail saved
as a file (.eml, what Outlook, Thunderbird and Apple Mail write when a message is dragged out).

Why: both are headers and parts, each part in its own transfer encoding (quoted-printable,
base64) and character set. Read as text, a page Chromium saved (as Chrome and Edge save it) was
its markup with "=3D" in every attribute and lines cut by "=" at 76 columns (40,019 characters
for SQLite's limits.html, whose text is 15,205), and a mail was its routing headers and the
encoded body.

They are read as a browser or a mail program shows them:
- a page: its HTML part (the archive's root, else its first text/html part), decoded, then read
  as any web page (documents/webpage.py); the pictures and style sheets beside it are left out;
- a mail: the headers a reader sees (From, To, Cc, Date, Subject), a blank line, then its text:
  every text/plain part that is not an attachment, one after another, else its text/html part
  read as a page (a broken multipart with no parts: its body); the names of the files attached
  to it are listed at the end, since their contents are not read (attach them on their own).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import policy
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from email.message import Message
from email.parser import BytesParser

EXTENSIONS = (".eml", ".mht", ".mhtml")
MEDIA_TYPES = ("message/rfc822", "multipart/related", "application/x-mimearchive")
SHOWN_HEADERS = ("From", "To", "Cc", "Date", "Subject")
# the header block of a MIME message, sniffed when neither the name nor the type tells: a first
# line "Name: value" (or an mbox "From " line), and MIME-Version among the headers before the blank line
_HEADER_LINE = re.compile(rb"^(?:From |[A-Za-z][A-Za-z0-9-]{0,40}:)")
_MIME_VERSION = re.compile(rb"^MIME-Version:\s*1\.0", re.I | re.M)


@dataclass(slots=True)
class Parts:
    """What a MIME file holds to read: `page` for a saved web page, else a mail's `header` lines
    and its body as `text` or `html`; `attached`: names of the files a mail carries."""
    page: bytes | None = None
    charset: str | None = None         # the declared character set of `page` or `html`
    header: str = ""
    text: str | None = None
    html: bytes | None = None
    attached: list[str] = field(default_factory=list)


def is_mime(name: str, media_type: str, data: bytes) -> bool:
    """Whether a file is a saved page or mail: declared so, named so (unless declared text, which
    is how to attach one as it is), or starting with a header block that names MIME-Version (a
    text file that only starts "From: ..." is not)."""
    media_type = media_type.lower().split(";")[0].strip()
    if media_type in MEDIA_TYPES:
        return True
    if media_type.startswith("text/"):   # declared text: read as it is (as a page's source is)
        return False
    if name.lower().endswith(EXTENSIONS):
        return True
    if not _HEADER_LINE.match(data[:64]):
        return False
    head = data[:8192].replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    return bool(_MIME_VERSION.search(head))


def parts(data: bytes) -> Parts:
    """The parts of a MIME file that are read. A file with no readable part has neither `page`
    nor `text` nor `html` (documents/extract.py says so). Parsed with the email package's
    compat32 policy: its default policy parses each part's headers into objects, 40 times slower
    (a mail of 40,000 tiny parts took 21 s to parse, against 1.2 s)."""
    msg = BytesParser(policy=policy.compat32).parsebytes(data)
    if msg.get_content_type() == "multipart/related" or msg.get("Snapshot-Content-Location") is not None:
        root = _root(msg)
        if root is None:
            return Parts()
        return Parts(page=root.get_payload(decode=True) or b"", charset=root.get_content_charset())
    out = Parts(header="\n".join(f"{h}: {_header(msg[h])}" for h in SHOWN_HEADERS if msg[h]))
    shown = [p for p in msg.walk() if not p.is_multipart() and p.get_content_maintype() == "text"
             and (p.get("Content-Disposition") or "").split(";")[0].strip().lower() != "attachment"]
    plain = [p for p in shown if p.get_content_type() == "text/plain"]
    html = [p for p in shown if p.get_content_type() == "text/html"]
    if plain:   # every inline text part, in order, as a mail program shows them one after another
        out.text = "\n\n".join(_decode(p.get_payload(decode=True) or b"", p.get_content_charset()).strip("\n")
                                for p in plain)
    elif html:   # a mail written only in HTML
        out.html, out.charset = html[0].get_payload(decode=True) or b"", html[0].get_content_charset()
    elif msg.get_content_maintype() == "multipart" and not msg.is_multipart():
        # a multipart mail whose boundary never comes: its body, as a mail program falls back to it
        out.text = _decode(msg.get_payload(decode=True) or b"", msg.get_content_charset())
    read = set(map(id, plain if plain else html[:1]))
    out.attached = [_header(p.get_filename()) for p in msg.walk()
                    if p.get_filename() and id(p) not in read]
    return out


def _header(value: object) -> str:
    """A header as a reader sees it: encoded words ("=?utf-8?q?Agn=C3=A8s?=") decoded, lines unfolded."""
    try:
        text = str(make_header(decode_header(str(value))))
    except (HeaderParseError, LookupError, UnicodeError, ValueError):
        text = str(value)
    return " ".join(text.split())


def _root(msg: Message) -> Message | None:
    """An archive's page: the part its `start` parameter names, else its first text/html part."""
    start = str(msg.get_param("start") or "").strip("<>")
    pages = [p for p in msg.walk() if p.get_content_type() in ("text/html", "application/xhtml+xml")]
    for p in pages:
        if start and (p.get("Content-ID") or "").strip().strip("<>") == start:
            return p
    return pages[0] if pages else None


def _decode(raw: bytes, charset: str | None) -> str:
    """A text part's characters in its declared set (UTF-8 when it declares none or one unknown
    here: mail programs write UTF-8 today), undecodable bytes replaced."""
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")
