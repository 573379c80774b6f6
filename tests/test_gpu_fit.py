"""--gpu-layers: N, all, auto. `auto` fits layers into the GPU's free memory."""
from __future__ import annotations

import pytest

from llmpack.errors import LlmpackError
from llmpack.runtime.gpu_fit import COMPUTE_RESERVE, SAFETY_MARGIN, fit_gpu_layers, gpu_devices, resolve_gpu_layers

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


def test_explicit_values_pass_through(tiny_model):
    assert resolve_gpu_layers("12", tiny_model, 512) == 12
    assert resolve_gpu_layers(0, tiny_model, 512) == 0
    with pytest.raises(LlmpackError):
        resolve_gpu_layers("most", tiny_model, 512)


@pytest.mark.skipif(bool(gpu_devices()), reason="this machine has a GPU")
def test_auto_and_all_are_zero_on_a_cpu_only_build(tiny_model):
    assert resolve_gpu_layers("auto", tiny_model, 512) == 0
    assert resolve_gpu_layers("all", tiny_model, 512) == 0
