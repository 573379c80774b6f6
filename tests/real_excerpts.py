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

# standards.txt (gnu-standards 2022.03.23), lines 399-446: the end of 3.4, the heading of 3.5 and its
# first paragraphs; a 1,200-character piece cut at the last blank line that fits ended with the heading
STANDARDS_CONDITIONAL = """\
   There are a few special cases where this technique is hard to use.
For example, if a function argument needs to hold the system type
'dev_t', you run into trouble, because 'dev_t' is shorter than 'int' on
some machines; but you cannot use 'int' instead, because 'dev_t' is
wider than 'int' on some machines.  There is no type you can safely use
on all machines in a non-standard definition.  The only way to support
non-standard C and pass such an argument is to check the width of
'dev_t' using Autoconf and choose the argument type accordingly.  This
may not be worth the trouble.

   In order to support pre-standard compilers that do not recognize
prototypes, you may want to use a preprocessor macro like this:

     /* Declare the prototype for a general external function.  */
     #if defined (__STDC__) || defined (WINDOWSNT)
     #define P_(proto) proto
     #else
     #define P_(proto) ()
     #endif

3.5 Conditional Compilation
===========================

When supporting configuration options already known when building your
program we prefer using 'if (... )' over conditional compilation, as in
the former case the compiler is able to perform more extensive checking
of all possible code paths.

   For example, please write

       if (HAS_FOO)
         ...
       else
         ...

instead of:

       #ifdef HAS_FOO
         ...
       #else
         ...
       #endif

   A modern compiler such as GCC will generate exactly the same code in
both cases, and we have been using similar techniques with good success
in several projects.  Of course, the former method assumes that
'HAS_FOO' is defined as either 0 or 1.

"""

# usrguide.pdf (texlive-latex-base-doc 2022), p. 3: the list of argument types as pypdf extracts it
USRGUIDE_TYPES = """\
m A standard mandatory argument, which can either be a single token alone
or multiple tokens surrounded by curly braces {}. Regardless of the input,
the argument will be passed to the internal code without the outer braces.
This is the type specifier for a normal TEX argument.
r Given as r⟨token1 ⟩⟨token2 ⟩, this denotes a ‘required’ delimited argument,
where the delimiters are ⟨token1 ⟩ and ⟨token2 ⟩. If the opening delimiter
⟨token1 ⟩ is missing, the default marker -NoValue- will be inserted after
a suitable error.
R Given as R⟨token1 ⟩⟨token2 ⟩{⟨default⟩}, this is a ‘required’ delimited argument
as for r, but it has a user-definable recovery ⟨default⟩ instead of
-NoValue-.
v Reads an argument ‘verbatim’, between the following character and its
next occurrence, in a way similar to the argument of the LATEX2ε command
\\verb. Thus a v-type argument is read between two identical characters,
which cannot be any of %, \\, #, {, } or ␣.
"""

# fntguide.pdf (texlive-latex-base-doc 2022), the series values of p. 5 and the author commands of
# p. 8, as pypdf extracts them
FNTGUIDE_SERIES = """\
Examples for series values are then:
m Medium weight and width
b Bold weight, medium width
bx Bold extended
sb Semi-bold, medium width
sbx Semi-bold extended
c Medium weight, condensed width

\\textmd{..} or \\mdseries series m
\\textbf{..} or \\bfseries series bx
\\textit{..} or \\itshape shape it
"""
