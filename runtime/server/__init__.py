"""The server (llmpack.runtime.server): HTTP only. The OpenAI, Responses, Anthropic and Ollama APIs,
`/health`, `/metrics` and the chat page's own API over one served model, in rooms that name the
architecture:

    http/        options, state (/health), errors, guards, request context,
                 metrics, streaming                                           -> core
    openai/      the OpenAI API (chat, completions, embeddings, models)       -> core, http
    responses/   OpenAI's Responses API, with its stored responses             -> core, http
    anthropic/   Anthropic's Messages API                                     -> core, http
    ollama/      Ollama's API (/api/chat, /api/generate, /api/tags, ...)      -> core, http
    page/        the chat page's saved chats, settings and /v1/extract       -> core, http, documents
    app.py       the one route table (create_app); config.py the ServeConfig -> the rooms above
    lifecycle/   serve(): sockets, the waitress server, model preparation,
                 browser redirect, instance lock, signals                    -> everything above

What the server serves lives below it, with no Flask: runtime/core/ (the generation core every
room calls) and runtime/documents/ (attached files). A protocol room imports core/ and http/
only, never another protocol; the server reaches the engine only through `EngineClient`
(runtime/engine/client.py). tests/test_layers.py holds these rules. May import every room of the
runtime; no room outside it imports it: runtime/scale/ runs it on Ray with what the CLI hands
it (llmpack/ray_server.py), and the CLI and the builder sit above it."""
