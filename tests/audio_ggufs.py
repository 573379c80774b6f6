"""Tiny audio models for tests: a random-weight audio projector (mmproj) that llama.cpp's clip
loader accepts, and the small text model it pairs with, as tests/vision_ggufs.py does for pictures.

The projector is Qwen2-Audio's (`qwen2a`), the simplest audio encoder mtmd runs: a Whisper
encoder (two 1-D convolutions over the log-mel spectrogram, the second with stride 2, learned
position embeddings, pre-norm transformer blocks whose key projection has no bias), a 2-wide
average pool, and one linear layer to the text model's width. mtmd cuts sound into 30-second
windows of 3000 mel frames (mtmd-audio.cpp, padding the last one with silence), so any clip up to
30 s becomes one chunk of 3000 / 2 / 2 = 750 rows in the text model's sequence.

Tensor names and keys are llama.cpp's own (tools/mtmd/clip-impl.h, clip.cpp's loader for
PROJECTOR_TYPE_QWEN2A): `clip.audio.*` hyperparameters, `a.*` encoder tensors, `mm.a.fc` the
projector. mtmd wraps each clip in `<|audio_bos|>` ... `<|audio_eos|>` text, which the tiny text
model has as tokens of its own.
"""
from __future__ import annotations

import io
import math
import wave
from pathlib import Path

import numpy as np
from ggufs import write_tiny_model
from gguf import GGUFWriter

AUDIO_TOKENS = ("<|audio_bos|>", "<|audio_eos|>")
ROWS_PER_WINDOW = 750          # one 30-second window: 3000 mel frames, halved by the conv, halved by the pool
SAMPLE_RATE = 16000            # Whisper's, which mtmd resamples every clip to


def write_tiny_audio_model(path: str | Path, **kw) -> Path:
    """The tiny llama text model (tests/ggufs.py) with the audio markers mtmd puts around a clip as
    tokens, and room for a clip's 750 rows and a few turns of text."""
    kw.setdefault("n_ctx_train", 4096)
    return write_tiny_model(path, name="tiny-test-audio-model", added_tokens=AUDIO_TOKENS, **kw)


def write_tiny_audio_mmproj(
    path: str | Path, *, n_embd_text: int = 64, n_embd: int = 32, n_head: int = 4, n_ff: int = 64,
    n_layer: int = 2, n_mel: int = 80, seed: int = 5, name: str = "tiny-test-qwen2a-mmproj",
) -> Path:
    """Write a random-weight Qwen2-Audio projector whose output width is `n_embd_text` (the text
    model's n_embd). Its Whisper encoder reads `n_mel` mel bins (80 as Whisper, 128 as Qwen2-Audio)."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(Path(path), "clip")
    w.add_name(name)
    w.add_description("random weights for llmpack's tests")
    w.add_bool("clip.has_vision_encoder", False)
    w.add_bool("clip.has_audio_encoder", True)
    w.add_string("clip.projector_type", "qwen2a")
    w.add_uint32("clip.audio.embedding_length", n_embd)
    w.add_uint32("clip.audio.feed_forward_length", n_ff)
    w.add_uint32("clip.audio.block_count", n_layer)
    w.add_uint32("clip.audio.projection_dim", n_embd_text)
    w.add_uint32("clip.audio.attention.head_count", n_head)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.audio.num_mel_bins", n_mel)

    def tensor(name: str, *shape: int, scale: float = 0.1, mean: float = 0.0, f16: bool = False) -> None:
        data = (mean + rng.standard_normal(shape) * scale).astype(np.float32)
        w.add_tensor(name, data.astype(np.float16) if f16 else data)

    # numpy shapes are ggml's ne reversed. The convolutions' kernels are [3, in, out] in ggml, their
    # biases [1, out] (added across time); Whisper's converter stores the kernels as f16.
    tensor("a.conv1d.1.weight", n_embd, n_mel, 3, scale=0.2, f16=True)
    tensor("a.conv1d.1.bias", n_embd, 1, scale=0.02)
    tensor("a.conv1d.2.weight", n_embd, n_embd, 3, scale=0.2, f16=True)
    tensor("a.conv1d.2.bias", n_embd, 1, scale=0.02)
    tensor("a.position_embd.weight", 1500, n_embd, scale=0.2)   # the 1500 frames after the stride-2 conv
    for i in range(n_layer):
        p = f"a.blk.{i}"
        for norm in ("ln1", "ln2"):
            tensor(f"{p}.{norm}.weight", n_embd, mean=1.0, scale=0.05)
            tensor(f"{p}.{norm}.bias", n_embd, scale=0.02)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"{p}.{proj}.weight", n_embd, n_embd)
            if proj != "attn_k":          # Whisper's key projection has no bias (clip.cpp asserts it)
                tensor(f"{p}.{proj}.bias", n_embd, scale=0.02)
        tensor(f"{p}.ffn_up.weight", n_ff, n_embd)
        tensor(f"{p}.ffn_up.bias", n_ff, scale=0.02)
        tensor(f"{p}.ffn_down.weight", n_embd, n_ff)
        tensor(f"{p}.ffn_down.bias", n_embd, scale=0.02)
    tensor("a.post_ln.weight", n_embd, mean=1.0, scale=0.05)
    tensor("a.post_ln.bias", n_embd, scale=0.02)
    # strong enough that the audio rows move the tiny text model's greedy choices
    tensor("mm.a.fc.weight", n_embd_text, n_embd, scale=0.5)
    tensor("mm.a.fc.bias", n_embd_text, scale=0.02)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def tone(seconds: float = 2.0, hz: float = 440.0, *, rate: int = SAMPLE_RATE, seed: int = 0) -> np.ndarray:
    """Mono float PCM in [-1, 1]: a sine at `hz` with a little seeded noise, so two tones differ."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.size) * 0.02
    return (0.5 * np.sin(2 * math.pi * hz * t) + noise).clip(-1, 1).astype(np.float32)


def wav_bytes(pcm: np.ndarray, *, rate: int = SAMPLE_RATE, channels: int = 1, width: int = 2) -> bytes:
    """`pcm` (mono floats) as a PCM WAV file of `width` bytes a sample, copied to every channel."""
    if width == 2:
        samples = (pcm * 32767).round().astype("<i2")
    elif width == 1:
        samples = ((pcm * 127).round() + 128).astype(np.uint8)
    elif width == 4:
        samples = (pcm * 2147483647.0).round().astype("<i4")
    else:
        raise ValueError(f"a sample is 1, 2 or 4 bytes, not {width}")
    frames = np.repeat(samples[:, None], channels, axis=1).tobytes()
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(frames)
    return out.getvalue()
