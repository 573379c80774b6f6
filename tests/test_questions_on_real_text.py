"""Spec for what a question reads of real text (runtime/documents/excerpts.py, words.py, layout.py):
the words of people's files are not the question's words. Each case is a short excerpt of a file
in the real corpus (benchmarks/doc_corpus.py) where the answer's sentence used to lose to another
one, measured on the corpus's 62 questions (docs/BENCHMARKS.md, real corpus):

- German inflects a word at its end: "drückt" in the question, "drücken" in the text;
- a book's index says where a rule stands ("length of source lines ... (line 2264)"), and the rule
  says it in other words than the question ("How long should source lines be at most?");
- a date answers "what is the date", though the sentence never says "date";
- a heading names its section but does not say what it says, and a file cut into pieces used to
  leave a heading at one piece's end and its section in the next;
- a code asked about ("argument type m", "series value bx") is the first word of its entry in a list;
- a web page marks its headings (a bold paragraph in SQLite's pages) and introduces a list with a colon;
- "How many" asks for a number: "many" is no word of the answer ("as many keys as will fit").
"""
from __future__ import annotations

import pytest

from llmpack.runtime.documents import chunks
from llmpack.runtime.documents import excerpts as E
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import index as I
from llmpack.runtime.documents import layout
from llmpack.runtime.documents.words import meet, terms
from real_excerpts import (FNTGUIDE_SERIES, SQLITE_LIMITS, SQLITE_STORAGE_CLASSES, STANDARDS_CONDITIONAL,
                           STANDARDS_FORMATTING, USRGUIDE_TYPES)

# debian-reference.de.txt (debian-reference-de 2.100), lines 1163-1182, with the no-break spaces its
# converter left in the indentation
DEBIAN_REFERENCE_DE = (
    '1.1.2. Die Shell-Eingabeaufforderung auf einem GUI-System\n'
    '\n'
    '    Falls Sie während der Installation eine grafische GUI-Oberfläche\n'
    '    installiert haben, bekommen Sie nach dem Systemstart einen\n'
    '    grafischen Anmeldebildschirm. Geben Sie zur Anmeldung\n'
    '\xa0\xa0\xa0 Benutzername und Passwort des unprivilegierten Benutzerkontos\n'
    '    ein. Verwenden Sie dabei die TAB-Taste, um zwischen Benutzername\n'
    '    und Passwort zu wechseln, oder benutzen Sie dazu die primäre\n'
    '    Maustaste.\n'
    '\n'
    '    In der GUI-Oberfläche bekommen Sie eine\n'
    '    Shell-Eingabeaufforderung, indem Sie einen X-Terminal-Emulator\n'
    '\xa0\xa0\xa0 wie gnome-terminal(1), rxvt(1) oder xterm(1) starten. In der\n'
    '    GNOME-Arbeitsplatzumgebung erreichen Sie dies, indem Sie die\n'
    '    SUPER-Taste (Windows-Taste) drücken und "terminal" in das\n'
    '    Suchfeld eingeben.\n'
    '\n'
    '    Bei einigen anderen Arbeitsplatzumgebungen (wie fluxbox) gibt es\n'
    '\xa0\xa0\xa0 möglicherweise keine offensichtliche Möglichkeit, ein Menü zu\n'
    '    öffnen. Versuchen Sie in diesem Fall einfach einen Rechtsklick\n')

# standards.txt (gnu-standards 2022.03.23), lines 498-518 (and 2262-2272: real_excerpts.py), and entries of its
# index as makeinfo writes them (lines 5582-5590), their "(line N)" renumbered for this excerpt
STANDARDS_ROBUST = """\
   POSIX.2 specifies that 'df' and 'du' must output sizes by default in
units of 512 bytes.  What users want is units of 1k, so that is what we
do by default.

   GNU utilities also depart from the letter of the POSIX.2
specification when they support long-named command-line options, and
intermixing options with ordinary arguments.

4.2 Writing Robust Programs
===========================

Avoid arbitrary limits on the length or number of _any_ data structure,
including file names, lines, files, and symbols, by allocating all data
structures dynamically.  In most Unix utilities, "long lines are
silently truncated".  This is not acceptable in a GNU utility.
"""


def standards_with_index() -> str:
    text = STANDARDS_ROBUST + "\n" + STANDARDS_FORMATTING + "\nIndex\n*****\n\n* Menu:\n\n"
    rule = text[:text.index("Please keep")].count("\n") + 1
    long_names = text[:text.index("GNU utilities also")].count("\n") + 1
    return text + (
        f"* -Wall compiler option:                 Syntactic Conventions.\n"
        f"                                                             (line {rule + 5})\n"
        f"* length of source lines:                Formatting.         (line {rule})\n"
        f"* long-named options:                    Command-Line Interfaces.\n"
        f"                                                             (line {long_names})\n"
        f"* Guile:                                 Source Language.    (line {long_names})\n")


# lppl.pdf (texlive-latex-base-doc 2022), the top of p. 1 and a paragraph of p. 6
LPPL = """\
The LATEX Project Public License
LPPL Version 1.3c 2008-05-04
Copyright 1999, 2002–2008 LATEX3 Project
Everyone is allowed to distribute verbatim copies of this license
document, but modification of it is not allowed.

Many works provide ways to control the behavior of that work without
altering any of its licensed components, so you may distribute the
modified version of such a work under a licensed name.
"""


def words(text: str) -> int:
    return len(text.split()) + 1


@pytest.fixture
def index(tmp_path, monkeypatch) -> I.DocumentIndex:
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    return I.DocumentIndex()


def best_passage(index: I.DocumentIndex, name: str, text: str, question: str, budget: int = 100) -> str:
    found = index.add(D.extract(name, text.encode()), "model")
    [reading] = E.read(index, [found], question, budget, words)
    return reading.hits[0].text


def test_forms_of_one_word_meet_and_other_words_do_not():
    def stem(word: str) -> str:
        [t] = terms(word)
        return t
    assert meet(stem("drückt"), stem("drücken")) and meet(stem("modifier"), stem("modifying"))
    assert meet(stem("licence"), stem("licensed"))
    assert not meet(stem("install"), stem("instance"))
    assert not meet(stem("statements"), stem("state"))   # a short word inside a longer one is not its form
    assert not meet(stem("1994"), stem("19945"))


def test_a_german_question_reads_the_sentence_that_inflects_its_verb(index):
    # "drückt": the sentence says "drücken"; without it the TAB-Taste sentence is read first
    question = "Welche Taste drückt man in GNOME, um ein Terminal zu suchen?"
    assert "SUPER-Taste" in best_passage(index, "debian-reference.de.txt", DEBIAN_REFERENCE_DE, question)


def test_index_entries_are_contents_and_name_their_line():
    text = standards_with_index()
    entry = next(line for line in text.split("\n") if line.startswith("* length of source lines"))
    assert layout.is_contents(entry) and layout.entry_words(entry) == "length of source lines"
    assert layout.points_to(text, text.index(entry) + len(entry)) == text[:text.index("Please keep")].count("\n") + 1
    wrapped = text.index("* -Wall compiler option")
    assert layout.points_to(text, text.index("\n", wrapped)) is not None          # "(line N)" on the next line
    assert not layout.is_contents("* Note: a list item that says something")       # one space: text, not an index
    assert not layout.is_contents("* Price:    40 dollars a month")                # aligned, but it names no line


def test_a_question_reads_the_line_a_matching_index_entry_names(index):
    passage = best_passage(index, "standards.txt", standards_with_index(), "How long should source lines be at most?")
    assert "79 characters" in passage


def test_an_index_entry_is_never_read_for_itself(index):
    found = index.add(D.extract("standards.txt", standards_with_index().encode()), "model")
    [reading] = E.read(index, [found], "How long should source lines be at most?", 400, words)
    assert not any("(line " in h.text for h in reading.hits)


def test_a_question_for_a_date_reads_the_date(index):
    passage = best_passage(index, "lppl.txt", LPPL, "What is the date of this version of the licence?")
    assert "2008-05-04" in passage


def test_a_heading_begins_the_piece_that_holds_its_section():
    pieces = chunks.split(STANDARDS_CONDITIONAL)
    assert len(pieces) == 2
    assert pieces[1].startswith("3.5 Conditional Compilation\n=====") and "Conditional Compilation" not in pieces[0]


def test_a_question_that_matches_a_heading_reads_the_start_of_its_section(index):
    # read for itself, the heading came with the "#endif" before it and its underline, and no answer
    question = "Why does the standard prefer if statements over conditional compilation?"
    passage = best_passage(index, "standards.txt", STANDARDS_CONDITIONAL, question)
    assert passage.startswith("3.5 Conditional Compilation") and "more extensive checking" in passage


def test_a_letter_asked_about_reads_the_entry_that_starts_with_it(index):
    # without the letter, "denote" and "argument" found r's entry ("this denotes a 'required' ...")
    passage = best_passage(index, "usrguide.txt", USRGUIDE_TYPES, "What does the argument type m denote?")
    assert passage.startswith("m A standard mandatory argument")
    passage = best_passage(index, "usrguide.txt", USRGUIDE_TYPES, "What does the v argument type read?")
    assert passage.startswith("v Reads an argument")


def test_a_short_code_asked_about_reads_its_entry_not_a_line_that_also_names_it(index):
    # "series" and "bx" both stand in p. 8's "\textbf{..} or \bfseries series bx", which says nothing of
    # what bx means; the entry "bx Bold extended" holds the code alone, as its first word
    passage = best_passage(index, "fntguide.txt", FNTGUIDE_SERIES, "What does the series value bx mean?")
    assert "bx Bold extended" in passage and "bfseries" not in passage


def test_a_section_title_the_file_marks_is_read_with_the_sentences_after_it(index):
    # SQLite's limits.html titles each limit with a bold paragraph (documents/webpage.py); read as a
    # sentence among others, the title came with the sentence after it, and the default (the second) not
    question = "What is the default maximum length of a string or BLOB in SQLite?"
    passage = best_passage(index, "limits.html", SQLITE_LIMITS, question, budget=120)
    assert passage.startswith("1) Maximum length of a string or BLOB") and "1 billion" in passage


def test_a_sentence_that_ends_with_a_colon_is_read_with_the_list_it_introduces(index):
    # before: "... one of the following storage classes:" and "- NULL.", one class of five
    passage = best_passage(index, "datatype3.html", SQLITE_STORAGE_CLASSES, "Which storage classes does SQLite have?",
                           budget=200)
    assert all(f"- {c}." in passage for c in ("NULL", "INTEGER", "REAL", "TEXT", "BLOB"))


def test_how_many_is_no_word_of_the_answer():
    assert I.STOPWORDS >= {"many", "much"}
    assert terms("How many bytes long is the header?") == terms("bytes long header")
