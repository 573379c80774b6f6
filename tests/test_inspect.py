"""`llmpack inspect` / read_model_info: figures agree with the factory's dimensions and with
what llama.cpp itself reports when it loads the same file."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ggufs import CHATML_TEMPLATE, tiny_vocab
from llmpack.cli import main
from llmpack.builder.inspect import recipe_name
from llmpack.runtime.model.model_info import read_model_info
from llmpack.runtime.chat.recipes import match_recipe

V, E, L, H, KVH, F = len(tiny_vocab()), 64, 2, 4, 2, 128    # write_tiny_model's defaults
HD = E // H
LAYER_PARAMS = E + E * E + 2 * (KVH * HD) * E + E * E + E + 3 * F * E
PARAMS = 2 * V * E + E + L * LAYER_PARAMS


def llama_cpp_report(path: Path, n_ctx: int) -> tuple[dict, str]:
    """Load `path` in a child llama.cpp with verbose logging; return what its C API says and the
    load log (stderr). A child process keeps the log capturable and this process clean."""
    code = f"""
import json, llama_cpp
from llmpack.runtime.hardware.backends import load_backends
load_backends(quiet=False)   # llama-cpp-python never loads ggml's run-time backends itself
llm = llama_cpp.Llama(model_path={str(path)!r}, n_ctx={n_ctx}, verbose=True)
m, v = llm._model.model, llama_cpp.llama_model_get_vocab(llm._model.model)
print(json.dumps(dict(
    n_params=llama_cpp.llama_model_n_params(m), size=llama_cpp.llama_model_size(m),
    n_layer=llama_cpp.llama_model_n_layer(m), n_embd=llama_cpp.llama_model_n_embd(m),
    n_head=llama_cpp.llama_model_n_head(m), n_head_kv=llama_cpp.llama_model_n_head_kv(m),
    n_swa=llama_cpp.llama_model_n_swa(m), n_ctx_train=llama_cpp.llama_model_n_ctx_train(m),
    n_vocab=llama_cpp.llama_vocab_n_tokens(v), bos=llama_cpp.llama_vocab_bos(v),
    eos=llama_cpp.llama_vocab_eos(v), eot=llama_cpp.llama_vocab_eot(v)), sort_keys=True))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def log_info(log: str, key: str) -> str:
    return re.search(rf"print_info: {re.escape(key)}\s*= (.+)", log).group(1).strip()


def kv_cache_bytes(log: str) -> int:
    """Sum of llama.cpp's "llama_kv_cache: size = X MiB" lines (one per cache: SWA and full)."""
    return round(sum(float(x) for x in re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB", log)) * 2**20)


# ---- tiny models --------------------------------------------------------------------------------

def test_tiny_model_figures_follow_from_its_dimensions(tiny_model):
    info = read_model_info(tiny_model)
    assert (info.architecture, info.name, info.gguf_version) == ("llama", "tiny-test-model", 3)
    assert (info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == (L, E, [H] * L, [KVH] * L)
    assert (info.head_dim_k, info.head_dim_v, info.context_length, info.vocab_size) == (HD, HD, 2048, V)
    assert info.parameters == PARAMS
    assert info.file_type == "all F32" and info.tensor_types == {"F32": {"count": 21, "bytes": PARAMS * 4}}
    assert info.weight_bytes == PARAMS * 4
    assert info.weight_bytes_per_layer == [LAYER_PARAMS * 4] * L
    assert info.non_layer_weight_bytes == (2 * V * E + E) * 4
    assert info.kv_bytes_per_token == L * KVH * (HD + HD) * 2 == 256
    assert info.kv_bytes_per_token_per_layer == [128, 128]
    assert info.ctx == 2048 and info.kv_bytes_total == 256 * 2048
    assert info.sliding_window is None and info.swa_layers is None
    assert info.special_tokens == {
        "bos": {"id": 1, "text": "<s>"}, "eos": {"id": 2, "text": "</s>"},
        "eot": {"id": 4, "text": "<|im_end|>"},      # found by its text, as llama.cpp does
        "pad": None, "unk": {"id": 0, "text": "<unk>"},
    }
    assert info.chat_template is None


@pytest.mark.parametrize("dtype, file_type, bytes_per_weight", [("f16", "F16", 2), ("q8_0", "Q8_0", 34 / 32)])
def test_quantized_variants_report_their_type_and_size(tiny_model_factory, dtype, file_type, bytes_per_weight):
    info = read_model_info(tiny_model_factory(dtype=dtype))
    norms = (2 * L + 1) * E                          # 1-D norm weights stay F32
    assert info.file_type == file_type
    assert info.tensor_types[dtype.upper()] == {"count": 16, "bytes": round((PARAMS - norms) * bytes_per_weight)}
    assert info.tensor_types["F32"] == {"count": 5, "bytes": norms * 4}
    assert info.parameters == PARAMS


def test_ctx_sets_the_kv_estimate(tiny_model):
    info = read_model_info(tiny_model, ctx=512)
    assert info.ctx == 512 and info.kv_bytes_total == 256 * 512
    assert info.kv_bytes(1000) == 256_000 and info.kv_bytes(1000, bytes_per_element=1) == 128_000


def test_an_embedded_template_and_the_matching_recipe_are_reported(tiny_chat_model):
    info = read_model_info(tiny_chat_model)
    assert info.chat_template == CHATML_TEMPLATE
    expected = match_recipe(arch="llama", name=["tiny-test-model"], chat_template=CHATML_TEMPLATE)
    assert expected is not None and recipe_name(info) == expected.name


def test_a_model_inside_a_larger_file_reads_the_same(tiny_model, tmp_path):
    blob = tiny_model.read_bytes()
    packed = tmp_path / "app"
    packed.write_bytes(b"\0" * 1000 + blob + b"\0" * 10)
    inner = read_model_info(packed, offset=1000, length=len(blob))
    plain = read_model_info(tiny_model)
    assert inner.offset == 1000 and inner.length == len(blob)
    assert {**inner.to_dict(), "path": "", "offset": 0} == {**plain.to_dict(), "path": ""}


def test_inspect_reads_the_model_inside_a_built_executable(tiny_model, tmp_path, capsys):
    """End to end with builder.splice: a real PyInstaller bootloader + archive, model spliced in."""
    import shutil

    import PyInstaller
    from PyInstaller.archive.writers import CArchiveWriter

    from llmpack.builder import splice

    bootloader = Path(PyInstaller.__file__).parent / "bootloader" / "Linux-64bit-intel" / "run"
    (tmp_path / "hello.txt").write_text("hello")
    CArchiveWriter(str(tmp_path / "pkg"), [("hello.txt", str(tmp_path / "hello.txt"), True, "x")],
                   "libpython3.11.so.1.0")
    stub = tmp_path / "stub"
    shutil.copyfile(bootloader, stub)
    subprocess.run(["objcopy", "--add-section", f"pydata={tmp_path / 'pkg'}", str(stub)], check=True)
    app = tmp_path / "tiny-chat"
    splice.write_packed(stub, tiny_model, app, {"name": "tiny"})

    assert main(["inspect", str(app), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["offset"] > 0 and data["length"] == tiny_model.stat().st_size
    assert data["parameters"] == PARAMS


def test_inspect_prints_a_readable_report(tiny_chat_model, capsys):
    assert main(["inspect", str(tiny_chat_model)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tiny_chat_model.name}\n")
    for line in ["tiny-test-model [llama], GGUF v3", "parameters     176.58 K", "file type      all F32, 32.00 bits",
                 "context        2048 tokens (trained)",
                 "layers         2, embedding 64, heads 4, KV heads 2, head dim 16/16",
                 f"vocabulary     {V} tokens; BOS 1 '<s>', EOS 2 '</s>', EOT 4 '<|im_end|>', UNK 0 '<unk>'",
                 "chat template  embedded", "KV cache       256 B per token (f16); 512.00 KiB at 2048 tokens"]:
        assert line in out


def test_inspect_json_is_one_object_with_the_same_figures(tiny_model, capsys):
    assert main(["inspect", str(tiny_model), "--ctx", "1024", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    data = json.loads(out)
    assert data["parameters"] == PARAMS and data["kv_bytes_per_token"] == 256
    assert data["ctx"] == 1024 and data["kv_bytes_total"] == 256 * 1024
    assert data["weight_bytes_per_layer"] == [LAYER_PARAMS * 4] * L
    assert data["has_chat_template"] is False and "chat_template" not in data
    assert data["bits_per_weight"] == 32.0


def test_inspect_rejects_a_nonsense_ctx(tiny_model, capsys):
    assert main(["inspect", str(tiny_model), "--ctx", "0"]) == 2
    assert capsys.readouterr().err == "llmpack: error: --ctx must be a positive number of tokens, not 0\n"


def test_gemma3_sliding_window_layers_follow_llama_cpp_pattern(tiny_model_factory):
    """llama.cpp's gemma3 loader: load_swa_pattern(ml, 6) -> every 6th layer has full attention."""
    info = read_model_info(tiny_model_factory(arch="gemma3", n_layer=12,
                                              extra_kv={"gemma3.attention.sliding_window": 512}))
    assert info.sliding_window == 512
    assert info.swa_layers == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_a_per_layer_pattern_and_per_layer_kv_heads_are_honoured(tiny_model_factory):
    info = read_model_info(tiny_model_factory(arch="gemma3", n_layer=4, extra_kv={
        "gemma3.attention.sliding_window": 256,
        "gemma3.attention.sliding_window_pattern": [True, False, True, False],
        "gemma3.attention.head_count_kv": [2, 1, 0, 2]}))
    assert info.swa_layers == [0, 2]
    assert info.n_head_kv == [2, 1, 0, 2]
    assert info.kv_bytes_per_token_per_layer == [128, 64, 0, 128]


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_tiny_model_figures_match_llama_cpp(tiny_model_factory, dtype):
    path = tiny_model_factory(dtype=dtype)
    info = read_model_info(path, ctx=4096)
    api, log = llama_cpp_report(path, n_ctx=4096)
    assert api == {"n_params": info.parameters, "size": info.weight_bytes, "n_layer": L, "n_embd": E,
                   "n_head": H, "n_head_kv": KVH, "n_swa": 0, "n_ctx_train": 2048, "n_vocab": V,
                   "bos": 1, "eos": 2, "eot": 4}
    assert kv_cache_bytes(log) == info.kv_bytes_total == 1 << 20


# ---- the demo model (Gemma 3 270M Q4_K_M) -------------------------------------------------------
# Expected figures are from llama.cpp's own load log (llama-cpp-python 0.3.36, n_ctx=2048):
#   print_info: file type = Q4_K - Medium / file size = 235.16 MiB (7.36 BPW) / n_ctx_train = 32768
#   n_embd = 640, n_layer = 18, n_head = 4, n_head_kv = 1, n_swa = 512, n_embd_head_k/v = 256
#   n_ff = 2048, model params = 268.10 M, n_vocab = 262144, BOS 2 '<bos>', EOS 1 '<eos>',
#   EOT 106 '<end_of_turn>', UNK 3 '<unk>', PAD 0 '<pad>'
#   type f32: 109, q5_0: 81, q8_0: 10, q4_K: 27, q6_K: 9 tensors
#   llama_kv_cache: non-SWA 6.00 MiB (2048 cells, 3 layers: 5, 11, 17) + SWA 30.00 MiB (2048 cells,
#   15 layers; llama-cpp-python uses a full-size SWA cache) = 36 MiB = 18,432 bytes per token.

@pytest.mark.demo
def test_demo_model_figures_match_the_llama_cpp_load_log(demo_model):
    info = read_model_info(demo_model, ctx=2048)
    assert (info.architecture, info.name) == ("gemma3", "Gemma 3 270m")
    assert info.file_type == "Q4_K - Medium"
    assert f"{info.weight_bytes / 2**20:.2f}" == "235.16" and f"{info.bits_per_weight:.2f}" == "7.36"
    assert f"{info.parameters / 1e6:.2f}" == "268.10"
    assert {t: v["count"] for t, v in info.tensor_types.items()} == \
        {"F32": 109, "Q5_0": 81, "Q8_0": 10, "Q4_K": 27, "Q6_K": 9}
    assert (info.context_length, info.n_layer, info.n_embd) == (32768, 18, 640)
    assert info.n_head == [4] * 18 and info.n_head_kv == [1] * 18
    assert (info.head_dim_k, info.head_dim_v, info.sliding_window) == (256, 256, 512)
    assert info.swa_layers == [i for i in range(18) if i not in (5, 11, 17)]
    assert info.vocab_size == 262144
    assert info.special_tokens == {
        "bos": {"id": 2, "text": "<bos>"}, "eos": {"id": 1, "text": "<eos>"},
        "eot": {"id": 106, "text": "<end_of_turn>"}, "pad": {"id": 0, "text": "<pad>"},
        "unk": {"id": 3, "text": "<unk>"},
    }
    assert info.kv_bytes_per_token == 18 * 1 * (256 + 256) * 2 == 18_432
    assert info.kv_bytes_total == 36 * 2**20
    assert len(info.weight_bytes_per_layer) == 18
    assert sum(info.weight_bytes_per_layer) + info.non_layer_weight_bytes == info.weight_bytes


@pytest.mark.demo
def test_demo_model_figures_match_a_live_llama_cpp_load(demo_model):
    info = read_model_info(demo_model, ctx=2048)
    api, log = llama_cpp_report(demo_model, n_ctx=2048)
    assert api == {"n_params": info.parameters, "size": info.weight_bytes, "n_layer": 18, "n_embd": 640,
                   "n_head": 4, "n_head_kv": 1, "n_swa": 512, "n_ctx_train": 32768, "n_vocab": 262144,
                   "bos": 2, "eos": 1, "eot": 106}
    assert log_info(log, "file type") == info.file_type
    assert log_info(log, "n_embd_head_k") == str(info.head_dim_k)
    assert log_info(log, "file size").startswith(f"{info.weight_bytes / 2**20:.2f} MiB ({info.bits_per_weight:.2f} BPW)")
    assert kv_cache_bytes(log) == info.kv_bytes_total
    full = re.search(r"non-SWA KV cache.*?layers", log, re.S)
    assert full and "3 layers" in full.group(0)
