"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) over the core, for Claude-style
clients: `protocol` reads Anthropic's request (system, content blocks, tools, tool_choice,
thinking) into the core's ChatRequest and writes a Message; `stream` writes the documented event
sequence; `routes` is the room's route table, with errors in Anthropic's own shape. May import
core/ and http/ only, never another protocol room."""
