"""Model-family recipes: what llmpack knows about a family beyond what its GGUF says.

Most GGUFs embed a chat template, but older or hand-made conversions don't, and none carry the
authors' recommended sampling settings or the strings that end a turn. A recipe
(`recipes/*.toml`, like an Ollama Modelfile) fills those gaps. `resolve_chat()` decides once,
at startup, which template and defaults a model gets. A built executable stores the chosen
recipe as a dict (`Recipe.to_dict()`) so it never depends on files outside itself.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from llmpack.errors import LlmpackError
from llmpack.runtime.chat.chat_template import ChatTemplateError, compile_template, fold_system_into_first_user, render_chat
from llmpack.runtime.engine.sampling_params import SamplingParams

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
_TOP_KEYS = {"name", "description", "chat_template", "context", "system_role", "system", "stop", "eot_tokens", "match",
             "sampling", "tool_format"}
TOOL_FORMATS = ("hermes", "llama3", "mistral")   # how the family writes tool calls (runtime/structured/tool_calls.py)
_MATCH_KEYS = {"architectures", "names", "fingerprints", "priority"}


class RecipeError(LlmpackError):
    """A recipe is unknown, unreadable or invalid, or no recipe fits a model that needs one."""


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise RecipeError(f"{where} must be a list of non-empty strings")
    return tuple(value)


@dataclass(frozen=True)
class Recipe:
    """One model family. The TOML layout and `to_dict()` share one shape (see recipes/gemma.toml)."""

    name: str
    description: str
    chat_template: str
    architectures: tuple[str, ...] = ()
    name_patterns: tuple[str, ...] = ()    # regexes searched (case-insensitively) in general.name/basename
    fingerprints: tuple[str, ...] = ()     # all must occur in an embedded template to identify the family
    priority: int = 0                      # higher is tried first (llama2 before mistral: both use [INST])
    stop: tuple[str, ...] = ()
    eot_tokens: tuple[str, ...] = ()
    sampling: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    context: int = 4096
    system: str | None = None              # default system prompt
    supports_system: bool = True           # False: the template folds system text into the first user turn
    tool_format: str = "hermes"            # one of TOOL_FORMATS
    source: str = ""                       # file it came from, or "<manifest>"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Recipe:
        """Validate a recipe in its TOML/manifest shape; every problem is one RecipeError line."""
        label = (data.get("name") if isinstance(data, Mapping) else None) or source

        def check(ok: object, problem: str) -> None:
            if not ok:
                raise RecipeError(f"recipe {label}: {problem}")

        check(isinstance(data, Mapping), "expected a table of settings")
        match, sampling = data.get("match") or {}, data.get("sampling") or {}
        check(isinstance(match, Mapping) and isinstance(sampling, Mapping), "[match] and [sampling] must be tables")
        unknown = (set(data) - _TOP_KEYS) | (set(match) - _MATCH_KEYS)
        check(not unknown, f"unknown setting(s) {', '.join(sorted(unknown))}")
        name, template, context, system = (data.get(k) for k in ("name", "chat_template", "context", "system"))
        check(isinstance(name, str) and re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name),
              "'name' must be lower-case letters, digits, '.', '_' or '-'")
        check(isinstance(template, str) and template.strip(), "'chat_template' is missing")
        check(isinstance(data.get("system_role", True), bool), "'system_role' must be true or false")
        check(type(match.get("priority", 0)) is int, "match.priority must be a whole number")
        check(context is None or (type(context) is int and context >= 16), "'context' must be a whole number of tokens")
        check(system is None or isinstance(system, str), "'system' must be a string")
        check(data.get("tool_format", "hermes") in TOOL_FORMATS, f"'tool_format' must be one of {', '.join(TOOL_FORMATS)}")
        check(not set(sampling) - set(SAMPLING_KEYS), f"[sampling] allows only {', '.join(SAMPLING_KEYS)}")
        where = f"recipe {name}"
        patterns = _strings(match.get("names", []), f"{where}: match.names")
        try:
            [re.compile(p) for p in patterns]
            SamplingParams(**sampling)
            compile_template(template)
        except re.error as exc:
            raise RecipeError(f"{where}: match.names has a bad regex {exc.pattern!r}: {exc}") from None
        except (LlmpackError, TypeError) as exc:
            raise RecipeError(f"{where}: {exc}") from None
        return cls(
            name=name, description=str(data.get("description", "")), chat_template=template,
            architectures=tuple(a.lower() for a in _strings(match.get("architectures", []), f"{where}: match.architectures")),
            name_patterns=patterns, fingerprints=_strings(match.get("fingerprints", []), f"{where}: match.fingerprints"),
            priority=int(match.get("priority", 0)), stop=_strings(data.get("stop", []), f"{where}: stop"),
            eot_tokens=_strings(data.get("eot_tokens", []), f"{where}: eot_tokens"),
            sampling=MappingProxyType(dict(sampling)), context=context or 4096, system=system or None,
            supports_system=bool(data.get("system_role", True)), source=source,
            tool_format=data.get("tool_format", "hermes"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The TOML shape, JSON-serialisable, for a built executable's manifest."""
        data: dict[str, Any] = {
            "name": self.name, "description": self.description, "context": self.context,
            "system_role": self.supports_system, "stop": list(self.stop), "eot_tokens": list(self.eot_tokens),
            "tool_format": self.tool_format,
            "chat_template": self.chat_template,
            "match": {"architectures": list(self.architectures), "names": list(self.name_patterns),
                      "fingerprints": list(self.fingerprints), "priority": self.priority},
            "sampling": dict(self.sampling),
        }
        if self.system is not None:
            data["system"] = self.system
        return data

    def matches_template(self, template: str | None) -> bool:
        return bool(template and self.fingerprints and all(f in template for f in self.fingerprints))


def _parse_toml(text: str, source: str) -> Recipe:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"recipe {source} is not valid TOML: {exc}") from None
    return Recipe.from_dict(data, source=source)


@lru_cache(maxsize=1)
def _builtin_recipes() -> tuple[Recipe, ...]:
    # importlib.resources, not __file__ paths, so this also works inside a PyInstaller bundle
    # (as long as the bundle collects the llmpack.recipes data files).
    entries = sorted((e for e in resources.files("llmpack.recipes").iterdir() if e.name.endswith(".toml")),
                     key=lambda e: e.name)
    return tuple(_parse_toml(e.read_text(encoding="utf-8"), str(e)) for e in entries)


def load_recipes() -> dict[str, Recipe]:
    """The built-in recipes by name, in name order."""
    return {r.name: r for r in _builtin_recipes()}


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A built-in recipe by name, or a recipe .toml file by path."""
    recipes = load_recipes()
    text = str(name_or_path)
    if text in recipes:
        return recipes[text]
    path = Path(text).expanduser()
    if path.is_file():
        try:
            return _parse_toml(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise RecipeError(f"cannot read recipe {path}: {exc}") from None
    if text.endswith(".toml") or "/" in text or "\\" in text:
        raise RecipeError(f"recipe file {text} does not exist")
    raise RecipeError(f"unknown recipe {text!r}; built-in recipes: {', '.join(recipes)} (or pass a path to a .toml file)")


def match_recipe(*, arch: str | None, name: str | Sequence[str] | None, chat_template: str | None,
                 recipes: Mapping[str, Recipe] | None = None) -> Recipe | None:
    """The recipe that fits a model's metadata: an embedded template's fingerprints are the
    strongest evidence, then the model's name (general.name / general.basename), then its
    architecture. Within each step, higher `priority` wins, then name order."""
    pool = sorted((recipes if recipes is not None else load_recipes()).values(), key=lambda r: (-r.priority, r.name))
    for recipe in pool:
        if recipe.matches_template(chat_template):
            return recipe
    names = [n for n in ([name] if isinstance(name, str) else (name or ())) if n]
    for recipe in pool:
        if any(re.search(p, n, re.IGNORECASE) for p in recipe.name_patterns for n in names):
            return recipe
    for recipe in pool:
        if arch and arch.lower() in recipe.architectures:
            return recipe
    return None


@dataclass(frozen=True)
class ChatFormat:
    """How to turn messages into a prompt for this model, and the defaults that go with it."""

    template: str
    source: str                  # "recipe:gemma" or "gguf"
    reason: str                  # for the startup log: why this template was chosen
    bos_token: str = ""
    eos_token: str = ""
    stop: tuple[str, ...] = ()
    eot_tokens: tuple[str, ...] = ()
    sampling: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    context: int | None = None   # default context size (cap it by the model's trained context)
    system: str | None = None
    supports_system: bool = True
    recipe: Recipe | None = None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text. If the template rejects a conversation that has a system message
        (e.g. Mistral's "roles must alternate"), retry once with the system text folded into the
        first user turn, so a default system prompt never makes such a model unusable."""
        kwargs = dict(bos_token=self.bos_token, eos_token=self.eos_token, add_generation_prompt=add_generation_prompt)
        try:
            return render_chat(self.template, messages, **kwargs, **extra)
        except ChatTemplateError as exc:
            if not exc.raised_by_template or not any(m.get("role") in ("system", "developer") for m in messages):
                raise
            try:
                return render_chat(self.template, fold_system_into_first_user(messages), **kwargs, **extra)
            except ChatTemplateError:
                raise exc from None


def _from_recipe(recipe: Recipe, reason: str, bos_token: str, eos_token: str) -> ChatFormat:
    return ChatFormat(template=recipe.chat_template, source=f"recipe:{recipe.name}", reason=reason,
                      bos_token=bos_token, eos_token=eos_token, stop=recipe.stop, eot_tokens=recipe.eot_tokens,
                      sampling=recipe.sampling, context=recipe.context, system=recipe.system,
                      supports_system=recipe.supports_system, recipe=recipe)


def resolve_chat(explicit: str | None, *, arch: str | None, name: str | Sequence[str] | None,
                 embedded_template: str | None, bos_token: str, eos_token: str,
                 recipe_data: Mapping[str, Any] | None = None) -> ChatFormat:
    """Pick the chat format. Precedence: `explicit` (--recipe NAME or file) > `recipe_data` (the
    recipe stored in a built executable) > the template embedded in the GGUF (with a matching
    recipe's stop strings and defaults, if one matches) > a recipe matched from metadata > error."""
    bos, eos = bos_token or "", eos_token or ""
    if explicit:
        return _from_recipe(load_recipe(explicit), f"--recipe {explicit}", bos, eos)
    if recipe_data is not None:
        recipe = Recipe.from_dict(recipe_data, source="<manifest>")
        return _from_recipe(recipe, f"recipe {recipe.name} stored in this executable", bos, eos)
    names = ", ".join(load_recipes())
    recipe = match_recipe(arch=arch, name=name, chat_template=embedded_template)
    if embedded_template and embedded_template.strip():
        try:
            compile_template(embedded_template)  # refuse a hostile or broken template at startup
        except ChatTemplateError as exc:
            raise ChatTemplateError(f"{exc} (the template is embedded in the GGUF; pass --recipe NAME "
                                    f"to use a built-in one instead: {names})") from None
        # Only a fingerprint match says the template is that family's, so only then do its
        # stop strings apply; a name/architecture match still lends sampling and context defaults.
        same_family = recipe is not None and recipe.matches_template(embedded_template)
        return ChatFormat(
            template=embedded_template, source="gguf", bos_token=bos, eos_token=eos,
            reason="template embedded in the GGUF" + (f", defaults from recipe {recipe.name}" if recipe else ""),
            stop=recipe.stop if same_family else (), eot_tokens=recipe.eot_tokens if same_family else (),
            sampling=recipe.sampling if recipe else MappingProxyType({}), context=recipe.context if recipe else None,
            system=recipe.system if recipe else None,
            supports_system=recipe.supports_system if same_family else True, recipe=recipe)
    if recipe is not None:
        return _from_recipe(recipe, f"no template in the GGUF; recipe {recipe.name} matched its metadata", bos, eos)
    raise RecipeError(f"the GGUF has no chat template and llmpack does not recognise its family "
                      f"(architecture {arch!r}, name {name!r}); pass --recipe NAME with one of: {names} "
                      "(or a path to your own recipe .toml)")


def print_recipes(as_json: bool = False) -> int:
    """`llmpack recipes [--json]`: list the built-in recipes."""
    recipes = load_recipes()
    if as_json:
        print(json.dumps([{**r.to_dict(), "source": r.source} for r in recipes.values()], indent=2))
        return 0
    rows = [("NAME", "ARCHITECTURES", "CONTEXT", "DESCRIPTION")]
    rows += [(r.name, ", ".join(r.architectures) or "-", str(r.context), r.description) for r in recipes.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3])
    print("\nUse one with --recipe NAME, or pass a path to your own recipe .toml.")
    return 0


def chat_format_for_model(info, explicit: str | None = None, recipe_data: dict | None = None) -> ChatFormat:
    """resolve_chat() fed from a ModelInfo (llmpack.runtime.model.model_info.read_model_info); the
    file name counts as a model name too (many GGUFs name their family only there)."""
    special = info.special_tokens or {}
    bos = (special.get("bos") or {}).get("text") or ""
    eos = (special.get("eos") or {}).get("text") or ""
    names = [n for n in (info.name, Path(info.path).stem) if n]
    return resolve_chat(explicit, arch=info.architecture, name=names, embedded_template=info.chat_template,
                        bos_token=bos, eos_token=eos, recipe_data=recipe_data)
