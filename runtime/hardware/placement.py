"""Where the model runs: the offload plan (`--gpu-layers N | all | auto | 0`, `--device`) and
the report of what happened, for the start-up line and /health's `backend` object.

With no usable GPU (no GPU backend, no Vulkan loader or driver, no device, `--device cpu`,
`--gpu-layers 0`) the plan offloads nothing and carries the one line that says why. The report
counts the repeating layers llama.cpp placed on the GPU by its own rule, from what was asked and
what the loaded model reports (model_runner.offloaded_layers), never from llama.cpp's log text.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from llmpack.runtime.hardware.backends import Device, gpu_devices, gpu_probed, load_backends, pick_device
from llmpack.runtime.hardware.gpu_fit import fit_gpu_layers, fit_on
from llmpack.runtime.hardware.rpc import RpcError
from llmpack.runtime.hardware.rpc_client import RemoteDevice, add_servers
from llmpack.runtime.model.model_info import ModelInfo, read_model_info


NO_GPU = "no graphics card found that llmpack can use"


@dataclass(slots=True)
class OffloadPlan:
    n_gpu_layers: int             # llama.cpp's n_gpu_layers: -1 all, 0 none
    device: Device | None         # the one GPU the layers go to
    note: str | None = None       # why the GPU is not used, when it is not (technical: backends, drivers)
    why: str | None = None        # the same for anyone: the start-up line and /health's `summary`
    remote: list[RemoteDevice] = field(default_factory=list)   # other machines' devices (--rpc), after `device`

    def handles(self) -> list[int]:
        """llama_model_params.devices, in order: the local GPU, then each worker's devices."""
        return [d.handle for d in ([self.device] if self.device else []) + self.remote]   # type: ignore[misc]

    def split(self) -> list[float] | None:
        """llama_model_params.tensor_split with more than one device: each one's free memory, which
        is llama.cpp's own default, made explicit so that layers_per_device() says what it did."""
        devices = ([self.device] if self.device else []) + self.remote   # type: ignore[operator]
        return [float(d.memory_free or 1) for d in devices] if len(devices) > 1 else None


def no_gpu_reason() -> str:
    """Why no GPU is used: every GPU backend's line, in load order (the CUDA flavour has two)."""
    found = load_backends()
    if found.notes:
        return "; ".join(found.notes)
    if not found.dynamic:
        return "this llama.cpp build has no GPU backend"
    return "no GPU backend library was found beside the CPU backends"


def fit_report(info: ModelInfo) -> dict:
    """For `llmpack inspect`: every GPU here, with how many of this model's layers fit in its
    free memory at info.ctx tokens; or, with none, the line saying why."""
    fits = []
    for dev in gpu_devices():
        n = fit_gpu_layers(dev.memory_free, info.weight_bytes_per_layer, info.non_layer_weight_bytes,
                           info.kv_bytes_per_token_per_layer, info.ctx)
        fits.append({**dev.to_dict(), "layers_fit": min(n, info.n_layer), "output_fits": n > info.n_layer})
    return {"ctx": info.ctx, "n_layers": info.n_layer, "devices": fits, "note": None if fits else no_gpu_reason()}


def plan_offload(layers: int | str, model_path, n_ctx: int, device: str | None = None,
                 info: ModelInfo | None = None, devices: list[Device] | None = None,
                 offset: int = 0, length: int | None = None, memory_fraction: float = 1.0,
                 rpc: Sequence[str] = ()) -> OffloadPlan:
    """Resolve `--gpu-layers` (already parsed: N, -1, "all" or "auto") and `--device` against
    `devices` (default: this machine's GPUs, gpu_devices(); a caller that already listed them, or a
    test with chosen free memory, passes its own). `auto` needs the model's layer sizes: `info`
    when the caller has read the header already, else it is read here (at `offset`, for a GGUF
    inside a bigger file), and only then. `memory_fraction` (vLLM's gpu_memory_utilization) caps
    what `auto` may fill at that share of the device's total memory. `rpc`: workers' endpoints
    (`--rpc`), whose devices take the layers together with the local GPU, if any (plan_remote)."""
    if rpc:
        return plan_remote(layers, model_path, n_ctx, device, info, devices, offset, length, add_servers(rpc))
    if layers == 0:
        return OffloadPlan(0, None, "--gpu-layers 0 keeps the model on the CPU", "as --gpu-layers 0 asks")
    chosen = pick_device(gpu_devices() if devices is None else devices, device)
    if chosen is None:
        if (device or "").lower() == "cpu":
            return OffloadPlan(0, None, "--device cpu keeps the model on the CPU", "as --device cpu asks")
        return OffloadPlan(0, None, no_gpu_reason(), NO_GPU)
    if layers == "all":
        return OffloadPlan(-1, chosen)
    if isinstance(layers, int):
        return OffloadPlan(layers, chosen)
    if memory_fraction < 1.0:
        chosen = replace(chosen, memory_free=min(chosen.memory_free, int(chosen.memory_total * memory_fraction)))
    n = fit_on(chosen, info or read_model_info(model_path, ctx=n_ctx, offset=offset, length=length), n_ctx)
    if n == 0:
        return OffloadPlan(0, None, f"not one layer fits in the {chosen.memory_free >> 20} MiB free on "
                                    f"{chosen.id} ({chosen.name}); pass --gpu-layers N to try anyway",
                           f"not enough free memory on {chosen.name}")
    return OffloadPlan(n, chosen)


def plan_remote(layers: int | str, model_path, n_ctx: int, device: str | None, info: ModelInfo | None,
                devices: list[Device] | None, offset: int, length: int | None,
                remote: list[RemoteDevice]) -> OffloadPlan:
    """`--rpc`: the layers go to the workers' devices (and a local GPU, first, if there is one), split
    by free memory; `auto` offloads what fits in all of them together, the rest stays on the CPU."""
    if layers == 0:
        raise RpcError("--gpu-layers 0 keeps every layer here, so --rpc would not be used; leave one of them out")
    local = pick_device(gpu_devices() if devices is None else devices, device)
    plan = OffloadPlan(-1, local, remote=remote)
    if isinstance(layers, int):
        plan.n_gpu_layers = layers
    elif layers == "auto":
        info = info or read_model_info(model_path, ctx=n_ctx, offset=offset, length=length)
        free = sum(d.memory_free for d in remote) + (local.memory_free if local else 0)
        plan.n_gpu_layers = fit_gpu_layers(free, info.weight_bytes_per_layer, info.non_layer_weight_bytes,
                                           info.kv_bytes_per_token_per_layer, n_ctx)
        if plan.n_gpu_layers == 0:
            raise RpcError(f"not one layer fits in the {free >> 20} MiB the RPC workers offer; give them more "
                           "(--mem) or pass --gpu-layers N to try anyway")
    return plan


def layers_per_device(n_gpu_layers: int, n_layer: int, n_layer_all: int, split: list[float] | None,
                      n_devices: int) -> list[int]:
    """How many of the `n_layer` repeating layers each device holds, by llama.cpp's own rule
    (llama_model_base::load_tensors): the offloaded layers are the top ones, and layer il goes to
    the first device whose cumulative share of `split` exceeds (il - first) / offloaded."""
    if n_devices == 0 or n_gpu_layers == 0:
        return [0] * n_devices
    wanted = n_gpu_layers if n_gpu_layers > 0 else n_layer_all + 1
    first, act = max(n_layer_all + 1 - wanted, 0), min(wanted, n_layer_all + 1)
    cumulative = np.cumsum(np.asarray(split or [1.0] * n_devices, dtype=np.float32), dtype=np.float32)
    cumulative /= cumulative[-1]   # in float32, as llama.cpp computes its split points
    counts = [0] * n_devices
    for il in range(first, min(n_layer, first + act)):
        at = np.float32(il - first) / np.float32(act)
        counts[min(int(np.searchsorted(cumulative, at, side="right")), n_devices - 1)] += 1
    return counts


def backend_report(plan: OffloadPlan, runner: Any) -> dict:
    """/health's `backend` object (its shape: docs/PORTABILITY.md, "GPU offload") for a loaded ModelRunner.
    A model kept on the CPU by --gpu-layers 0 lists no devices: nothing probed them (load_backends)."""
    found = load_backends(gpu=plan.n_gpu_layers != 0 or bool(plan.remote))
    if plan.remote:
        return _remote_report(plan, runner, found.cpu_variant)
    offloaded = runner.gpu_layers if plan.device is not None else 0
    note, why = plan.note, plan.why
    if plan.device is not None and offloaded == 0 and plan.n_gpu_layers != 0:
        note, why = f"llama.cpp offloaded no layers to {plan.device.id}", f"{plan.device.name} took none of it"
    if offloaded:
        summary = f"Running on your graphics card ({plan.device.name})"   # type: ignore[union-attr]
        if offloaded < runner.n_layer:
            summary += f", {offloaded} of {runner.n_layer} layers; the rest on your processor"
    else:
        summary = f"Running on your processor ({why or 'the graphics card is not used'})"
    return {"cpu_variant": found.cpu_variant,
            "devices": [d.to_dict() for d in gpu_devices()] if gpu_probed() else [],
            "gpu_device": plan.device.id if plan.device is not None and offloaded else None,
            "gpu_layers": offloaded, "n_layers": runner.n_layer, "note": note, "summary": summary + ".",
            "remote": []}


def _remote_report(plan: OffloadPlan, runner: Any, cpu_variant: str | None) -> dict:
    """backend_report with --rpc: `remote` names each worker's device and the layers it holds."""
    counts = layers_per_device(plan.n_gpu_layers, runner.n_layer, getattr(runner, "n_layer_all", runner.n_layer),
                               plan.split(), len(plan.handles()))
    local = counts.pop(0) if plan.device is not None else 0
    remote = [{**d.to_dict(), "layers": n} for d, n in zip(plan.remote, counts)]
    parts = [f"{r['endpoint']}: {r['layers']}" for r in remote]
    if local:
        parts.insert(0, f"your graphics card ({plan.device.name}): {local}")   # type: ignore[union-attr]
    summary = f"Running {sum(counts) + local} of {runner.n_layer} layers on RPC workers ({', '.join(parts)})"
    if sum(counts) + local < runner.n_layer:
        summary += "; the rest on your processor"
    return {"cpu_variant": cpu_variant, "devices": [d.to_dict() for d in gpu_devices()],
            "gpu_device": plan.device.id if plan.device is not None and local else None,
            "gpu_layers": sum(counts) + local, "n_layers": runner.n_layer, "note": None, "summary": summary + ".",
            "remote": remote}


def startup_line(report: dict, verbose: bool = False) -> str:
    """Where the model runs, in words for anyone (/health's `summary`), e.g. `llmpack: Running on
    your processor (no graphics card found that llmpack can use).`; the technical reason (a
    backend's or driver's line) and the CPU variant follow with `verbose`, and are one flag away
    otherwise."""
    line = f"llmpack: {report.get('summary') or 'Running on your processor.'}"
    cpu = f"CPU backend {report['cpu_variant']}" if report.get("cpu_variant") else "CPU backend built in"
    if report.get("remote"):
        workers = ", ".join(f"{r['id']} at {r['endpoint']} ({r['memory_free'] >> 20} MiB offered): {r['layers']}"
                            for r in report["remote"])
        detail = f"llmpack: RPC {workers} of {report['n_layers']} layers; {cpu}"
    elif report.get("gpu_layers"):
        dev = next((d for d in report["devices"] if d["id"] == report["gpu_device"]), {"name": "?"})
        detail = (f"llmpack: GPU {report['gpu_device']} ({dev['name']}): "
                  f"{report['gpu_layers']}/{report['n_layers']} layers; {cpu}")
    else:
        detail = f"llmpack: {cpu}; GPU not used: {report.get('note') or 'unknown reason'}"
    if verbose:
        return f"{line}\n{detail}"
    if report.get("gpu_layers") or not report.get("note") or "--" in line:   # nothing more to say
        return line
    return f"{line} Start with --verbose for the technical reason."
