"""/health's gpu_layers: the repeating layers llama.cpp really placed on the GPU, worked out from
the placement asked for and the loaded model (model_runner.offloaded_layers), not parsed from
llama.cpp's log wording into a global. Checked against llama.cpp's own per-layer placement on a
real Vulkan device (Mesa's lavapipe), one model at a time and two loading at once."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from needs import LAVAPIPE_ICD, skip_or_fail

from llmpack.runtime.hardware import backends
from llmpack.runtime.engine.model_runner import offloaded_layers

REPO = Path(__file__).resolve().parents[1]
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0", "VK_ICD_FILENAMES": str(LAVAPIPE_ICD)}
# llama.cpp's debug line for each layer, e.g. "load_tensors: layer   2 assigned to device Vulkan0, is_swa = 0"
PLACED = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")


def test_offloaded_layers_follows_llama_cpps_rule():
    """load_tensors puts layers n_layer_all + 1 - N .. n_layer_all (the output layer) on the GPU."""
    assert [offloaded_layers(n, 2, 2, 1) for n in (0, 1, 2, 3, 4, -1)] == [0, 0, 1, 2, 2, 2]
    assert offloaded_layers(-1, 18, 18, 0) == 0       # no device: nothing, whatever was asked
    assert offloaded_layers(19, 18, 18, 1) == 18
    assert offloaded_layers(2, 18, 19, 1) == 0        # one MTP layer above the trunk takes the second slot


@pytest.mark.needs("lavapipe")
def test_reported_layers_match_llama_cpps_own_placement_on_a_vulkan_device(tiny_model: Path):
    if not backends.load_backends().dynamic:
        skip_or_fail("llama.cpp was built without GGML_BACKEND_DL (LLMPACK_LLAMA_FLAVOUR=avx2?); run ./dev setup")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "offload_child.py"), str(tiny_model)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **LAVAPIPE})
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    logs = re.split(r"\n@@load (-?\d+)\n", proc.stderr.split("\n@@together\n")[0])[1:]
    truth = {}
    for asked, log in zip(logs[::2], logs[1::2]):
        placed = {int(layer): device for layer, device in PLACED.findall(log)}
        assert placed, f"llama.cpp logged no placement for --gpu-layers {asked}"
        truth[int(asked)] = sum(1 for layer, device in placed.items() if layer < 2 and device != "CPU")
    assert truth == {1: 0, 2: 1, 3: 2, -1: 2, 0: 0}, truth   # the tiny model has 2 layers + output
    for load in found["sequential"] + found["together"]:
        assert load["n_layers"] == 2
        assert load["gpu_layers"] == truth[load["asked"]], (load, truth)
        assert (load["gpu_device"] == "Vulkan0") == (load["gpu_layers"] > 0), load
