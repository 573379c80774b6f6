"""Chat formats (llmpack.runtime.chat): rendering messages with a model's Jinja chat template
(`chat_template`) and the per-family presets in recipes/ (`recipes`: template, stop strings,
sampling defaults, tool format). It may import `model` and `engine` (a recipe's sampling section is
checked as engine `SamplingParams`); the server and `llm.py` use it, the engine never does."""
