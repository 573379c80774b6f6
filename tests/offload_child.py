"""Run by tests/test_offload.py as a child process with a Vulkan device (Mesa's lavapipe): load
MODEL with several --gpu-layers values, one after another and then two at once, and print one
JSON line of what each runner reports. llama.cpp's own per-layer placement goes to stderr (its
debug log, verbose), between "@@load N" markers, for the parent to check the reports against."""
from __future__ import annotations

import json
import os
import sys
import threading

from llmpack.runtime.engine.config import EngineConfig
from llmpack.runtime.engine.model_runner import ModelRunner
from llmpack.runtime.hardware.placement import backend_report, plan_offload

SEQUENTIAL = (1, 2, 3, -1, 0)
TOGETHER = (-1, 1)


def load(model: str, n_gpu_layers: int) -> dict:
    plan = plan_offload(n_gpu_layers, model, 256)
    runner = ModelRunner(EngineConfig(model, n_ctx=256, max_num_seqs=1, verbose=True), plan.n_gpu_layers,
                         plan.device.handle if plan.device else 0)
    report = backend_report(plan, runner)
    runner.close()
    return {"asked": n_gpu_layers, "gpu_layers": report["gpu_layers"], "n_layers": report["n_layers"],
            "gpu_device": report["gpu_device"]}


def main(model: str) -> None:
    sequential = []
    for n in SEQUENTIAL:
        os.write(2, f"\n@@load {n}\n".encode())
        sequential.append(load(model, n))
    os.write(2, b"\n@@together\n")
    together: dict[int, dict] = {}
    threads = [threading.Thread(target=lambda n=n: together.__setitem__(n, load(model, n))) for n in TOGETHER]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"sequential": sequential, "together": [together[n] for n in TOGETHER]}))


if __name__ == "__main__":
    main(sys.argv[1])
