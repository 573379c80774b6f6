"""Spec for runtime/documents/webpage.py: an HTML file is read as a browser shows it, its text paragraph
by paragraph, with its headings, on real pages of SQLite's documentation (tests/real_excerpts.py) and on
the markup people's saved pages carry (scripts, styles, menus, inline SVG)."""
from __future__ import annotations

import time

import pytest

from llmpack.runtime.documents import chunks
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import webpage
from real_excerpts import SQLITE_HEADER_TABLE, SQLITE_LIMITS

SAVED_PAGE = """<!DOCTYPE html>
<html><head>
<meta charset="utf-8">
<title>Implementation Limits For SQLite</title>
<style>body { font-family: sans-serif } .menu li { display: inline }</style>
<script>function toggle_div(nm) { var w = document.getElementById(nm); if (w.style.display=="block") {} }</script>
<body>
<nav><ul><li><a href="index.html">Home</a><li><a href="about.html">About</a></ul></nav>
<div hidden>Search the documentation</div>
<span aria-hidden="true">&#9776;</span>
<p>Some limits can be changed at run-time&nbsp;on a per-connection basis.</p>
<svg width="300" height="80"><title>select-stmt</title><path d="M 10 10 L 290 10 L 290 70"/>
<text x="20" y="40">SELECT</text></svg>
<noscript><p>Enable JavaScript</p></noscript>
<pre>
CREATE TABLE t1(
  a INTEGER PRIMARY KEY
);
</pre>
<p>Tom &amp; Jerry&#39;s <b>café</b></p>
</body></html>
"""


def read(html: str, name: str = "page.html") -> D.Document:
    return D.extract(name, html.encode())


def test_a_saved_page_is_its_text_without_scripts_styles_menus_or_drawings():
    doc = read(SAVED_PAGE)
    assert doc.kind == "html"
    assert doc.text.split("\n") == [
        "Implementation Limits For SQLite",
        "Some limits can be changed at run-time on a per-connection basis.",
        "CREATE TABLE t1(",
        "  a INTEGER PRIMARY KEY",
        ");",
        "Tom & Jerry's café",
    ]
    assert doc.headings == [(0, 1, "Implementation Limits For SQLite")]   # the title, as the page has no <h1>


def test_a_sphinx_page_has_no_menus_marked_as_navigation_and_no_permalink_marks():
    """As Sphinx lays out Python's documentation (python3.11-doc): the related-pages bar and the
    sidebar are <div role="navigation">, and each heading and API entry ends in a "¶" link that
    shows only under the mouse."""
    page = ('<div class="related" role="navigation" aria-label="related navigation"><h3>Navigation</h3>'
            '<ul><li><a href="genindex.html">index</a></li><li><a href="next.html">next</a> |</li></ul></div>'
            '<h2>Basic Usage<a class="headerlink" href="#basic-usage" title="Permalink to this heading">¶</a></h2>'
            '<dl><dt id="json.dump">json.dump(obj, fp)<a class="headerlink" href="#json.dump">¶</a></dt>'
            '<dd><p>Serialize obj as a JSON formatted stream to fp.</p></dd></dl>'
            '<div class="sphinxsidebar" role="navigation"><h3>Previous topic</h3><p>email</p></div>')
    doc = read(page)
    assert doc.text.split("\n") == ["Basic Usage", "json.dump(obj, fp)", "Serialize obj as a JSON formatted stream to fp."]
    assert doc.headings == [(0, 2, "Basic Usage")]


def test_a_page_that_is_mostly_drawings_is_as_long_as_its_text():
    # SQLite's lang_select.html is 1.6 MB of inline SVG around 36 KB of text; read as it is, it
    # counted 916,086 tokens, and searching it found words inside path data
    diagram = '<svg><path d="' + " ".join(f"M {i} {i} L {i + 1} {i}" for i in range(20_000)) + '"/></svg>'
    doc = read(f"<h1>The SELECT statement</h1>{diagram}<p>The LIMIT clause sets an upper bound.</p>{diagram}")
    assert doc.text == "The SELECT statement\nThe LIMIT clause sets an upper bound."


def test_headings_make_sections_and_a_bold_paragraph_is_a_heading_too():
    doc = read(SQLITE_LIMITS, "limits.html")
    lines = doc.text.split("\n")
    assert lines[2] == "1) Maximum length of a string or BLOB"   # the item's number, and its title on its line
    assert "up to 2^31-1 or 2147483647" in doc.text                # an exponent stays one
    assert [(level, title) for _, level, title in doc.headings] == [
        (2, "Limits In SQLite"), (3, "Maximum length of a string or BLOB"), (3, "Maximum Number Of Columns")]
    for at, _, title in doc.headings:
        assert doc.text[at:].split("\n", 1)[0].endswith(title)
    labels = {c.label: c.heading for c in chunks.chunk(doc)}
    assert labels["§ Maximum Number Of Columns"] == "Limits In SQLite > Maximum Number Of Columns"


def test_a_table_row_is_one_line_under_its_column_names():
    doc = read(SQLITE_HEADER_TABLE, "fileformat2.html")
    lines = doc.text.split("\n")
    assert "Offset | Size | Description" in lines
    assert 'Offset: 0 | Size: 16 | Description: The header string: "SQLite format 3\\000"' in lines
    assert ("Offset: 16 | Size: 2 | Description: The database page size in bytes. Must be a power of two "
            "between 512 and 32768 inclusive, or the value 1 representing a page size of 65536.") in lines
    assert doc.headings == [(0, 2, "1.3. The Database Header")]


def test_a_header_name_as_long_as_a_sentence_is_left_out_and_the_short_ones_kept():
    """datatype3.html's table of affinities (sqlite3-doc): asked what VARCHAR(255) gets, the demo
    model answered NUMERIC from the row read without its column's name "Resulting Affinity"."""
    page = ("<table><tr><th>Example Typenames From The<br>CREATE TABLE Statement<br>or CAST Expression"
            "<th>Resulting Affinity<th>Rule Used To Determine Affinity"
            "<tr><td>CHARACTER(20)<br>VARCHAR(255)<br>TEXT<td>TEXT<td>2</table>")
    assert read(page).text.split("\n")[1] == ("CHARACTER(20) VARCHAR(255) TEXT | Resulting Affinity: TEXT | "
                                              "Rule Used To Determine Affinity: 2")


def test_a_table_without_a_header_row_joins_its_cells_and_a_layout_table_keeps_its_paragraphs():
    assert read("<table><tr><td>a<td>b<tr><td>c<td>d</table>").text == "a | b\nc | d"
    page = "<table><tr><td>Menu</td><td><h2>News</h2><p>First story.</p><p>Second story.</p></td></tr></table>"
    doc = read(page)
    assert doc.text.split("\n") == ["Menu", "News", "First story.", "Second story."]
    assert doc.headings == [(5, 2, "News")]


def test_lists_are_marked_so_that_numbered_items_are_no_table_of_contents():
    doc = read('<ol start="3"><li>Open the file.<li>Save it.</ol><ul><li>milk<li>eggs</ul>')
    assert doc.text == "3) Open the file.\n4) Save it.\n- milk\n- eggs"


def test_a_page_in_another_character_set_is_read_in_the_one_it_declares():
    page = '<html><head><meta http-equiv="content-type" content="text/html; charset=windows-1252"></head>' \
           '<body><p>Café crème € 5</p></body></html>'
    assert read_bytes(page.encode("cp1252")).text == "Café crème € 5"
    # declaring none, it is windows-1252, as a browser reads it (maxima-doc's intromax.html)
    assert read_bytes("<p>Federal University of Paran\xe1</p>".encode("latin-1")).text == "Federal University of Paraná"
    with pytest.raises(D.DocumentError, match="binary data, not a web page"):
        read_bytes(bytes(range(1, 256)) * 64)   # no NUL, not UTF-8, no charset: not a page either
    with pytest.raises(D.DocumentError, match="names a character set llmpack does not know"):
        D.extract("old.html", b'<meta charset="x-klingon"><p>caf\xe9</p>')


def read_bytes(data: bytes) -> D.Document:
    return D.extract("page.htm", data)


def test_what_makes_a_file_a_web_page():
    assert webpage.is_html("notes.HTML", "", b"x") and webpage.is_html("x", "text/html; charset=utf-8", b"x")
    assert webpage.is_html("download", "application/octet-stream", b"\xef\xbb\xbf  <!DOCTYPE html><p>hi")
    assert not webpage.is_html("notes.txt", "", b"<p>a paragraph in a text file</p>")
    # sent as plain text, a page is its source, as it is: how to ask about the markup itself
    doc = D.extract("index.html", b"<h1>Hi</h1>", media_type="text/plain")
    assert (doc.kind, doc.text) == ("text", "<h1>Hi</h1>")
    assert D.extract("notes.pdf", b"<p>the page's text of a PDF</p>", media_type="text/plain").kind == "text"


def test_a_page_with_nothing_to_read_says_so():
    with pytest.raises(D.DocumentError, match="web page with no text to read"):
        read("<html><head><script>var x = 1;</script></head><body><img src=a.png></body></html>", "app.html")


def test_a_huge_page_stops_at_the_deadline_and_at_the_text_limit(monkeypatch):
    page = "<p>word</p>" * 400_000
    with pytest.raises(D.DocumentError, match="took longer than"):
        D.extract("big.html", page.encode(), deadline=time.monotonic() - 1)
    monkeypatch.setattr(D, "MAX_TEXT_CHARS", 100_000)
    with pytest.raises(D.DocumentError, match="more than 100,000 characters"):
        D.extract("big.html", page.encode())
