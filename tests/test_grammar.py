"""Constrained output in the engine: a grammar per sequence, next to free sequences in the same
batch, with n>1, cut off by max_tokens, on a tiny model whose random weights want anything but
JSON - so every valid output below is the grammar's doing."""
from __future__ import annotations

import json

import jsonschema
import pytest
from engine_invariants import check_consistency

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.structured.grammar import JSON_OBJECT_GBNF, GrammarError, check_gbnf, schema_to_gbnf
from llmpack.runtime.engine.grammar_sampler import check_with_llama
from llmpack.runtime.llm import collect
from llmpack.runtime.engine.sampling_params import SamplingParams

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["name", "age", "address"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_model):
    eng = LLMEngine(EngineConfig(str(tiny_model), n_ctx=2048, max_num_seqs=16))
    eng.on_step = check_consistency
    yield eng
    eng.shutdown()


def run(engine, prompt, **kw):
    return collect(engine.add_request(prompt, SamplingParams(**kw)))


# ---- turning requests into grammars ---------------------------------------------------------------
def test_schema_grammar_is_accepted_by_llama(engine):
    for schema in (PERSON, {"type": "array", "items": {"type": "number"}}, {"enum": [1, "x", None]},
                   {"$defs": {"p": {"type": "string"}}, "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/p"}}, "required": ["a"]}):
        check_with_llama(schema_to_gbnf(schema), engine.runner.vocab)
    check_with_llama(JSON_OBJECT_GBNF, engine.runner.vocab)


@pytest.mark.parametrize("schema, problem", [
    ({"type": "foo"}, "type"),
    ("not a schema", "object"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/x.json"}}}, "$ref"),
    ({"type": "integer", "multipleOf": 5}, "multipleOf"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no integer"),
    ({"type": "string", "minimum": 5}, "minimum"),
    ({"type": "string", "pattern": "[a-z]+"}, "pattern"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "missing"),
])
def test_bad_schemas_name_the_problem(schema, problem):
    with pytest.raises(GrammarError, match=problem.replace("$", r"\$")):
        schema_to_gbnf(schema)


@pytest.mark.parametrize("gbnf, problem", [
    ('start ::= "a"', "root"),
    ('root ::= item+\n', "item"),
    ('root ::= ( "a" | "b"', "never closed"),
    ('root ::= "a" )', "matching"),
    ('"a" ::= root', "name ::="),
    ('root ::= "unterminated', "unexpected"),
])
def test_bad_grammars_name_the_problem(gbnf, problem):
    with pytest.raises(GrammarError, match=problem):
        check_gbnf(gbnf)


def test_llama_refuses_what_the_checker_lets_through(engine):
    check_gbnf("root ::= root \"a\"")   # left recursion is well-formed, but llama.cpp cannot run it
    with pytest.raises(GrammarError, match="left-recursive"):
        check_with_llama("root ::= root \"a\"", engine.runner.vocab)


def test_the_engine_check_refuses_a_bad_grammar_before_anything_is_queued(engine):
    bad = "root ::= root \"a\""
    with pytest.raises(GrammarError, match="left-recursive"):
        engine.check_grammar(bad)
    with pytest.raises(GrammarError, match="left-recursive"):
        engine.add_request("x", SamplingParams(grammar=bad, max_tokens=4))
    assert engine.stats().num_waiting == 0


def test_a_request_grammar_is_parsed_by_llama_once(engine, monkeypatch):
    """The server checks a request's grammar with engine.check_grammar before add_request; that
    parse is the one the request's samples run on (n=2: the second is a copy, not a parse)."""
    import llama_cpp

    real = llama_cpp.llama_sampler_init_grammar
    parses: list[bytes] = []
    monkeypatch.setattr(llama_cpp, "llama_sampler_init_grammar", lambda v, g, r: parses.append(g) or real(v, g, r))
    gbnf = schema_to_gbnf(PERSON)
    engine.check_grammar(gbnf)
    assert len(parses) == 1
    out = collect(engine.add_request("Person:", SamplingParams(grammar=gbnf, n=2, max_tokens=160, temperature=1.0,
                                                             seed=5)))
    assert len(parses) == 1, "add_request or the engine thread parsed the grammar again"
    for o in out.outputs:
        jsonschema.validate(json.loads(o.text), PERSON)
    collect(engine.add_request("Person:", SamplingParams(grammar=gbnf, max_tokens=160, temperature=0)))
    assert len(parses) == 2                     # without a check first: add_request's own, only


# ---- generating under a grammar ---------------------------------------------------------------------
def test_json_schema_output_validates_even_when_cut_short(engine):
    """Random weights, sampled and greedy, budgets from tiny to roomy: every output parses and
    validates, because the grammar steers to a close before max_tokens."""
    gbnf = schema_to_gbnf(PERSON)
    streams = [engine.add_request("Person:", SamplingParams(grammar=gbnf, max_tokens=m, temperature=t, seed=s))
               for m in (64, 160) for t in (0.0, 1.0) for s in (1, 2, 3)]
    for out in map(collect, streams):
        text = out.outputs[0].text
        jsonschema.validate(json.loads(text), PERSON)
        assert out.outputs[0].finish_reason == "stop", text


def test_grammar_rows_share_a_batch_with_free_rows(engine):
    """Free rows in a batch with constrained rows are sampled exactly as without them; the
    constraint stays with its own sequence."""
    from test_engine import assert_same_or_near_tie

    free = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, logprobs=5)
    prompts = ["The capital of France is", "Once upon a time", "def f(x):"]
    alone = [run(engine, p, **{f: getattr(free, f) for f in ("temperature", "max_tokens", "ignore_eos", "logprobs")})
             .outputs[0] for p in prompts]
    streams = [engine.add_request(p, free) for p in prompts]
    constrained = [engine.add_request(p, SamplingParams(grammar=JSON_OBJECT_GBNF, max_tokens=32, temperature=0.8,
                                                        seed=i)) for i, p in enumerate(prompts)]
    together = [collect(s).outputs[0] for s in streams]
    assert_same_or_near_tie(alone, together)
    assert all(len(t.token_ids) == 16 for t in together)
    for out in map(collect, constrained):
        assert isinstance(json.loads(out.outputs[0].text), dict)


def test_n_samples_each_follow_the_grammar(engine):
    gbnf = schema_to_gbnf({"type": "object", "properties": {"answer": {"enum": ["yes", "no", "maybe"]}},
                           "required": ["answer"]})
    out = run(engine, "Is it?", grammar=gbnf, n=4, temperature=1.0, seed=7, max_tokens=20)
    assert len(out.outputs) == 4
    for c in out.outputs:
        assert json.loads(c.text)["answer"] in ("yes", "no", "maybe")


def test_raw_gbnf(engine):
    out = run(engine, "Count:", grammar='root ::= ("one" | "two") " " [0-9]{3}', max_tokens=20, temperature=0.0)
    text = out.outputs[0].text
    assert text.split(" ")[0] in ("one", "two") and text.split(" ")[1].isdigit() and len(text.split(" ")[1]) == 3


@pytest.mark.parametrize("bounds", [{"minimum": 0}, {"minimum": 18, "maximum": 120}, {"minimum": -50, "maximum": 7},
                                    {"exclusiveMinimum": 0, "exclusiveMaximum": 1000}, {"maximum": -3},
                                    {"minimum": 995, "maximum": 1005}])
def test_integer_bounds_hold(engine, bounds):
    for kind in ("integer", "number"):   # a number's bounds are met by integers in range
        schema = {"type": "object", "properties": {"v": {"type": kind, **bounds}}, "required": ["v"]}
        out = run(engine, "Value:", grammar=schema_to_gbnf(schema), n=6, temperature=1.5, seed=4, max_tokens=40)
        for c in out.outputs:
            jsonschema.validate(json.loads(c.text), schema)


def test_a_bad_grammar_is_refused_at_the_door(engine):
    with pytest.raises(GrammarError):
        engine.add_request("x", SamplingParams(grammar="root ::= root \"a\""))
    assert run(engine, "x", max_tokens=2).outputs[0].finish_reason == "length"   # the engine lives on
