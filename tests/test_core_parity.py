"""One generation path: `LLM.chat` offline and /v1/chat/completions over HTTP give the same greedy
reply, for a model whose recipe sets sampling defaults, a system prompt and stop token ids."""
from __future__ import annotations

from pathlib import Path

from ggufs import IM_END_ID
from server_fixtures import live_server

from llmpack import LLM, SamplingParams

RECIPE = '''
name = "parity"
description = "ChatML with defaults that change a greedy reply"
stop = ["<|im_end|>"]
eot_tokens = ["<|im_end|>"]
system = "You answer in one word."
chat_template = """{% for m in messages %}<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

[sampling]
temperature = 0.9
repetition_penalty = 1.8
'''
HELLO = [{"role": "user", "content": "hello world"}]


def test_offline_and_http_give_the_same_greedy_reply(tiny_chat_model: Path, tmp_path: Path):
    recipe = tmp_path / "parity.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    with live_server(tiny_chat_model, "--recipe", str(recipe), "--ctx", "512") as srv:
        http = srv.openai().chat.completions.create(model=srv.model_id, messages=HELLO, temperature=0, max_tokens=24)
    with LLM(tiny_chat_model, recipe=str(recipe), n_ctx=512, gpu_layers=0) as llm:
        params = llm.get_default_sampling_params()
        assert (params.repetition_penalty, params.stop_token_ids) == (1.8, [IM_END_ID])   # the recipe's
        params.temperature, params.max_tokens = 0.0, 24
        offline = llm.chat(HELLO, params)[0].outputs[0]
        assert offline.text == http.choices[0].message.content and len(offline.token_ids) == http.usage.completion_tokens
        # the recipe's system prompt and penalty change this reply, so the equality above is no accident
        bare = llm.generate([llm.engine.tokenize_prompt(llm.chat_format.render(HELLO))],
                            SamplingParams(temperature=0, max_tokens=24))[0].outputs[0]
        assert bare.text != offline.text
