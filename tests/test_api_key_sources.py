"""The API key can come from a file (--api-key-file) or the environment (LLMPACK_API_KEY), so it
need not sit on a command line that every user of the computer can read (/proc/*/cmdline)."""
from __future__ import annotations

from pathlib import Path

import pytest
import requests

from llmpack.cli import build_parser, serve_config
from llmpack.errors import LlmpackError
from server_fixtures import *  # noqa: F401,F403
from server_fixtures import live_server


def key_of(*flags: str) -> str | None:
    return serve_config(build_parser().parse_args(["run", "model.gguf", *flags])).api_key


def test_the_key_comes_from_the_flag_then_the_file_then_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("LLMPACK_API_KEY", raising=False)
    assert key_of() is None
    (tmp_path / "key").write_text("from-file\n# a comment line\n")
    monkeypatch.setenv("LLMPACK_API_KEY", "from-env")
    assert key_of() == "from-env"
    assert key_of("--api-key-file", str(tmp_path / "key")) == "from-file"
    assert key_of("--api-key", "from-flag", "--api-key-file", str(tmp_path / "key")) == "from-flag"


def test_a_missing_or_empty_key_file_is_one_line(tmp_path: Path):
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(LlmpackError, match="holds no API key; put the key on its first line"):
        key_of("--api-key-file", str(tmp_path / "empty"))
    with pytest.raises(LlmpackError, match="cannot read the API key from .*nope"):
        key_of("--api-key-file", str(tmp_path / "nope"))


def test_a_server_keyed_from_the_environment_refuses_requests_without_it(tiny_chat_model: Path, monkeypatch):
    monkeypatch.setenv("LLMPACK_API_KEY", "env-secret")
    with live_server(tiny_chat_model) as srv:
        assert requests.get(srv.url + "/v1/models", timeout=30).status_code == 401
        ok = requests.get(srv.url + "/v1/models", headers={"Authorization": "Bearer env-secret"}, timeout=30)
        assert ok.status_code == 200
