"""Tiny vision models for tests: random-weight projector files (mmproj) that llama.cpp's clip
loader accepts, to pair with tests/ggufs.py's tiny text models. Two kinds:

- write_tiny_mmproj: LLaVA-style, for the tiny llama model (one position per image row);
- write_tiny_qwen2vl_mmproj + write_tiny_qwen2vl_model: the Qwen2-VL family, whose text model
  places image rows with M-RoPE (a grid of positions that shares one temporal position), the case
  the engine's block tables must map token indices to positions for.

The projector is LLaVA-style ("mlp"): a CLIP ViT tower (conv patch embedding, learned position
embeddings, pre-norm transformer blocks with biases) and a two-layer GELU MLP that maps the
tower's features to the text model's embedding width. llama.cpp resizes every image to
image_size x image_size (its fixed-size preprocessor for "mlp" without grid pinpoints), so an
image always becomes (image_size / patch_size)^2 embedding rows: 16 with the defaults.

Tensor names and keys are llama.cpp's own (tools/mtmd/clip-impl.h): `clip.*` hyperparameters,
`v.*` tower tensors, `mm.0` / `mm.2` projector layers. The tower runs n_layer - 1 blocks (LLaVA
reads the second-to-last layer), so the default writes 2.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from ggufs import write_tiny_model
from gguf import GGUFValueType, GGUFWriter


class ClipWriter:
    """What every test projector shares: llama.cpp's `clip` keys for a vision tower, random tensors
    drawn from one seeded generator, and the pre-norm ViT blocks (tools/mtmd/clip-impl.h names)."""

    def __init__(self, path: Path, *, name: str, projector: str, n_embd_text: int, n_embd: int, n_head: int,
                 n_ff: int, n_layer: int, image_size: int, patch_size: int, eps: float, seed: int) -> None:
        self.path, self.rng = path, np.random.default_rng(seed)
        w = self.w = GGUFWriter(path, "clip")
        w.add_name(name)
        w.add_description("random weights for llmpack's tests")
        w.add_bool("clip.has_vision_encoder", True)
        w.add_bool("clip.has_audio_encoder", False)
        w.add_string("clip.projector_type", projector)
        w.add_uint32("clip.vision.embedding_length", n_embd)
        w.add_uint32("clip.vision.feed_forward_length", n_ff)
        w.add_uint32("clip.vision.block_count", n_layer)
        w.add_uint32("clip.vision.projection_dim", n_embd_text)
        w.add_uint32("clip.vision.attention.head_count", n_head)
        w.add_float32("clip.vision.attention.layer_norm_epsilon", eps)
        w.add_uint32("clip.vision.image_size", image_size)
        w.add_uint32("clip.vision.patch_size", patch_size)
        w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
        w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def tensor(self, name: str, *shape: int, scale: float = 0.1, mean: float = 0.0, f16: bool = False) -> None:
        data = (mean + self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.w.add_tensor(name, data.astype(np.float16) if f16 else data)

    def blocks(self, n_layer: int, n_embd: int, n_ff: int, *, norm_bias: bool = True, gated: bool = False) -> None:
        """The tower's transformer blocks: two norms, biased attention projections, an MLP."""
        tensor = self.tensor
        for i in range(n_layer):
            p = f"v.blk.{i}"
            for norm in ("ln1", "ln2"):
                tensor(f"{p}.{norm}.weight", n_embd, mean=1.0, scale=0.05)
                if norm_bias:
                    tensor(f"{p}.{norm}.bias", n_embd, scale=0.02)
            for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
                tensor(f"{p}.{proj}.weight", n_embd, n_embd)
                tensor(f"{p}.{proj}.bias", n_embd, scale=0.02)
            for ffn in ("ffn_up", "ffn_gate") if gated else ("ffn_up",):
                tensor(f"{p}.{ffn}.weight", n_ff, n_embd)
                tensor(f"{p}.{ffn}.bias", n_ff, scale=0.02)
            tensor(f"{p}.ffn_down.weight", n_embd, n_ff)
            tensor(f"{p}.ffn_down.bias", n_embd, scale=0.02)

    def finish(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path


def write_tiny_mmproj(
    path: str | Path, *, n_embd_text: int = 64, n_embd: int = 32, n_head: int = 4, n_ff: int = 64,
    n_layer: int = 2, image_size: int = 32, patch_size: int = 8, seed: int = 1,
    name: str = "tiny-test-mmproj",
) -> Path:
    """Write a random-weight LLaVA-style projector whose output width is `n_embd_text` (it must
    equal the text model's n_embd, or llama.cpp refuses the pair)."""
    n_patches = (image_size // patch_size) ** 2
    c = ClipWriter(Path(path), name=name, projector="mlp", n_embd_text=n_embd_text, n_embd=n_embd, n_head=n_head,
                   n_ff=n_ff, n_layer=n_layer, image_size=image_size, patch_size=patch_size, eps=1e-5, seed=seed)
    c.w.add_bool("clip.use_gelu", True)
    tensor = c.tensor
    # numpy shapes are ggml's ne reversed: the conv kernel is ne [patch, patch, 3, n_embd]
    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size, scale=0.2, f16=True)
    tensor("v.patch_embd.bias", n_embd)
    tensor("v.position_embd.weight", n_patches, n_embd, scale=0.2)
    tensor("v.pre_ln.weight", n_embd, mean=1.0, scale=0.05)
    tensor("v.pre_ln.bias", n_embd, scale=0.02)
    c.blocks(n_layer, n_embd, n_ff)
    # strong enough that the image rows move the tiny text model's greedy choices
    tensor("mm.0.weight", n_embd_text, n_embd, scale=0.3)
    tensor("mm.0.bias", n_embd_text, scale=0.02)
    tensor("mm.2.weight", n_embd_text, n_embd_text, scale=0.5)
    tensor("mm.2.bias", n_embd_text, scale=0.02)
    return c.finish()


def write_tiny_qwen2vl_model(path: str | Path, *, n_embd: int = 64, n_head: int = 4, seed: int = 0,
                             sections: tuple[int, int, int, int] = (2, 3, 3, 0), **kw) -> Path:
    """A random-weight text model of llama.cpp's `qwen2vl` architecture (Qwen2-VL / Qwen2.5-VL's
    language half): the llama layout with M-RoPE, whose rotary pairs are split into `sections`
    (temporal, height, width, unused) - at most head_dim / 2 pairs in all, as in the real models'
    [16, 24, 24, 0] of 64. `kw`: more of write_tiny_model's arguments (a chat_template)."""
    head_dim = n_embd // n_head
    if sum(sections) > head_dim // 2:
        raise ValueError(f"the sections {sections} hold more than the {head_dim // 2} rotary pairs of a head")
    return write_tiny_model(path, arch="qwen2vl", n_embd=n_embd, n_head=n_head, seed=seed,
                            name="tiny-test-qwen2vl", **kw,
                            extra_kv={"qwen2vl.rope.dimension_sections": (list(sections), GGUFValueType.ARRAY)})


def write_tiny_qwen2vl_mmproj(
    path: str | Path, *, n_embd_text: int = 64, n_embd: int = 32, n_head: int = 4, n_ff: int = 64,
    n_layer: int = 2, patch_size: int = 4, seed: int = 3, name: str = "tiny-test-qwen2vl-mmproj",
    version: str = "2",
) -> Path:
    """Write a random-weight Qwen2-VL projector (`qwen2vl_merger`): two conv patch embeddings
    (the temporal pair of frames; a still image goes through both), a ViT whose attention rotates
    by the patch's (row, column) with M-RoPE - no learned position table - and the merger, which
    joins each 2 x 2 block of patches into one row and maps it through a GELU MLP to the text
    model's width. So an image of W x H pixels (resized by llama.cpp to multiples of 2 * patch)
    becomes a grid of nx = W / (2 * patch) by ny = H / (2 * patch) rows: 8 x 6 for 64 x 48 with
    the defaults, which advance the text's position by max(nx, ny) = 8, not by the 48 rows.
    version="2.5": Qwen2.5-VL's tower instead (`qwen2.5vl_merger`): RMS norms, a gated SiLU MLP and
    window attention in every layer but each n_wa_pattern-th (here: the second).
    Tensor names and keys: llama.cpp's tools/mtmd/clip-impl.h and clip.cpp."""
    if version not in ("2", "2.5"):
        raise ValueError(f"version must be '2' or '2.5', not {version!r}")
    v25 = version == "2.5"
    c = ClipWriter(Path(path), name=name, projector="qwen2.5vl_merger" if v25 else "qwen2vl_merger",
                   n_embd_text=n_embd_text, n_embd=n_embd, n_head=n_head, n_ff=n_ff, n_layer=n_layer,
                   image_size=16 * patch_size, patch_size=patch_size, eps=1e-6, seed=seed)
    c.w.add_bool("clip.use_silu" if v25 else "clip.use_gelu", True)
    if v25:
        c.w.add_uint32("clip.vision.n_wa_pattern", 2)
    tensor = c.tensor
    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size, scale=0.2, f16=True)
    tensor("v.patch_embd.weight.1", n_embd, 3, patch_size, patch_size, scale=0.2, f16=True)
    c.blocks(n_layer, n_embd, n_ff, norm_bias=not v25, gated=v25)   # Qwen2.5-VL: RMS norms, gated SiLU
    tensor("v.post_ln.weight", n_embd, mean=1.0, scale=0.05)
    if not v25:
        tensor("v.post_ln.bias", n_embd, scale=0.02)
    merged = 4 * n_embd       # a 2 x 2 block of patches, side by side
    tensor("mm.0.weight", merged, merged, scale=0.15)
    tensor("mm.0.bias", merged, scale=0.02)
    tensor("mm.2.weight", n_embd_text, merged, scale=0.3)
    tensor("mm.2.bias", n_embd_text, scale=0.02)
    return c.finish()
