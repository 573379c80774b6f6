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

# limits.html (sqlite3-doc 3.40.1-2+deb12u2, public domain), abridged: its heading (line 121), the first two items of
# its list of limits (lines 183-206 and 218-236, cut), each titled by a bold paragraph, with no </li>
SQLITE_LIMITS = """\
<h2>Limits In SQLite</h2>
<p>"Limits" in the context of this article means sizes or
quantities that can not be exceeded.</p>
<ol>
<li><p><b>Maximum length of a string or BLOB</b></p>

<p>
The maximum number of bytes in a string or BLOB in SQLite is defined
by the preprocessor macro SQLITE_MAX_LENGTH.  The default value
of this macro is 1 billion (1 thousand million or 1,000,000,000).
You can raise or lower this value at compile-time using a command-line
option like this:
</p>

<blockquote>-DSQLITE_MAX_LENGTH=123456789</blockquote>

<p>
The current implementation will only support a string or BLOB
length up to 2<small><sup>31</sup></small>-1 or 2147483647.  And
some built-in functions such as hex() might fail well before that
point.
</p>

<li><p><b>Maximum Number Of Columns</b></p>

<p>
The default setting for SQLITE_MAX_COLUMN is 2000.
</p>
</ol>
"""

# fileformat2.html (sqlite3-doc 3.40.1-2+deb12u2), lines 288-304 and 348, a sentence cut: a table with a
# header row
SQLITE_HEADER_TABLE = """\
<h2 id="the_database_header"><span>1.3. </span>The Database Header</h2>
<p>The first 100 bytes of the database file comprise the database file
header.  The database file header is divided into fields as shown by
the table below.</p>

<center>
<i>Database Header Format</i><br>
<table width="80%" border="1">
<tr><th>Offset</th><th>Size</th><th>Description
</th></tr><tr><td valign="top" align="center">0</td><td valign="top" align="center">16</td><td align="left">
The header string: "SQLite format 3\\000"
</td></tr><tr><td valign="top" align="center">16</td><td valign="top" align="center">2</td><td align="left">
The database page size in bytes.  Must be a power of two between 512
and 32768 inclusive, or the value 1 representing a page size of 65536.
</td></tr><tr><td valign="top" align="center">18</td><td valign="top" align="center">1</td><td align="left">
File format write version.  1 for legacy; 2 for <a href="wal.html">WAL</a>.
</td></tr></table></center>
"""

# datatype3.html (sqlite3-doc 3.40.1-2+deb12u2), lines 190-217: a list a colon introduces
SQLITE_STORAGE_CLASSES = """\
<h1 id="storage_classes_and_datatypes"><span>2. </span>Storage Classes and Datatypes</h1>

<p>Each value stored in an SQLite database (or manipulated by the
database engine) has one of the following storage classes:</p>
<ul>
  <li><p><b>NULL</b>.
  The value is a NULL value.</p>

  </li><li><p><b>INTEGER</b>. The value is a signed integer, stored in 0, 1,
  2, 3, 4, 6, or 8 bytes depending on the magnitude of the value.</p>

  </li><li><p><b>REAL</b>. The value is a floating point value, stored as
  an 8-byte IEEE floating point number.</p>

  </li><li><p><b>TEXT</b>. The value is a text string, stored using the
  database encoding (UTF-8, UTF-16BE or UTF-16LE).</p>

  </li><li><p><b>BLOB</b>. The value is a blob of data, stored exactly as
  it was input.</p>
</li></ul>

<p>A storage class is more general than a datatype.
The INTEGER storage class, for example, includes 7 different integer
datatypes of different lengths.  But as soon as INTEGER values are read
off of disk and into memory for processing, they are converted to the
most general datatype (8-byte signed integer).</p>
"""
