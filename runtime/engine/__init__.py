"""The engine (llmpack.runtime.engine), in nano-vllm's shape: `engine.LLMEngine` runs one step at a
time on its own thread; `scheduler` admits, batches and preempts sequences under a token budget;
`block_manager` owns the paged KV cache (block tables, prefix sharing and cache); `model_runner`
is the only module that calls llama.cpp's decode; `sampler` and `grammar_sampler` pick tokens;
`sequence`, `request`, `outputs`, `sampling_params` and `detokenizer` are the data it moves.
Images (`--mmproj`): `images` checks an image's header and structure, `pictures` decodes it to
RGB in a sandboxed child (runtime/sandbox), `vision` wraps llama.cpp's mtmd (the
projector: tokenizing text and pictures, encoding one), and `multimodal` schedules and decodes
image rows into the same block tables, with an encoder thread and the hooks the scheduler calls.
It may import `model`, `hardware`, `structured` and `sandbox`, never `chat` or `server`: the engine sees
token ids and sampling parameters, not messages or HTTP."""
