"""The model file (llmpack.runtime.model): checking a GGUF header before llama.cpp sees it
(`gguf_check`), reading what it says about itself (`model_info`: architecture, context, layer
sizes, chat template, special tokens) and whether it is a base or an instruct model
(`base_model`). Pure file reading with no llama.cpp: it imports nothing else of the runtime, so
the builder, `llmpack inspect` and every other room can use it."""
