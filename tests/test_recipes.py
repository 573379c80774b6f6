"""Recipes: built-in model families, how a model's chat format is chosen, `llmpack recipes`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmpack.cli import main
from llmpack.runtime.chat.chat_template import ChatTemplateError
from llmpack.runtime.chat.recipes import (
    ChatFormat,
    Recipe,
    RecipeError,
    load_recipe,
    load_recipes,
    match_recipe,
    resolve_chat,
)

BUILTINS = {"chatml", "deepseek-r1", "gemma", "gpt-oss", "llama2", "llama3", "mistral", "phi3", "qwen3", "zephyr"}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Name a colour."},
]
TOKENS = {  # (bos, eos) as each family's GGUF spells them
    "gemma": ("<bos>", "<eos>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>"), "chatml": ("", "<|im_end|>"),
    "llama2": ("<s>", "</s>"), "mistral": ("<s>", "</s>"), "zephyr": ("<s>", "</s>"), "phi3": ("<s>", "<|endoftext|>"),
}
EXPECTED = {
    "gemma": "<bos><start_of_turn>user\nYou are terse.\n\nHi!<end_of_turn>\n"
             "<start_of_turn>model\nHello.<end_of_turn>\n"
             "<start_of_turn>user\nName a colour.<end_of_turn>\n"
             "<start_of_turn>model\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "chatml": "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
              "<|im_start|>assistant\n",
    "llama2": "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] Name a colour. [/INST]",
    "mistral": "<s>[INST] You are terse.\n\nHi! [/INST] Hello.</s>[INST] Name a colour. [/INST]",
    "zephyr": "<|system|>\nYou are terse.</s>\n<|user|>\nHi!</s>\n<|assistant|>\nHello.</s>\n"
              "<|user|>\nName a colour.</s>\n<|assistant|>\n",
    "phi3": "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\nHello.<|end|>\n"
            "<|user|>\nName a colour.<|end|>\n<|assistant|>\n",
}


def _resolve(explicit: str | None = None, **kw: object) -> ChatFormat:
    args: dict = {"arch": None, "name": None, "embedded_template": None, "bos_token": "<s>", "eos_token": "</s>"}
    args.update(kw)
    return resolve_chat(explicit, **args)


def test_builtin_recipes_load_with_their_settings() -> None:
    recipes = load_recipes()
    assert set(recipes) == BUILTINS
    for recipe in recipes.values():
        assert recipe.source.endswith(f"{recipe.name}.toml")
        assert recipe.description and recipe.stop and recipe.eot_tokens and recipe.context >= 2048
        assert "temperature" in recipe.sampling
    gemma = recipes["gemma"]
    assert dict(gemma.sampling) == {"temperature": 1.0, "top_k": 64, "top_p": 0.95, "min_p": 0.0, "repetition_penalty": 1.0}
    assert gemma.architectures == ("gemma", "gemma2", "gemma3", "gemma3n")
    assert gemma.eot_tokens == ("<end_of_turn>",) and not gemma.supports_system
    assert recipes["llama3"].eot_tokens == ("<|eot_id|>", "<|eom_id|>")
    assert recipes["chatml"].eot_tokens[0] == "<|im_end|>" and recipes["phi3"].eot_tokens[0] == "<|end|>"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_recipe_renders_a_conversation_exactly(name: str) -> None:
    bos, eos = TOKENS[name]
    chat = _resolve(name, bos_token=bos, eos_token=eos)
    assert chat.source == f"recipe:{name}"
    assert chat.render(CONVERSATION) == EXPECTED[name]


def test_gemma_without_system_and_without_generation_prompt() -> None:
    chat = _resolve("gemma", bos_token="<bos>")
    text = chat.render([{"role": "user", "content": "  Hi!\n"}], add_generation_prompt=False)
    assert text == "<bos><start_of_turn>user\nHi!<end_of_turn>\n"


def test_gemma_rejects_turns_that_do_not_alternate() -> None:
    with pytest.raises(ChatTemplateError, match="alternate"):
        _resolve("gemma").render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_each_recipe_recognises_its_own_template(name: str) -> None:
    recipe = load_recipes()[name]
    assert match_recipe(arch=None, name=None, chat_template=recipe.chat_template) is recipe


@pytest.mark.parametrize(("template", "expected"), [
    ("{{ '<start_of_turn>' + role }}", "gemma"),
    ("{{ '<|start_header_id|>' + m.role + '<|end_header_id|>' }}", "llama3"),
    ("{{ '<|im_start|>' + m.role }}", "chatml"),
    ("{{ bos_token + '[INST] <<SYS>>\\n' }}", "llama2"),     # llama2 and mistral both say [INST]
    ("{{ '[INST] ' + m.content + ' [/INST]' }}", "mistral"),
    ("{{ '<|user|>\\n' + c + '<|end|>' }}{{ '<|assistant|>' }}", "phi3"),  # phi3 and zephyr share tags
    ("{{ '<|user|>\\n' + c + eos_token }}{{ '<|assistant|>' }}", "zephyr"),
])
def test_match_by_template_fingerprint(template: str, expected: str) -> None:
    recipe = match_recipe(arch="unknown", name="unknown", chat_template=template)
    assert recipe is not None and recipe.name == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("Meta-Llama-3.1-8B-Instruct", "llama3"), ("Llama 2 7b Chat", "llama2"), ("CodeLlama 7B Instruct", "llama2"),
    ("Hermes-3-Llama-3.1-8B", "chatml"), ("Qwen2.5 0.5B Instruct", "chatml"), ("Mistral-7B-Instruct-v0.2", "mistral"),
    ("TinyLlama-1.1B-Chat-v1.0", "zephyr"), ("Phi-3.5-mini-instruct", "phi3"), ("Gemma 3 270m", "gemma"),
])
def test_match_by_model_name(name: str, expected: str) -> None:
    recipe = match_recipe(arch="unknown", name=name, chat_template=None)
    assert recipe is not None and recipe.name == expected


@pytest.mark.parametrize(("arch", "expected"), [
    ("gemma3", "gemma"), ("gemma2", "gemma"), ("qwen2", "chatml"), ("qwen3", "qwen3"), ("phi3", "phi3"), ("llama", "llama2"), ("rwkv6", None),
])
def test_match_by_architecture(arch: str, expected: str | None) -> None:
    recipe = match_recipe(arch=arch, name="some-finetune", chat_template=None)
    assert (recipe.name if recipe else None) == expected


def test_fingerprint_beats_name_beats_architecture() -> None:
    assert match_recipe(arch="gemma3", name="Qwen fine-tune", chat_template="<|start_header_id|>").name == "llama3"
    assert match_recipe(arch="gemma3", name="Qwen fine-tune", chat_template="{{ custom }}").name == "chatml"
    assert match_recipe(arch="gemma3", name=["", "gemma-3"], chat_template=None).name == "gemma"


def test_resolve_precedence() -> None:
    chatml = load_recipes()["chatml"]
    embedded = "{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}"
    meta = {"arch": "gemma3", "name": "gemma-3", "embedded_template": embedded}
    # 1. an explicit recipe beats everything
    assert _resolve("chatml", recipe_data=load_recipes()["llama3"].to_dict(), **meta).source == "recipe:chatml"
    # 2. the recipe stored in an executable beats the GGUF
    stored = _resolve(recipe_data=chatml.to_dict(), **meta)
    assert stored.source == "recipe:chatml" and stored.template == chatml.chat_template
    # 3. the embedded template beats a matched recipe, which still lends its stops and defaults
    gguf = _resolve(**meta)
    assert (gguf.source, gguf.template, gguf.recipe.name) == ("gguf", embedded, "gemma")
    assert gguf.stop == ("<end_of_turn>", "<start_of_turn>") and gguf.sampling["top_k"] == 64 and gguf.context == 8192
    assert gguf.render([{"role": "user", "content": "x"}]) == "<start_of_turn>x"
    # 4. no embedded template: the recipe matched from metadata
    assert _resolve(**{**meta, "embedded_template": None}).source == "recipe:gemma"
    assert _resolve(**{**meta, "embedded_template": "   "}).source == "recipe:gemma"
    # 5. nothing to go on: a clear error naming every recipe
    with pytest.raises(RecipeError) as info:
        _resolve(arch="rwkv6", name="mystery", embedded_template=None)
    assert "--recipe NAME" in str(info.value) and all(n in str(info.value) for n in BUILTINS)


def test_unknown_family_template_takes_only_defaults_from_a_name_or_arch_match() -> None:
    custom = "{% for m in messages %}### {{ m.content }}{% endfor %}"
    chat = _resolve(arch="gemma3", name=None, embedded_template=custom)
    assert chat.source == "gguf" and chat.stop == () and chat.eot_tokens == ()
    assert chat.sampling["temperature"] == 1.0
    bare = _resolve(arch="rwkv6", name=None, embedded_template=custom)
    assert bare.recipe is None and dict(bare.sampling) == {} and bare.context is None


def test_broken_embedded_template_is_refused_at_startup_with_a_way_out() -> None:
    with pytest.raises(ChatTemplateError, match=r"syntax error on line 1.*--recipe NAME"):
        _resolve(arch="llama", embedded_template="{% for m in messages %}")


def test_template_without_system_role_gets_the_system_text_folded_in() -> None:
    strict = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
              "[{{ m.role }}]{{ m.content }}{% endfor %}")
    chat = _resolve(arch=None, embedded_template=strict)
    assert chat.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == "[user]S\n\nU"


def test_unknown_recipe_lists_the_available_ones() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe("gemmaa")
    assert "unknown recipe 'gemmaa'" in str(info.value) and all(n in str(info.value) for n in BUILTINS)
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipe("missing/recipe.toml")


def test_recipe_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ndescription = "test"\nstop = ["<END>"]\neot_tokens = ["<END>"]\n'
                    "chat_template = '''{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}'''\n"
                    "[match]\narchitectures = [\"toy\"]\n[sampling]\ntemperature = 0.2\n")
    chat = _resolve(str(path))
    assert chat.source == "recipe:mine" and chat.stop == ("<END>",) and chat.sampling == {"temperature": 0.2}
    assert chat.render([{"role": "user", "content": "hi"}]) == "user: hi\n"


@pytest.mark.parametrize(("body", "error"), [
    ("name = \n", "not valid TOML"),
    ('name = "x"\nchat_template = "t"\ntemprature = 1\n', "unknown setting"),
    ('name = "x"\nchat_template = "t"\n[sampling]\ntemperature = -1\n', "temperature"),
    ('name = "x"\nchat_template = "t"\n[sampling]\nseed = 1\n', r"\[sampling\] allows only"),
    ('name = "x"\nchat_template = "{{ cycler.__init__ }}"\n', "Python internals"),
    ('name = "x"\nchat_template = "{% if %}"\n', "syntax error"),
    ('name = "x"\n', "chat_template"),
    ('name = "X Y"\nchat_template = "t"\n', "lower-case"),
])
def test_invalid_recipe_files_are_refused(tmp_path: Path, body: str, error: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(RecipeError, match=error):
        load_recipe(path)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_recipes_survive_a_manifest_round_trip(name: str) -> None:
    recipe = load_recipes()[name]
    data = json.loads(json.dumps(recipe.to_dict()))
    assert Recipe.from_dict(data, source=recipe.source) == recipe


def test_cli_lists_recipes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "ARCHITECTURES", "CONTEXT", "DESCRIPTION"]
    gemma = next(r for r in rows if r.startswith("gemma "))
    assert "gemma, gemma2, gemma3" in gemma and "8192" in gemma and "Gemma" in gemma
    assert {r.split()[0] for r in rows if r.strip() and not r.startswith("Use ")} == BUILTINS
    assert "--recipe NAME" in out


def test_cli_lists_recipes_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in data} == BUILTINS
    gemma = next(r for r in data if r["name"] == "gemma")
    assert gemma["match"]["architectures"][:3] == ["gemma", "gemma2", "gemma3"] and gemma["sampling"]["top_k"] == 64

