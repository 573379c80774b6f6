"""Documents attached to a chat: text from the files a person attaches (PDF, DOCX, text,
Markdown, HTML, CSV, JSON, code), and for a file far longer than the context, the parts of it a
question reads. A room of its own below the core: of the runtime it imports only the sandbox
(tests/test_layers.py), so the core's attachments (runtime/core/attachments.py) use it like any
library.

- `extract`: `extract.extract(name, data)` -> a `Document` (PDF pages, DOCX headings), bounded
  in size and time;
- `chunks`: a document too long for the context -> pieces that keep where they came from
  (the page of a PDF, the heading of a DOCX or Markdown section, the lines of a text file);
- `index`: those pieces in SQLite FTS5 (BM25) in the app's data folder (the app holds its index:
  runtime/core/files.py), by default the per-user one;
- `excerpts`: the pieces one question reads within a token budget, written under their marks,
  and what the reply reports of them (so the page can show which parts of the file were read);
- `reading`: which files of a request are read whole and which are searched (`file.read`);
- `places`, `attribution`: what the model was given, and which place of it supports each
  sentence of the reply (the server's sources; nothing when the support is weak).
"""
