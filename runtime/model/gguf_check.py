"""Bounds-checked GGUF header parser: runs before llama.cpp (or anything else) touches a file.

llama.cpp validates too, but a bad file there becomes a crash, a C-level log line on stderr or a
vague "failed to load model". Here every problem becomes a GGUFError whose one line names it.
The parser never reads the whole file: it walks the header over an mmap and keeps large arrays
(the vocabulary) as lazy `ArrayInfo` descriptors. That makes it fast enough to be the metadata
source for `llmpack inspect` too, where gguf.GGUFReader is two orders of magnitude slower on a
262k-token vocabulary because it makes a numpy array per token (docs/BENCHMARKS.md, "GGUF header
parse").

All offsets are relative to a *region*: a GGUF file may sit inside a built executable.
"""
from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from llmpack.errors import LlmpackError

MAX_STRING = 1 << 30            # llama.cpp's GGUF_MAX_STRING_LENGTH
MAX_ARRAY = 1 << 30             # llama.cpp's GGUF_MAX_ARRAY_ELEMENTS
MAX_COUNT = 1 << 24             # tensors or KV pairs; real models have a few thousand at most
MAX_DIMS = 4                    # GGML_MAX_DIMS
MAX_TENSOR_NAME = 63            # GGML_MAX_NAME (64) including the NUL
DEFAULT_ALIGNMENT = 32
DECODE_ARRAYS_UP_TO = 1024      # longer arrays stay lazy (ArrayInfo)

# Architectures llama.cpp can load: LLM_ARCH_NAMES in src/llama-arch.cpp of the llama.cpp
# vendored by llama-cpp-python 0.3.36 (the pinned version), minus "clip" (vision projectors).
# tests/test_gguf_check.py checks each name against the installed libllama.
LLAMA_CPP_ARCHITECTURES = frozenset("""
llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert modern-bert
nomic-bert nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom stablelm qwen qwen2
qwen2moe qwen2vl qwen3 qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35 qwen35moe qwen4exp phi2 phi3
phimoe plamo plamo2 plamo3 codeshell orion internlm2 minicpm minicpm3 gemma gemma2 gemma3 gemma3n
gemma4 gemma4-assistant gemma-embedding starcoder2 mamba mamba2 maple jamba falcon-h1 xverse
command-r cohere2 cohere2moe dbrx olmo olmo2 olmoe muse-glimmer openelm arctic deepseek deepseek2
deepseek2-ocr deepseek32 deepseek4 chatglm glm4 glm4moe glm-dsa bitnet t5 t5encoder jais jais2
nemotron nemotron_h nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite
granitemoe granitehybrid graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe
bailingmoe2 bailingmoe3 dots1 dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe hunyuan-moe
hunyuan-dense hunyuan_vl hy_v3 hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream smallthinker llada
llada-moe seed_oss grovemoe apertus minimax-01 hrm_text minimax-m2 minimax-m3 cogvlm rnd1
pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2 step35 spark2_5 llama-embed
maincoder kimi-linear kimi-k3 glm5-next talkie mellum nanbeige qwen3tts pockettts
""".split())

# struct format and size of each scalar GGUF value type
_SCALAR = {
    GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h", GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d",
}
_U64 = struct.Struct("<Q")

# first bytes of files people mistake for a GGUF model, and what to call them
_LOOKALIKES = {
    b"version https://git-lfs": "a Git LFS pointer, not the model itself; run `git lfs pull`",
    b"PK\x03\x04": "a zip archive; unzip it first", b"\x7fELF": "an executable", b"MZ": "a Windows executable",
    b"<!DOCTYPE": "a web page, probably a failed download", b"<html": "a web page, probably a failed download",
    b"GGML": "an old GGML model; convert it to GGUF", b"GGJT": "an old GGML model; convert it to GGUF",
}


class GGUFError(LlmpackError):
    """The file is not a GGUF model llama.cpp can load; the message says why in one line."""


@dataclass(frozen=True)
class ArrayInfo:
    """A GGUF array left undecoded (e.g. 262k vocabulary strings); `offset` is where its
    first element starts, relative to the region."""
    item_type: GGUFValueType
    count: int
    offset: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: GGMLQuantizationType
    shape: tuple[int, ...]      # GGUF/ggml order: shape[0] is the row length
    offset: int                 # relative to the start of the data section
    nbytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass
class GGUFHeader:
    path: Path
    version: int
    alignment: int
    data_offset: int            # start of tensor data, relative to the region
    kv: dict[str, Any]          # scalars, strings, short arrays as lists, long arrays as ArrayInfo
    kv_types: dict[str, GGUFValueType]
    tensors: list[TensorInfo]
    region_offset: int          # where the GGUF starts inside `path`
    region_length: int

    @property
    def architecture(self) -> str:
        return self.kv["general.architecture"]

    def iter_strings(self, key: str) -> Iterator[bytes]:
        """The raw items of string array `key`, read back from the file when it was left lazy
        (safe without checks: validate_gguf bounds-checked every length)."""
        value = self.kv[key]
        if not isinstance(value, ArrayInfo):
            yield from (v.encode() for v in value)
            return
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = self.region_offset + value.offset
            for _ in range(value.count):
                (n,) = _U64.unpack_from(mm, pos)
                yield mm[pos + 8:pos + 8 + n]
                pos += 8 + n

    def read_strings(self, key: str, stop: int | None = None) -> list[str]:
        """Decode string array `key` (or its first `stop` items)."""
        return [raw.decode("utf-8", "replace") for raw in islice(self.iter_strings(key), stop)]


class _Cursor:
    """Reads little-endian values from mm[start:end], failing with a GGUFError that names the
    item being read when a length runs past the region."""

    def __init__(self, mm: mmap.mmap, start: int, end: int, label: str) -> None:
        self.mm, self.start, self.end, self.pos, self.label = mm, start, end, start, label
        self.size = end - start

    def fail(self, message: str) -> GGUFError:
        return GGUFError(f"{self.label}: {message}")

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize("<" + fmt)
        if n > self.end - self.pos:
            raise self.fail(f"truncated: {what} at byte {self.pos - self.start} needs {n} bytes "
                            f"but the file has {self.size} bytes; the download may be incomplete")
        self.pos += n
        return struct.unpack_from("<" + fmt, self.mm, self.pos - n)[0]

    def string(self, what: str) -> str:
        n = self.unpack("Q", what)
        if n > MAX_STRING or n > self.end - self.pos:
            raise self.fail(f"{what} claims a string of {n} bytes at byte {self.pos - self.start - 8} "
                            f"but only {self.end - self.pos} bytes follow; the file is corrupt or truncated")
        raw = self.mm[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")


def _value_type(raw: int, cur: _Cursor, what: str) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise cur.fail(f"{what} has unknown GGUF value type {raw}; the file is corrupt") from None


def _read_value(cur: _Cursor, vtype: GGUFValueType, what: str) -> Any:
    if vtype == GGUFValueType.STRING:
        return cur.string(what)
    if vtype != GGUFValueType.ARRAY:
        return cur.unpack(_SCALAR[vtype], what)
    item = _value_type(cur.unpack("I", what), cur, what + " (array items)")
    count = cur.unpack("Q", what)
    left = cur.end - cur.pos
    if item == GGUFValueType.ARRAY:
        raise cur.fail(f"{what} is an array of arrays, which llama.cpp does not support")
    min_item = 8 if item == GGUFValueType.STRING else struct.calcsize(_SCALAR[item])
    if count > MAX_ARRAY or count * min_item > left:
        raise cur.fail(f"{what} claims an array of {count} {item.name.lower()} items but only {left} "
                       f"bytes follow; the file is corrupt or truncated")
    start = cur.pos - cur.start
    if item == GGUFValueType.STRING:
        if count <= DECODE_ARRAYS_UP_TO:
            return [cur.string(f"{what}[{i}]") for i in range(count)]
        mm, pos, end, unpack = cur.mm, cur.pos, cur.end, _U64.unpack_from
        for i in range(count):   # walk without decoding: only the bounds matter here
            if pos + 8 > end or (n := unpack(mm, pos)[0]) > end - pos - 8:
                cur.pos = pos
                cur.string(f"{what}[{i}]")  # raises the precise error
            pos += 8 + n
        cur.pos = pos
        return ArrayInfo(item, count, start)
    fmt = _SCALAR[item]
    if count <= DECODE_ARRAYS_UP_TO:
        values = list(struct.unpack_from(f"<{count}{fmt}", cur.mm, cur.pos))
        cur.pos += count * min_item
        return values
    cur.pos += count * min_item
    return ArrayInfo(item, count, start)


def _describe_magic(head: bytes) -> str:
    """A hint for common look-alikes, so "not a GGUF file" also says what it is instead."""
    if head[8:10] == b'{"':
        return "; it looks like a safetensors file: convert it with llama.cpp's convert_hf_to_gguf.py"
    what = next((w for prefix, w in _LOOKALIKES.items() if head.lstrip().startswith(prefix)), None)
    return f"; it looks like {what}" if what else ""


def validate_gguf(path: str | os.PathLike[str], offset: int = 0, length: int | None = None,
                  expect: str = "model") -> GGUFHeader:
    """Check that path[offset:offset+length] is a GGUF model llama.cpp can load; return its header.
    expect="mmproj": a vision projector (mmproj) instead (runtime/model/mmproj.py).

    Raises GGUFError (one line) for anything malformed: bad magic or version, impossible counts,
    lengths running past the region, unknown value or tensor types, misaligned, overlapping or
    out-of-bounds tensor data, a bad alignment or an architecture llama.cpp does not know.
    """
    path = Path(path)
    label = path.name if offset == 0 and length is None else f"{path.name} (model at byte {offset})"
    try:
        file_size = path.stat().st_size
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if length is None:
        length = max(file_size - offset, 0)
    if offset < 0 or offset + length > file_size:
        raise GGUFError(f"{label}: model region of {length} bytes runs past the end of the file "
                        f"({file_size} bytes); the file is truncated")
    if length == 0:
        raise GGUFError(f"{label}: empty file (0 bytes), not a GGUF model; the download may have failed")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _parse(mm, _Cursor(mm, offset, offset + length, label), path, expect)


def _parse(mm: mmap.mmap, cur: _Cursor, path: Path, expect: str = "model") -> GGUFHeader:
    magic = mm[cur.start:cur.start + 4]
    if len(magic) < 4 and b"GGUF".startswith(magic):
        raise cur.fail(f"truncated: only {len(magic)} bytes; the download may be incomplete")
    if magic != b"GGUF":
        head = mm[cur.start:cur.start + 32]
        raise cur.fail(f"not a GGUF file (magic {magic!r}, expected b'GGUF'){_describe_magic(head)}")
    cur.pos += 4
    version = cur.unpack("I", "the version")
    if version & 0xFFFF == 0 and version:
        raise cur.fail("big-endian GGUF files are not supported; use a little-endian conversion")
    if version not in (2, 3):
        hint = "GGUF v1 is no longer supported; re-convert the model" if version == 1 else \
            "only versions 2 and 3 are supported; the file is corrupt or from a newer tool"
        raise cur.fail(f"GGUF version {version}: {hint}")
    n_tensors = cur.unpack("Q", "the tensor count")
    n_kv = cur.unpack("Q", "the metadata count")
    for count, what in ((n_tensors, "tensor count"), (n_kv, "metadata count")):
        if count > MAX_COUNT:
            raise cur.fail(f"corrupt header: {what} {count} is impossible (at most {MAX_COUNT})")
    if n_tensors * 24 + n_kv * 13 > cur.end - cur.pos:   # the smallest possible entries
        raise cur.fail(f"truncated or corrupt: {n_tensors} tensors and {n_kv} metadata entries cannot "
                       f"fit in a {cur.size}-byte file; the download may be incomplete")

    kv: dict[str, Any] = {}
    kv_types: dict[str, GGUFValueType] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key {i}")
        if not key or key in kv:
            raise cur.fail(f"corrupt header: metadata key {i} is {'empty' if not key else f'a duplicate of {key!r}'}")
        vtype = _value_type(cur.unpack("I", f"the type of {key!r}"), cur, f"metadata {key!r}")
        kv[key] = _read_value(cur, vtype, f"metadata {key!r}")
        kv_types[key] = vtype

    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in kv and kv_types["general.alignment"] != GGUFValueType.UINT32:
        raise cur.fail("general.alignment must be a uint32")
    if alignment <= 0 or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment is {alignment}, not a power of two")

    tensors = [_read_tensor_info(cur, i) for i in range(n_tensors)]
    header_end = cur.pos - cur.start
    data_offset = -(-header_end // alignment) * alignment
    _check_tensor_data(cur, tensors, data_offset, alignment)

    header = GGUFHeader(path, version, alignment, data_offset, kv, kv_types, tensors, cur.start, cur.size)
    (_check_mmproj if expect == "mmproj" else _check_model)(cur, header)
    return header


def _check_mmproj(cur: _Cursor, header: GGUFHeader) -> None:
    arch = header.kv.get("general.architecture")
    if arch != "clip":
        raise cur.fail(f"this is a {arch or 'GGUF'} model, not a vision projector (an mmproj file, architecture "
                       f"'clip'); pass the mmproj*.gguf published with the model")
    if header.kv.get("clip.has_vision_encoder") is not True and header.kv.get("clip.has_audio_encoder") is not True:
        raise cur.fail("this projector has neither a vision nor an audio encoder, so it cannot read pictures or sound")
    if not header.tensors:
        raise cur.fail("no tensors: this projector file holds metadata only")


def _read_tensor_info(cur: _Cursor, i: int) -> TensorInfo:
    name = cur.string(f"the name of tensor {i}")
    if len(name.encode()) > MAX_TENSOR_NAME:
        raise cur.fail(f"tensor {i} has a name of {len(name.encode())} bytes; llama.cpp allows {MAX_TENSOR_NAME}")
    what = f"tensor {name!r}"
    n_dims = cur.unpack("I", f"the shape of {what}")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"{what} has {n_dims} dimensions; llama.cpp allows at most {MAX_DIMS}")
    shape = tuple(cur.unpack("Q", f"the shape of {what}") for _ in range(n_dims))
    if any(d <= 0 or d >= 1 << 62 for d in shape):
        raise cur.fail(f"{what} has an impossible shape {list(shape)}")
    raw_type = cur.unpack("I", f"the type of {what}")
    try:
        qtype = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise cur.fail(f"{what} has unknown tensor type {raw_type}; the file is corrupt "
                       f"or needs a newer llmpack") from None
    row = shape[0] if shape else 1
    if row % block:
        raise cur.fail(f"{what} of type {qtype.name} has rows of {row} values, "
                       f"not a multiple of its block size {block}")
    n = math.prod(shape)
    if n >= 1 << 63:
        raise cur.fail(f"{what} has an impossible shape {list(shape)}")
    offset = cur.unpack("Q", f"the data offset of {what}")
    return TensorInfo(name, qtype, shape, offset, n // block * type_size)


def _check_tensor_data(cur: _Cursor, tensors: list[TensorInfo], data_offset: int, alignment: int) -> None:
    """Alignment, bounds, overlap, then llama.cpp's own rule that tensors are packed in order."""
    names: set[str] = set()
    for t in tensors:
        if t.name in names:
            raise cur.fail(f"corrupt header: tensor name {t.name!r} appears twice")
        names.add(t.name)
        if t.offset % alignment:
            raise cur.fail(f"tensor {t.name!r} data offset {t.offset} is not aligned to {alignment} bytes")
        start, end = data_offset + t.offset, data_offset + t.offset + t.nbytes
        if start >= cur.size and t.nbytes:
            raise cur.fail(f"tensor {t.name!r} data starts at byte {start}, past the end of the file "
                           f"({cur.size} bytes); the file is truncated or corrupt")
        if end > cur.size:
            raise cur.fail(f"truncated: tensor {t.name!r} data ends at byte {end} but the file has "
                           f"{cur.size} bytes; the download may be incomplete")
    by_offset = sorted(tensors, key=lambda t: t.offset)
    for a, b in zip(by_offset, by_offset[1:]):
        if a.offset + a.nbytes > b.offset:
            raise cur.fail(f"corrupt header: tensor {a.name!r} overlaps tensor {b.name!r}")
    expected = 0
    for t in tensors:
        if t.offset != expected:
            raise cur.fail(f"tensor {t.name!r} is at data offset {t.offset}, expected {expected}: "
                           f"llama.cpp needs tensors stored back to back in header order")
        expected += -(-t.nbytes // alignment) * alignment


def _check_model(cur: _Cursor, header: GGUFHeader) -> None:
    arch = header.kv.get("general.architecture")
    if arch is None:
        raise cur.fail("general.architecture is missing, so llama.cpp cannot tell what model this is")
    if not isinstance(arch, str):
        raise cur.fail("general.architecture is not a string")
    if arch == "clip":
        raise cur.fail("this is a vision projector (mmproj) file, not a language model")
    if arch not in LLAMA_CPP_ARCHITECTURES:
        raise cur.fail(f"unknown architecture {arch!r}: the bundled llama.cpp (llama-cpp-python 0.3.36) "
                       f"cannot load it")
    splits = header.kv.get("split.count", 1)
    if isinstance(splits, int) and splits > 1:
        raise cur.fail(f"part {header.kv.get('split.no', 0) + 1} of a model split into {splits} files; "
                       f"merge them first with `llama-gguf-split --merge`")
    if not header.tensors:
        raise cur.fail("no tensors: this file holds metadata only (a vocabulary?), not model weights")
