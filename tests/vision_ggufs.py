"""A tiny vision model for tests: a random-weight projector file (mmproj) that llama.cpp's clip
loader accepts, to pair with tests/ggufs.py's tiny llama text model.

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
from gguf import GGUFWriter


def write_tiny_mmproj(
    path: str | Path, *, n_embd_text: int = 64, n_embd: int = 32, n_head: int = 4, n_ff: int = 64,
    n_layer: int = 2, image_size: int = 32, patch_size: int = 8, seed: int = 1,
    name: str = "tiny-test-mmproj",
) -> Path:
    """Write a random-weight LLaVA-style projector whose output width is `n_embd_text` (it must
    equal the text model's n_embd, or llama.cpp refuses the pair)."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    n_patches = (image_size // patch_size) ** 2

    w = GGUFWriter(path, "clip")
    w.add_name(name)
    w.add_description("random weights for llmpack's tests")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_audio_encoder", False)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def tensor(name: str, *shape: int, scale: float = 0.1, mean: float = 0.0, f16: bool = False) -> None:
        data = (mean + rng.standard_normal(shape) * scale).astype(np.float32)
        w.add_tensor(name, data.astype(np.float16) if f16 else data)

    # numpy shapes are ggml's ne reversed: the conv kernel is ne [patch, patch, 3, n_embd]
    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size, scale=0.2, f16=True)
    tensor("v.patch_embd.bias", n_embd)
    tensor("v.position_embd.weight", n_patches, n_embd, scale=0.2)
    tensor("v.pre_ln.weight", n_embd, mean=1.0, scale=0.05)
    tensor("v.pre_ln.bias", n_embd, scale=0.02)
    for i in range(n_layer):
        p = f"v.blk.{i}"
        for norm in ("ln1", "ln2"):
            tensor(f"{p}.{norm}.weight", n_embd, mean=1.0, scale=0.05)
            tensor(f"{p}.{norm}.bias", n_embd, scale=0.02)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"{p}.{proj}.weight", n_embd, n_embd)
            tensor(f"{p}.{proj}.bias", n_embd, scale=0.02)
        tensor(f"{p}.ffn_up.weight", n_ff, n_embd)
        tensor(f"{p}.ffn_up.bias", n_ff, scale=0.02)
        tensor(f"{p}.ffn_down.weight", n_embd, n_ff)
        tensor(f"{p}.ffn_down.bias", n_embd, scale=0.02)
    # strong enough that the image rows move the tiny text model's greedy choices
    tensor("mm.0.weight", n_embd_text, n_embd, scale=0.3)
    tensor("mm.0.bias", n_embd_text, scale=0.02)
    tensor("mm.2.weight", n_embd_text, n_embd_text, scale=0.5)
    tensor("mm.2.bias", n_embd_text, scale=0.02)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
