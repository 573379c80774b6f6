"""The chat page's ES modules (webui/*.js) import each other without cycles: a cycle makes the
order in which modules run depend on which one the page happens to load first."""
from __future__ import annotations

import re
from pathlib import Path

WEBUI = Path(__file__).resolve().parents[1] / "webui"
IMPORT = re.compile(r"""^\s*import\s[^;]*?from\s+["']\./([\w.-]+\.js)["']""", re.M | re.S)


def imports() -> dict[str, list[str]]:
    return {f.name: IMPORT.findall(f.read_text("utf-8")) for f in sorted(WEBUI.glob("*.js"))}


def test_the_page_modules_import_each_other_without_cycles():
    graph = imports()
    assert graph["app.js"] and graph["stream.js"], graph   # the pattern reads the imports
    cycles = []

    def walk(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append(" -> ".join(path[path.index(name):] + [name]))
            return
        for dep in graph.get(name, []):
            walk(dep, path + [name])

    for name in graph:
        walk(name, [])
    assert cycles == [], cycles
