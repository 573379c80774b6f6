"""`llmpack bench`: a serving benchmark against any OpenAI-compatible server (llmpack,
llama-server, Ollama, vLLM), in the spirit of `vllm bench serve`.

- `workloads`: what is sent (short random prompts, shared-system-prompt chat, a long prompt);
- `client`: one streamed request, timed chunk by chunk;
- `runner`: a closed loop of N concurrent clients, and the statistics of a run;
- `report`: the terminal table and the JSON document; `cmd_bench` is the CLI entry.
"""
