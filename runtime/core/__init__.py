"""The generation core (llmpack.runtime.core): the one path every wire format takes.

    request  -> prompt      `prompt.render_messages` (chat template, default system prompt, tools),
                            `attachments.expand_file_parts` (files in messages), `params.sampling_params`
                            (the model's recipe defaults, stop strings and stop token ids)
    prompt   -> engine      `generation.Generation`: one engine stream per prompt, aborted when the
                            client leaves (`active.ActiveRequests`)
    engine   -> output      `plan.OutputPlan` (JSON, grammar, tools) and `output.ChoiceText`: a
                            reasoning model's thinking split off (runtime/chat/reasoning.py), text,
                            tool calls, finish reasons, per choice, streamed or whole; a thinking
                            budget ends the thinking and goes on (`generation.Generation`)

`served_model.ServedModel` is what the core knows of the one model: its `EngineClient` (the only
door to the engine, runtime/engine/client.py), chat format and recipe defaults. The OpenAI
routes (runtime/server/openai/) and the offline `LLM.chat` (runtime/llm.py) both call `request.prepare_chat`,
so the same model answers the same way offline and over HTTP.

The core is protocol-neutral: it knows no Flask, no HTTP and no wire format. Its requests are
typed (`request.ChatRequest`, `request.CompletionRequest`); its messages follow the chat-template
convention (roles system/user/assistant/tool, OpenAI-style `tool_calls`), which every Jinja chat
template reads. Errors are `errors.ApiError` (status, message, the parameter at fault); each room
renders them in its own protocol's shape. What an app holds (its document index, the sandbox that
reads files, the last reads and clips) is `files.AppFiles`, made by the app and carried by its
`ServedModel`, never a module global. May import: the engine, chat, structured, media and model
rooms, and documents/. Imported by: the server's protocol rooms, page/ and lifecycle/, and runtime/llm.py.
"""
