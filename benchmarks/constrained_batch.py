"""How much do grammar-constrained rows slow the free rows that share their batch?

Three runs on one engine, same model, same run; the measured free rows run exactly --tokens
steps (ignore_eos), the other rows outlive them (the batch keeps its size):

  A  F free rows alone
  B  F free rows + C more free rows        (the fair peer: same batch size)
  C  F free rows + C constrained rows      (JSON schema, sampled, like an agent's request)

It prints the free rows' throughput in each run and the ratios C/B (what constraining costs
the neighbours beyond the batch slots themselves) and C/A, plus how often the grammar refused
the freely sampled token (then the row is constrained in slices).

    ./dev bench constrained_batch [--free 4] [--constrained 4] [--tokens 48] [--model PATH]
"""
from __future__ import annotations

import argparse
import time

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.structured.grammar import schema_to_gbnf
from llmpack.runtime.llm import collect
from llmpack.runtime.engine.sampling_params import SamplingParams

# Long enough that no constrained row can finish (or start closing) while the free rows run.
SCHEMA = {"type": "object", "required": ["name", "notes"], "additionalProperties": False,
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "notes": {"type": "array", "items": {"type": "string"}, "minItems": 40}}}
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "My favourite food is",
           "The weather today", "In 1969, the first humans", "A haiku about autumn:", "Water boils at"]


def run(engine: LLMEngine, free: int, extra: int, constrained: bool, tokens: int) -> tuple[float, float]:
    """(free rows' tokens per second, fraction of checked tokens the grammar refused)."""
    gbnf = schema_to_gbnf(SCHEMA)
    streams = [engine.add_request(PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)),
                                  SamplingParams(temperature=0.8, seed=i, max_tokens=tokens, ignore_eos=True))
               for i in range(free)]
    # The other rows outlive the measured ones (and are aborted after), so the batch keeps its
    # size and they are never in their closing phase (see grammar_sampler) while measured.
    others = [engine.add_request("Describe a person as JSON: " + PROMPTS[i % len(PROMPTS)],
                                 SamplingParams(temperature=0.8, seed=100 + i, max_tokens=tokens * 4 + 200,
                                                ignore_eos=not constrained, grammar=gbnf if constrained else None))
              for i in range(extra)]
    samplers = []
    start = time.perf_counter()
    for s in streams:
        collect(s)
    elapsed = time.perf_counter() - start
    for s in others:
        samplers += [q.sampler for q in s.request.seqs]
        s.abort()
        collect(s)
    checked = sum(q.grammar.checked for q in samplers if q.grammar is not None)
    rejected = sum(q.grammar.rejected for q in samplers if q.grammar is not None)
    return free * tokens / elapsed, (rejected / checked if checked else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF (default: the demo model)")
    ap.add_argument("--free", type=int, default=4)
    ap.add_argument("--constrained", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=2, help="alternate the runs this many times; best of each kept")
    args = ap.parse_args()
    if args.model is None:
        from llmpack.demo_models import demo_model_path
        args.model = str(demo_model_path("gemma"))
    engine = LLMEngine(EngineConfig(args.model, n_ctx=4096, max_num_seqs=args.free + args.constrained))
    try:
        run(engine, 1, 1, True, 4)   # warm up (and build the grammar's vocabulary tables)
        best = {"A": 0.0, "B": 0.0, "C": 0.0}
        refused = 0.0
        for _ in range(args.repeat):
            best["A"] = max(best["A"], run(engine, args.free, 0, False, args.tokens)[0])
            best["B"] = max(best["B"], run(engine, args.free, args.constrained, False, args.tokens)[0])
            tps, refused = run(engine, args.free, args.constrained, True, args.tokens)
            best["C"] = max(best["C"], tps)
    finally:
        engine.shutdown()
    print(f"free rows' throughput, tokens/s ({args.free} free rows, {args.tokens} tokens each):")
    print(f"  A  alone                          {best['A']:8.1f}")
    print(f"  B  + {args.constrained} free rows                  {best['B']:8.1f}")
    print(f"  C  + {args.constrained} JSON-schema rows           {best['C']:8.1f}   "
          f"(grammar refused {refused:.0%} of freely sampled tokens)")
    print(f"ratio C/B (cost of constraining, beyond the batch slots): {best['C'] / best['B']:.2f}")
    print(f"ratio C/A:                                                {best['C'] / best['A']:.2f}")


if __name__ == "__main__":
    main()
