"""Spec for llmpack.progress, the one console progress mechanism: a tqdm bar on a terminal;
elsewhere (logs, pipes, CI) one line when a phase starts and a note at most every NOTE_EVERY_S."""
from __future__ import annotations

import io

from llmpack import progress
from llmpack.progress import Bar, ByteProgress, PhaseBars


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_phase_is_one_line_then_a_note_at_most_every_interval(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = Bar("unpacking model", 1000, file=log)
    for _ in range(5):            # quick updates: no note
        bar.update(10)
    clock[0] += progress.NOTE_EVERY_S
    bar.update(450)               # 500 of 1000 after 30 s
    bar.update(10)                # too soon for another note
    bar.close()
    bar.update(10)                # after close: silent
    assert log.getvalue() == "llmpack: unpacking model...\nllmpack: unpacking model: 50% (30 s)\n"


def test_a_phase_of_unknown_length_notes_its_latest_step(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    bar = Bar("building the runtime stub", file=log)
    bar.set_note("Analyzing modules")
    clock[0] = 31.0
    bar.set_note("Building EXE")
    assert log.getvalue().splitlines() == ["llmpack: building the runtime stub...",
                                           "llmpack: building the runtime stub: Building EXE (31 s)"]


def test_on_a_terminal_it_is_a_tqdm_bar_that_clears_itself():
    term = Terminal()
    bar = Bar("unpacking model", 4 << 20, file=term)
    bar.update(2 << 20)
    bar.close()
    frames = [f for f in term.getvalue().split("\r") if f.strip()]
    assert frames and frames[0].startswith("unpacking model:") and "/4.00M" in frames[0]
    assert "\n" not in term.getvalue()   # leave=False: the line is cleared, the console stays clean


def test_byte_progress_reports_running_totals_to_a_callback():
    seen = []
    bp = ByteProgress(lambda done, total: seen.append((done, total)), 300, "x")
    for n in (100, 100, 100):
        bp(n)
    bp.close()
    assert seen == [(100, 300), (200, 300), (300, 300)]


def test_phase_bars_start_one_bar_per_phase_and_stay_quiet_when_disabled():
    log = io.StringIO()
    bars = PhaseBars({"extracting": "Unpacking the model", "loading": "Loading the model"}, file=log)
    for phase, fraction in [("extracting", 0.0), ("extracting", 0.5), ("loading", 0.1), ("loading", 1.0)]:
        bars(phase, fraction)
    bars.close()
    assert log.getvalue() == "llmpack: Unpacking the model...\nllmpack: Loading the model...\n"
    quiet = io.StringIO()
    off = PhaseBars({}, enabled=False, file=quiet)
    off("extracting", 0.5)
    off.close()
    assert quiet.getvalue() == ""


def test_human_bytes_is_the_one_way_a_size_is_shown():
    assert [progress.human_bytes(n) for n in (0, 1023, 1024, 1536, 329_360_000, 4 * 1024**3, 5 * 1024**4)] == [
        "0 B", "1023 B", "1.00 KiB", "1.50 KiB", "314.10 MiB", "4.00 GiB", "5120.00 GiB"]
