"""The hardware (llmpack.runtime.hardware): llama.cpp's ctypes bindings without the high-level
half of llama-cpp-python (`bindings`), loading ggml's backends and picking the best CPU
variant (`backends`, `amx_probe`), and deciding how many layers go to a GPU (`gpu_fit`: the
arithmetic; `placement`: the plan and the words `/health` and the console show). It may import
`model` (layer sizes come from the GGUF header) and nothing else of the runtime."""
