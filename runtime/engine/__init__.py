"""The engine (llmpack.runtime.engine), in nano-vllm's shape: `engine.LLMEngine` runs one step at a
time on its own thread; `scheduler` admits, batches and preempts sequences under a token budget;
`block_manager` owns the paged KV cache (block tables, prefix sharing and cache); `model_runner`
is the only module that calls llama.cpp's decode; `sampler` and `grammar_sampler` pick tokens;
`sequence`, `request`, `outputs`, `sampling_params` and `detokenizer` are the data it moves.
Pictures and sound (`--mmproj`), checked and decoded in runtime/media: `projector` wraps
llama.cpp's mtmd (tokenizing text, pictures and sound, encoding one), `media` is the data a prompt
with them carries, and `multimodal` schedules and decodes their rows into the same block tables,
with an encoder thread and the hooks the scheduler calls.
It may import `model`, `hardware`, `structured`, `sandbox` and `media`, never `chat` or `server`: the
engine sees token ids and sampling parameters, not messages or HTTP."""
