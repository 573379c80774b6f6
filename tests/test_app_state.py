"""State that belongs to an app (issue 43): the index of long documents, the sandbox that reads
files, the last reads and the last decoded clips (core/files.py `AppFiles`), and the stored
responses, are held by each app (its ServerState, or the offline LLM), never by the process. Two
apps in one process, each with its own data folder, do not see each other's documents.

Against `FakeEngine` (one token per byte), so a few KB of text is a long document; the files are
read by the real sandbox, and indexed in the real SQLite index."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from types import MappingProxyType

import pytest

from fake_engine import FakeEngine

from llmpack.runtime.chat.recipes import ChatFormat, load_recipe
from llmpack.runtime.core.files import AppFiles
from llmpack.runtime.core.served_model import describe_model
from llmpack.runtime.server.app import create_app
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.state import ServerState

NOTES = "\n".join(f"Line {i}: the harbour master logs the arrival of ship number {i}." for i in range(300)).encode()


def chatml() -> ChatFormat:
    recipe = load_recipe("chatml")
    return ChatFormat(template=recipe.chat_template, source="recipe:chatml", reason="test", stop=recipe.stop,
                      eot_tokens=recipe.eot_tokens, sampling=MappingProxyType({}), system=None, recipe=recipe)


class App:
    """One app as `llmpack run` makes it (ServerState, its model, the route table), in its own folder."""

    def __init__(self, folder: Path) -> None:
        self.state = ServerState("Fake", files=AppFiles(folder))
        self.state.set_ready(describe_model(FakeEngine(), chatml(), model_id="fake", display_name="Fake",
                                            files=self.state.files))
        self.client = create_app(self.state, ServerOptions()).test_client()

    def ask_about(self, file_id: str):
        part = {"type": "file", "file": {"filename": "harbour.txt", "file_id": file_id}}
        return self.client.post("/v1/chat/completions", json={"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Which ship is number 7?"}, part]}]})


@pytest.fixture
def two_apps(tmp_path: Path):
    apps = App(tmp_path / "a"), App(tmp_path / "b")
    yield apps
    for app in apps:
        app.state.files.close()


def test_two_apps_in_one_process_keep_their_own_documents(two_apps, tmp_path: Path):
    a, b = two_apps
    r = a.client.post("/v1/extract", data=NOTES, headers={"X-Filename": "harbour.txt", "Content-Type": "text/plain"})
    assert r.status_code == 200 and r.json["searched"], r.json    # too long for the context: indexed
    file_id = r.json["file_id"]
    assert a.ask_about(file_id).status_code == 200
    refused = b.ask_about(file_id)
    assert refused.status_code == 400 and refused.json["error"]["code"] == "file_not_indexed"
    assert a.state.files.index.path == tmp_path / "a" / "documents.sqlite3"   # each in its own folder
    with sqlite3.connect(tmp_path / "b" / "documents.sqlite3") as con:        # b looked, and keeps nothing
        assert con.execute("SELECT COUNT(*) FROM documents").fetchone() == (0,)
    assert a.state.files.sandbox is not b.state.files.sandbox and a.state.files.read is not b.state.files.read


def test_two_apps_keep_their_own_stored_responses(two_apps, tmp_path: Path):
    a, b = two_apps
    r = a.client.post("/v1/responses", json={"input": "Hello!"})
    assert r.status_code == 200, r.json
    assert a.client.get(f"/v1/responses/{r.json['id']}").status_code == 200
    assert b.client.get(f"/v1/responses/{r.json['id']}").status_code == 404
    with sqlite3.connect(tmp_path / "a" / "responses.sqlite3") as con:   # in a's own folder, only there
        assert con.execute("SELECT id FROM responses").fetchall() == [(r.json["id"],)]
    with sqlite3.connect(tmp_path / "b" / "responses.sqlite3") as con:
        assert con.execute("SELECT COUNT(*) FROM responses").fetchone() == (0,)
