"""The server's sources (documents/attribution.py) on crafted replies: what the model was given
comes from the real reading path (reading.arrange over the real index), the reply is written
here, so each test says exactly which sentence must point where, or nowhere."""
from __future__ import annotations

import pytest

from doc_files import make_docx, make_pdf
from long_docs import contract_pages
from llmpack.runtime.documents import extract as D
from llmpack.runtime.documents import index as I
from llmpack.runtime.documents import reading as R
from llmpack.runtime.documents.attribution import Attribution, claims
from llmpack.runtime.documents.places import Place, of_document
from real_excerpts import STANDARDS_FORMATTING


def words(text: str) -> int:
    return len(text.split()) + text.count("\n")


@pytest.fixture
def index(tmp_path, monkeypatch) -> I.DocumentIndex:
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path / "data"))
    return I.DocumentIndex()


@pytest.fixture(scope="module")
def contract():
    pages, needle = contract_pages()
    return D.extract("contract.pdf", make_pdf(pages)), needle


def arranged(index, files: list[R.Attached], question: str) -> Attribution:
    got = R.arrange([{"role": "user", "content": []}], [R.FileMessage(0, files, question)],
                    budget=3000, count=words, index=index, owner="m")
    return got.attribution


def only(sources):
    assert len(sources) == 1, [s.to_json()["label"] for s in sources]
    return sources[0].to_json()


def test_a_reply_that_states_the_fact_points_at_its_page(index, contract):
    doc, needle = contract
    att = arranged(index, [R.Attached("contract.pdf", doc=doc)], needle.question)
    reply = "Kestrel Marine services the emergency generator, under contract number KM-4471 [p. 217]."
    src = only(att.sources(reply))
    assert (src["file"], src["page"], src["label"]) == ("contract.pdf", 217, "contract.pdf · p. 217")
    assert src["quote"] == needle.text and src["context"][src["quote_start"]:src["quote_end"]] == needle.text
    assert needle.text in doc.pages[216] and src["context"] in doc.pages[216]
    assert (src["reply_start"], src["reply_end"]) == (0, len(reply))
    assert (src["model_mark"], src["mark_right"]) == ("[p. 217]", True)
    assert src["file_id"] == I.doc_id(doc) and src["section"] is None and src["lines"] is None


@pytest.mark.parametrize("written, mark", [("[p. 216]", "[p. 216]"), ("(p. 216)", "(p. 216)"),
                                           ("on page 216", "page 216"), ("[end of p. 216]", "[end of p. 216]")])
def test_a_wrong_page_mark_is_overruled_and_flagged(index, contract, written, mark):
    doc, needle = contract
    att = arranged(index, [R.Attached("contract.pdf", doc=doc)], needle.question)
    src = only(att.sources(f"The generator is serviced by Kestrel Marine (contract KM-4471), {written}."))
    assert src["page"] == 217 and src["model_mark"] == mark and src["mark_right"] is False


def test_a_mark_alone_or_a_page_alone_is_no_claim(index, contract):
    doc, needle = contract
    att = arranged(index, [R.Attached("contract.pdf", doc=doc)], needle.question)
    assert att.sources("[p. 96]") == [] and att.sources("It is on page 217.") == []
    # a mark after the sentence it cites belongs to that sentence
    reply = "Kestrel Marine services it under contract KM-4471.\n[p. 216]"
    assert claims(reply) == [(0, len(reply))]
    assert only(att.sources(reply))["mark_right"] is False


def test_unsupported_sentences_get_no_source(index, contract):
    doc, needle = contract
    att = arranged(index, [R.Attached("contract.pdf", doc=doc)], needle.question)
    assert att.sources("The generator was painted green in 1998 by volunteers.") == []
    assert att.sources("It is serviced by Kestrel Marine under contract number KM-9930.") == []   # a wrong number
    assert att.sources("I hope this helps! Let me know if you have other questions.") == []
    reply = "Sure. Kestrel Marine services it under contract number KM-4471. It also sells boats to pirates."
    src = only(att.sources(reply))
    assert reply[src["reply_start"]:src["reply_end"]] == "Kestrel Marine services it under contract number KM-4471."


def test_a_paraphrase_is_attributed(index, contract):
    doc, needle = contract
    att = arranged(index, [R.Attached("contract.pdf", doc=doc)], "Which firm maintains the Harrow Lane backup power?")
    src = only(att.sources("The backup generator of the depot on Harrow Lane is maintained by Kestrel Marine."))
    assert src["page"] == 217 and src["quote"] == needle.text


def test_numbers_decide_between_near_identical_sentences():
    pages = ["The door code of the archive is 4711. Staff sign in at the desk.",
             "The door code of the archive is 5822. Staff sign in at the desk."]
    doc = D.extract("codes.pdf", make_pdf(pages))
    att = Attribution(of_document(doc, 0), "What is the door code of the archive?")
    assert only(att.sources("The door code is 5822."))["page"] == 2
    assert only(att.sources("The archive's door code is 4711."))["page"] == 1
    # the same sentence on both pages: which page is unknowable, so no source
    assert att.sources("Staff sign in at the desk.") == []


def test_two_files_each_sentence_points_at_its_own(index, contract):
    doc, needle = contract
    note = D.extract("note.txt", b"Shopping list.\nMilk and bread.\nThe door code of the shed is 4711.\nCall Anna.\n")
    att = arranged(index, [R.Attached("contract.pdf", doc=doc), R.Attached("note.txt", doc=note)], needle.question)
    reply = "Kestrel Marine services the generator under contract KM-4471. The shed's door code is 4711."
    first, second = (s.to_json() for s in att.sources(reply))
    assert first["label"] == "contract.pdf · p. 217"
    assert (second["file"], second["page"], second["lines"], second["label"]) == ("note.txt", None, [3, 3],
                                                                                    "note.txt · line 3")
    assert second["quote"] == "The door code of the shed is 4711." and second["reply_start"] > first["reply_end"]


def test_a_section_of_a_docx_is_named(index):
    data = make_docx([("Heading1", "Terms"), ("Normal", "Payment is due within 30 days of the invoice."),
                      ("Heading1", "Termination"), ("Normal", "Either party may end the agreement with 90 days notice."),
                      ("Normal", "Notice must be given in writing to the registered office.")])
    doc = D.extract("agreement.docx", data)
    att = arranged(index, [R.Attached("agreement.docx", "excerpts", doc)], "How can the agreement be ended?")
    src = only(att.sources("The agreement can be ended by either party with 90 days notice [§ Termination]."))
    assert (src["section"], src["label"], src["mark_right"]) == ("Termination", "agreement.docx · § Termination", True)


def test_places_of_a_csv_row():
    csv = "id,item,serial\n1,pump,SN-1002\n2,boiler,SN-7781\n3,valve,SN-4410\n"
    doc = D.extract("inventory.csv", csv.encode())
    att = Attribution(of_document(doc, 0), "What is the serial of the boiler?")
    src = only(att.sources("The boiler's serial is SN-7781."))
    assert src["quote"] == "2,boiler,SN-7781" and src["lines"] == [3, 3]


def test_no_places_no_sources():
    att = Attribution([])
    assert not att and att.sources("Anything at all, 4711.") == []
    one = Attribution([Place("a.txt", "doc-1", 0, "line 1", "The code is 4711.", first_line=1)])
    assert only(one.sources("The code is 4711."))["label"] == "a.txt · line 1"


def test_a_csv_record_named_by_its_line_and_file_is_still_attributed(index):
    """A reply that names the line and the file ("line 203", "inventory-26.csv") makes no claim
    with the numbers 203 or 26: the record is still its source, and the line agrees."""
    rows = ["id,town,facility,serial,litres"] + [f"{i},Olford Quay,library,SN-{1000 + i},{100 + i}" for i in range(1, 400)]
    rows[202] = "202,Fordby Lane,pumping station,NR-9087,8936"
    doc = D.extract("inventory-26.csv", ("\n".join(rows) + "\n").encode())
    att = arranged(index, [R.Attached("inventory-26.csv", "excerpts", doc)], "What is the serial of the pumping station in Fordby Lane?")
    reply = "The serial of the pumping station in Fordby Lane is NR-9087, at line 203 of inventory-26.csv."
    src = only(att.sources(reply))
    assert src["lines"] == [203, 203] and src["label"] == "inventory-26.csv · line 203"
    assert (src["model_mark"], src["mark_right"]) == ("line 203", True)
    assert att.sources(reply.replace("line 203", "line 150"))[0].mark_right is False


# debian-reference (German), section 1.1.4, as its text file wraps it: a list item and the note under it
ROOT_SHELL = """1.1.4. Die root-shell-Eingabeaufforderung

    Hier ein paar grundlegende Methoden, um mittels root-Passwort
    eine root-shell-Eingabeaufforderung zu bekommen:

      * Geben Sie root im textbasierten Anmeldebildschirm ein.

      * Tippen Sie in jeglicher Shell "su -l" ein.

          + Hierdurch werden NICHT die Umgebungseinstellungen des
            angemeldeten Benutzers beibehalten.

      * Tippen Sie in jeglicher Benutzer-Shell-Eingabeaufforderung
        "su" ein.
"""


def test_a_claim_joined_from_two_near_sentences_is_quoted_from_both():
    """The demo model read the list item and its note and wrote them as one sentence: the note
    alone holds most of that sentence's words, but not the command the person asked for. The real
    corpus counted that half as a wrong source; the quote is now both."""
    doc = D.Document("debian-reference.de.txt", "text", ROOT_SHELL, len(ROOT_SHELL.encode()))
    att = Attribution(of_document(doc, 0), "Was tippt man in jeglicher Shell, um eine root-Shell zu bekommen?")
    [src] = att.sources('In jeglicher Shell "su -l" wird NICHT die Umgebungseinstellungen des angemeldeten '
                        'Benutzers beibehalten.')
    assert src.quote.startswith('* Tippen Sie in jeglicher Shell "su -l" ein.') and src.quote.endswith("beibehalten.")
    # one sentence stated alone is still quoted alone
    [alone] = att.sources("Geben Sie root im textbasierten Anmeldebildschirm ein.")
    assert alone.quote == "* Geben Sie root im textbasierten Anmeldebildschirm ein."


# standards.txt (gnu-standards 2022.03.23), lines 2262-2276, as wrapped at 72 columns
BRACES = STANDARDS_FORMATTING + """
   Avoid putting open-brace, open-parenthesis or open-bracket in column
one when they are inside a function, so that they won't start a defun.
The open-brace that starts a 'struct' body can go in column one if you
find it useful to treat that definition as a defun.
"""


def test_a_claim_about_what_was_asked_is_quoted_with_the_sentence_that_says_it():
    """The demo model answered about a C function's brace with the words of the sentence about a
    'struct' body ("... if you find it useful"). That sentence alone was its source: a wrong
    place, since a reader finds the struct there, not the function the person asked about."""
    doc = D.Document("standards.txt", "text", BRACES, len(BRACES.encode()))
    att = Attribution(of_document(doc, 0), "Where should the open brace that starts a C function's body go?")
    [src] = att.sources("The open brace that starts a C function's body should go in column one if you find it "
                        "useful.")
    assert src.quote.startswith("It is important to put the open-brace") and src.quote.endswith("as a defun.")
    # the struct sentence stated as it is, asked about a struct, is quoted alone
    att = Attribution(of_document(doc, 0), "Where can the open brace of a struct body go?")
    [alone] = att.sources("The open-brace that starts a 'struct' body can go in column one if you find it useful.")
    assert alone.quote.startswith("The open-brace that starts a 'struct' body")


def test_read_as_two_passages_side_by_side_the_claim_is_sourced_to_the_one_about_what_was_asked():
    """A 384-token reading of standards.txt gave the function's sentence and the struct's as two
    passages (lines 2268-2271 and 2273-2279), and the same reply was sourced to the struct's
    alone. A quote cannot span two passages, so the source is the one that names the subject;
    passages that are not side by side are not so joined."""
    function, struct = BRACES.split("\n\n   Avoid")
    function = function.split("\n\n   ")[-1]
    struct = "Avoid" + struct

    def att(struct_line: int) -> Attribution:
        places = [Place("standards.txt", "doc-s", 0, "lines 2268-2271", function, first_line=2268),
                  Place("standards.txt", "doc-s", 0, f"lines {struct_line}-{struct_line + 3}", struct,
                        first_line=struct_line)]
        return Attribution(places, "Where should the open brace that starts a C function's body go?")

    claim = "The open brace that starts a C function's body should go in column one if you find it useful."
    [src] = att(2273).sources(claim)
    assert src.place.label == "lines 2268-2271" and src.quote.startswith("It is important to put the open-brace")
    [far] = att(2400).sources(claim)   # not beside it: no rival there, the struct's sentence as before
    assert far.place.label == "lines 2400-2403"


# lppl.pdf p. 1 and usrguide.pdf p. 1 (texlive-latex-base-doc 2022) as PDFium reads them
LPPL_P1 = ("The LATEX Project Public License\nLPPL Version 1.3c 2008-05-04\nCopyright 1999, 2002–2008 LATEX3 Project\n"
           "Everyone is allowed to distribute verbatim copies of this license\ndocument, but modification of it is "
           "not allowed.\nPreamble\nThe LATEX Project Public License (lppl) is the primary license under which the\n"
           "LATEX kernel and the base LATEX packages are distributed.")
USRGUIDE_P1 = ("LATEX for authors — current version\n© Copyright 2020-2022, LATEX Project Team.\nAll rights reserved.∗\n"
               "2022-07-05\n∗This file may distributed and/or modified under the conditions of the LATEX Project Public\n"
               "License, either version 1.3c of this license or (at your option) any later version. See the\n"
               "source usrguide.tex for full details.")


def test_a_claim_two_files_state_is_sourced_to_neither():
    """Asked "Which version of the LaTeX Project Public License is this?" of the guide and the
    licence together, the demo model wrote "The LATEX Project Public License is version 1.3c.":
    the guide's footnote says it in one sentence, the licence in its title and the line under
    it. Which file the person meant is unknowable, so no source (it was the guide's footnote, a
    wrong source for the licence's question). What only one of them says keeps its source."""
    docs = [D.Document("usrguide.pdf", "pdf", USRGUIDE_P1, 1, [USRGUIDE_P1]),
            D.Document("lppl.pdf", "pdf", LPPL_P1, 1, [LPPL_P1])]
    att = Attribution([p for i, d in enumerate(docs) for p in of_document(d, i)],
                      "Which version of the LaTeX Project Public License is this?")
    assert att.sources("The LATEX Project Public License is version 1.3c.") == []
    [dated] = att.sources("LPPL version 1.3c is dated 2008-05-04.")
    assert dated.to_json()["label"] == "lppl.pdf · p. 1"
    [guide] = att.sources("This file may be distributed and modified under the conditions of that licence.")
    assert guide.to_json()["label"] == "usrguide.pdf · p. 1"


# fntguide.pdf (texlive-latex-base-doc 2022) p. 7 and p. 22, as PDFium reads them
FNTGUIDE_P7 = ("The values used by these commands are determined by the\ndocument class, using the parameters defined in "
               "Section 2.4.\nNote that there are no author commands for selecting new encodings. These\nshould be "
               "provided by packages, such as the fontenc package.\nThis section does not explain how LATEX font "
               "specifications are turned into fonts.")
FNTGUIDE_P22 = ("5.1 The fontenc package\nUsers can select new font encodings using the fontenc package. The fontenc\n"
                "package has options for encodings; the last option becomes the default encoding.")


def test_one_file_saying_it_twice_keeps_its_tightest_sentence():
    """fntguide.pdf says what fontenc is for over two sentences on p. 7 and in one on p. 22: both
    are the file's word, so the one sentence stands as the source (a file's second saying is
    no rival, as another file's is)."""
    # its pp. 7 and 22 as pp. 1 and 2 here
    doc = D.Document("fntguide.pdf", "pdf", FNTGUIDE_P7 + "\n\n" + FNTGUIDE_P22, 1, [FNTGUIDE_P7, FNTGUIDE_P22])
    att = Attribution(of_document(doc, 0), "Which package should provide commands for selecting new encodings?")
    [src] = att.sources("The fontenc package should provide commands for selecting new encodings.")
    assert (src.to_json()["label"], src.quote) == ("fntguide.pdf · p. 2",
                                                   "Users can select new font encodings using the fontenc package.")
