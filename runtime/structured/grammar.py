"""Grammars for constrained output: JSON mode, JSON schema and raw GBNF, checked at the door.

Every constraint ends up as GBNF text, llama.cpp's grammar language, which each constrained
sequence runs in its own llama.cpp grammar sampler (see `grammar_sampler`). This module only
turns requests into GBNF and refuses bad ones with a message that names the problem:

* `{"type": "json_object"}` -> `JSON_OBJECT_GBNF`, any JSON object;
* a JSON schema -> llama-cpp-python's port of llama.cpp's json-schema-to-grammar converter,
  with two rules replaced so that what the grammar allows is exactly what `json.loads` accepts
  and a weak model cannot run away in whitespace (see `_RULE_OVERRIDES`);
* raw GBNF (llama-server's `grammar` field) -> checked for the mistakes a user makes (unknown
  rule, no `root`, unbalanced brackets) before llama.cpp itself parses it.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from llmpack.runtime.structured.grammar_limits import (
    MAX_GRAMMAR_CHARS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_DEPTH,
    TOKEN,
    GrammarError,
    check_counts,
    check_size,
    repeat,
)
from llmpack.runtime.structured.grammar_ranges import BOUNDS, integer_range

# Strings: no raw control characters (json.loads refuses them). Whitespace: at most one space
# between tokens, so output is compact JSON and a model cannot loop on newlines.
_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_SPACE = '" "?'
_RULE_OVERRIDES = {"char": _CHAR, "space": _SPACE}

JSON_OBJECT_GBNF = rf"""root ::= "{{" space ( string ":" space value ( "," space string ":" space value )* )? "}}"
value ::= object | array | string | number | ( "true" | "false" | "null" ) space
object ::= "{{" space ( string ":" space value ( "," space string ":" space value )* )? "}}" space
array ::= "[" space ( value ( "," space value )* )? "]" space
string ::= "\"" char* "\"" space
char ::= {_CHAR}
number ::= "-"? ( [0-9] | [1-9] [0-9]{{1,15}} ) ( "." [0-9]{{1,16}} )? ( [eE] [-+]? [0-9]{{1,3}} )? space
space ::= {_SPACE}
"""



# ---------------------------------------------------------------- JSON schema -> GBNF
def schema_to_gbnf(schema: Any) -> str:
    """GBNF for JSON that validates against `schema` (draft 2020-12 subset: types, properties,
    required, additionalProperties, items/prefixItems, min/maxItems, min/maxLength, enum,
    const, anyOf/oneOf/allOf, $ref into $defs/definitions, pattern, date/time/uuid formats)."""
    if isinstance(schema, bool):
        schema = {} if schema else None
    if not isinstance(schema, dict):
        raise GrammarError(f"the JSON schema must be an object, got {type(schema).__name__}")
    try:
        text = json.dumps(schema)
    except (RecursionError, ValueError):   # nested deeper than json can write, or a cycle
        raise GrammarError(f"the JSON schema is nested more than {MAX_SCHEMA_DEPTH} levels deep") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise GrammarError(f"the JSON schema is too large ({len(text)} characters; at most {MAX_SCHEMA_CHARS})")
    _check_schema(schema, "schema", 0)
    converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        resolved = converter.resolve_refs(json.loads(text), "input")
        converter.visit(resolved, "")
    except GrammarError:
        raise
    except RecursionError:
        raise GrammarError("the JSON schema refers to itself without end") from None
    except (AssertionError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:   # ranges too
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {detail[:300]}") from None
    rules = dict(converter._rules)
    for name, rule in _RULE_OVERRIDES.items():
        if name in rules:
            rules[name] = rule
    gbnf = "\n".join(f"{name} ::= {rule}" for name, rule in sorted(rules.items())) + "\n"
    check_size(gbnf, "the grammar made from the JSON schema")
    return gbnf


@lru_cache(maxsize=1)
def _converter_class():
    """llama-cpp-python's converter, taught integer bounds (it ignores them)."""
    # lazy: importing llama_cpp loads libllama; the rest of this room is plain text work
    from llama_cpp.llama_grammar import PRIMITIVE_RULES, RESERVED_NAMES, STRING_FORMAT_RULES, SchemaConverter

    class Converter(SchemaConverter):
        """Adds integer bounds, writes repetitions as {m,n}, and keeps a running total of the
        grammar's size so a schema that would grow past MAX_GRAMMAR_CHARS stops as it does."""

        size = 0

        def _add_rule(self, name, rule):
            known = len(self._rules)
            key = super()._add_rule(name, rule)
            if len(self._rules) > known:   # the converter re-adds the same rule many times
                self.size += len(key) + len(rule) + 5
            if self.size > MAX_GRAMMAR_CHARS:
                raise GrammarError(f"the grammar made from the JSON schema grows past {MAX_GRAMMAR_CHARS} "
                                   "characters: simplify the schema (fewer properties, enum values or repetitions)")
            return key

        def visit(self, schema, name):
            rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
            plain = isinstance(schema, dict) and not any(k in schema for k in _SPECIAL)
            kind = schema.get("type") if isinstance(schema, dict) else None
            if plain and kind in ("integer", "number"):
                rule = integer_range(schema)
                if rule is not None:
                    return self._add_rule(rule_name, f"({rule}) space")
            if plain and kind in (None, "array") and isinstance(schema.get("items"), dict) \
                    and not any(k in schema for k in ("properties", "additionalProperties", "allOf")):
                item = self.visit(schema["items"], f"{name}{'-' if name else ''}item")
                body = repeat(item, schema.get("minItems", 0), schema.get("maxItems"), '"," space')
                return self._add_rule(rule_name, f'"[" space {body} "]" space')
            if plain and kind == "string" and "pattern" not in schema \
                    and not re.match(r"^uuid[1-5]?$", schema.get("format") or "") \
                    and f"{schema.get('format')}-string" not in STRING_FORMAT_RULES \
                    and ("minLength" in schema or "maxLength" in schema):
                char = self._add_primitive("char", PRIMITIVE_RULES["char"])
                body = repeat(char, schema.get("minLength", 0), schema.get("maxLength"))
                return self._add_rule(rule_name, rf'"\"" {body} "\"" space')
            return super().visit(schema, name)

    return Converter


_SPECIAL = ("$ref", "oneOf", "anyOf", "enum", "const")   # the converter's branches that come first


_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
_UNENFORCED = (*BOUNDS, "multipleOf",
               "minProperties", "maxProperties", "uniqueItems", "not", "if", "patternProperties",
               "contains", "dependentRequired", "dependentSchemas")


def _check_schema(node: Any, path: str, depth: int) -> None:
    """Refuse what the converter would silently get wrong, so the output always validates, and
    what would make it work without end (see the MAX_ limits above)."""
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise GrammarError(f"{path} must be a JSON schema object, got {json.dumps(node)[:60]}")
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(f"the JSON schema is nested more than {MAX_SCHEMA_DEPTH} levels deep "
                           f"(at {path[:60]}...); flatten it")
    check_counts(node, path)
    types = node.get("type")
    for t in (types if isinstance(types, list) else [types] if types is not None else []):
        if t not in _TYPES:
            raise GrammarError(f"{path}.type {json.dumps(t)[:60]} is not a JSON schema type "
                               f"(use one of {', '.join(sorted(_TYPES))})")
    for key in _UNENFORCED:
        if key in node and not _harmless_bound(node, key):
            raise GrammarError(f"{path}.{key} is not supported in constrained output; "
                               "remove it (or validate it in your application)")
    ref = node.get("$ref")
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("#/")):
        raise GrammarError(f"{path}.$ref {json.dumps(ref)[:80]}: only local references (#/$defs/...) are supported")
    for key in ("properties", "$defs", "definitions"):
        sub = node.get(key)
        if sub is not None:
            if not isinstance(sub, dict):
                raise GrammarError(f"{path}.{key} must be an object")
            for name, child in sub.items():
                _check_schema(child, f"{path}.{key}.{name}", depth + 1)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _check_schema(node[key], f"{path}.{key}", depth + 1)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        sub = node.get(key)
        if sub is not None:
            if not isinstance(sub, list) or not sub:
                raise GrammarError(f"{path}.{key} must be a non-empty list of schemas")
            for i, child in enumerate(sub):
                _check_schema(child, f"{path}.{key}[{i}]", depth + 1)
    required = node.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        raise GrammarError(f"{path}.required must be a list of property names")
    pattern = node.get("pattern")
    if pattern is not None and (not isinstance(pattern, str) or not pattern.startswith("^")
                                or not pattern.endswith("$")):
        raise GrammarError(f"{path}.pattern must be a string anchored with ^ and $")
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise GrammarError(f"{path}.enum must be a non-empty list")


def _harmless_bound(node: dict, key: str) -> bool:
    """Bounds the grammar cannot enforce are refused, except those that every value the
    grammar allows already meets (e.g. `uniqueItems: false`, or bounds on an enum)."""
    value = node[key]
    if key == "uniqueItems" and value is False:
        return True
    if key in BOUNDS and node.get("type") in ("integer", "number"):
        return True   # enforced: integers in range (for "number" too: a range of integers is valid)
    return "enum" in node or "const" in node


# ---------------------------------------------------------------- GBNF checks


def check_gbnf(text: Any) -> str:
    """Check GBNF text for the common mistakes and return it; raise GrammarError naming the
    line and the problem. llama.cpp parses it again (and has the last word) when it is used."""
    if not isinstance(text, str):
        raise GrammarError("the grammar must be a string of GBNF rules")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"the grammar is too long ({len(text)} characters; at most {MAX_GRAMMAR_CHARS})")
    check_size(text, "the grammar")
    defined: dict[str, int] = {}
    used: list[tuple[str, int]] = []
    line, depth, pos, prev, rule_open = 1, 0, 0, None, False
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if m is None:
            raise GrammarError(f"grammar line {line}: unexpected {text[pos:pos + 20]!r}")
        kind, value = m.lastgroup, m.group()
        pos = m.end()
        if kind == "nl":
            line += 1
            continue
        if kind in ("ws", "comment"):
            continue
        if kind == "define":
            if prev is None or prev[0] != "name" or depth:
                raise GrammarError(f"grammar line {line}: '::=' must follow a rule name at the start of a rule")
            used.pop()
            defined.setdefault(prev[1], line)
            rule_open = True
        elif kind == "name":
            used.append((value, line))
        elif not rule_open:
            raise GrammarError(f"grammar line {line}: expected 'name ::= ...', got {value[:20]!r}")
        elif value == "(":
            depth += 1
        elif value == ")":
            depth -= 1
            if depth < 0:
                raise GrammarError(f"grammar line {line}: ')' without a matching '('")
        prev = (kind, value)
    if depth:
        raise GrammarError("the grammar ends inside a '(' group that is never closed")
    if "root" not in defined:
        raise GrammarError("the grammar has no 'root' rule; generation starts from 'root ::= ...'")
    for name, at in used:
        if name not in defined:
            raise GrammarError(f"grammar line {at}: rule '{name}' is used but never defined")
    return text


@lru_cache(maxsize=64)
def min_length(text: str) -> int:
    """How many characters the shortest text the grammar allows has (a bound on the tokens a
    sequence needs to finish it); grammar_sampler reserves that much of max_tokens for closing.
    Cached: a large schema's grammar takes a quarter of a second, and each of a request's n
    sequences asks on the engine thread (check_with_llama asks first, on the request's)."""
    toks = [(m.lastgroup, m.group()) for m in TOKEN.finditer(text) if m.lastgroup not in ("ws", "comment", "nl")]
    starts = [i for i in range(len(toks) - 1) if toks[i][0] == "name" and toks[i + 1][0] == "define"]
    bodies = {toks[i][1]: toks[i + 2:j] for i, j in zip(starts, [*starts[1:], len(toks)])}
    inf = float("inf")
    best = dict.fromkeys(bodies, inf)

    def alternatives(body: list, pos: int) -> tuple[float, int]:
        low, total = inf, 0.0
        while pos < len(body) and body[pos][1] != ")":
            kind, value = body[pos]
            pos += 1
            if value == "|":
                low, total = min(low, total), 0.0
                continue
            if value == "(":
                size, pos = alternatives(body, pos)
                pos += 1
            elif kind == "literal":
                size = len(re.findall(r"\\x..|\\u.{4}|\\U.{8}|\\.|.", value[1:-1]))
            elif kind == "name":
                size = best.get(value, inf)
            else:                                   # a character class, '.', or a <token>
                size = 1
            times = 1
            if pos < len(body) and (body[pos][1] in ("*", "?", "+") or body[pos][0] == "rep"):
                rep = body[pos][1]
                times = 0 if rep in ("*", "?") else 1 if rep == "+" else int(re.findall(r"\d+", rep)[0])
                pos += 1
            total += size * times if times else 0
        return min(low, total), pos

    order = _callees_first(bodies)   # one pass settles every rule outside a cycle
    for _ in range(len(bodies) + 1):
        changed = False
        for name in order:
            body = bodies[name]
            size = alternatives(body, 0)[0]
            if size < best[name]:
                best[name], changed = size, True
        if not changed:
            break
    root = best.get("root", inf)
    return int(root) if root != inf else 0


def _callees_first(bodies: dict[str, list]) -> list[str]:
    """Rule names, each after the rules it uses (but for cycles): depth-first, without recursion,
    since a chain of rules can be thousands long. In the file's order a chain written top-down
    took one pass per rule: minutes for a 200 KB grammar."""
    refs = {name: [v for k, v in body if k == "name" and v in bodies] for name, body in bodies.items()}
    order: list[str] = []
    seen: set[str] = set()
    for start in bodies:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(refs[start]))]
        while stack:
            name, children = stack[-1]
            for child in children:
                if child not in seen:
                    seen.add(child)
                    stack.append((child, iter(refs[child])))
                    break
            else:
                stack.pop()
                order.append(name)
    return order


def json_schema_of(response_format: dict) -> Any:
    """The schema inside an OpenAI `response_format` of type json_schema."""
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise GrammarError("'response_format.json_schema' must be an object with a 'schema'")
    if "schema" not in spec:
        raise GrammarError("'response_format.json_schema.schema' is missing")
    return spec["schema"]
