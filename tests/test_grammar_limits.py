"""Spec for the limits on grammars made from requests (runtime/structured/grammar_limits.py,
grammar_ranges.py): whatever schema a client sends, turning it into a grammar takes bounded time
and memory and gives a grammar llama.cpp accepts, or the request is refused with a GrammarError
(a 400 naming the parameter, see test_structured_api.py). A one-line schema once made 19 MB of
grammar (integer bounds), and `minItems: 10**9` a list of a billion strings."""
from __future__ import annotations

import json
import random
import re
import time
import tracemalloc

import pytest

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.grammar_sampler import check_with_llama
from llmpack.runtime.structured import tool_calls as T
from llmpack.runtime.structured.grammar import GrammarError, check_gbnf, min_length, schema_to_gbnf
from llmpack.runtime.structured.grammar_limits import MAX_GRAMMAR_CHARS
from llmpack.runtime.structured.grammar_ranges import integer_range

TIME_LIMIT_S = 5.0           # per schema, on a loaded 2-core machine (each takes milliseconds)
MEMORY_LIMIT = 64 << 20      # peak Python allocation while converting one schema


@pytest.fixture(scope="module")
def vocab(tiny_model):
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=256, max_num_seqs=1))
    yield eng.runner.vocab
    eng.shutdown()


# ---- integer ranges ---------------------------------------------------------------------------------
_PIECE = re.compile(r'\s+|"([^"]*)"|(\[[^\]]*\])|(\{\d+(?:,\d*)?\})|([()|])')


def as_regex(gbnf: str) -> re.Pattern:
    """The small GBNF subset integer_range writes, as a Python regex."""
    out, pos = [], 0
    while pos < len(gbnf):
        m = _PIECE.match(gbnf, pos)
        assert m, gbnf[pos:pos + 30]
        pos = m.end()
        out.append(re.escape(m.group(1)) if m.group(1) is not None else m.group(2) or m.group(3) or m.group(4) or "")
    return re.compile("".join(out))


def test_integer_ranges_grow_linearly_with_the_digits():
    sizes = [len(integer_range({"minimum": 0, "maximum": 10 ** k - 1})) for k in range(1, 17)]
    sizes += [len(integer_range({"minimum": 10 ** (k - 1) + 3, "maximum": 10 ** k - 7})) for k in range(2, 17)]
    assert max(sizes) < 1500, sizes      # doubling per digit made 2.4 MB at 16 digits


@pytest.mark.parametrize("seed", range(4))
def test_integer_ranges_hold_exactly_the_integers_between_the_bounds(seed):
    rng = random.Random(seed)
    for _ in range(300):
        digits = rng.choice([1, 2, 3, 5, 9, 15])
        a, b = sorted(rng.randint(-10 ** digits, 10 ** digits) for _ in range(2))
        schema = {k: v for k, v in (("minimum", a), ("maximum", b)) if rng.random() < 0.8} or {"minimum": a}
        pattern = as_regex(integer_range(schema))
        probes = [*range(a - 2, a + 3), *range(b - 2, b + 3), 0, 10 ** 16 - 1, -(10 ** 16 - 1),
                  *(rng.randint(-10 ** (digits + 1), 10 ** (digits + 1)) for _ in range(20))]
        for x in probes:
            inside = schema.get("minimum", -10 ** 16) <= x <= schema.get("maximum", 10 ** 16) and abs(x) < 10 ** 16
            assert bool(pattern.fullmatch(str(x))) == inside, (schema, x)
        assert not any(pattern.fullmatch(s) for s in ("-0", "00", "01", "-", ""))


@pytest.mark.parametrize("bound", [1e30, 10 ** 30, 10 ** 400, 1.7e308])
def test_bounds_beyond_16_digits_are_clamped_to_no_bound(bound):
    assert integer_range({"minimum": 0, "maximum": bound}) == integer_range({"minimum": 0})
    assert integer_range({"minimum": -bound, "maximum": 5}) == integer_range({"maximum": 5})
    with pytest.raises(GrammarError, match="no integer of at most 16 digits"):
        schema_to_gbnf({"type": "integer", "minimum": bound})


# ---- the seeded schema fuzz -------------------------------------------------------------------------
def _nested(rng: random.Random, depth: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(depth):
        node = rng.choice([{"type": "object", "properties": {"a": node}, "required": ["a"]},
                           {"type": "array", "items": node},
                           {"anyOf": [node, {"type": "null"}]}])
    return node


def _hostile(rng: random.Random, kind: str) -> dict:
    big = rng.choice([10 ** 9, 10 ** 6, 2000, 1001, 1000, 999, 10 ** 400])
    if kind == "nesting":
        return _nested(rng, rng.choice([20, 33, 64, 300]))
    if kind == "bounds":
        return {"type": rng.choice(["integer", "number"]),
                rng.choice(["minimum", "exclusiveMinimum"]): rng.choice([-1e30, -10 ** 400, 0, -(10 ** 19)]),
                rng.choice(["maximum", "exclusiveMaximum"]): rng.choice([1e30, 10 ** 400, 10 ** 19 - 1, 1.7e308])}
    if kind == "enum":
        return {"enum": ["".join(rng.choices("abc\"\\é", k=rng.randint(1, 40))) for _ in range(rng.choice([10, 5000, 40000]))]}
    if kind == "const":
        return {"const": rng.choice(["x" * 150_000, {"k": ["v" * 50] * 2000}, list(range(30000))])}
    if kind == "pattern":
        unit = rng.choice(["a", "[a-z]", "(ab|cd)", "\\d", "."])
        return {"type": "string", "pattern": "^" + "".join(f"{unit}{{{rng.choice([1, 50, 256, big])}}}"
                                                          for _ in range(rng.choice([1, 20, 200]))) + "$"}
    if kind == "anyOf":
        return {"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "integer", "minimum": i}}}
                          for i in range(rng.choice([100, 3000]))]}
    if kind == "ref":
        n = rng.choice([1, 50, 1500])
        defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{(i + 1) % n}"}, "maxItems": 3} for i in range(n)}
        return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}}
    if kind == "counts":
        key = rng.choice(["minItems", "maxItems", "minLength", "maxLength"])
        return {"type": "array" if "Items" in key else "string", key: big,
                **({"items": _nested(rng, 3)} if "Items" in key else {})}
    if kind == "optional":
        return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(rng.choice([200, 256, 3000]))}}
    raise AssertionError(kind)


KINDS = ("nesting", "bounds", "enum", "const", "pattern", "anyOf", "ref", "counts", "optional")


def compiles_or_is_refused(convert, vocab) -> str:
    """Run `convert` under the time and memory limits; the grammar (if any) must suit llama.cpp."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        gbnf = convert()
    except GrammarError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 500
        return "refused"
    finally:
        took = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert took < TIME_LIMIT_S and peak < MEMORY_LIMIT, (took, peak)
    assert len(gbnf) <= MAX_GRAMMAR_CHARS + 1000    # + the forced tool call's root rule
    start = time.monotonic()
    try:
        check_with_llama(gbnf, vocab)     # llama.cpp parses it, and min_length runs
    except GrammarError:
        return "refused by llama.cpp"
    assert time.monotonic() - start < TIME_LIMIT_S
    return "compiled"


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_schemas_compile_within_limits_or_are_refused(kind, vocab):
    rng = random.Random(f"schema-fuzz-{kind}")
    outcomes = set()
    for _ in range(6):
        schema = _hostile(rng, kind)
        outcomes.add(compiles_or_is_refused(lambda: schema_to_gbnf(schema), vocab))
        tool = T.Tool("f", "", schema if schema.get("type") == "object" else {"type": "object", "properties": {"a": schema}})
        outcomes.add(compiles_or_is_refused(lambda: T.forced_grammar([tool], "hermes", True), vocab))
    assert outcomes, kind


def test_what_the_limits_refuse_is_named():
    cases = [({"type": "array", "items": {}, "minItems": 10 ** 9}, "schema.minItems must be a whole number from 0 to 1000"),
             ({"type": "string", "pattern": "^a{1000000}$"}, "repeats something more than 256 times"),
             (_nested(random.Random(1), 40), "nested more than 32 levels deep"),
             ({"type": "object", "properties": {f"p{i}": {} for i in range(300)}}, "more than 256 optional properties"),
             ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength is more than schema.maxLength")]
    for schema, words in cases:
        with pytest.raises(GrammarError, match=re.escape(words)):
            schema_to_gbnf(schema)


def test_long_repetitions_use_gbnf_counts_not_nested_groups(vocab):
    gbnf = schema_to_gbnf({"type": "array", "items": {"type": "string", "maxLength": 1000}, "maxItems": 1000})
    assert "char{0,1000}" in gbnf and '("," space item){0,999}' in gbnf
    check_with_llama(gbnf, vocab)
    assert min_length(gbnf) == 2


def test_raw_grammars_cannot_nest_without_end():
    with pytest.raises(GrammarError, match="nests \\( \\) groups 70 deep; at most 64"):
        check_gbnf("root ::= " + "(" * 70 + '"a"' + ")" * 70)


def test_the_shortest_text_of_a_long_rule_chain_is_found_quickly():
    n = 9000     # written top-down, which once took one pass over the grammar per rule
    gbnf = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(n)) + f'r{n} ::= "b"\n'
    start = time.monotonic()
    assert min_length(check_gbnf(gbnf)) == n + 1
    assert time.monotonic() - start < TIME_LIMIT_S


def test_ordinary_schemas_still_convert():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 1e30},
                                               "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
              "required": ["n"]}
    assert "root ::=" in schema_to_gbnf(json.loads(json.dumps(schema)))
