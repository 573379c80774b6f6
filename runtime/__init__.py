"""Runtime: GGUF checks, recipes, the batching engine over llama.cpp, and the server (llmpack.runtime)."""
