"""--gpu-layers: N, all, auto, 0. `auto` fits layers into the GPU's free memory; with no GPU
every value keeps the model on the CPU with a reason. The plans are made against fake devices
(backends.Device with chosen free memory, passed where placement would list the real ones),
so `auto`, `all` and N are planned on every machine, GPU or not."""
from __future__ import annotations

import pytest

from llmpack.errors import LlmpackError
from ggufs import tiny_vocab
from llmpack.runtime.engine.config import parse_gpu_layers
from llmpack.runtime.hardware.backends import Device
from llmpack.runtime.hardware.gpu_fit import COMPUTE_RESERVE, SAFETY_MARGIN, fit_gpu_layers
from llmpack.runtime.hardware.placement import OffloadPlan, plan_offload

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


def test_every_value_is_zero_without_a_gpu_and_the_plan_says_why(tiny_model):
    for spec in ("auto", "all", "12"):
        plan = plan_offload(parse_gpu_layers(spec), tiny_model, 512, devices=[])
        assert plan.n_gpu_layers == 0 and plan.device is None
        assert plan.note


# ---- planning against a fake GPU: the same code a real one runs, with free memory we choose ----------
# The tiny model (tests/ggufs.py defaults: 2 layers, n_embd 64, 2 KV heads of 16, n_ff 128, f32)
# by its tensor shapes, not by read_model_info, so a wrong reading of the file shows up here too.
N_CTX = 512
LAYER_WEIGHTS = 4 * (2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64)   # 2 norms, q+o, k+v, gate+up+down
LAYER_KV = 2 * 32 * 2 * N_CTX                                              # f16 K and V per token, x n_ctx
LAYER = LAYER_WEIGHTS + LAYER_KV
OUTPUT = 4 * (2 * len(tiny_vocab()) * 64 + 64)                            # token_embd, output, output_norm


def fake_gpu(free: int, id: str = "Vulkan0", name: str = "Fake GPU", integrated: bool = False) -> Device:
    return Device(id, name, memory_total=max(free, 1 << 30), memory_free=free, integrated=integrated)


@pytest.mark.parametrize("free, layers", [
    (OVERHEAD + LAYER - 1, 0),                       # not one layer
    (OVERHEAD + LAYER, 1),                           # the last layer only
    (OVERHEAD + 2 * LAYER + OUTPUT - 1, 2),          # every repeating layer, not the output layer
    (OVERHEAD + 2 * LAYER + OUTPUT, 3),              # everything: llama.cpp counts the output as one more
])
def test_auto_fits_the_layers_the_free_memory_holds(tiny_model, free, layers):
    gpu = fake_gpu(free)
    plan = plan_offload("auto", tiny_model, N_CTX, devices=[gpu])
    if layers == 0:
        assert (plan.n_gpu_layers, plan.device) == (0, None)
        assert plan.note == (f"not one layer fits in the {free >> 20} MiB free on Vulkan0 (Fake GPU); "
                             "pass --gpu-layers N to try anyway")
    else:
        assert (plan.n_gpu_layers, plan.device, plan.note) == (layers, gpu, None)


def test_the_context_is_part_of_the_fit(tiny_model):
    gpu = fake_gpu(OVERHEAD + 2 * LAYER + OUTPUT)
    assert plan_offload("auto", tiny_model, N_CTX, devices=[gpu]).n_gpu_layers == 3
    assert plan_offload("auto", tiny_model, 4 * N_CTX, devices=[gpu]).n_gpu_layers < 3


@pytest.mark.parametrize("free", [0, OVERHEAD + 2 * LAYER + OUTPUT])
def test_all_and_n_are_taken_as_asked_whatever_is_free(tiny_model, free):
    """`all` and N are the user's call (llama.cpp fails the load if they do not fit): no fitting."""
    gpu = fake_gpu(free)
    assert plan_offload("all", tiny_model, N_CTX, devices=[gpu]) == OffloadPlan(-1, gpu)
    assert plan_offload(1, tiny_model, N_CTX, devices=[gpu]) == OffloadPlan(1, gpu)
    assert plan_offload(12, tiny_model, N_CTX, devices=[gpu]) == OffloadPlan(12, gpu)


def test_auto_fits_on_the_device_it_picks(tiny_model):
    """A discrete GPU before an integrated one (whatever is free), then the most free memory;
    --device names another, and the fit is against that one's memory."""
    igpu = fake_gpu(80 << 30, "Vulkan0", "Integrated", integrated=True)
    small = fake_gpu(OVERHEAD + LAYER, "Vulkan1", "Small")
    big = fake_gpu(OVERHEAD + 2 * LAYER + OUTPUT, "Vulkan2", "Big")
    devices = [igpu, small, big]
    assert plan_offload("auto", tiny_model, N_CTX, devices=devices) == OffloadPlan(3, big)
    assert plan_offload("auto", tiny_model, N_CTX, device="Vulkan1", devices=devices) == OffloadPlan(1, small)
    assert plan_offload("auto", tiny_model, N_CTX, device="0", devices=devices) == OffloadPlan(3, igpu)
    assert plan_offload("auto", tiny_model, N_CTX, device="cpu", devices=devices) == \
        OffloadPlan(0, None, "--device cpu keeps the model on the CPU", "as --device cpu asks")
