"""Structured output (llmpack.runtime.structured): turning a JSON Schema, `json_object` or a set of
tools into a GBNF grammar (`grammar`, `grammar_ranges`) and reading tool calls back out of the
model's text (`tool_calls`). Pure text work with no llama.cpp; it imports nothing else of the
runtime. The engine applies the grammars (`engine.grammar_sampler`)."""
