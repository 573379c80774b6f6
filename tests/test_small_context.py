"""A context smaller than the step budget: llama.cpp caps n_batch at the n_ctx asked for (and pads
n_ctx up to 256), so with --ctx 128 a 200-token prompt fits the context but not one llama_decode
of 512 tokens; planning the step with our own 512 hit GGML_ASSERT(n_tokens_all <= n_batch) and
aborted the whole process (found by tests/test_fuzz_routes.py). Run in a child process, so a
regression aborts only the child."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys
from llmpack.runtime.engine.engine import EngineConfig, LLMEngine
from llmpack.runtime.engine.sampling_params import SamplingParams
eng = LLMEngine(EngineConfig(model_path=sys.argv[1], n_ctx=128, max_num_seqs=4, gpu_layers=0))
prompt = eng.tokenize("é" * 100)
streams = [eng.add_request(prompt, SamplingParams(max_tokens=2, temperature=0)) for _ in range(2)]
outs = [list(s)[-1] for s in streams]
print(json.dumps({"n_ctx": eng.n_ctx, "prompt": len(prompt), "n_batch": eng.runner.n_batch,
                  "finished": [o.finished for o in outs]}))
eng.shutdown()
"""


def test_a_prompt_longer_than_the_ctx_asked_for_but_inside_the_padded_one_is_served(tiny_model: Path):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tiny_model)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["n_batch"] == 128 < found["prompt"] <= found["n_ctx"], found   # the case that aborted
    assert found["finished"] == [True, True]
