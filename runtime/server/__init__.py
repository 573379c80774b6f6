"""OpenAI-compatible HTTP server and chat page over the engine (llmpack.runtime.server)."""
