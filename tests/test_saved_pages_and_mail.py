"""Spec for files that are MIME messages (runtime/documents/mime.py): a web page saved as one file
and a mail saved as a file are read as a browser and a mail program show them, not as their
transfer encoding. The page is saved by Chromium itself (Blink writes what Chrome's and Edge's
"Webpage, Single File" writes); the mails are written by Python's email package, as a mail
program encodes them (quoted-printable, base64, a PDF attached)."""
from __future__ import annotations

from email.message import EmailMessage
from email.mime.image import MIMEImage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import format_datetime
from datetime import datetime, timezone

import pytest

from browser_fixtures import *  # noqa: F401,F403 - Chromium (`browser`), for the page it saves
from doc_files import make_pdf
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import mime

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>Café Hours</title>
<style>body { font: 12px serif }</style><script>var tracking = "not text";</script></head>
<body><nav><a href="/">Home</a> <a href="/menu">Menu</a></nav>
<h1>Café Hours</h1>
<p>The café on Rue Lepic opens at 07:30 on weekdays and at 09:00 on Sundays; the kitchen closes an hour
before the doors, and the terrace is heated from November to March, weather permitting, with blankets at
the counter for anyone who asks for one.</p>
<h2>Prices</h2>
<table><tr><th>Item</th><th>Price</th></tr><tr><td>Crème brûlée</td><td>€6.50</td></tr></table>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="">
</body></html>"""


@pytest.mark.browser
def test_a_page_chromium_saves_as_one_file_reads_as_the_page(browser, tmp_path):
    source = tmp_path / "hours.html"
    source.write_text(PAGE, encoding="utf-8")
    page = browser.new_page()
    try:
        page.goto(source.as_uri())
        archive = page.context.new_cdp_session(page).send("Page.captureSnapshot", {"format": "mhtml"})["data"]
    finally:
        page.close()
    data = archive.encode("utf-8")
    assert data.startswith(b"From: <Saved by Blink>") and b"=3D" in data   # quoted-printable, as saved
    for name, media in (("hours.mhtml", ""), ("hours.mht", "multipart/related"), ("saved page", "")):
        doc = D.extract(name, data, media_type=media)
        as_page = D.extract("hours.html", PAGE.encode())
        assert (doc.kind, doc.text, doc.headings) == ("html", as_page.text, as_page.headings), name
        assert doc.size == len(data) and "€6.50" in doc.text and "tracking" not in doc.text
    assert "=3D" in D.extract("hours.mhtml", data, media_type="text/plain").text   # declared text: as it is


def test_a_page_saved_by_word_in_windows_1252_reads_in_its_character_set():
    archive = MIMEMultipart("related", type="text/html")
    archive["MIME-Version"] = "1.0"
    html = MIMEText("<html><body><h1>Minutes</h1><p>The caf\u00e9 \u201cLe Zinc\u201d hosts the next "
                    "meeting.</p><img src=\"image001.png\"></body></html>", "html", "windows-1252")
    picture = MIMEImage(b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "png")
    picture["Content-Location"] = "image001.png"
    archive.attach(html)
    archive.attach(picture)
    data = archive.as_bytes()
    assert "caf\u00e9".encode("cp1252") not in data   # encoded for the wire
    doc = D.extract("minutes.mht", data)
    assert doc.kind == "html" and doc.text == "Minutes\nThe caf\u00e9 \u201cLe Zinc\u201d hosts the next meeting."
    assert doc.headings == [(0, 1, "Minutes")]


def mail() -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Agnès Dupont <agnes@example.org>"
    msg["To"] = "Board <board@example.org>"
    msg["Date"] = format_datetime(datetime(2026, 3, 2, 9, 15, tzinfo=timezone.utc))
    msg["Subject"] = "Boiler service — next visit"
    msg["Received"] = "from mx.example.org by mail.example.org; Mon, 2 Mar 2026 09:15:02 +0000"
    msg["DKIM-Signature"] = "v=1; a=rsa-sha256; d=example.org; b=c2lnbmF0dXJl"
    msg.set_content("Hello all,\n\nthe engineer from Kestrel Marine will service the boiler in the cellar on "
                    "Tuesday 14 April at 7 pm; the serial number on its plate is BX-4471-Q and the caretaker "
                    "has the key.\n\nBest,\nAgnès\n", cte="quoted-printable")
    return msg


def test_a_mail_reads_as_its_headers_and_its_text():
    msg = mail()
    msg.add_attachment(make_pdf(["Service report."]), maintype="application", subtype="pdf", filename="report.pdf")
    data = bytes(msg)
    sentence = "the serial number on its plate is BX-4471-Q and the caretaker has the key."
    assert b"Agn=C3=A8s" in data and b"=\n" in data and sentence.encode() not in data   # quoted-printable, cut at 76
    doc = D.extract("Boiler service.eml", data)
    assert doc.kind == "text" and doc.size == len(data)
    assert doc.text.startswith("From: Agnès Dupont <agnes@example.org>\nTo: Board <board@example.org>\n"
                               "Date: Mon, 02 Mar 2026 09:15:00 +0000\nSubject: Boiler service — next visit\n\n"
                               "Hello all,\n\nthe engineer from Kestrel Marine will service the boiler in the cellar")
    assert sentence in doc.text and "Received" not in doc.text
    assert "DKIM" not in doc.text and doc.text.endswith("Attached to this mail, not read here: report.pdf")
    # saved with no telling name or type (an "Untitled" file): its MIME-Version header says what it is
    assert D.extract("Untitled", data).text == doc.text


def test_a_mail_in_html_is_read_as_its_page_and_plain_text_wins_where_both_are_sent():
    msg = mail()
    msg.add_alternative("<html><body><h2>Visit</h2><p>The engineer comes on <b>Tuesday 14 April</b>.</p>"
                        "<script>x()</script></body></html>", subtype="html")
    both = D.extract("visit.eml", bytes(msg))
    assert both.kind == "text" and "the caretaker has the key" in both.text and "<b>" not in both.text   # the plain part
    html_only = mail()
    html_only.set_content("<html><body><h2>Visit</h2><p>The engineer comes on <b>Tuesday 14 April</b>.</p>"
                          "<script>x()</script></body></html>", subtype="html")
    doc = D.extract("visit.eml", bytes(html_only))
    assert doc.kind == "html" and doc.text.endswith("Subject: Boiler service — next visit\n\nVisit\n"
                                                    "The engineer comes on Tuesday 14 April.")
    at, level, title = doc.headings[0]
    assert (doc.text[at:at + len(title)], level) == ("Visit", 2)


def test_a_mail_shows_every_inline_text_part_and_a_broken_one_its_body():
    """As a mail program shows them: text parts one after another, one "inline" with a file name
    too (XEmacs VM writes them so), an attached text file named, not read; a multipart mail whose
    boundary never comes (seen in the email package's own test mails) is its body."""
    parts = (b"MIME-Version: 1.0\nFrom: barry@python.org\nSubject: two parts\n"
             b"Content-Type: multipart/mixed; boundary=XX\n\n--XX\nContent-Type: text/plain\n"
             b"Content-Disposition: inline; filename=msg.txt\n\nThe first part.\n--XX\nContent-Type: text/plain\n\n"
             b"The second part.\n--XX\nContent-Type: text/plain\nContent-Disposition: attachment; filename=log.txt\n\n"
             b"Not shown.\n--XX--\n")
    assert D.extract("two.eml", parts).text == ("From: barry@python.org\nSubject: two parts\n\nThe first part.\n\n"
                                                "The second part.\n\nAttached to this mail, not read here: log.txt")
    broken = (b"MIME-Version: 1.0\nSubject: fish\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n"
              b"Hi there,\n\nThis is the dingus fish.\n")
    assert D.extract("fish.eml", broken).text == "Subject: fish\n\nHi there,\n\nThis is the dingus fish.\n"


def test_text_that_only_looks_like_a_mail_and_mail_without_text():
    note = b"From: the caretaker\nSubject: keys\n\nThe key hangs in the shed, hook 7.\n"
    assert D.extract("note.txt", note).text == note.decode()          # no MIME-Version: a text file
    assert D.extract("note", note).text == note.decode()
    assert not mime.is_mime("mail.eml", "text/plain", bytes(mail()))  # declared text: read as it is
    only = EmailMessage()
    only["Subject"] = "scan"
    only.add_attachment(b"\x89PNG\r\n\x1a\n" + b"\0" * 32, maintype="image", subtype="png", filename="scan.png")
    with pytest.raises(D.DocumentError) as info:
        D.extract("scan.eml", bytes(only))
    assert "scan.eml is a saved web page or mail with no text in it" in str(info.value)
    empty = b"Content-Type: text/plain\nMIME-Version: 1.0\n\n\n"
    with pytest.raises(D.DocumentError):
        D.extract("empty.eml", empty)
    assert "\n" not in str(info.value)


def test_hostile_mail_ends_in_one_line_or_a_bounded_text():
    many = mail()
    for i in range(50):
        many.add_attachment(b"x", maintype="application", subtype="octet-stream", filename=f"part{i}.bin")
    text = D.extract("many.eml", bytes(many)).text
    assert text.endswith("Attached to this mail, not read here: " + ", ".join(f"part{i}.bin" for i in range(20))
                         + ", 30 more")
    deep = b"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b0\n\n" + b"".join(
        b"--b%d\nContent-Type: multipart/mixed; boundary=b%d\n\n" % (i, i + 1) for i in range(3000))
    with pytest.raises(D.DocumentError) as info:
        D.extract("deep.eml", deep)
    assert str(info.value).startswith("deep.eml could not be read as a saved web page or mail") and "\n" not in str(info.value)
