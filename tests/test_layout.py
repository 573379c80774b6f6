"""Text laid out as people's files are (documents/layout.py, words.py, attribution.py), on short
excerpts quoted from real documents nobody here wrote: the LaTeX team's "LaTeX2e for class and
package writers" (clsguide.pdf, Debian's texlive-latex-base-doc), the GNU Coding Standards as
Debian's gnu-standards ships them (standards.text, wrapped at 72 columns by makeinfo), and the
Japanese Debian Reference (debian-reference-ja). benchmarks/doc_corpus.py fetches the whole
files; these tests quote what each rule is about."""
from __future__ import annotations

import pytest

from llmpack.runtime.documents import layout
from llmpack.runtime.documents.attribution import Attribution
from llmpack.runtime.documents.places import Place
from llmpack.runtime.documents.scripts import grams
from llmpack.runtime.documents.words import sentences, terms
from real_excerpts import STANDARDS_CONDITIONAL

# clsguide.pdf, p. 2, as pypdf extracts it: lines broken at the margin, one word hyphenated
CLSGUIDE_P2 = """1.1 Writing classes and packages for LATEX 2ε
LATEX is a document preparation system that enables the document writer to
concentrate on the contents of their text, without bothering too much about
the formatting of it. For example, chapters are indicated by \\chapter{⟨title⟩}
rather than by selecting 18pt bold.
One of the largest differences between LATEX 2.09 and LATEX 2ε is in the com-
mands used to write packages and classes. In LATEX 2.09, there was very little
support for writing .sty files, and so writers had to resort to using low-level
commands."""

# clsguide.pdf, p. 1: its table of contents, and the footnote and page number under it
CLSGUIDE_CONTENTS = """Contents
1 Introduction 2
1.1 Writing classes and packages for LATEX 2ε . . . . . . . . . . . . . 2
1.2 Overview . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 3
4.3 Option declaration . . . . . . . . . . . . . . . . . . . . . . . . . . . 17"""

# standards.text: the contents at the top, then a section under its underlined heading
STANDARDS = """GNU Coding Standards
1 About the GNU Coding Standards
2 Keeping Free Software Free
  2.1 Referring to Proprietary Programs
  2.2 Accepting Contributions
""" + STANDARDS_CONDITIONAL[STANDARDS_CONDITIONAL.index("3.5 Conditional Compilation"):]


def units(text: str) -> list[str]:
    return [text[a:b] for a, b in sentences(text)]


def test_a_sentence_wrapped_over_pdf_lines_is_one_sentence():
    got = units(CLSGUIDE_P2)
    assert got[0] == "1.1 Writing classes and packages for LATEX 2ε"   # the heading stays a line of its own
    assert got[1] == ("LATEX is a document preparation system that enables the document writer to\n"
                      "concentrate on the contents of their text, without bothering too much about\n"
                      "the formatting of it.")
    assert got[-1] == ("In LATEX 2.09, there was very little\nsupport for writing .sty files, and so writers "
                       "had to resort to using low-level\ncommands.")


def test_a_word_hyphenated_at_a_line_end_is_one_word():
    assert "commands\nused" in layout.dehyphenate(CLSGUIDE_P2)
    assert "command" in terms("is in the com-\nmands used") and "com" not in terms("is in the com-\nmands used")
    # a hyphen inside a line is a compound, left alone
    assert layout.dehyphenate("class- and package-writers") == "class- and package-writers"


def test_text_wrapped_at_72_columns_joins_but_code_and_headings_do_not():
    got = units(STANDARDS)
    assert ("When supporting configuration options already known when building your\nprogram we prefer "
            "using 'if (... )' over conditional compilation, as in\nthe former case the compiler is able to "
            "perform more extensive checking\nof all possible code paths.") in got
    assert "3.5 Conditional Compilation" in got and "if (HAS_FOO)" in got and "For example, please write" in got


def test_csv_records_and_table_rows_stay_lines():
    csv = ("Maximum length of a string or BLOB,SQLITE_MAX_LENGTH,1000000000,bytes\n"
           "Maximum number of columns in a table,SQLITE_MAX_COLUMN,2000,columns\n")
    assert len(units(csv)) == 2
    table = "Maximum length of a string or BLOB        SQLITE_MAX_LENGTH     1000000000\n" \
            "Maximum number of columns                 SQLITE_MAX_COLUMN     2000"
    assert len(units(table)) == 2


def test_running_headers_footers_and_page_numbers_are_not_content():
    # three pages of the German Debian Reference's layout: a running header, the text, a number
    pages = [f"Kapitel 1. GNU/Linux-Lehrgang\n{body}\n{n}" for n, body in enumerate([
        "Ich denke, dass das Erlernen eines Computersystems wie das Erlernen einer neuen Fremdsprache ist.",
        "Obwohl Anleitungen und Dokumentationen hilfreich sind, müssen Sie selbst üben.",
        "Die Shell-Eingabeaufforderung ist der Ort, an dem Sie Befehle eingeben."], 17)]
    clean = layout.clean_pages(pages)
    assert clean[0] == "Ich denke, dass das Erlernen eines Computersystems wie das Erlernen einer neuen Fremdsprache ist."
    assert all("Kapitel 1" not in p and not p.rstrip().endswith(("17", "18", "19")) for p in clean)
    # a line that only one page has at its top is that page's own heading, and stays
    assert layout.clean_pages(["1.2 Overview\nThis document contains an overview.", "Text.", "More text."])[0] \
        .startswith("1.2 Overview")


def test_contents_lines_are_recognised_and_headings_with_text_are_not():
    lines = CLSGUIDE_CONTENTS.split("\n")
    assert [layout.is_contents(x) for x in lines] == [False, True, True, True, True]
    found = {STANDARDS[a:b] for a, b in layout.contents_lines(STANDARDS)}
    assert "  2.1 Referring to Proprietary Programs" in found and "1 About the GNU Coding Standards" in found
    assert "3.5 Conditional Compilation" not in found   # a heading that its text follows
    # a contents line is one unit: its dot leaders end no sentence
    assert units(lines[4]) == [lines[4]]


def test_a_contents_list_that_runs_to_the_end_of_a_chunk_is_still_contents():
    # the GNU standards' contents fill the file's first chunk and go on in the next: the titles
    # at the chunk's end have no text under them, so they are contents too, not headings
    top = STANDARDS[:STANDARDS.index("3.5 Conditional")].rstrip()
    found = {top[a:b] for a, b in layout.contents_lines(top)}
    assert {"1 About the GNU Coding Standards", "  2.2 Accepting Contributions"} <= found


# octave.pdf (octave-doc 7.3.0), as PDFium reads it: p. 4, its table of contents, and p. 1141, its
# function index; both with dot leaders and a page number
OCTAVE_CONTENTS = """ii
2.6 Executable Octave Programs . . . . . . . . . . . . . . . . . . . . . . . . . 37
2.6.1 Passing Arguments to Executable Scripts . . . . . . . . . . . . . . . . 38
2.7 Comments in Octave Programs . . . . . . . . . . . . . . . . . . . . . . . . 38"""
OCTAVE_INDEX = """Function Index 1125
isfield . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 120
isfigure . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 427
isfile . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . . 959"""
# standards.txt's index as makeinfo writes it, a long entry's "(line N)" alone on the next line
STANDARDS_INDEX = """* length of source lines:                Formatting.         (line 2264)
* libexecdir:                            Directory Variables.
                                                             (line 4201)
* libiconv:                              Semantics.          (line  519)"""


def test_an_index_is_told_from_a_table_of_contents():
    """A book's index lists words in the order of the alphabet, a table of contents numbers the
    titles it outlines: what says what a whole file is about keeps the contents, not the index."""
    assert [layout.is_index_line(x) for x in OCTAVE_CONTENTS.split("\n")] == [False, False, False, False]
    assert [layout.is_index_line(x) for x in OCTAVE_INDEX.split("\n")] == [False, True, True, True]
    assert [layout.is_index_line(x) for x in CLSGUIDE_CONTENTS.split("\n")] == [False] * 5
    assert layout.without_index(OCTAVE_CONTENTS) == OCTAVE_CONTENTS
    assert layout.without_index(OCTAVE_INDEX) == "Function Index 1125"
    assert layout.without_index(STANDARDS_INDEX) == ""
    assert layout.without_index(CLSGUIDE_P2) == CLSGUIDE_P2 and layout.without_index(STANDARDS) == STANDARDS


def place(text: str, page: int, name: str = "clsguide.pdf") -> Place:
    return Place(name, "doc-" + name, 0, f"p. {page}", text, page)


def test_a_verbatim_answer_of_a_wrapped_sentence_gets_its_source():
    att = Attribution([place(CLSGUIDE_CONTENTS, 1), place(CLSGUIDE_P2, 2)], "What is LaTeX?")
    [src] = att.sources("LaTeX is a document preparation system that enables the document writer to concentrate "
                        "on the contents of their text, without bothering too much about the formatting of it.")
    assert src.place.page == 2 and src.quote.endswith("the formatting of it.") and src.quote.startswith("LATEX is")


def test_a_passage_that_starts_inside_a_typeset_line_keeps_its_first_sentence_whole():
    """A question reads a page's sentences from where one starts, often inside a line: what the
    model read of lppl.pdf's page 2 (the LaTeX licence, texlive-latex-base-doc) begins with
    "In particular, the", a line as short as the cut made it. The sentence still runs on to the
    next lines, so the source quotes all of it, not "act of running ..." (the chat page then
    highlighted a sentence without its start). A short first line before a capital stays a heading."""
    passage = ("In particular, the\nact of running the Work is not restricted and no requirements are made\n"
               "concerning any offers of support for the Work.\n"
               "2. You may distribute a complete, unmodified copy of the Work as you received\n"
               "it. Distribution of only part of the Work is considered modification")
    whole = passage[:passage.index("\n2.")]
    assert units(passage)[0] == whole
    [src] = Attribution([place(passage, 2)], "Does the licence restrict running the Work?").sources(
        "In particular, the act of running the Work is not restricted and no requirements are made concerning any "
        "offers of support for the Work.")
    assert src.quote == whole
    assert units("Preamble\nThe LATEX Project Public License (lppl) is the primary license under which the\n"
                 "LATEX kernel and the base LATEX packages are distributed.")[0] == "Preamble"


def test_a_source_is_shown_with_its_wrapped_lines_joined_and_its_offsets_kept():
    """The context a source opens on reads as sentences, not as the PDF's margin cut them; the
    heading, the code and the numbered item keep their lines; offsets into it hold."""
    shown = layout.reflow(CLSGUIDE_P2)
    assert len(shown) == len(CLSGUIDE_P2)
    assert shown.split("\n")[:2] == [
        "1.1 Writing classes and packages for LATEX 2ε",
        "LATEX is a document preparation system that enables the document writer to concentrate on the contents "
        "of their text, without bothering too much about the formatting of it. For example, chapters are "
        "indicated by \\chapter{⟨title⟩} rather than by selecting 18pt bold."]
    code = layout.reflow(STANDARDS)
    assert "       #ifdef HAS_FOO\n         ...\n       #else\n" in code and "3.5 Conditional Compilation\n===" in code
    assert "2 Keeping Free Software Free\n  2.1 Referring" in code   # contents lines stay lines


def test_a_contents_line_is_no_source_for_the_section_it_names():
    body = ("4.3 Option declaration\nThe following commands deal with the declaration and handling of options to\n"
            "document classes and packages. Every option name must be a ‘LATEX name’.")
    att = Attribution([place(CLSGUIDE_CONTENTS, 1), place(body, 17)], "Where is option declaration described?")
    srcs = att.sources("Option declaration is described in section 4.3 on page 17.")
    assert [s.place.page for s in srcs] in ([], [17])
    only_contents = Attribution([place(CLSGUIDE_CONTENTS, 1)], "Where is option declaration described?")
    assert only_contents.sources("Option declaration is described in section 4.3.") == []


def test_a_cross_reference_does_not_stand_for_the_section_it_names():
    overview = ("Section 2.7 contains some general advice about writing classes and packages.\n"
                "Section 4 lists the new class and package commands.")
    att = Attribution([place(overview, 3)], "Where is \\DeclareOption described?")
    # the reply names section 4; the overview only refers to it
    assert att.sources("\\DeclareOption is listed in Section 4.") == []
    # what the overview itself states is sourced to it
    [src] = att.sources("Section 2.7 gives general advice about writing classes and packages.")
    assert src.place.page == 3


def test_a_number_alone_is_no_source():
    # a wrong answer: "Section 7" and a line of another section that starts with "7."
    text = "7. Keep a copy of every file you change.\nThe release notes list every change."
    att = Attribution([place(text, 9, "notes.pdf")], "Where is licensing covered?")
    assert att.sources("Licensing is covered in Section 7.") == []
    assert att.sources("It is 7.") == []


def test_a_claim_that_names_someone_else_is_not_attributed():
    text = "The LATEX system is based on TEX, which is described in The TEXbook by\nDonald E. Knuth [1]."
    att = Attribution([place(text, 3)], "Who wrote The TeXbook?")
    assert att.sources("The TEXbook, which describes TEX, is by Leslie Lamport.") == []
    [src] = att.sources("TEX is described in The TEXbook by Donald Knuth.")
    assert src.quote == text


# debian-reference.ja.txt, 1.1: no spaces between words
JA = ("コンピューターシステムを学ぶことは新しい外国語を学ぶことに似ていると考えます。"
      "チュートリアルブックやドキュメントは役に立ちますが、あなた自身が実習する必要があります。")


def test_cjk_is_compared_in_pairs_of_characters():
    assert len(units(JA)) == 2
    assert {"外国", "国語"} <= set(terms("外国語")) and "国語" in grams(JA)
    att = Attribution([Place("debian-reference.ja.txt", "doc-ja", 0, "lines 40-41", JA, first_line=40)],
                      "コンピューターを学ぶのは何に似ていますか?")
    [src] = att.sources("新しい外国語を学ぶことに似ています。")
    assert src.quote.startswith("コンピューターシステム") and src.quote.endswith("考えます。")


def test_pages_whose_lines_look_alike_keep_their_text():
    """Generated pages of one long line each ("Page 1: word0 word1 ..."), alike but for their
    numbers, are text, not a running header."""
    pages = [f"Page {i + 1}: " + " ".join(f"word{j}" for j in range(42)) for i in range(4)]
    assert layout.clean_pages(pages) == pages


def test_a_page_with_nothing_but_what_repeats_keeps_it():
    """texlive's blowup-ex5.pdf: four pages of "A B C / X Y Z" and a number. What repeats on
    every page is furniture only beside other text; alone on a page, it is the page's text (the
    first rule left the file with no text at all). The number alone is still no text."""
    pages = [f"A B C\nX Y Z\n{n}" for n in range(1, 5)]
    assert layout.clean_pages(pages) == ["A B C\nX Y Z"] * 4


def test_a_pdf_whose_only_text_is_a_page_number_has_no_text_layer():
    """A figure saved as a PDF whose only text is its label "2" (texlive's moodle/test/fig/22.pdf):
    it was accepted as a document of no words."""
    from doc_files import make_pdf

    from llmpack.runtime.documents import extract as D

    with pytest.raises(D.DocumentError, match="has no text layer"):
        D.extract("22.pdf", make_pdf(["2"]))


def test_a_two_sided_books_left_page_header_is_furniture():
    """The Octave manual (octave-doc 7.3.0) is printed two-sided: "596 GNU Octave (version 7.3.0)"
    heads its left pages, "Chapter 18: Linear Algebra 595" its right ones. The left one stands on
    under half of all pages (548 of 1,158: chapter openings have none), so it was read as the first
    line of each of those pages, and quoted in their sources."""
    entries = ["cholinv (A)\nCompute the inverse of the symmetric positive definite matrix A.",
               "chol2inv (U)\nInvert a symmetric, positive definite square matrix.",
               "cholupdate (R, u, op)\nUpdate or downdate a Cholesky factorization.",
               "cholinsert (R, j, u)\nUpdate a Cholesky factorization given a row or column to insert.",
               "choldelete (R1, j)\nUpdate a Cholesky factorization given a row or column to delete.",
               "cholshift (R, i, j)\nUpdate a Cholesky factorization given a range of columns to shift.",
               "hess (A)\nCompute the Hessenberg decomposition of the matrix A.",
               "lu (A)\nCompute the LU decomposition of A.",
               "qr (A)\nCompute the QR factorization of A.",
               "qz (A, B)\nCompute the QZ decomposition of a generalized eigenvalue problem.",
               "schur (A)\nCompute the Schur decomposition of A.",
               "svd (A)\nCompute the singular value decomposition of A."]
    pages = []
    for i, entry in enumerate(entries):
        n = 594 + i
        if n % 2:
            pages.append(f"Chapter 18: Linear Algebra {n}\n{entry}")
        elif n % 3:
            pages.append(f"{n} GNU Octave (version 7.3.0)\n{entry}")
        else:   # a chapter's first page: no running header
            pages.append(f"Chapter {n // 3}\n{entry}")
    clean = layout.clean_pages(pages)
    assert sum("GNU Octave" in p for p in pages) == 4 and not any("GNU Octave" in p for p in clean)
    assert clean[2] == entries[2] and clean[1] == entries[1]


def test_a_chapters_running_header_that_carries_the_page_number_is_furniture():
    """The Octave manual heads each right page with its chapter and the page's printed number
    ("Chapter 15: Plotting 317" over PDF page 333): one chapter's header stands on a few dozen of
    1,158 pages, under any share of the book, so it began each of those pages' text and quotes. A
    line whose number follows the page index is the page's number. A chapter's own title
    ("Kapitel 2", as the Debian Reference opens a chapter) and a cross-reference that happens to
    end a page stay."""
    words = "axes line marker colour legend grid label title figure handle property window".split()
    pages = []
    for n in range(30):   # printed pages 14-43: chapter 14 to PDF page 10, chapter 15 after it
        printed = n + 14
        head = ("Kapitel 2" if n == 10 else f"Chapter 15: Plotting {printed}" if n > 10 and n % 2
                else f"Chapter 14: Input and Output {printed}" if n % 2 else f"{printed} GNU Octave (version 7.3.0)")
        body = [f"The {words[(n + k) % 12]} of a plot is set with the {words[(n * 3 + k) % 12]} property." for k in range(6)]
        end = "See also: [plot], page 316." if n in (4, 20, 27) else f"The {words[n % 12]} is drawn in the current axes."
        pages.append("\n".join([head, *body, end]))
    clean = layout.clean_pages(pages)
    assert not any("Chapter 15: Plotting" in p or "Chapter 14: Input" in p or "GNU Octave" in p for p in clean)
    assert clean[10].startswith("Kapitel 2\n") and sum(p.endswith("page 316.") for p in clean) == 3
    assert all(p.split("\n")[1:] == c.split("\n")[-7:] for p, c in zip(pages, clean))   # the text itself whole
