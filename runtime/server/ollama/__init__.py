"""Ollama's native API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version,
/api/embed) over the core, for Open WebUI, Continue and the editors that speak it: `protocol`
reads Ollama's requests (options, format, tools, think) into the core's requests and writes its
NDJSON shapes; `routes` is the room's route table, with errors as Ollama's {"error": "..."}.
May import core/ and http/ only, never another protocol room."""
