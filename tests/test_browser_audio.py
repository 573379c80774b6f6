"""Sound on the chat page with the test-made audio model (`--mmproj` with a Qwen2-Audio projector),
in headless Chromium with a fake microphone: the microphone button shows only for a model that
hears; it records (the badge counts the length up), a recording can be thrown away while it runs
or as a chip before sending, a kept one shows its length, and it is sent as WAV (the page converts
MediaRecorder's webm/opus) that the model hears; sound files attach too, and are kept in the saved
chat. 1280 and 390 px, screenshots in artifacts/."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest
from audio_ggufs import tone, wav_bytes, write_tiny_audio_mmproj, write_tiny_audio_model
from ggufs import CHATML_TEMPLATE
from playwright import sync_api

from browser_fixtures import *  # noqa: F401,F403
from browser_fixtures import ARTIFACTS, CHROMIUM_ARGS, chromium_path, get_chat, get_chats, last_reply, new_page
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server, wait_until
from test_browser_attach import CHIP, attach, problems

pytestmark = pytest.mark.browser

FAKE_MICROPHONE = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]


@pytest.fixture(scope="module")
def mic_browser():
    """Chromium whose microphone is its built-in fake (a beep), allowed without asking."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS + FAKE_MICROPHONE)
        yield b
        b.close()


@pytest.fixture(scope="module")
def audio_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("browser-audio")
    return (write_tiny_audio_model(folder / "tiny-audio-chat.gguf", chat_template=CHATML_TEMPLATE),
            write_tiny_audio_mmproj(folder / "mmproj-audio.gguf", n_embd_text=64))


def record(page, seconds_shown: str) -> None:
    """Click the microphone and wait until the badge shows `seconds_shown` (m:ss) of recording."""
    page.click("[data-testid=mic]")
    page.wait_for_selector("[data-testid=recording]", state="visible")
    wait_until(lambda: page.locator("[data-testid=record-time]").inner_text() >= seconds_shown, 30)


@pytest.mark.parametrize("width, height", [(1280, 860), (390, 844)])
def test_a_voice_message_is_recorded_discarded_recorded_again_and_sent(mic_browser, audio_files, width: int,
                                                                       height: int) -> None:
    model, mmproj = audio_files
    ctx = mic_browser.new_context(viewport={"width": width, "height": height})
    page = new_page(ctx)
    try:
        with live_server(model, "--mmproj", str(mmproj), "--ctx", "2048") as srv:
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            page.wait_for_selector("[data-testid=mic]", state="visible")
            assert "sound files" in page.get_attribute("[data-testid=attach]", "title")
            ARTIFACTS.mkdir(exist_ok=True)

            record(page, "0:01")                                 # thrown away while it records
            page.screenshot(path=str(ARTIFACTS / f"audio-{width}-recording.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.click("[data-testid=record-cancel]")
            page.wait_for_selector("[data-testid=recording]", state="hidden")
            page.wait_for_timeout(500)
            assert page.locator(CHIP).count() == 0

            record(page, "0:02")                                 # kept, then discarded as a chip
            page.click("[data-testid=mic]")
            chip = page.locator(CHIP)
            wait_until(lambda: chip.count() == 1 and "reading" not in chip.first.inner_text(), 30)
            meta = chip.first.locator("[data-testid=attachment-meta]").inner_text()
            assert meta.endswith(("0:02", "0:03")), meta          # its length, m:ss
            assert chip.first.locator(".chip-name").inner_text() == "Recording 1"   # the discarded one is not counted
            page.screenshot(path=str(ARTIFACTS / f"audio-{width}-clip.png"))
            chip.first.locator("[data-testid=attachment-remove]").click()
            wait_until(lambda: chip.count() == 0)

            record(page, "0:01")                                 # recorded again and sent
            page.click("[data-testid=mic]")
            wait_until(lambda: chip.count() == 1 and "reading" not in chip.first.inner_text(), 30)
            encodes = srv.engine.mm.projector.encodes
            page.fill("[data-testid=prompt]", "what do you hear ?")
            page.keyboard.press("Enter")
            last_reply(page).wait_for()
            page.wait_for_selector("[data-testid=stop]", state="hidden", timeout=60_000)
            assert last_reply(page).locator(".content").inner_text().strip()
            assert srv.engine.mm.projector.encodes == encodes + 1, "the recording did not reach the model"
            sent = page.locator("[data-testid=message-user] [data-testid=sent-attachment]")
            assert sent.count() == 1 and "sound" in sent.inner_text()
            sent.scroll_into_view_if_needed()                    # the tiny model's reply is long
            page.screenshot(path=str(ARTIFACTS / f"audio-{width}-sent.png"))
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert not page.problems, page.problems

            (summary,) = wait_until(lambda: [c for c in get_chats(srv) if c["n_messages"] == 2])
            (clip,) = get_chat(srv, summary["id"])["messages"][0]["attachments"]
            assert clip["audio_url"].startswith("data:audio/wav;base64,")
            wav = base64.b64decode(clip["audio_url"].split(",", 1)[1])
            assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE" and int.from_bytes(wav[24:28], "little") == 16000
    finally:
        ctx.close()


def test_sound_files_attach_for_a_model_that_hears_and_are_refused_by_one_that_does_not(
        mic_browser, audio_files, chat_server) -> None:
    model, mmproj = audio_files
    ctx = mic_browser.new_context(viewport={"width": 1280, "height": 860})
    page = new_page(ctx)
    try:
        page.goto(chat_server.server.page_url)                   # text only: no microphone, files refused
        page.wait_for_selector("#app:not([hidden])")
        assert page.locator("[data-testid=mic]").is_hidden()
        attach(page, "memo.wav", wav_bytes(tone(1.0)), "audio/wav")
        wait_until(lambda: problems(page))
        assert "memo.wav is a sound file; this model cannot hear" in problems(page)[0]
        with live_server(model, "--mmproj", str(mmproj), "--ctx", "2048") as srv:
            page.goto(srv.server.page_url)
            page.wait_for_selector("#app:not([hidden])")
            attach(page, "memo.wav", wav_bytes(tone(3.0, rate=44100), rate=44100, channels=2), "audio/wav")
            chip = page.locator(CHIP)
            wait_until(lambda: chip.count() == 1 and "reading" not in chip.first.inner_text(), 30)
            assert chip.first.locator("[data-testid=attachment-meta]").inner_text().endswith("0:03")
            attach(page, "photo.png", b"\x89PNG\r\n\x1a\n" + bytes(40), "image/png")
            wait_until(lambda: problems(page))
            assert "this model hears but cannot see" in problems(page)[0]
    finally:
        ctx.close()
