"""Documents attached to a chat, with nothing of the server in them (tests/test_layers.py holds
them to the standard library and llmpack's base modules):

- `extract`: a file's bytes -> its text (PDF pages, DOCX headings), bounded in size and time;
- `chunks`: a document too long for the context -> pieces that keep where they came from
  (the page of a PDF, the heading of a DOCX or Markdown section, the lines of a text file);
- `index`: those pieces in SQLite FTS5 (BM25) in the per-user data folder, and the best of them
  for one question within a token budget;
- `excerpts`: how the pieces the model reads are written into the prompt, and what the reply
  reports of them (so the page can show which parts of the file were read).
"""
