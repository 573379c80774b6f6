"""The server (llmpack.runtime.server): the OpenAI-compatible HTTP API, `/health`, `/metrics` and the
chat page's own API over one served model, in rooms that name the architecture:

    documents/   text from attached files (PDF, DOCX, ...)                  imports nothing of the server
    core/        the generation core every wire format calls: request -> prompt -> engine ->
                 output plan -> events (also runtime/llm.py's LLM.chat)      -> documents
    http/        options, state (/health), errors, guards, request context,
                 metrics                                                      -> core
    openai/      the OpenAI API as a thin translation over the core          -> core, http
    page/        the chat page's saved chats, settings and /v1/extract       -> core, http, documents
    app.py       the one route table (create_app); config.py the ServeConfig -> the rooms above
    lifecycle/   serve(): sockets, the waitress server, model preparation,
                 browser redirect, instance lock, signals                    -> everything above

A protocol room imports core/ and http/ only, never another protocol; the server reaches the engine
only through `EngineClient` (runtime/engine/client.py). tests/test_layers.py holds these rules. The
top room of the runtime: it may import every other room, and nothing in the runtime imports it
except runtime/llm.py, which uses core/."""
