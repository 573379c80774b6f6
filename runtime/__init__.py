"""The runtime (llmpack.runtime): everything a built file runs, in rooms that name the architecture.

    model/       what a GGUF file says: header checks, metadata, base-or-instruct      (imports nothing here)
    hardware/    where it runs: ggml backends, CPU variant, GPU offload and fitting    -> model
    structured/  output constraints: JSON Schema -> GBNF, tool-call grammars           (imports nothing here)
    sandbox/     a stranger's bytes read in capped child processes (pictures, files)  (imports nothing here)
    engine/      continuous batching over llama.cpp: scheduler, paged KV, sampling    -> model, hardware, structured, sandbox
    chat/        chat formats: templates and per-family recipes                        -> model, engine
    llm.py       the offline Python API (`llmpack.LLM`), a front-end like server/      -> chat, engine, model
    server/      the OpenAI-compatible HTTP server and the chat page's API             -> every room above

Dependencies point one way, down this list; tests/test_layers.py reads every import (inside
functions too) and fails on a back-edge or a cycle. The builder may import the runtime, never the
reverse. A request's path through these rooms is traced in docs/ARCHITECTURE.md.
"""
