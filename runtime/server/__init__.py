"""The server (llmpack.runtime.server): the OpenAI-compatible HTTP API, `/health`, `/metrics` and the
chat page's own API over one served model. `launch` starts waitress and prepares the model in the
background (`serving` builds the `ServedModel`); `app` wires the routes; `protocol` and `structured`
turn request bodies into engine requests; `security` is the deny-by-default API key; `chats` and
`attachments` (with `documents`) back the chat page. The top room: it may import every other room
of the runtime, and nothing in the runtime imports it."""
