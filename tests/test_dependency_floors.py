"""The run-time dependencies with known flaws that reach llmpack have one floor each
(builder/stub_bundle.py SECURITY_FLOORS), and every place that installs them honours it:
pyproject.toml (pip, the Linux and macOS builds), the Windows stub's hashed pins, and the Python
that freezes a native stub (checked here as it is installed)."""
from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:   # Python 3.10
    import tomli as tomllib

from llmpack.builder.stub_bundle import SECURITY_FLOORS, StubError, below_floors, check_security_floors, version_tuple

REPO = Path(__file__).resolve().parents[1]


def _requirement(spec: str) -> tuple[str, str, str]:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(>=|==)\s*([0-9][^;,\s]*)", spec)
    assert m, spec
    return m.group(1).lower(), m.group(2), m.group(3)


def test_the_floors_are_the_fixed_versions():
    assert version_tuple(SECURITY_FLOORS["jinja2"]) >= (3, 1, 6)
    assert version_tuple(SECURITY_FLOORS["waitress"]) >= (3, 0, 2)
    assert version_tuple(SECURITY_FLOORS["pypdfium2"]) >= (5, 15)   # PDFium chromium/8149
    assert version_tuple(SECURITY_FLOORS["pillow"]) >= (12, 3, 0)   # issue 46: 2026 advisories fixed up to 12.3.0


def test_pyproject_asks_for_at_least_the_floors():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {name: version for name, op, version in map(_requirement, deps) if op == ">="}
    for name, floor in SECURITY_FLOORS.items():
        assert version_tuple(floors[name]) >= version_tuple(floor), (name, floors[name], floor)


def test_the_windows_stub_pins_at_least_the_floors():
    pins = {}
    for line in (REPO / "builder/windows/requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, op, version = _requirement(line)
            assert op == "=="
            pins[name] = version
    for name, floor in SECURITY_FLOORS.items():
        assert version_tuple(pins[name]) >= version_tuple(floor), (name, pins[name], floor)


def test_the_installed_versions_meet_the_floors():
    """What this Python runs and would freeze into a native stub."""
    installed = {name: importlib.metadata.version(name) for name in SECURITY_FLOORS}
    assert below_floors() == [], installed
    check_security_floors()


def test_an_old_version_is_named_and_a_stub_refused(monkeypatch):
    old = {"jinja2": "3.1.4", "waitress": "3.0.0", "pypdfium2": "4.30.0", "pillow": "12.2.0"}
    assert below_floors(old.__getitem__) == ["jinja2 3.1.4 (needs >= 3.1.6)", "waitress 3.0.0 (needs >= 3.0.2)",
                                             "pypdfium2 4.30.0 (needs >= 5.15)",
                                             "pillow 12.2.0 (needs >= 12.3.0)"]
    assert below_floors({"jinja2": "3.1.10", "waitress": "3.0.2", "pypdfium2": "5.15.2", "pillow": "13.0.0"}.__getitem__) == []
    monkeypatch.setattr("llmpack.builder.stub_bundle.below_floors", lambda: below_floors(old.__getitem__))
    with pytest.raises(StubError, match="refusing to build a stub with jinja2 3.1.4"):
        check_security_floors()
