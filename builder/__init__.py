"""Builder: turns a GGUF model and a cached runtime stub into one executable (llmpack.builder)."""
