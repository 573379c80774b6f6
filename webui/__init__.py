"""The chat page, served as static files (llmpack.webui)."""
