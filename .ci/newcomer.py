"""The newcomer's run, proved (issue 47): every test that needs an optional tool (tests/needs.py's
TOOLS: Wine, mingw, Chromium, qemu, lavapipe, osslsigncode, ccache, llama-server...) is run here
with all of those tools hidden and CI unset, as on a fresh desktop that followed the README without
them. Each must skip with one line that says what to install. One that errors, fails, passes, or
skips for another reason fails this step, and so CI; so does a run that selects no test at all
(pytest's exit code 5: the marks are gone, and the step would prove nothing).

Nothing heavy runs: conftest.py skips each such test before any fixture is set up, so the step
is pytest's collection of tests/ and a skip per test (seconds on 2 cores).

CI reuses machines that have every tool installed, so the tools are hidden where they are, not
only left off PATH: in a mount namespace of this step alone (`unshare -rm`, as tests/tmpfs.py
uses), /dev/null is bound over each command and file a tool is made of, wherever PATH finds it.
`which` and the file checks then find nothing, and the machine itself is untouched.

    .venv/bin/python .ci/newcomer.py        (.ci/run runs it after ./dev setup)
    .venv/bin/python .ci/newcomer.py --whole [pytest args]
                                            the README's `./dev test`, whole, with the same tools
                                            hidden: the newcomer's figure in the README
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import needs  # noqa: E402 - tests/ first

HIDDEN_FLAG = "--tools-hidden"
WHOLE_FLAG = "--whole"
# What the README asks of every machine before `./dev setup` (it compiles llama-cpp-python): left in
# place for the whole run, where hiding them would stand for a machine that cannot set up at all.
PREREQUISITES = {"cc", "gcc", "g++", "c++", "cmake", "readelf", "glslc"}
# what needs.need() says: "needs wine, gendef: apt-get install wine64 mingw-w64-tools (.ci/run installs them all)"
SAYS_WHAT_TO_INSTALL = re.compile(r"^needs \S.*: \S.* \(\.ci/run installs them all\)$")


def installed_paths(keep: frozenset[str] = frozenset()) -> list[str]:
    """Every file that makes a tool present: each command wherever PATH has it, each file; not
    those named in `keep`."""
    found: set[str] = set()
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for tool in needs.TOOLS:
        for part in needs.TOOLS[tool]():
            for name in part.names:
                if name in keep:
                    continue
                candidates = [Path(name)] if name.startswith("/") else [Path(d) / name for d in dirs]
                found |= {os.path.realpath(p) for p in candidates if p.is_file()}
    return sorted(found)


def hide_and_rerun(command: list[str], keep: frozenset[str] = frozenset()) -> int:
    """`command` with every optional tool hidden (but `keep`) and CI unset."""
    paths = installed_paths(keep)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # sh -c SCRIPT sh N PATH... COMMAND...: /dev/null over the N paths, then the command
    script = ('n=$1; shift; i=0; while [ $i -lt "$n" ]; do mount --bind /dev/null "$1" || exit 97; '
              'shift; i=$((i+1)); done; exec "$@"')
    cmd = ["unshare", "-rm", "sh", "-c", script, "sh", str(len(paths)), *paths, *command]
    print(f"[newcomer] hiding {len(paths)} files of the optional tools in a mount namespace, CI unset", flush=True)
    rc = subprocess.run(cmd, env=env, cwd=REPO).returncode
    if rc == 97:
        print("[newcomer] could not hide the tools: `unshare -rm` and `mount --bind` must work here", flush=True)
    return rc


class Outcomes:
    """A pytest plugin: what became of each test (its first report that was not a pass, else its call)."""

    def __init__(self) -> None:
        self.tests: dict[str, tuple[str, str]] = {}

    def pytest_runtest_logreport(self, report) -> None:
        if report.nodeid in self.tests and self.tests[report.nodeid][0] != "passed":
            return
        if report.skipped:
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.tests[report.nodeid] = ("skipped", why.removeprefix("Skipped: "))
        elif report.failed:
            self.tests[report.nodeid] = ("error" if report.when != "call" else "failed", str(report.longrepr)[-600:])
        elif report.when == "call":
            self.tests[report.nodeid] = ("passed", "")


def run_hidden() -> int:
    import pytest

    still_here = [tool for tool in needs.TOOLS if not needs.missing(tool)]
    if still_here:
        print(f"[newcomer] still found after hiding: {still_here}; the check would prove nothing", flush=True)
        return 1
    began = time.monotonic()
    outcomes = Outcomes()
    rc = pytest.main(["-m", "needs", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "--no-header", "-rN",
                      str(REPO / "tests")],
                     plugins=[outcomes])
    took = time.monotonic() - began
    if rc == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("[newcomer] no test is marked `needs` (tests/needs.py): this check would prove nothing", flush=True)
        return 1
    if not outcomes.tests:
        print(f"[newcomer] FAILED: pytest ran no test (exit code {int(rc)}); without the optional tools the "
              "suite does not even collect (see above)", flush=True)
        return 1
    wrong = {nodeid: o for nodeid, o in outcomes.tests.items()
             if o[0] != "skipped" or not SAYS_WHAT_TO_INSTALL.match(o[1])}
    for nodeid, (outcome, why) in sorted(wrong.items()):
        print(f"[newcomer] {outcome.upper()} {nodeid}: {why}", flush=True)
    reasons = sorted({why for outcome, why in outcomes.tests.values() if outcome == "skipped"})
    print(f"[newcomer] {len(outcomes.tests)} tests need an optional tool; {len(outcomes.tests) - len(wrong)} "
          f"skipped saying what to install, {len(wrong)} did not; {took:.0f} s. The lines they print:", flush=True)
    for why in reasons:
        print(f"    {why}", flush=True)
    if wrong or rc != pytest.ExitCode.OK:
        print(f"[newcomer] FAILED (pytest exit code {int(rc)}): a newcomer without the optional tools would "
              "see the tests above error, fail or pass without what they check", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    if HIDDEN_FLAG in sys.argv[1:]:
        sys.exit(run_hidden())
    if sys.argv[1:2] == [WHOLE_FLAG]:
        began = time.monotonic()
        rc = hide_and_rerun([str(REPO / "dev"), "test", *sys.argv[2:]], frozenset(PREREQUISITES))
        print(f"[newcomer] ./dev test without the optional tools: exit code {rc}, {time.monotonic() - began:.0f} s",
              flush=True)
        sys.exit(rc)
    sys.exit(hide_and_rerun([sys.executable, str(Path(__file__).resolve()), HIDDEN_FLAG]))
