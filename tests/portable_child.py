"""Run by tests/test_portability.py as a child process, natively or under `qemu-x86_64 -cpu X`:
load MODEL through the runtime (backends, engine), generate greedily from PROMPT and print one
JSON line: the CPU variant ggml loaded, the generated token ids, and the ggml CPU libraries
mapped into this process (which must be exactly the chosen variant)."""
from __future__ import annotations

import json
import sys

from llmpack import LLM, SamplingParams
from llmpack.runtime.hardware.backends import load_backends


def main(model: str, prompt: str) -> None:
    with LLM(model, n_ctx=256, max_num_seqs=1, gpu_layers=0) as llm:
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].outputs[0]
        with open("/proc/self/maps") as maps:
            mapped = sorted({line.rsplit("/", 1)[-1].strip() for line in maps if "libggml-cpu" in line})
    print(json.dumps({"cpu_variant": load_backends().cpu_variant, "token_ids": out.token_ids, "mapped": mapped}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
