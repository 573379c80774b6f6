"""validate_gguf: every malformed file is refused with one line naming the problem, before
llama.cpp sees it, and `llmpack inspect` reports that line without a traceback."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from ggufs import kv_value_offset, patched_copy, tensor_info_offsets, truncated_copy
from llmpack.cli import main
from llmpack.runtime.model.gguf_check import LLAMA_CPP_ARCHITECTURES, ArrayInfo, GGUFError, validate_gguf

u32 = struct.Struct("<I").pack
u64 = struct.Struct("<Q").pack


# ---- good files ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_a_good_file_parses_like_the_gguf_package_reads_it(tiny_model_factory, dtype):
    path = tiny_model_factory(dtype=dtype)
    header = validate_gguf(path)
    reader = GGUFReader(path)
    assert header.version == 3 and header.alignment == 32
    assert header.data_offset == reader.data_offset
    assert [(t.name, t.type, list(t.shape), t.nbytes, header.data_offset + t.offset) for t in header.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), int(t.n_bytes), int(t.data_offset)) for t in reader.tensors]
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        expected = f.contents()
        got = header.kv[key]
        if isinstance(expected, float):
            assert got == pytest.approx(expected)
        elif isinstance(got, list) and got and isinstance(got[0], float):
            assert got == pytest.approx(expected)
        else:
            assert got == expected, key


def test_long_arrays_stay_lazy_and_can_be_read_back(tiny_model_factory):
    words = [f"w{i}é" for i in range(3000)]
    path = tiny_model_factory(extra_kv={"test.words": words, "test.numbers": list(range(5000))})
    header = validate_gguf(path)
    assert header.kv["test.words"] == ArrayInfo(GGUFValueType.STRING, 3000, header.kv["test.words"].offset)
    assert len(header.kv["test.numbers"]) == 5000 and isinstance(header.kv["test.numbers"], ArrayInfo)
    assert header.read_strings("test.words") == words
    assert header.read_strings("test.words", 2) == ["w0é", "w1é"]
    assert header.kv["tokenizer.ggml.tokens"][:3] == ["<unk>", "<s>", "</s>"]   # short: decoded


@pytest.mark.demo
def test_the_demo_model_vocabulary_is_lazy(demo_model):
    # gguf.GGUFReader builds a numpy array per token (~10 s for this file); we only bound-check them
    header = validate_gguf(demo_model)
    tokens = header.kv["tokenizer.ggml.tokens"]
    assert isinstance(tokens, ArrayInfo) and len(tokens) == 262144
    assert header.read_strings("tokenizer.ggml.tokens", 4) == ["<pad>", "<eos>", "<bos>", "<unk>"]


def test_a_model_embedded_in_a_larger_file_is_validated_in_place(tiny_model, tmp_path):
    blob = tiny_model.read_bytes()
    packed = tmp_path / "app.bin"
    packed.write_bytes(b"\x7fELF" + b"\0" * 4093 + blob + b"TRAILER" * 10)
    header = validate_gguf(packed, offset=4097, length=len(blob))
    assert header.region_offset == 4097 and len(header.tensors) == len(validate_gguf(tiny_model).tensors)
    with pytest.raises(GGUFError, match="truncated"):
        validate_gguf(packed, offset=4097, length=len(blob) - 100)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        validate_gguf(packed, offset=4096, length=len(blob))
    with pytest.raises(GGUFError, match="runs past the end of the file"):
        validate_gguf(packed, offset=4097, length=len(blob) * 2)


def test_the_architecture_list_matches_the_installed_llama_cpp():
    """Every name we accept is a string inside the bundled libllama (catches a stale list
    after llama-cpp-python is upgraded)."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    lib = next(p for p in lib_dir.iterdir() if p.name.startswith("libllama") or p.name == "llama.dll")
    data = lib.read_bytes()
    missing = [a for a in sorted(LLAMA_CPP_ARCHITECTURES) if a.encode() + b"\0" not in data]
    assert not missing
    assert {"llama", "gemma3", "qwen3", "phi3", "mistral3"} <= LLAMA_CPP_ARCHITECTURES


# ---- bad files: each maker returns (path, words the one-line message must contain) ------------

BadMaker = Callable[[Path, Path], tuple[Path, str]]


def not_gguf(good: Path, tmp: Path) -> tuple[Path, str]:
    (tmp / "model.gguf").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    return tmp / "model.gguf", "model.gguf: not a GGUF file (magic b'PK\\x03\\x04', expected b'GGUF'); it looks like a zip"


def empty(good: Path, tmp: Path) -> tuple[Path, str]:
    (tmp / "model.gguf").write_bytes(b"")
    return tmp / "model.gguf", "empty file (0 bytes)"


def cut_in_header(good: Path, tmp: Path) -> tuple[Path, str]:
    return truncated_copy(good, tmp / "model.gguf", 300), "truncated"


def cut_in_tensor_data(good: Path, tmp: Path) -> tuple[Path, str]:
    size = good.stat().st_size
    return truncated_copy(good, tmp / "model.gguf", size - 1000), \
        f"truncated: tensor 'output.weight' data ends at byte {size} but the file has {size - 1000} bytes; " \
        "the download may be incomplete"


def forged_string_length(good: Path, tmp: Path) -> tuple[Path, str]:
    return patched_copy(good, tmp / "model.gguf", kv_value_offset(good, "general.name"), u64(1 << 40)), \
        "metadata 'general.name' claims a string of 1099511627776 bytes"


def forged_array_length(good: Path, tmp: Path) -> tuple[Path, str]:
    at = kv_value_offset(good, "tokenizer.ggml.tokens") + 4   # after the item type
    return patched_copy(good, tmp / "model.gguf", at, u64(1 << 40)), \
        "metadata 'tokenizer.ggml.tokens' claims an array of 1099511627776 string items"


def forged_tensor_count(good: Path, tmp: Path) -> tuple[Path, str]:
    return patched_copy(good, tmp / "model.gguf", 8, u64(1 << 40)), "corrupt header: tensor count 1099511627776 is impossible"


def tensor_offset_beyond_file(good: Path, tmp: Path) -> tuple[Path, str]:
    at = tensor_info_offsets(good, "output.weight")["offset"]
    return patched_copy(good, tmp / "model.gguf", at, u64(1 << 40)), \
        "tensor 'output.weight' data starts at byte"


def misaligned_tensor(good: Path, tmp: Path) -> tuple[Path, str]:
    at = tensor_info_offsets(good, "blk.0.attn_q.weight")["offset"]
    offset = struct.unpack("<Q", good.read_bytes()[at:at + 8])[0]
    return patched_copy(good, tmp / "model.gguf", at, u64(offset + 4)), \
        f"tensor 'blk.0.attn_q.weight' data offset {offset + 4} is not aligned to 32 bytes"


def overlapping_tensors(good: Path, tmp: Path) -> tuple[Path, str]:
    at = tensor_info_offsets(good, "blk.0.attn_q.weight")["offset"]
    return patched_copy(good, tmp / "model.gguf", at, u64(0)), "overlaps tensor"


def unknown_tensor_type(good: Path, tmp: Path) -> tuple[Path, str]:
    at = tensor_info_offsets(good, "blk.1.ffn_up.weight")["type"]
    return patched_copy(good, tmp / "model.gguf", at, u32(99)), "tensor 'blk.1.ffn_up.weight' has unknown tensor type 99"


def unknown_value_type(good: Path, tmp: Path) -> tuple[Path, str]:
    at = kv_value_offset(good, "general.name") - 4
    return patched_copy(good, tmp / "model.gguf", at, u32(77)), "metadata 'general.name' has unknown GGUF value type 77"


def too_many_dims(good: Path, tmp: Path) -> tuple[Path, str]:
    at = tensor_info_offsets(good, "token_embd.weight")["n_dims"]
    return patched_copy(good, tmp / "model.gguf", at, u32(9)), "tensor 'token_embd.weight' has 9 dimensions"


def bad_version(good: Path, tmp: Path) -> tuple[Path, str]:
    return patched_copy(good, tmp / "model.gguf", 4, u32(7)), "GGUF version 7"


def missing_architecture(good: Path, tmp: Path) -> tuple[Path, str]:
    at = good.read_bytes().index(b"general.architecture")
    return patched_copy(good, tmp / "model.gguf", at, b"general.architectur_"), "general.architecture is missing"


def unknown_architecture(good: Path, tmp: Path) -> tuple[Path, str]:
    from ggufs import write_tiny_model

    return write_tiny_model(tmp / "model.gguf", arch="notamodel"), \
        "unknown architecture 'notamodel': the bundled llama.cpp (llama-cpp-python 0.3.36) cannot load it"


def alignment_not_power_of_two(good: Path, tmp: Path) -> tuple[Path, str]:
    from ggufs import write_tiny_model

    path = write_tiny_model(tmp / "model.gguf", extra_kv={"general.alignment": (48, GGUFValueType.UINT32)})
    return path, "general.alignment is 48, not a power of two"


BAD_FILES: list[BadMaker] = [
    not_gguf, empty, cut_in_header, cut_in_tensor_data, forged_string_length, forged_array_length,
    forged_tensor_count, tensor_offset_beyond_file, misaligned_tensor, overlapping_tensors,
    unknown_tensor_type, unknown_value_type, too_many_dims, bad_version, missing_architecture,
    unknown_architecture, alignment_not_power_of_two,
]


@pytest.fixture(params=BAD_FILES, ids=[f.__name__ for f in BAD_FILES])
def bad_file(request, tiny_model, tmp_path) -> tuple[Path, str]:
    return request.param(tiny_model, tmp_path)


def test_validate_raises_one_clear_line(bad_file):
    path, expected = bad_file
    with pytest.raises(GGUFError) as excinfo:
        validate_gguf(path)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{path.name}: ")
    assert expected in message


def test_inspect_prints_exactly_that_line_and_exits_2(bad_file, capsys):
    path, expected = bad_file
    assert main(["inspect", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("llmpack: error: ") and expected in err


@pytest.mark.parametrize("maker", [not_gguf, cut_in_tensor_data, forged_array_length, unknown_architecture],
                         ids=lambda f: f.__name__)
def test_the_llmpack_command_shows_no_traceback(maker, tiny_model, tmp_path):
    path, expected = maker(tiny_model, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "llmpack", "inspect", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("maker", [cut_in_tensor_data, forged_tensor_count, misaligned_tensor,
                                   unknown_tensor_type, unknown_architecture], ids=lambda f: f.__name__)
def test_llama_cpp_refuses_these_files_too(maker, tiny_model, tmp_path):
    """The checks are not stricter than llama.cpp for no reason: it cannot load these either
    (run in a child process, since a bad file may crash it)."""
    path, _ = maker(tiny_model, tmp_path)
    code = ("import llama_cpp; from llmpack.runtime.hardware.backends import load_backends; load_backends(); "
            f"llama_cpp.Llama(model_path={str(path)!r}, n_ctx=64, verbose=False)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0


def test_inspect_on_a_missing_file_is_one_line(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope.gguf")]) == 2
    assert capsys.readouterr().err == f"llmpack: error: {tmp_path / 'nope.gguf'}: no such file\n"


def test_a_vision_projector_is_named_as_such(tmp_path):
    from ggufs import write_tiny_model

    path = write_tiny_model(tmp_path / "mmproj.gguf", arch="clip")
    with pytest.raises(GGUFError, match=r"vision projector \(mmproj\) file, not a language model"):
        validate_gguf(path)


def test_random_corruption_never_escapes_as_another_exception(tiny_model, tmp_path):
    """Fuzz the header: whatever we break, the answer is a GGUFError or a valid header."""
    good = bytearray(tiny_model.read_bytes())
    header_end = validate_gguf(tiny_model).data_offset
    rng = np.random.default_rng(1)
    target = tmp_path / "fuzz.gguf"
    for _ in range(300):
        data = bytearray(good)
        for at in rng.integers(0, header_end, size=int(rng.integers(1, 4))):
            data[at] = int(rng.integers(0, 256))
        target.write_bytes(bytes(data))
        try:
            validate_gguf(target)
        except GGUFError as exc:
            assert "\n" not in str(exc)
