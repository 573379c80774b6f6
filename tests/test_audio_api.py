"""Sound over HTTP: `llmpack run MODEL --mmproj FILE` with the test-made audio model (a tiny
Qwen2-Audio projector). An OpenAI `input_audio` part reaches the model as llama.cpp itself reads
the file: the greedy reply equals the engine's own reply to the PCM mtmd's helper decodes from
the same bytes. A clip counts in usage, a second turn with it comes from the prefix cache, the
Responses API takes it too, and every refusal is one 400 naming the part."""
from __future__ import annotations

import base64
import ctypes
from pathlib import Path

import numpy as np
import pytest
import requests
from audio_ggufs import ROWS_PER_WINDOW, tone, wav_bytes, write_tiny_audio_mmproj, write_tiny_audio_model
from engine_invariants import check_consistency
from ggufs import CHATML_TEMPLATE
from llama_cpp import mtmd_cpp as mtmd
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_idle
from vision_ggufs import write_tiny_mmproj

from llmpack.runtime.core.params import SamplingValues, sampling_params
from llmpack.runtime.core.plan import plan_output
from llmpack.runtime.core.prompt import render_messages

QUESTION = "what do you hear ?"


@pytest.fixture(scope="module")
def audio_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audio-api")
    model = write_tiny_audio_model(folder / "tiny-audio-chat.gguf", chat_template=CHATML_TEMPLATE)
    mmproj = write_tiny_audio_mmproj(folder / "mmproj-audio.gguf", n_embd_text=64)
    with live_server(model, "--mmproj", str(mmproj), "--ctx", "2048") as srv:
        yield srv


def audio_part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def ask(srv, *parts: dict, text: str = QUESTION, **kw):
    messages = [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]
    return srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 12, "temperature": 0, **kw})


def mtmd_reading(srv, data: bytes) -> np.ndarray:
    """The PCM llama.cpp's own helper decodes from a file's bytes (miniaudio, at the model's rate)."""
    ctx = srv.engine.mm.projector.ctx
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bmp = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(data), False)
    assert bmp and mtmd.mtmd_bitmap_is_audio(bmp)
    try:
        n = mtmd.mtmd_bitmap_get_n_bytes(bmp)
        return np.frombuffer(ctypes.string_at(mtmd.mtmd_bitmap_get_data(bmp), n), np.float32).copy()
    finally:
        mtmd.mtmd_bitmap_free(bmp)


def engine_reply(srv, pcm: np.ndarray, max_tokens: int = 12) -> str:
    """The engine's greedy reply to the chat with `pcm` where the clip was, straight through its
    media_prompt (the same chat template renders the text around it, the same sampling defaults apply)."""
    model = srv.state.model
    marker = "<clip-here>"
    messages = [{"role": "user", "content": f"{QUESTION}\n{marker}"}]
    before, after = render_messages(model, messages, plan_output(model, None, None, chat=True)).split(marker)
    prompt = srv.engine.media_prompt([before, pcm, after])
    params = sampling_params(SamplingValues(temperature=0, max_tokens=max_tokens), model, chat=True)
    stream = srv.engine.add_request(prompt, params)
    return "".join(out.outputs[0].text for out in stream if out.outputs)


def test_the_greedy_reply_is_the_models_own_reading_of_the_clip(audio_server) -> None:
    wav = wav_bytes(tone(2.0, 440))
    r = ask(audio_server, audio_part(wav))
    assert r.status_code == 200, r.text
    reply = r.json()["choices"][0]["message"]["content"]
    assert reply == engine_reply(audio_server, mtmd_reading(audio_server, wav))
    other = ask(audio_server, audio_part(wav_bytes(tone(2.0, 1500, seed=3)))).json()["choices"][0]["message"]["content"]
    assert other != reply, "two different sounds, the same answer: the clip did not reach the model"


def test_a_clip_counts_in_usage_and_the_next_turn_comes_from_the_cache(audio_server) -> None:
    plain = audio_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}],
                                                       "max_tokens": 4, "temperature": 0}).json()
    clip = audio_part(wav_bytes(tone(1.5, 700, seed=5)))
    encodes = audio_server.engine.mm.projector.encodes
    first = ask(audio_server, clip).json()
    # the clip's rows, mtmd's <|audio_bos|> / <|audio_eos|> around them, and the "\n" joining the parts
    assert first["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] + ROWS_PER_WINDOW + 2 + 1
    turn2 = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, clip]},
             {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and now ?"}]
    second = audio_server.post("/v1/chat/completions", {"messages": turn2, "max_tokens": 4, "temperature": 0}).json()
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= ROWS_PER_WINDOW, second["usage"]
    assert audio_server.engine.mm.projector.encodes == encodes + 1, "the same clip was encoded twice"


def test_resampled_stereo_reaches_the_model_and_health_says_it_hears(audio_server) -> None:
    stereo = wav_bytes(tone(1.0, 440, rate=44100), rate=44100, channels=2)
    assert ask(audio_server, audio_part(stereo)).status_code == 200
    health = requests.get(audio_server.url + "/health").json()
    assert health["hears"] is True and health["vision"] is False


def test_the_responses_api_takes_input_audio(audio_server) -> None:
    wav = wav_bytes(tone(2.0, 440))
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": QUESTION},
                                                    {"type": "input_audio", "input_audio": {
                                                        "data": base64.b64encode(wav).decode(), "format": "wav"}}]}],
            "max_output_tokens": 12, "temperature": 0}
    r = audio_server.post("/v1/responses", body)
    assert r.status_code == 200, r.text
    text = r.json()["output"][-1]["content"][0]["text"]
    assert text == ask(audio_server, audio_part(wav)).json()["choices"][0]["message"]["content"]
    # the stored response keeps the clip: the next turn hears it again, as the same chat sent whole does
    follow = audio_server.post("/v1/responses", {"previous_response_id": r.json()["id"], "input": "and now ?",
                                                 "max_output_tokens": 4, "temperature": 0})
    assert follow.status_code == 200, follow.text
    whole = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, audio_part(wav)]},
             {"role": "assistant", "content": text}, {"role": "user", "content": "and now ?"}]
    chat = audio_server.post("/v1/chat/completions", {"messages": whole, "max_tokens": 4, "temperature": 0}).json()
    assert follow.json()["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] > ROWS_PER_WINDOW
    assert follow.json()["output"][-1]["content"][0]["text"] == chat["choices"][0]["message"]["content"]


BAD = {
    "bad base64": ({"data": "@@@@", "format": "wav"}, "not valid base64"),
    "mislabelled": ({"data": base64.b64encode(wav_bytes(tone(0.5))).decode(), "format": "mp3"},
                    "labelled MP3 but is a WAV"),
    "unknown format": ({"data": base64.b64encode(wav_bytes(tone(0.5))).decode(), "format": "ogg"},
                       "must be wav, mp3 or flac, not 'ogg'"),
    "not audio": ({"data": base64.b64encode(b"hello, this is text" * 4).decode(), "format": "wav"},
                  "not a WAV, MP3 or FLAC"),
    "cut off": ({"data": base64.b64encode(b"RIFF\x10\x00\x00\x00WAVEfmt junk").decode(), "format": "wav"},
                "could not be"),
    "five minutes and more": ({"data": base64.b64encode(wav_bytes(np.zeros(301 * 8000, np.float32), rate=8000,
                                                                  width=1)).decode(), "format": "wav"},
                              "301 s long; the limit is 300 s"),
    "no format": ({"data": "AAAA"}, "(wav, mp3 or flac)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_clips_are_one_clear_400_and_the_engine_serves_on(audio_server, case: str) -> None:
    spec, words = BAD[case]
    r = ask(audio_server, {"type": "input_audio", "input_audio": spec})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["param"] == "messages[0].content[1]", err
    wait_idle(audio_server.engine)
    check_consistency(audio_server.engine)
    assert ask(audio_server, audio_part(wav_bytes(tone(0.5)))).status_code == 200


def test_a_model_that_cannot_hear_refuses_sound_naming_the_part(chat_server, audio_server, tmp_path) -> None:
    r = ask(chat_server, audio_part(wav_bytes(tone(0.5))))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[1]" and err["code"] == "model_not_audio"
    assert "is a sound clip, but this model cannot hear" in err["message"] and "--mmproj" in err["message"]
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    seeing = ask(audio_server, picture).json()["error"]
    assert seeing["code"] == "model_not_vision" and "hears but cannot see" in seeing["message"]
    assert requests.get(chat_server.url + "/health").json()["hears"] is False


def test_a_vision_model_says_it_cannot_hear(tiny_chat_model: Path, tmp_path) -> None:
    mmproj = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf", n_embd_text=64)
    with live_server(tiny_chat_model, "--mmproj", str(mmproj), "--ctx", "512") as srv:
        err = ask(srv, audio_part(wav_bytes(tone(0.5)))).json()["error"]
        assert err["code"] == "model_not_audio" and "without an audio projector" in err["message"]


def test_flac_and_mp3_are_heard_as_wav_is_or_refused_saying_what_is_missing(audio_server) -> None:
    """With llmpack's llama.cpp (mtmd_helper_decode_audio) a FLAC clip is the same samples as its
    WAV, so the same greedy reply; with another llama.cpp it is one 400 that says what is missing."""
    import io

    import soundfile   # lazy: only this test writes FLAC and MP3

    from llmpack.runtime.media import audio

    pcm = tone(2.0, 440)

    def encoded(fmt: str) -> bytes:   # FLAC from the WAV's own 16-bit samples: lossless means equal
        out = io.BytesIO()
        if fmt == "flac":
            soundfile.write(out, np.frombuffer(wav_bytes(pcm)[44:], "<i2"), 16000, format="FLAC", subtype="PCM_16")
        else:
            soundfile.write(out, pcm, 16000, format="MP3")
        return out.getvalue()

    wav_reply = ask(audio_server, audio_part(wav_bytes(pcm))).json()["choices"][0]["message"]["content"]
    flac, mp3 = ask(audio_server, audio_part(encoded("flac"), "flac")), ask(audio_server, audio_part(encoded("mp3"), "mp3"))
    if audio._patched_decoder() is not None:
        assert flac.status_code == 200 and flac.json()["choices"][0]["message"]["content"] == wav_reply
        assert mp3.status_code == 200, mp3.text
    else:
        for r, fmt in ((flac, "FLAC"), (mp3, "MP3")):
            err = r.json()["error"]
            assert r.status_code == 400 and err["code"] == "bad_audio", r.text
            assert f"WAV sound only, not {fmt}" in err["message"] and "mtmd_helper_decode_audio" in err["message"]


def test_a_clip_outside_a_user_message_and_too_many_clips_are_refused_naming_them(audio_server) -> None:
    clip = audio_part(wav_bytes(tone(0.5)))
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": [clip]},
                {"role": "user", "content": "and ?"}]
    r = audio_server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].content[0]"
    assert "is a sound clip; sound clips can only be in user messages" in r.json()["error"]["message"]
    r = ask(audio_server, *[audio_part(wav_bytes(tone(0.2, 300 + 50 * k))) for k in range(9)])
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_clips", r.text


def test_a_client_cannot_forge_the_servers_own_media_item(audio_server) -> None:
    """The rooms hand the core MediaItem objects, which JSON cannot spell: a part shaped like one
    (the dict the rooms once handed over) is no part of any API, refused before anything is decoded."""
    forged = {"type": "media", "kind": "audio", "data": base64.b64encode(wav_bytes(tone(0.5))).decode(),
              "mime": "wav", "where": "somewhere else"}
    r = ask(audio_server, forged)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    assert "messages[0].content[1] must be {\"type\": \"text\"" in r.json()["error"]["message"], r.text
