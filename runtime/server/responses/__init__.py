"""OpenAI's Responses API (/v1/responses) over the core, for Codex-style agents: `protocol` reads
`input` items, `instructions`, function tools, `text.format` and `reasoning` into the core's
ChatRequest and writes Response objects and output items; `stream` writes the documented event
sequence; `store` keeps responses for `previous_response_id` (bounded, per user, 0600); `routes`
is the room's route table. May import core/ and http/ only, never another protocol room."""
