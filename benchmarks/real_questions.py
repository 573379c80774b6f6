"""Questions on the real corpus (benchmarks/doc_corpus.py), written by reading those files: each
with its answer (alternatives split by "|", matched in the reply ignoring case and spaces; a number
written in words also counts as digits) and its
place (PDF pages as llmpack extracts them, lines of a text file, or a web page's sections by their
innermost heading; any one of them is right).

Kinds: `once` (a fact stated once), `definition`, `number` (a number in a sentence or a table),
`trap` (the question's words also stand in the contents or in another section's
cross-reference: the source must be the place that states the answer), `paraphrase` (the
question shares few words with the text), `follow-up` (asked after another question in the same
chat), `two-files` (two files attached at once), and the languages: `de` (German), `ja`
(Japanese, no spaces between words).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    kind: str
    files: tuple[str, ...]
    question: str
    answer: str                      # "a|b": either is the fact
    file: str                        # the file that states it
    pages: tuple[int, ...] = ()      # PDF pages that state it
    lines: tuple[int, int] = (0, 0)  # text lines that state it (first, last)
    first: str = ""                  # follow-up: the question asked before, in the same chat
    unless: str = ""                 # a reply matching this holds the answer's words in another sense: no fact
    sections: tuple[str, ...] = ()   # web pages: the innermost headings of the sections that state it


C, U, L, S = "clsguide.pdf", "usrguide.pdf", "lppl.pdf", "standards.txt"
DE, JA = "debian-reference.de.txt", "debian-reference.ja.txt"


def q(kind: str, files, question: str, answer: str, pages=(), lines=(0, 0), file: str = "", first: str = "",
      unless: str = "", sections=()) -> Question:
    files = (files,) if isinstance(files, str) else tuple(files)
    return Question(kind, files, question, answer, file or files[0], tuple(pages), tuple(lines), first, unless,
                    tuple(sections))


QUESTIONS = [
    # ---- clsguide.pdf: LaTeX2e for class and package writers (33 pages, typeset)
    q("once", C, "How many types of command does LaTeX have?", "three|3", [6]),
    q("once", C, "To be colour safe, which LaTeX command should be used instead of the TeX primitive \\setbox?",
      "\\sbox|sbox", [6, 8]),
    q("definition", C, "What is the command \\normalcolor normally?", "\\relax|relax|does nothing", [7]),
    q("number", C, "At most how many characters should a file name have, without the extension?", "eight|8", [9]),
    q("once", C, "Which hook should a package use instead of redefining \\document?", "AtBeginDocument", [9]),
    q("paraphrase", C, "A firm wants a class for letters on its own headed note-paper. What would that class be called?",
      "ownlet", [5]),
    q("once", C, "In which file is the author's guide LaTeX2e for Authors?", "usrguide.tex", [3]),
    q("number", C, "Of how many packages does The LaTeX Companion second edition give an overview?", "200", [3]),
    q("once", C, "Who described TeX in The TeXbook?", "Knuth", [3, 32]),
    q("once", C, "Who wrote LaTeX: A Document Preparation System?", "Lamport", [3, 32]),
    q("once", C, "Which class file is used to typeset the documented sources of LaTeX?", "ltxdoc", [3, 5]),
    q("once", C, "In which release were the package error commands introduced?", "June 1994|1994", [9]),
    q("paraphrase", C, "What prefix might the classes of the University of Nowhere start with?", "unw", [9]),
    q("trap", C, "What does the guide say about freezing the 2.09 version when upgrading an old style file?",
      "no longer maintaining|freezing", [4]),
    q("follow-up", C, "Who are the authors of The LaTeX Companion second edition?", "Mittelbach", [3, 32],
      first="What does The LaTeX Companion describe?"),
    q("paraphrase", C, "Why is it a bad idea to load a package with \\input?", "more than once|once|listfiles", [7]),
    q("trap", C, "What is the rule of thumb for deciding between a class and a package?", "any document class", [5]),
    # ---- usrguide.pdf: LaTeX for authors (21 pages)
    q("number", U, "In which year was LaTeX2e released?", "1994", [2]),
    q("definition", U, "What does the argument type m denote?", "mandatory", [3]),
    q("definition", U, "What does the v argument type read?", "verbatim", [3]),
    q("once", U, "What does the + modifier do to an argument in an argument specification?", "long", [4]),
    q("once", U, "Which command issues an error if the command has already been defined?", "NewDocumentCommand", [4]),
    q("once", U, "Which of the document command variants should be used sparingly?", "DeclareDocumentCommand", [5]),
    q("once", U, "What is the default key name in the \\caption example?", "short-text", [9]),
    q("trap", U, "When is an argument processor applied to an argument?", "grabbed", [10]),
    q("trap", U, "In which order are argument processors applied?", "right to left", [10]),
    q("definition", U, "What does \\IfBlankTF return true for?", "empty|blank", [8]),
    q("follow-up", U, "And which marker is returned when it is not given?", "NoValue", [3],
      first="What is the o argument type?"),
    # ---- lppl.pdf: the LaTeX Project Public License (8 pages)
    q("number", L, "Which version of the LaTeX Project Public License is this?", "1.3c", [1]),
    q("number", L, "What is the date of this version of the licence?", "2008-05-04", [1]),
    q("once", L, "After an intention announcement, how long must nobody challenge it before you can become the "
                 "Current Maintainer?", "three months|3 months", [5]),
    q("definition", L, "What is a Compiled Work?", "directly usable", [2]),
    # clause 3(b) on p. 5, "the Current Maintainer is not reachable and the Copyright Holder agrees ...",
    # names the Copyright Holder too, but as someone who agrees, not as who the maintainer is
    q("definition", L, "Who is the Current Maintainer if nobody is nominated?", "Copyright Holder", [2],
      unless="not reachable"),
    q("paraphrase", L, "Which kind of work is this licence particularly suitable for?", "TeX-related|TEX-related", [1]),
    # ---- standards.txt: the GNU Coding Standards, plain text wrapped at 72 columns
    q("number", S, "How long should source lines be at most?", "79", lines=(2265, 2266)),
    q("once", S, "Why should a count of errors not be used as a program's exit status?", "8 bits|255",
      lines=(580, 584)),
    q("once", S, "Which environment variable should a program check for where to make temporary files?", "TMPDIR",
      lines=(586, 588)),
    q("number", S, "How long should a library's name prefix be?", "two characters|2 characters", lines=(614, 615)),
    q("once", S, "What should the --version option print?", "legal status", lines=(869, 873)),
    q("once", S, "Which two standard options should all programs support?", "--help|help", lines=(860, 864)),
    q("trap", S, "Which license should GNU manuals use?", "Free Documentation License|FDL", lines=(3196, 3198)),
    q("once", S, "What is a separate change log file normally called?", "ChangeLog", lines=(3306, 3308)),
    q("trap", S, "Why does the standard prefer if statements over conditional compilation?", "extensive checking|checking",
      lines=(422, 425)),
    q("once", S, "Which line should every Makefile contain?", "SHELL = /bin/sh|/bin/sh", lines=(3892, 3894)),
    q("number", S, "How many spaces should follow the end of a sentence in comments?", "two|2", lines=(2427, 2428)),
    q("paraphrase", S, "Where should the open brace that starts a C function's body go?", "column one", lines=(2268, 2270)),
    q("follow-up", S, "And what should --help output?", "brief documentation", lines=(1020, 1023),
      first="What should the --version option print?"),
    # ---- debian-reference.de.txt: German, indented and wrapped
    q("de", DE, "Wo ist die Grußnachricht gespeichert, die das System beim Start zeigt?", "/etc/motd", lines=(1141, 1143)),
    q("de", DE, "Wie wird das root-Benutzerkonto auch genannt?", "Superuser", lines=(1187, 1188)),
    q("de", DE, "Was sollten Sie mit dem root-Passwort niemals tun?", "anderen mit|anderen", lines=(1208, 1208)),
    q("de", DE, "Welche Taste drückt man in GNOME, um ein Terminal zu suchen?", "SUPER", lines=(1176, 1178)),
    q("de", DE, "Welche Tasten drückt man für einen textbasierten Anmeldebildschirm?", "Strg-Alt-F3",
      lines=(1119, 1123)),
    q("de", DE, "Was tippt man in jeglicher Shell, um eine root-Shell zu bekommen?", "su -l", lines=(1229, 1229)),
    # ---- debian-reference.ja.txt: Japanese
    q("ja", JA, "root アカウントは何とも呼ばれますか?", "スーパーユーザー|特権ユーザー", lines=(1115, 1115)),
    q("ja", JA, "root のパスワードについて何をしてはいけませんか?", "教え", lines=(1133, 1133)),
    q("ja", JA, "歓迎メッセージはどのファイルに保存されていますか?", "/etc/motd", lines=(1073, 1075)),
    q("ja", JA, "\"su -l\" は現ユーザーの環境を引き継ぎますか?", "一切引き継", lines=(1152, 1154)),
    q("ja", JA, "In the GNOME desktop, which key do you press to find a terminal?", "SUPER", lines=(1105, 1107)),
    # ---- two files at once
    q("two-files", (U, L), "Which version of the LaTeX Project Public License is this?", "1.3c", [1], file=L),
    q("two-files", (S, C), "How long should source lines be at most, according to the GNU standards?", "79",
      lines=(2265, 2266), file=S),
    q("two-files", (DE, JA), "Wie wird das root-Benutzerkonto auch genannt?", "Superuser", lines=(1187, 1188), file=DE),
    q("two-files", (C, U), "In an argument specification, what kind of argument does the letter m stand for?",
      "mandatory", [3], file=U),
]

# Held out: written on 2026-12-07 after the search rules of 75d0646 and the codes rule (excerpts.py
# `_codes`) were made, on a file and places those rules were not made on, to see whether they
# generalise: fntguide.pdf (LaTeX2e font selection, 39 typeset pages, many short codes such as "bx"
# and "phv"), and other chapters of the two Debian Reference files. Two places the first key did
# not list were added after reading them (p. 7 for the five attributes, p. 22 for fontenc): each
# states the reply's claim, and a reader who clicks them finds it.
F = "fntguide.pdf"
HELD_OUT = [
    q("number", F, "How many attributes does every text font in LaTeX have?", "five|5", [4, 7]),
    q("once", F, "What is the informal name of the TeX text extended encoding?", "Cork", [4]),
    q("once", F, "Which font family code stands for Adobe Helvetica?", "phv", [5]),
    q("definition", F, "What does the series value bx mean?", "Bold extended", [5]),
    q("letter", F, "What width does the series code c stand for?", "Condensed|75", [5]),
    q("definition", F, "What does the shape code sl stand for?", "Slanted|oblique", [7]),
    q("once", F, "If no unit is given for a font size, which unit is assumed?", "pt", [4, 7]),
    q("once", F, "Which package should provide commands for selecting new encodings?", "fontenc", [7, 22]),
    q("once", F, "Whose software is psnfss?", "Rahtz", [3]),
    q("number", F, "In which year was the Cork encoding developed?", "1990", [4]),
    q("definition", F, "What does the weight code eb mean?", "Extra Bold", [5]),
    q("trap", F, "Which section explains how to install new fonts into LaTeX?", "Section 4", [3]),
    q("de", DE, "Wie nennt man die Verzeichnisse als Ganzes betrachtet?", "Verzeichnisbaum", lines=(1581, 1582)),
    q("de", DE, "Was bezeichnet \"../\" immer?", "übergeordnete|Eltern", lines=(1591, 1593)),
    q("de", DE, "Welche Zeichen sind eine gute Wahl, um Wörter in einem Dateinamen zu trennen?",
      "Bindestriche|Unterstriche|Punkte", lines=(1614, 1615)),
    q("de", DE, "Wo sind bewährte Methoden für die Dateihierarchie beschrieben?", "Filesystem Hierarchy Standard",
      lines=(1633, 1635)),
    q("ja", JA, "ディレクトリー \"../\" は何を参照していますか?", "親ディレクトリー", lines=(1467, 1468)),
    q("ja", JA, "ファイル名は大文字と小文字を区別しますか?", "区別します", lines=(1431, 1432)),
    q("ja", JA, "ファイル名中の単語間を区別するには何を選びますか?", "ピリオド|ハイフン|下線", lines=(1488, 1489)),
]


# Web pages (`--web`): SQLite's documentation as sqlite3-doc ships it, written on 2026-12-07 by
# reading the pages after documents/webpage.py was made on them. The right place is a section
# (its innermost heading). The string limit is a trap: the SQL statement limit's section states
# the same 1,000,000,000. The Python pages (python3.11-doc) were added after webpage.py's Sphinx
# rules (role="navigation", the "¶" link) were made on json.html; their questions were written
# before any of them was asked.
PYJ, PYF, PYS = "json.html", "functools.html", "secrets.html"
PYJ_TOP = "json — JSON encoder and decoder"
PYF_TOP = "functools — Higher-order functions and operations on callable objects"
LIM, FMT, TYP, LCK, FAQ, SEL = ("limits.html", "fileformat2.html", "datatype3.html", "lockingv3.html", "faq.html",
                                "lang_select.html")
WEB = [
    q("trap", LIM, "What is the default maximum length of a string or BLOB in SQLite?",
      "1 billion|one billion|1,000,000,000", sections=["Maximum length of a string or BLOB"]),
    q("number", LIM, "What is the default setting for SQLITE_MAX_COLUMN?", "2000",
      sections=["Maximum Number Of Columns"]),
    q("number", LIM, "How large can the maximum number of columns be set at compile time?", "32767",
      sections=["Maximum Number Of Columns"]),
    q("number", FMT, "At which offset in the database header is the page size stored?", "16",
      sections=["1.3. The Database Header", "1.3.2. Page Size"]),
    q("number", FMT, "How many bytes long is the database file header?", "100",
      sections=["1.3. The Database Header", "1.6. B-tree Pages"]),
    q("paraphrase", TYP, "Which storage class holds a floating point number?", "REAL",
      sections=["2. Storage Classes and Datatypes"]),
    q("definition", TYP, "What affinity does a column declared as VARCHAR(255) get?", "TEXT",
      sections=["3.1. Determination Of Column Affinity", "3.1.1. Affinity Name Examples"]),
    q("once", LCK, "Which lock is needed in order to write to the database file?", "EXCLUSIVE",
      sections=["3.0 Locking", "5.0 Writing to a database file"]),
    q("once", FAQ, "How do I create an AUTOINCREMENT field?", "INTEGER PRIMARY KEY",
      sections=["(1) How do I create an AUTOINCREMENT field?"]),
    q("paraphrase", FAQ, "Does SQLite limit how long a VARCHAR value can be?", "not enforce|not enforced|no limit",
      sections=["(9) What is the maximum size of a VARCHAR in SQLite?"]),
    q("once", SEL, "What happens to duplicate rows in a SELECT DISTINCT?", "removed|eliminated|discarded",
      sections=["2.6. Removal of duplicate rows (DISTINCT processing)", "2. Simple Select Processing"]),
    q("definition", SEL, "What does the LIMIT clause do?", "upper bound", sections=["5. The LIMIT clause"]),
    q("two-files", (LIM, FAQ), "What is the default setting for SQLITE_MAX_COLUMN?", "2000", file=LIM,
      sections=["Maximum Number Of Columns"]),
    q("once", PYJ, "Which encoding does the JSON RFC recommend as the default?", "UTF-8",
      sections=["Character Encodings"]),
    q("paraphrase", PYJ, "What does the json module do when an object repeats a name?", "last",
      sections=["Repeated Names Within an Object", "Standard Compliance and Interoperability"]),
    q("number", PYJ, "What is the default value of sort_keys?", "False", sections=["Basic Usage", "Encoders and Decoders"]),
    q("once", PYJ, "Which module gives json a command line interface?", "json.tool",
      sections=["Command Line Interface", "Command line options", PYJ_TOP]),
    q("number", PYF, "What is the default maxsize of lru_cache?", "128", sections=[PYF_TOP]),
    q("paraphrase", PYF, "How do I clear the value a cached_property stored?",
      "deleting the attribute|delete the attribute|deletes the attribute|del", sections=[PYF_TOP]),
    q("once", PYS, "Which function compares two strings in constant time?", "compare_digest",
      sections=["Other functions"]),
    q("number", PYS, "How many bytes of randomness are believed to be enough for a token?", "32",
      sections=["How many bytes should tokens use?"]),
]
