"""--gpu-layers: N, all, auto, 0. `auto` fits layers into the GPU's free memory; with no GPU
every value keeps the model on the CPU with a reason."""
from __future__ import annotations

import pytest

from llmpack.errors import LlmpackError
from llmpack.runtime.hardware.backends import gpu_devices
from llmpack.runtime.engine.config import parse_gpu_layers
from llmpack.runtime.hardware.gpu_fit import COMPUTE_RESERVE, SAFETY_MARGIN, fit_gpu_layers
from llmpack.runtime.hardware.placement import plan_offload

MiB = 1024 * 1024
OVERHEAD = COMPUTE_RESERVE + SAFETY_MARGIN


def test_everything_fits_on_a_big_gpu_including_the_output_layer():
    assert fit_gpu_layers(80_000 * MiB, [100 * MiB] * 32, 500 * MiB, [128 * 1024] * 32, 4096) == 33


def test_layers_are_counted_from_the_last_and_stop_when_memory_runs_out():
    # each layer: 100 MiB weights + 4096 tokens x 64 KiB = 256 MiB KV -> 356 MiB
    free = OVERHEAD + 3 * 356 * MiB + 10 * MiB
    assert fit_gpu_layers(free, [100 * MiB] * 32, 500 * MiB, [64 * 1024] * 32, 4096) == 3


def test_a_smaller_context_lets_more_layers_fit():
    free = OVERHEAD + 3 * 356 * MiB + 10 * MiB
    assert fit_gpu_layers(free, [100 * MiB] * 32, 500 * MiB, [64 * 1024] * 32, 1024) > 3


def test_no_room_for_even_one_layer():
    assert fit_gpu_layers(OVERHEAD, [100 * MiB] * 4, 10 * MiB, [0] * 4, 4096) == 0


def test_gpu_layers_values_are_parsed():
    assert parse_gpu_layers("12") == 12
    assert parse_gpu_layers(0) == 0
    assert parse_gpu_layers("-1") == -1
    assert parse_gpu_layers(None) == "auto"
    assert parse_gpu_layers("all") == "all"
    with pytest.raises(LlmpackError):
        parse_gpu_layers("most")


def test_zero_keeps_the_model_on_the_cpu_and_says_so(tiny_model):
    plan = plan_offload(0, tiny_model, 512)
    assert (plan.n_gpu_layers, plan.device) == (0, None)
    assert "--gpu-layers 0" in plan.note


def test_device_cpu_keeps_the_model_on_the_cpu(tiny_model):
    plan = plan_offload("all", tiny_model, 512, device="cpu")
    assert (plan.n_gpu_layers, plan.device) == (0, None)
    assert "--device cpu" in plan.note


@pytest.mark.skipif(bool(gpu_devices()), reason="this machine has a GPU")
def test_every_value_is_zero_without_a_gpu_and_the_plan_says_why(tiny_model):
    for spec in ("auto", "all", "12"):
        plan = plan_offload(spec, tiny_model, 512)
        assert plan.n_gpu_layers == 0 and plan.device is None
        assert plan.note
