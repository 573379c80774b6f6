"""Every Python file in the repository passes ruff's pyflakes rules (F) and has no syntax
errors (E9): no undefined names, unused imports or variables, shadowed definitions or
f-strings without fields. Settings: [tool.ruff] in pyproject.toml."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_code_passes_pyflakes():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
