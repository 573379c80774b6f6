"""Sound, below the server: the test-made audio model is real to llama.cpp (mtmd loads the tiny
Qwen2-Audio projector and encodes a clip into rows that depend on the sound), and untrusted audio
bytes are checked, then decoded to PCM in the sandbox child, bounded in size and length."""
from __future__ import annotations

import base64
import ctypes
import io
from pathlib import Path

import numpy as np
import pytest
import soundfile
from audio_ggufs import ROWS_PER_WINDOW, SAMPLE_RATE, tone, wav_bytes, write_tiny_audio_mmproj, write_tiny_audio_model
from llama_cpp import mtmd_cpp as mtmd

from llmpack.runtime.media import audio
from llmpack.runtime.media.audio import AudioError, check_audio, decode_pcm, sniff_audio
from llmpack.runtime.chats.chat_export import to_markdown
from llmpack.runtime.chats.chat_shape import MAX_CLIP_URL, ChatError, clean_chat
from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.media import MEDIA_TOKEN
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.engine.projector import Projector


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    model = write_tiny_audio_model(tmp_path_factory.mktemp("audio") / "tiny-audio.gguf")
    r = ModelRunner(EngineConfig(str(model), n_ctx=2048, n_threads=2))
    yield r
    r.close()


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory) -> Path:
    return write_tiny_audio_mmproj(tmp_path_factory.mktemp("audio-proj") / "mmproj-audio.gguf", n_embd_text=64)


def encoded(ctx, pcm: np.ndarray, n_embd: int = 64) -> tuple[list[int], np.ndarray]:
    """Straight through mtmd: the chunk kinds of "hear <clip> this", and the clip's encoded rows."""
    bmp = mtmd.mtmd_bitmap_init_from_audio(len(pcm), pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    text = f"hear {mtmd.mtmd_default_marker().decode()} this".encode()
    inp = mtmd.mtmd_input_text(text, len(text), True, True)
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bmp), 1) == 0
        kinds = [mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i))
                 for i in range(mtmd.mtmd_input_chunks_size(chunks))]
        clip = mtmd.mtmd_input_chunks_get(chunks, kinds.index(2))
        n = mtmd.mtmd_input_chunk_get_n_tokens(clip)
        assert mtmd.mtmd_encode_chunk(ctx, clip) == 0
        rows = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(n * n_embd,)).reshape(n, n_embd).copy()
        return kinds, rows
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bmp)


def test_mtmd_loads_the_tiny_audio_projector_and_encodes_a_clip(runner: ModelRunner, mmproj: Path) -> None:
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.warmup = False, 2, False
    ctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), runner.model, params)
    assert ctx, "llama.cpp's clip loader refused the tiny audio projector"
    try:
        assert mtmd.mtmd_support_audio(ctx) and not mtmd.mtmd_support_vision(ctx)
        assert mtmd.mtmd_get_audio_sample_rate(ctx) == SAMPLE_RATE
        kinds, a = encoded(ctx, tone(3.0, 440))
        # text "hear <|audio_bos|>", the clip, text "<|audio_eos|> this": the markers are the model's tokens
        assert kinds == [0, 2, 0]
        assert a.shape == (ROWS_PER_WINDOW, 64) and np.isfinite(a).all() and a.std() > 0.01
        _, b = encoded(ctx, tone(3.0, 1200, seed=1))
        assert not np.allclose(a, b), "two different sounds, the same rows"
        _, again = encoded(ctx, tone(3.0, 440))
        assert np.array_equal(a, again)
    finally:
        mtmd.mtmd_free(ctx)


def test_audio_is_checked_by_its_bytes_before_anything_decodes_it() -> None:
    wav = wav_bytes(tone(0.5))
    assert check_audio(wav, "wav").format == "wav" and check_audio(wav, "audio/x-wav").format == "wav"
    assert sniff_audio(b"fLaC" + bytes(40)) == "flac" and sniff_audio(b"ID3" + bytes(40)) == "mp3"
    with pytest.raises(AudioError, match="empty"):
        check_audio(b"")
    with pytest.raises(AudioError, match="labelled MP3 but is a WAV"):
        check_audio(wav, "mp3")
    with pytest.raises(AudioError, match="WAV, MP3 or FLAC, not ogg"):
        check_audio(wav, "ogg")
    with pytest.raises(AudioError, match="not a WAV, MP3 or FLAC"):
        check_audio(b"OggS" + bytes(60))
    with pytest.raises(AudioError, match="the limit is 25 MiB"):
        check_audio(b"RIFF" + bytes(4) + b"WAVE" + bytes(audio.MAX_AUDIO_BYTES))


def test_wav_decodes_to_the_models_rate_in_mono() -> None:
    pcm = tone(1.0, 300)
    assert np.abs(decode_pcm(wav_bytes(pcm), SAMPLE_RATE) - pcm).max() < 1e-3
    stereo = decode_pcm(wav_bytes(tone(1.0, 300, rate=44100), rate=44100, channels=2, width=4), SAMPLE_RATE)
    assert abs(stereo.size - SAMPLE_RATE) <= 2
    # the same sound, resampled: what a 16 kHz recording of it would hold, near enough
    assert np.corrcoef(stereo[100:15000], pcm[100:15000])[0, 1] > 0.95
    eight_bit = decode_pcm(wav_bytes(pcm, width=1), SAMPLE_RATE)
    assert np.abs(eight_bit - pcm).max() < 0.02


def test_a_clip_past_the_length_cap_is_refused_by_its_header() -> None:
    long = wav_bytes(np.zeros(int(3.5 * 8000), np.float32), rate=8000)
    with pytest.raises(AudioError, match="3.5 s long; the limit is 3 s"):
        decode_pcm(long, SAMPLE_RATE, max_seconds=3)


def flac_bytes(pcm: np.ndarray, fmt: str = "FLAC") -> bytes:
    """`pcm` as FLAC (the very 16-bit samples wav_bytes writes, so lossless means equal) or MP3."""
    out = io.BytesIO()
    if fmt == "FLAC":
        soundfile.write(out, np.frombuffer(wav_bytes(pcm)[44:], "<i2"), SAMPLE_RATE, format=fmt, subtype="PCM_16")
    else:
        soundfile.write(out, pcm, SAMPLE_RATE, format=fmt)
    return out.getvalue()


def test_flac_and_mp3_decode_with_llmpacks_llama_cpp_or_are_refused_saying_what_is_missing() -> None:
    """llmpack's llama.cpp decodes them (mtmd_helper_decode_audio); another one says it cannot."""
    pcm = tone(1.0, 300)
    if audio._patched_decoder() is not None:
        assert np.array_equal(decode_pcm(flac_bytes(pcm), SAMPLE_RATE), decode_pcm(wav_bytes(pcm), SAMPLE_RATE))
        assert decode_pcm(flac_bytes(pcm, "MP3"), SAMPLE_RATE).size >= SAMPLE_RATE // 2
        with pytest.raises(AudioError, match="the audio is 1 s long; the limit is 0.5 s"):
            decode_pcm(flac_bytes(pcm), SAMPLE_RATE, max_seconds=0.5)
    else:
        for fmt in ("FLAC", "MP3"):
            with pytest.raises(AudioError, match=f"WAV sound only, not {fmt}.*mtmd_helper_decode_audio"):
                decode_pcm(flac_bytes(pcm, fmt), SAMPLE_RATE)


def test_a_sandboxed_child_decodes_and_the_server_gets_only_pcm() -> None:
    pcm = tone(2.0, 500)
    got = audio.decode(wav_bytes(pcm), "wav", SAMPLE_RATE, max_seconds=10)
    assert got.dtype == np.float32 and np.array_equal(got, decode_pcm(wav_bytes(pcm), SAMPLE_RATE))
    pool = audio.DECODER.pool
    started = pool.started
    with pytest.raises(AudioError, match="the limit is 1 s"):
        audio.decode(wav_bytes(pcm), "wav", SAMPLE_RATE, max_seconds=1)
    with pytest.raises(AudioError, match="could not be (read|decoded)"):   # the stdlib or miniaudio says it
        audio.decode(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk", "wav", SAMPLE_RATE, max_seconds=10)
    with pytest.raises(AudioError, match="labelled MP3 but is a WAV"):     # refused before any child
        audio.decode(wav_bytes(pcm), "mp3", SAMPLE_RATE)
    assert pool.started == started and pool.peak_busy <= audio.WORKERS   # refused clips cost no worker
    assert pool.pids(), "the decoder is a child process, not this one"


def test_a_clip_longer_than_a_window_is_one_span_per_window_each_named_apart(runner: ModelRunner, mmproj: Path) -> None:
    proj = Projector(mmproj, runner, n_threads=2)
    try:
        assert proj.kinds == {"audio"} and proj.sample_rate == SAMPLE_RATE
        long = tone(35.0, 300)
        mm = proj.prompt(["hear ", long, " this"], bos=[1])
        assert [s.kind for s in mm.spans] == ["audio", "audio"] and mm.spans[0].end == mm.spans[1].start
        assert all(s.n_tokens == s.n_pos == ROWS_PER_WINDOW and not s.whole for s in mm.spans)
        assert mm.token_ids.count(MEDIA_TOKEN) == 2 * ROWS_PER_WINDOW
        assert mm.spans[0].digest != mm.spans[1].digest, "two windows of one clip would share cached rows"
        first, second = proj.encode(mm.spans[0]), proj.encode(mm.spans[1])
        assert not np.allclose(first, second)
        again = proj.prompt(["other words ", long, "!"], bos=[])
        assert [s.digest for s in again.spans] == [s.digest for s in mm.spans]   # named by the sound itself
        with pytest.raises(AudioError, match="no samples"):
            proj.prompt(["x", np.zeros(0, np.float32), "y"], bos=[])
    finally:
        proj.close()


def test_a_saved_chat_keeps_a_clip_as_a_wav_data_url_and_exports_it_as_a_player() -> None:
    url = "data:audio/wav;base64," + base64.b64encode(wav_bytes(tone(0.5))).decode()

    def chat(audio_url: str) -> dict:
        return {"title": "t", "messages": [{"role": "user", "content": "hear this", "attachments": [
            {"name": "Recording 1", "kind": "audio", "text": "", "note": "0:01", "audio_url": audio_url}]}]}

    kept = clean_chat(chat(url))["messages"][0]["attachments"][0]
    assert kept["audio_url"] == url and kept["kind"] == "audio"
    md = to_markdown(clean_chat(chat(url)), "Tiny")
    assert f'<audio controls src="{url}" title="Recording 1 (0:01)">Sound: Recording 1 (0:01)</audio>' in md
    for bad in ("data:audio/mpeg;base64,AAAA", "data:text/html;base64,PGI+", "javascript:alert(1)",
                "data:audio/wav;base64," + "A" * MAX_CLIP_URL):
        with pytest.raises(ChatError, match=r"attachments\[\]\.audio_url must be a WAV data: URL"):
            clean_chat(chat(bad))
