"""The house rules of the code, read from the source with `ast` (imports inside functions too):

- dependencies point one way: server -> core -> llm/chat -> engine -> model/hardware/structured,
  core -> documents, and the builder -> runtime, never back (`ALLOWED` below is the whole map); inside
  the server (HTTP only), lifecycle -> the route table (server/app.py) -> the protocol rooms and page/
  -> http/; no room of runtime/ outside server/ imports server/, scale/ included: a way to run the
  server on Ray, it is handed the server by the CLI (scale/served.py), which sits above both;
- a protocol room imports core/ and http/, never another protocol room, and page/ never imports one;
- the server reaches the engine only through its client protocol (engine/client.py) and the
  engine's data types; only lifecycle/prepare.py constructs an engine;
- no import cycles between modules;
- an import inside a function is there on purpose (it delays a heavy or platform-only import)
  and says so with a `# lazy: ...` comment; one that only hid a cycle is a defect.

Imports in `if TYPE_CHECKING:` blocks count like any other: they never run, but a module that
names another's types depends on it, and a circle drawn with them is still a circle.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"llmpack": "llmpack", "builder": "llmpack.builder", "runtime": "llmpack.runtime",
           "webui": "llmpack.webui", "recipes": "llmpack.recipes"}

# Each unit -> the units it may import (besides itself). A module's unit is the longest prefix here.
BASE = {"llmpack", "llmpack.errors", "llmpack.paths", "llmpack.progress", "llmpack.signals", "llmpack.lru",
        "llmpack.stores", "llmpack.heap"}
# stores: the one way to open an SQLite store (chats, responses, the document index); heap: glibc's
# settings and trims, for every process that serves (the single server, Ray's replicas)
MODEL, HARDWARE, STRUCTURED = "llmpack.runtime.model", "llmpack.runtime.hardware", "llmpack.runtime.structured"
SANDBOX = "llmpack.runtime.sandbox"     # child processes for a stranger's bytes: documents', pictures' and sound's jobs
MEDIA = "llmpack.runtime.media"        # strangers' pictures and sound, checked, and decoded in the sandbox's children
ENGINE, CHAT, LLM, SERVER = ("llmpack.runtime.engine", "llmpack.runtime.chat", "llmpack.runtime.llm",
                             "llmpack.runtime.server")
CORE, DOCS = "llmpack.runtime.core", "llmpack.runtime.documents"   # no Flask: the generation core, the files
CHATS, TOOLS = "llmpack.runtime.chats", "llmpack.runtime.tools"   # no Flask: saved chats, MCP servers
S_HTTP, S_PAGE, S_LIFE = (f"{SERVER}.{room}" for room in ("http", "page", "lifecycle"))
# The rooms that each speak one wire format over the core (issue 26 adds responses, anthropic, ollama).
PROTOCOLS = {f"{SERVER}.{room}" for room in ("openai", "responses", "anthropic", "ollama")}
SERVER_ROOMS = {S_HTTP, S_PAGE, S_LIFE, *PROTOCOLS}
BELOW_SERVER = {MODEL, HARDWARE, STRUCTURED, SANDBOX, MEDIA, ENGINE, CHAT, LLM, CORE, DOCS, CHATS, TOOLS}
RUNTIME = {*BELOW_SERVER, SERVER, *SERVER_ROOMS}
SCALE = "llmpack.runtime.scale"
ALLOWED: dict[str, set[str]] = {
    "llmpack": {LLM, ENGINE},                     # the package exports LLM / SamplingParams, lazily
    "llmpack.errors": set(),
    "llmpack.paths": {"llmpack.errors"},
    "llmpack.progress": set(),
    "llmpack.signals": set(),
    "llmpack.lru": set(),
    "llmpack.stores": {"llmpack.paths"},
    "llmpack.heap": set(),
    "llmpack.demo_models": BASE,
    MODEL: BASE,
    HARDWARE: BASE | {MODEL},
    STRUCTURED: BASE,
    SANDBOX: BASE,
    MEDIA: BASE | {HARDWARE, SANDBOX},
    ENGINE: BASE | {MODEL, HARDWARE, STRUCTURED, SANDBOX, MEDIA},
    CHAT: BASE | {MODEL, ENGINE},
    DOCS: BASE | {SANDBOX},
    CHATS: BASE | {CORE},                          # the core's scrub: lone surrogates, as requests get
    TOOLS: BASE,
    CORE: BASE | {MODEL, ENGINE, CHAT, STRUCTURED, MEDIA, DOCS},
    LLM: BASE | {MODEL, ENGINE, CHAT, CORE},       # LLM.chat takes the same generation core as the server
    S_HTTP: BASE | {ENGINE, CORE},
    **{room: BASE | {ENGINE, STRUCTURED, CORE, S_HTTP} for room in PROTOCOLS},
    S_PAGE: BASE | {CORE, S_HTTP, DOCS, CHATS, TOOLS},
    SERVER: BASE | {ENGINE, CORE, CHATS, S_HTTP, S_PAGE, *PROTOCOLS},     # the route table and ServeConfig
    S_LIFE: BASE | {MODEL, HARDWARE, ENGINE, CHAT, SERVER, CORE, S_HTTP, S_PAGE, CHATS, TOOLS},
    # Ray Serve replicas of the server's app (optional extra): the CLI hands it the server (scale/served.py)
    SCALE: BASE | {MODEL},
    "llmpack.webui": BASE,
    "llmpack.recipes": set(),
    "llmpack.builder": BASE | RUNTIME | {"llmpack.webui", "llmpack.demo_models"},   # the flags: lifecycle/flags.py
    "llmpack.bench": BASE | RUNTIME | {SCALE, "llmpack.builder", "llmpack.demo_models"},
    # the server as scale/ runs it on Ray: where the two meet, beside the CLI that hands it over
    "llmpack.ray_server": BASE | RUNTIME | {SCALE},
    "llmpack.cli": BASE | RUNTIME | {SCALE, "llmpack.ray_server", "llmpack.builder", "llmpack.bench",
                    "llmpack.demo_models"},
    "llmpack.__main__": {"llmpack.cli"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def unit_of(module: str) -> str:
    return max((u for u in ALLOWED if module == u or module.startswith(u + ".")), key=len)


class Import:
    def __init__(self, module: str, target: str, line: int, in_function: bool) -> None:
        self.module, self.target, self.line, self.in_function = module, target, line, in_function

    def __repr__(self) -> str:
        return f"{MODULES[self.module].relative_to(ROOT)}:{self.line} imports {self.target}"


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    if node.level:
        package = package[:len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports_in(module: str, source: str) -> list[Import]:
    """Every import statement of `module`'s source, wherever it stands (functions, `if TYPE_CHECKING:`)."""
    tree = ast.parse(source)
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    return [Import(module, t, node.lineno, id(node) in inside) for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) for t in _targets(module, node)]


def imports() -> list[Import]:
    return [i for module, path in MODULES.items() for i in imports_in(module, path.read_text(encoding="utf-8"))]


IMPORTS = imports()
INTERNAL = [i for i in IMPORTS if i.target in MODULES and i.target != i.module]


def test_the_map_names_every_module():
    """A new top-level module or room must be placed in ALLOWED, not fall into a neighbour's unit."""
    for module in MODULES:
        assert any(module == u or module.startswith(u + ".") for u in ALLOWED), f"{module}: add it to ALLOWED"


def test_the_map_is_one_way():
    """No two units may import each other, even through others (the package's own __init__ aside: it
    exports LLM lazily, and every unit may read its __version__). The builder once allowed the CLI back."""
    units = {u: allowed - {u, "llmpack"} for u, allowed in ALLOWED.items() if u != "llmpack"}
    assert find_cycle(units) is None, "ALLOWED allows a circle: " + " -> ".join(find_cycle(units) or [])


def test_nothing_below_the_server_imports_it():
    """server/ is HTTP only: the core, the documents, the offline LLM and the engine never reach up into it,
    and scale/ runs it on Ray without importing it (the CLI hands it the server's factories)."""
    up = [i for i in INTERNAL if unit_of(i.module) in BELOW_SERVER | {SCALE}
          and unit_of(i.target) in {SERVER, *SERVER_ROOMS}]
    assert not up, "imports of server/ from below it:\n" + "\n".join(map(repr, up))


def test_dependencies_point_one_way():
    back_edges = [i for i in INTERNAL
                  if unit_of(i.target) != unit_of(i.module) and unit_of(i.target) not in ALLOWED[unit_of(i.module)]]
    assert not back_edges, "imports against the layering (see ALLOWED):\n" + "\n".join(map(repr, back_edges))


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle in a directed graph, as the list of its nodes, or None (iterative DFS)."""
    state: dict[str, int] = {}   # 1 on the current path, 2 finished
    for start in sorted(edges):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(edges.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges.get(nxt, ()))))
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_type_checking_imports_are_edges():
    """A circle drawn only with type imports is found too (engine/ once had a 12-file one)."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from llmpack.runtime.engine.engine import LLMEngine\n")
    found = imports_in(f"{ENGINE}.sequence", source)
    assert [(i.target, i.in_function) for i in found] == [("typing", False), (f"{ENGINE}.engine", False)]


def test_no_import_cycles():
    edges: dict[str, set[str]] = {}
    for i in INTERNAL:
        edges.setdefault(i.module, set()).add(i.target)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _says_lazy(lines: list[str], line: int) -> bool:
    """A `# lazy` comment on the import's line, or on the comment, import or blank lines right above it."""
    i = line - 1
    if "# lazy" in lines[i]:
        return True
    while i > 0 and (not lines[i - 1].strip() or lines[i - 1].lstrip().startswith(("#", "import ", "from "))):
        i -= 1
        if "# lazy" in lines[i]:
            return True
    return False


def test_imports_inside_functions_say_why():
    texts = {m: p.read_text(encoding="utf-8").splitlines() for m, p in MODULES.items()}
    silent = sorted({repr(i) for i in IMPORTS if i.in_function and not _says_lazy(texts[i.module], i.line)})
    assert not silent, ("imports inside functions without a `# lazy: <why>` comment (move them to the top; "
                        "break a cycle by moving the shared piece down):\n" + "\n".join(silent))


# What the server may import from the engine room: its client protocol, the data it carries, and the
# media data types (engine/media.py: MultimodalPrompt, MediaSpan; numpy only). Pictures and sound are
# checked and decoded in runtime/media, which the core calls.
ENGINE_CONTRACT = {f"{ENGINE}.{m}" for m in ("client", "outputs", "request", "sampling_params", "config", "media")}


def test_the_server_reaches_the_engine_only_through_its_client():
    """vLLM's seam: the server depends on `EngineClient`; only lifecycle/prepare.py makes an engine."""
    reaches = [i for i in INTERNAL if unit_of(i.module) in {SERVER, *SERVER_ROOMS} and unit_of(i.target) == ENGINE
               and i.target not in ENGINE_CONTRACT
               and not (i.module == f"{S_LIFE}.prepare" and i.target == f"{ENGINE}.engine")]
    assert not reaches, "the server past the engine's client protocol:\n" + "\n".join(map(repr, reaches))


def test_protocol_rooms_import_only_core_and_http():
    """Each wire format is a thin room over the core: no protocol imports another, page/ none."""
    crossing = [i for i in INTERNAL if unit_of(i.target) in PROTOCOLS and unit_of(i.module) != unit_of(i.target)
                and i.module != SERVER + ".app"]
    assert not crossing, "imports of a protocol room from outside the route table:\n" + "\n".join(map(repr, crossing))


def test_the_engine_client_loads_no_llama_cpp():
    """The seam is data types and a protocol (as vLLM's engine/protocol.py): a front-end that imports it
    to speak to an engine, here or in another process, loads neither llama.cpp nor our bindings to it."""
    heavy = ["llama_cpp", "llmpack.runtime.hardware.bindings", f"{ENGINE}.model_runner", f"{ENGINE}.engine"]
    code = ("import json, sys; import llmpack.runtime.engine.client; "
            f"print(json.dumps([m for m in {heavy!r} if any(k == m or k.startswith(m + '.') for k in sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [], "importing engine/client.py loaded " + proc.stdout


@pytest.mark.parametrize("room", ["model", "hardware", "structured", "sandbox", "media", "engine", "chat", "core",
                                  "documents", "server",
                                  *(r.removeprefix("llmpack.runtime.").replace(".", "/") for r in sorted(SERVER_ROOMS))])
def test_each_room_says_what_it_owns(room):
    doc = ast.get_docstring(ast.parse((ROOT / "runtime" / room / "__init__.py").read_text()))
    assert doc and "import" in doc, f"runtime/{room}/__init__.py: say what the room owns and may import"
