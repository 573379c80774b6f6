"""Sound for a model that hears: checking audio bytes, and decoding them to the PCM mtmd takes.

A clip reaches us from a stranger (an API call, the chat page's microphone), and the decoders
behind it (miniaudio's WAV, MP3 and FLAC readers inside llama.cpp's mtmd) trust their input. So
the bytes are checked here first (a size cap, the format by its signature, which must agree with
what the client said it sent: header.py, as for pictures), and the decoding itself is a job of the
sandbox's worker pool (runtime/sandbox/pool.py: a warm child under a memory cap and a deadline, at
most WORKERS clips at once, the pool's slots the semaphore), on the path pictures take
(decoder.py): `decode` sends the bytes, `decode_job` runs `decode_pcm` in the child, and the
server only ever sees mono float samples, no more of them than the length cap allows. A clip is refused *before* its samples are
allocated when it is longer than MAX_AUDIO_SECONDS (llmpack's llama.cpp patch
`mtmd_helper_decode_audio` reads the length first; builder/llama_source.py). Every limit lives
here once.

Where the installed llama.cpp lacks that patch (someone's own llama-cpp-python), WAV is read with
Python's `wave` module instead, and MP3 and FLAC are refused with a sentence that says so.
"""
from __future__ import annotations

import ctypes
import io
import struct
import wave
from dataclasses import dataclass

import numpy as np

from llmpack.errors import LlmpackError
from llmpack.runtime.media.decoder import Decoder
from llmpack.runtime.media.errors import MediaBusy, MediaError
from llmpack.runtime.media.header import Kind, check_header

MAX_AUDIO_BYTES = 25 * 1024 * 1024     # per clip, as OpenAI's audio uploads
MAX_AUDIO_SECONDS = 300                # five minutes: mtmd makes ~750 rows of every 30 s (Qwen2-Audio)
MAX_RATE = 48000                       # the highest model rate a decoder child answers for (its answer's cap)
MEMORY_BYTES = 1 << 30                 # address space of one decoder child: five minutes at 48 kHz fit many times
TIME_LIMIT_S = 20.0                    # to wait for a free decoder, and again to decode (5 min of MP3: < 1 s)
WORKERS = 2                            # clips decoded at once, in the whole server
FORMATS = ("wav", "mp3", "flac")       # what input_audio's "format" names, as OpenAI and llama-server
MEDIA_TYPES = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav",
               "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/flac": "flac", "audio/x-flac": "flac"}


class AudioError(MediaError):
    """This clip cannot be used; the message says why in words a person can act on."""


class AudioBusy(AudioError, MediaBusy):
    """Every sound decoder stayed busy for TIME_LIMIT_S: the server is overloaded, not the clip bad."""


@dataclass(frozen=True, slots=True)
class AudioInfo:
    format: str          # wav | mp3 | flac
    size: int            # bytes


def sniff_audio(data: bytes) -> str | None:
    """The format the bytes really are, by their signature (as mtmd's helper tells audio apart)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def check_audio(data: bytes, fmt: str | None = None) -> AudioInfo:
    """The size cap and the format: `fmt` (input_audio's "format", or a media type) must agree
    with the bytes. Raises AudioError otherwise. Nothing here decodes a sample."""
    return AudioInfo(check_header(data, AUDIO, fmt), len(data))


def _accept(info: AudioInfo, asked: dict, answer: dict, raw: bytes) -> np.ndarray:
    """The child's samples, if there are as many as it said and no more than the length asked for allows."""
    pcm = np.frombuffer(raw, "<f4")
    limit = asked["max_seconds"] * asked["rate"] + asked["rate"]
    if pcm.size != answer.get("frames") or pcm.size == 0 or pcm.size > limit:
        raise AudioError(f"the {info.format.upper()} audio decoded to {pcm.size} samples, which its decoder did "
                         f"not account for")
    return pcm


AUDIO = Kind("audio", "audio", "file", "WAV, MP3 or FLAC", MAX_AUDIO_BYTES, {**{f: f for f in FORMATS}, **MEDIA_TYPES},
             sniff_audio, AudioError)       # input_audio's "format" names a format; a media type works too
DECODER: Decoder[AudioInfo, np.ndarray] = Decoder(
    f"{__name__}:decode_job", AUDIO, check=check_audio, accept=_accept, busy=AudioBusy,
    send=("a shorter clip", "a shorter clip, or WAV"), others="other sound",
    workers=WORKERS, memory=MEMORY_BYTES, max_answer=MAX_AUDIO_SECONDS * MAX_RATE * 4, time_limit=TIME_LIMIT_S)


def decode(data: bytes, fmt: str | None, sample_rate: int, max_seconds: float = MAX_AUDIO_SECONDS) -> np.ndarray:
    """The clip in `data` as mono float32 PCM at `sample_rate` Hz, decoded in a sandboxed child, or
    AudioError with a sentence that names the problem (AudioBusy when no decoder was free)."""
    if not 0 < sample_rate <= MAX_RATE:
        raise AudioError(f"this model takes sound at {sample_rate} Hz; llmpack decodes for up to {MAX_RATE} Hz")
    return DECODER.decode(data, fmt, rate=sample_rate, max_seconds=max_seconds)


def decode_job(head: dict, data: bytes) -> tuple[dict, bytes]:
    """The worker's side: sound to mono float32 PCM at the model's rate (an AudioError refuses it)."""
    try:
        pcm = decode_pcm(data, int(head["rate"]), float(head["max_seconds"]))
    except (LlmpackError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a decoder's surprise is the clip's fault: say so, stay warm
        raise AudioError(f"the audio could not be decoded ({type(exc).__name__}: {exc})") from None
    return {"frames": int(pcm.size)}, pcm.astype("<f4").tobytes()


def decode_pcm(data: bytes, sample_rate: int, max_seconds: float = MAX_AUDIO_SECONDS) -> np.ndarray:
    """The clip as mono float32 samples at `sample_rate` Hz (the model's, mtmd_get_audio_sample_rate).
    Runs a decoder over untrusted bytes: the sandbox child calls it (decode_job). Raises AudioError."""
    info = check_audio(data)
    max_frames = int(max_seconds * sample_rate)
    decode = _patched_decoder()
    if decode is not None:
        return _decode_mtmd(decode, data, info, sample_rate, max_frames, max_seconds)
    if info.format != "wav":
        raise AudioError(f"this build of llmpack can read WAV sound only, not {info.format.upper()}: its llama.cpp "
                         f"lacks mtmd_helper_decode_audio (llmpack's own runtime has it; ./dev setup builds it). "
                         f"Send the clip as WAV")
    return _decode_wav(data, sample_rate, max_frames, max_seconds)


def _patched_decoder():
    """llmpack's `mtmd_helper_decode_audio` (builder/llama_source.py), or None where the installed
    mtmd library lacks it or is missing altogether."""
    try:
        # lazy: the sandbox child loads llama.cpp only when a clip comes
        from llmpack.runtime.hardware import bindings  # noqa: F401 - llama_cpp without its high-level half
        from llama_cpp import mtmd_cpp
    except (OSError, ImportError):
        return None
    lib = getattr(mtmd_cpp, "_libmtmd", None)
    fn = getattr(lib, "mtmd_helper_decode_audio", None) if lib is not None else None
    free = getattr(lib, "mtmd_helper_audio_free", None) if lib is not None else None
    if fn is None or free is None:
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_uint64,
                   ctypes.POINTER(ctypes.POINTER(ctypes.c_float)), ctypes.POINTER(ctypes.c_uint64)]
    fn.restype = ctypes.c_int32
    free.argtypes = [ctypes.POINTER(ctypes.c_float)]
    free.restype = None
    return fn, free


def _decode_mtmd(decode, data: bytes, info: AudioInfo, rate: int, max_frames: int, max_seconds: float) -> np.ndarray:
    fn, free = decode
    out = ctypes.POINTER(ctypes.c_float)()
    n = ctypes.c_uint64()
    rc = fn(data, len(data), rate, max_frames, ctypes.byref(out), ctypes.byref(n))
    if rc == 2:
        raise _too_long(n.value / rate, max_seconds)
    if rc == 3:
        raise MemoryError
    if rc != 0 or not out:
        raise AudioError(f"the {info.format.upper()} audio could not be decoded (damaged, cut off or an encoding "
                         f"llama.cpp does not read)")
    try:
        return np.ctypeslib.as_array(out, shape=(n.value,)).copy()
    finally:
        free(out)


def _decode_wav(data: bytes, rate: int, max_frames: int, max_seconds: float) -> np.ndarray:
    """PCM WAV through the standard library: integer samples of 1 to 4 bytes, any channels and rate."""
    try:
        with wave.open(io.BytesIO(data)) as f:
            channels, width, src_rate, frames = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.getnframes()
            if src_rate <= 0 or channels <= 0:
                raise AudioError(f"the WAV audio says it has {channels} channels at {src_rate} Hz")
            if frames / src_rate * rate > max_frames:
                raise _too_long(frames / src_rate, max_seconds)
            raw = f.readframes(frames)
    except (wave.Error, EOFError, RuntimeError, ValueError, struct.error) as exc:   # RuntimeError: a chunk cut off
        raise AudioError(f"the WAV audio could not be read ({exc}); send 8-, 16-, 24- or 32-bit PCM WAV") from None
    got = len(raw) // (width * channels)
    if got == 0:
        raise AudioError("the WAV audio holds no samples")
    raw = raw[:got * width * channels]
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16) << 8 >> 8).astype(np.float32) / 2**23
    else:
        x = np.frombuffer(raw, "<i2" if width == 2 else "<i4").astype(np.float32) / (2 ** (8 * width - 1))
    mono = x.reshape(got, channels).mean(axis=1)
    if src_rate != rate:            # linear, as miniaudio's default resampler
        n_out = max(1, int(round(got * rate / src_rate)))
        mono = np.interp(np.arange(n_out) * (src_rate / rate), np.arange(got), mono)
    return mono.astype(np.float32)


def _too_long(seconds: float, max_seconds: float) -> AudioError:
    return AudioError(f"the audio is {_secs(seconds)} s long; the limit is {_secs(max_seconds)} s: send a shorter clip")


def _secs(seconds: float) -> str:
    """Seconds as a person reads them: 301, 3.5 (never 1.5 shown as 2 next to a limit of 2)."""
    return f"{seconds:.1f}".removesuffix(".0")
