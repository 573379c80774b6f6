"""Short excerpts of the real corpus's files (benchmarks/doc_corpus.py) that more than one test
reads, as the files wrap them."""

# standards.txt (gnu-standards 2022.03.23), lines 2262-2272, wrapped at 72 columns
STANDARDS_FORMATTING = """\
5.1 Formatting Your Source Code
===============================

Please keep the length of source lines to 79 characters or less, for
maximum readability in the widest range of environments.

   It is important to put the open-brace that starts the body of a C
function in column one, so that they will start a defun.  Several tools
look for open-braces in column one to find the beginnings of C
functions.  These tools will not work on code not formatted that way.
"""
