"""The model's name on the chat page: `--name` at build time, end to end (the manifest, the
built program's flags, /health, /v1/models, the page's title and header); without it a clean
name from the GGUF naming convention or the file name, never general.name's quantization
("... Instruct AWQ" in a Q4_K_M file)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import requests
from gguf import GGUFValueType

from browser_fixtures import *  # noqa: F401,F403
from ggufs import CHATML_TEMPLATE, write_tiny_model
from server_fixtures import *  # noqa: F401,F403
from helpers.stubs import archive, elf_stub  # noqa: F401 - the fake stub fixtures (a real bootloader)

from llmpack.builder import extract, packfile
from llmpack.builder.build import build_executable
from llmpack.builder.stub_entry import build_parser, built_config
from llmpack.runtime.model.model_info import read_model_info
from llmpack.runtime.model.naming import human_name
from llmpack.runtime.server.lifecycle.server import Server

CLEAN = "Qwen2.5 Coder 0.5B Instruct"


@pytest.mark.parametrize("kv, stem, name", [
    # the demo model's own metadata: finetune "Instruct-AWQ", in a Q4_K_M file
    ({"general.name": "Qwen2.5 Coder 0.5B Instruct AWQ", "general.basename": "Qwen2.5-Coder",
      "general.size_label": "0.5B", "general.finetune": "Instruct-AWQ"}, "qwen2.5-coder-0.5b-instruct-q4_k_m", CLEAN),
    ({"general.name": "Gemma 3 270m", "general.basename": "gemma-3", "general.size_label": "270M"},
     "gemma-3-270m-q4_k_m", "Gemma 3 270M"),
    ({"general.name": "Qwen2.5 Coder 0.5B Instruct AWQ"}, "qwen2.5-coder-0.5b-instruct-q4_k_m", CLEAN),
    ({"general.name": "Qwen2.5 Coder 0.5B Instruct AWQ"}, "9f" * 32, CLEAN),   # a built program's <sha256>.gguf
    ({}, "Meta-Llama-3.1-8B-Instruct.Q4_K_M", "Meta Llama 3.1 8B Instruct"),
    ({}, "mistral-7b-instruct-v0.3.IQ3_XXS", "Mistral 7B Instruct v0.3"),
    ({}, "Mixtral-8x7B-Instruct-v0.1-GGUF", "Mixtral 8x7B Instruct v0.1"),
    ({}, "gemma-3-270m-it-BF16", "Gemma 3 270M IT"),
    ({"general.name": "SmolLM2 135M"}, "model", "SmolLM2 135M"),
    ({}, "", "Local model"),
])
def test_a_clean_name_without_quantization_tags(kv, stem, name):
    assert human_name(kv, stem) == name


@pytest.fixture(scope="module")
def awq_model(tmp_path_factory) -> Path:
    """A Q4_K_M-typed file whose general.name says AWQ, named as such files are."""
    path = tmp_path_factory.mktemp("awq") / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    write_tiny_model(path, chat_template=CHATML_TEMPLATE, name="Qwen2.5 Coder 0.5B Instruct AWQ",
                     extra_kv={"general.file_type": (15, GGUFValueType.UINT32)})
    info = read_model_info(path)
    assert info.file_type.startswith("Q4_K") and "AWQ" in info.name
    return path


def test_llmpack_run_shows_the_clean_name_and_keeps_the_file_as_the_api_id(awq_model):
    with live_server(awq_model) as srv:  # noqa: F405
        health = requests.get(srv.url + "/health", timeout=10).json()
        assert health["display_name"] == CLEAN
        assert health["model"] == srv.model_id == awq_model.stem   # what API clients already use


def test_a_build_without_name_records_the_clean_name(awq_model, elf_stub, tmp_path):  # noqa: F811
    result = build_executable(awq_model, tmp_path / "app", stub=elf_stub, progress=False)
    assert packfile.read_manifest(result.path).defaults["name"] == CLEAN


def _serve_built(program: Path, tmp: Path) -> Server:
    """What the built program does when it starts (builder/stub_entry.run): its flags and the
    manifest's defaults, the model unpacked from itself, the server; signals and browser aside."""
    manifest = packfile.read_manifest(program)
    config = built_config(build_parser(manifest).parse_args(["--no-browser", "--port", "0"]), manifest)
    server = Server(config, lambda progress: extract.extract_model(program, manifest, tmp / "models"), quiet=True)
    server.start_preparing()
    threading.Thread(target=server.run, daemon=True).start()
    assert server.state.ready.wait(120) and server.state.phase == "ready", server.state.message
    return server


@pytest.mark.browser
def test_name_at_build_time_is_what_the_page_and_the_api_show(awq_model, elf_stub, tmp_path, page):  # noqa: F811
    result = build_executable(awq_model, tmp_path / "my-helper", name="My Helper", stub=elf_stub, progress=False)
    assert packfile.read_manifest(result.path).defaults["name"] == "My Helper"
    server = _serve_built(result.path, tmp_path)
    try:
        health = requests.get(server.url + "/health", timeout=10).json()
        assert health["display_name"] == "My Helper" and health["model"] == "My Helper"
        models = requests.get(server.url + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["My Helper"]
        page.goto(server.page_url)
        page.wait_for_selector("#app:not([hidden])")
        assert page.title() == "My Helper"
        assert page.locator("[data-testid=model-name]").inner_text() == "My Helper"
        assert page.problems == []
    finally:
        server.stop()
        server.closed.wait(30)
