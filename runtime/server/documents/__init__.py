"""Text from the files a person attaches (PDF, DOCX, text, Markdown, HTML, CSV, JSON, code):
`extract.extract(name, data)` -> a `Document`. A room of its own: it imports nothing of the
server, so the core's attachments (core/attachments.py) and any later index use it alike."""
