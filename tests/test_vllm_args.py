"""vLLM's engine arguments given to LLM(...): each does what it means here or is refused by name."""
from __future__ import annotations

import os

import pytest

from llmpack.runtime.engine.vllm_args import VLLM_ARGS, engine_kwargs
from llmpack.runtime.hardware.backends import Device
from llmpack.runtime.hardware.placement import plan_offload


def test_the_docs_example_translates():
    kwargs, seed = engine_kwargs({"max_model_len": 4096, "gpu_memory_utilization": 0.95, "dtype": "half"})
    assert kwargs == {"n_ctx": 4096, "gpu_memory_utilization": 0.95} and seed is None


def test_same_meaning_arguments_become_engine_settings():
    kwargs, seed = engine_kwargs({"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 32,
                                  "enable_prefix_caching": False, "seed": 7, "tensor_parallel_size": 1,
                                  "quantization": "gguf", "trust_remote_code": True, "n_threads": 2})
    assert kwargs == {"max_num_seqs": 8, "n_batch": 256, "block_size": 32, "enable_prefix_cache": False,
                      "n_threads": 2}
    assert seed == 7


@pytest.mark.parametrize(("name", "value", "why"), [
    ("tensor_parallel_size", 2, "one machine's GPU"),
    ("dtype", "float32", "half precision"),
    ("dtype", "bfloat16", "half precision"),
    ("quantization", "awq", "llama-quantize"),
    ("tokenizer", "meta-llama/Llama-3-8B", "own tokenizer"),
    ("download_dir", "/tmp/x", "downloads nothing"),
    ("cpu_offload_gb", 4, "gpu_layers=N"),
    ("swap_space", 4, "recomputed"),
    ("kv_cache_dtype", "fp8", "half precision"),
    ("enable_lora", True, "LoRA"),
    ("enable_chunked_prefill", False, "chunks"),
    ("skip_tokenizer_init", True, "tokenizer"),
])
def test_arguments_that_cannot_mean_the_same_are_refused_by_name(name, value, why):
    with pytest.raises(ValueError, match=name) as info:
        engine_kwargs({name: value})
    assert why in str(info.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gpu_memory_utilization": 1.5}, "fraction"), ({"gpu_memory_utilization": 0}, "fraction"),
    ({"seed": "x"}, "seed"), ({"max_model_len": 512, "n_ctx": 512}, "max_model_len and n_ctx"),
])
def test_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        engine_kwargs(kwargs)


def test_a_name_that_is_no_argument_is_a_type_error():
    with pytest.raises(TypeError, match="max_model_length"):
        engine_kwargs({"max_model_length": 4096})


def test_enforce_eager_turns_off_cuda_graphs(monkeypatch):
    monkeypatch.delenv("GGML_CUDA_DISABLE_GRAPHS", raising=False)
    engine_kwargs({"enforce_eager": False})
    assert "GGML_CUDA_DISABLE_GRAPHS" not in os.environ
    engine_kwargs({"enforce_eager": True})
    assert os.environ["GGML_CUDA_DISABLE_GRAPHS"] == "1"


def test_every_listed_argument_has_a_rule():
    for name in VLLM_ARGS:
        try:
            engine_kwargs({name: None})
        except ValueError:
            pass   # refused by name: a rule


def test_gpu_memory_utilization_caps_what_auto_placement_fills(tiny_model):
    """vLLM's meaning: this engine may use that share of the GPU's total memory, free or not."""
    from test_gpu_fit import LAYER, N_CTX, OUTPUT, OVERHEAD   # the tiny model's sizes, measured there

    total = OVERHEAD + 2 * LAYER + OUTPUT          # room for everything
    gpu = Device("Vulkan0", "Fake GPU", memory_total=total, memory_free=total)
    assert plan_offload("auto", tiny_model, N_CTX, devices=[gpu]).n_gpu_layers == 3
    share = (OVERHEAD + LAYER) / total             # room for one layer only
    assert plan_offload("auto", tiny_model, N_CTX, devices=[gpu], memory_fraction=share + 1e-9).n_gpu_layers == 1


def test_llm_takes_vllms_constructor_as_its_docs_write_it(tiny_chat_model):
    """LLM(model=path, max_model_len=..., gpu_memory_utilization=0.95, dtype="half"), and vLLM's
    seed: runs with the same seed sample the same text."""
    from llmpack import LLM, SamplingParams   # lazy: loads llama.cpp

    params = SamplingParams(temperature=1.0, max_tokens=8)
    texts = []
    for _ in range(2):
        with LLM(model=str(tiny_chat_model), max_model_len=256, gpu_memory_utilization=0.95, dtype="half",
                 gpu_layers=0, seed=5) as llm:
            assert llm.engine.n_ctx == 256
            texts.append([o.outputs[0].text for o in llm.generate(["hello", "hello"], params)])
    assert texts[0] == texts[1] and texts[0][0] != texts[0][1]   # reproducible, yet two samples differ
    with pytest.raises(ValueError, match="tensor_parallel_size=2"):
        LLM(model=str(tiny_chat_model), tensor_parallel_size=2)
