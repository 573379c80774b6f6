"""Every Python file in the repository passes ruff's pyflakes rules (F) and has no syntax
errors (E9): no undefined names, unused imports or variables, shadowed definitions or
f-strings without fields. Settings: [tool.ruff] in pyproject.toml."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_code_passes_pyflakes():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_session_fixtures_are_defined_in_conftest_only():
    """A session-scoped fixture that a helper module (server_fixtures.py, browser_fixtures.py...)
    defines is a separate fixture in every test module that imports it, set up once per module:
    a "shared" demo server then starts once per module. conftest.py's are shared for real."""
    helpers = [p for p in (REPO / "tests").rglob("*.py") if p.name != "conftest.py" and not p.name.startswith("test_")]
    found = [f"{p.relative_to(REPO)}:{n}" for p in sorted(helpers)
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"scope=[\"']session[\"']", line)]
    assert found == [], f"move these session-scoped fixtures to tests/conftest.py: {found}"
