"""Shared fixtures. Test models come from tests/ggufs.py (tiny, random weights, real llama.cpp
models); the demo model is the real Gemma 3 270M, assembled once into the user's llmpack cache
(LLMPACK_CACHE is deliberately left alone here: re-assembling 253 MB per session is slow).

Every session-scoped fixture lives here, the demo servers above all: one that a helper module
defines and several test modules import is a separate fixture in each of them, set up once per
module (tests/test_lint.py fails on one outside this file). A test that uses a shared server
leaves it as it found it: no monkeypatching, no flags, nothing that depends on running first."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import needs
from ggufs import CHATML_TEMPLATE, write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """factory(**write_tiny_model kwargs) -> path; identical requests share one file, so treat
    the result as read-only (copy it before corrupting it)."""
    made: dict[str, Path] = {}
    folder = tmp_path_factory.mktemp("tiny-models")

    def factory(**kwargs: Any) -> Path:
        key = repr(sorted(kwargs.items()))
        if key not in made:
            made[key] = write_tiny_model(folder / f"tiny-{len(made)}.gguf", **kwargs)
        return made[key]

    return factory


@pytest.fixture(scope="session")
def tiny_model(tiny_model_factory: Callable[..., Path]) -> Path:
    """A 2-layer f32 llama model with no embedded chat template."""
    return tiny_model_factory()


@pytest.fixture(scope="session")
def tiny_chat_model(tiny_model_factory: Callable[..., Path]) -> Path:
    """The tiny model with an embedded ChatML template (<|im_start|>/<|im_end|> are in its vocabulary)."""
    return tiny_model_factory(chat_template=CHATML_TEMPLATE)


@pytest.fixture(scope="session")
def demo_model() -> Path:
    """The real demo model (Gemma 3 270M Q4_K_M). Its package is a test dependency: when it is
    missing the tests that need it fail (PathsError says how to install it), never skip."""
    from llmpack.demo_models import demo_model_path

    return demo_model_path("gemma")


@pytest.fixture(scope="session")
def demo_server(demo_model: Path) -> Iterator[Any]:
    """The demo model (Gemma 3 270M, a base model) behind `llmpack run --ctx 2048`, once per session,
    for every test that needs it over HTTP: structured output, LangChain, embeddings."""
    from server_fixtures import live_server

    with live_server(demo_model, "--ctx", "2048") as srv:
        yield srv


@pytest.fixture(scope="session")
def instruct_server() -> Iterator[Any]:
    """The instruct demo model (Qwen2.5-Coder 0.5B Instruct), once per session, for every test
    that needs a model that really answers. Its packages are test dependencies: when they are
    missing the tests fail (PathsError says how to install them), never skip."""
    from llmpack.demo_models import demo_model_path
    from server_fixtures import live_server

    with live_server(demo_model_path("qwen"), "--ctx", "8192", "--parallel", "4") as srv:
        yield srv


@pytest.fixture(scope="session")
def scripted_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that answers every ChatML prompt with server_fixtures.SCRIPTED_REPLY."""
    from server_fixtures import write_scripted_model

    return write_scripted_model(tmp_path_factory.mktemp("scripted") / "scripted.gguf")


@pytest.fixture(scope="session")
def qwen3_thinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A tiny GGUF with Qwen3's chat template that thinks before it answers (tests/thinking_model.py),
    served once per session for the reasoning tests of every API and of the page."""
    from llmpack.runtime.chat.recipes import load_recipes
    from server_fixtures import live_server
    from thinking_model import write_thinking_model

    path = write_thinking_model(tmp_path_factory.mktemp("qwen3") / "qwen3-thinker.gguf",
                                load_recipes()["qwen3"].chat_template)
    with live_server(path, "--ctx", "512") as srv:
        yield srv


@pytest.fixture(scope="session")
def tool_caller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A tiny model that answers with text and then a Hermes tool call (test_tool_calls.CALL_REPLY),
    served once per session for the tool tests of the Responses and Anthropic APIs."""
    from server_fixtures import live_server, write_scripted_model
    from test_tool_calls import CALL_REPLY

    with live_server(write_scripted_model(tmp_path_factory.mktemp("caller") / "caller.gguf", reply=CALL_REPLY)) as srv:
        yield srv


@pytest.fixture
def chat_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Saved chats go to a temporary data folder (LLMPACK_DATA_DIR), never the user's; the folder
    is not made: the server makes it when the first chat is saved."""
    folder = tmp_path / "data"
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(folder))
    return folder


# --------------------------------------------------------------------------- optional tools
# A test that needs Wine, Chromium, qemu... (tests/needs.py) is skipped, or failed under CI, before
# any of its fixtures is set up: a newcomer's run starts no server and builds no file only to skip.
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*tools): needs optional tools (tests/needs.py's TOOLS): skipped "
                                       "without them before any set-up, failed under CI")


@pytest.hookimpl(tryfirst=True)   # before `-m` selects: `-m needs` finds the tests marked here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    needs.mark_items(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    needs.check_item(item)


@needs.fixture("windows", scope="session")
def windows_stub() -> Path:
    """The cached Windows stub (`./dev test` makes it first when Wine and mingw are installed:
    about 11 minutes the first time, then cached under a key of its inputs)."""
    from llmpack.builder.stub import get_stub
    from llmpack.builder.windows.pins import WindowsBuildError
    from llmpack.builder.windows.target import WindowsTarget

    try:
        return get_stub(target=WindowsTarget(), quiet=True)
    except WindowsBuildError as exc:
        pytest.fail(f"the Windows stub could not be built: {exc}")


@pytest.fixture(scope="session")
def stub() -> Path:
    """The real Linux runtime stub, built once per llmpack source state (a minute or two), then cached."""
    from llmpack.builder.stub import get_stub

    return get_stub()
