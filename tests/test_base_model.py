"""Base-model detection: no chat template and no instruct/chat tag means the model continues
text; `llmpack build` says so."""
from __future__ import annotations

from pathlib import Path

import pytest

from llmpack.builder.build import BuildResult, report
from llmpack.builder.manifest import Manifest, ModelBlob
from llmpack.runtime.model.base_model import is_base_model


@pytest.mark.parametrize("kv, names, base", [
    ({"general.name": "Gemma 3 270m"}, ["gemma-3-270m-Q4_K_M"], True),               # the demo model
    ({"general.name": "Gemma 3 270m", "general.finetune": "it"}, [], False),
    ({"general.name": "Llama 3.2 1B"}, ["Llama-3.2-1B-Instruct-Q4_K_M"], False),    # tag in the file name
    ({"general.name": "Qwen2.5 0.5B", "general.tags": ["text-generation", "chat"]}, [], False),
    ({"general.name": "Mistral-7B-Instruct-v0.3"}, [], False),
    ({"general.name": "TinyLlama 1.1B"}, ["tinyllama-1.1b-chat-v1.0"], False),
    ({"general.name": "phi-2"}, ["phi-2.Q4_K_M"], True),
    ({"general.name": "base", "tokenizer.chat_template": "{{ messages }}"}, [], False),   # a template: tuned
    ({"tokenizer.chat_template": "  "}, ["llama-7b"], True),
    ({"general.name": "Kitten"}, ["kitten"], True),   # "it" inside a word is not a tag
])
def test_base_model_detection(kv, names, base):
    assert is_base_model(kv, names) is base


def test_build_report_names_a_base_model(capsys: pytest.CaptureFixture, tmp_path: Path):
    out = tmp_path / "chat"
    out.write_bytes(b"x")
    blob = ModelBlob(sha256="0" * 64, size=10, stored_size=10, offset=0, compression="none")
    for base in (True, False):
        manifest = Manifest(model=blob, defaults={"name": "Demo", "ctx": 4096}, extra={"base_model": base})
        report(BuildResult(path=out, manifest=manifest, model_path=out, size=1, seconds=0.1,
                           chat_source="recipe:gemma", sidecar=False))
        text = capsys.readouterr().out
        assert ("it continues text rather than answering" in text) is base
