"""One rule for tests that need a tool a developer's machine may lack (Wine, Chromium, qemu,
lavapipe, a built llama-server): skipped there, with the reason `-ra` lists at the end of the
run; failed under CI (CI set, and not "0" or "false"), where `.ci/run` installs every tool."""
from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(why: str, *, module: bool = False) -> NoReturn:
    """`module`: called at a test module's top level (a missing package), for all of its tests."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI must run this test: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=module)
