"""Images through the engine: encode time, and time to first token of an image prompt alone and
beside 16 text streams (whose tokens/s with and without the image stream is printed too).

No real vision model is on our registries, so the projector is written here with random
weights but a real tower's shape (CLIP ViT-B/16 at 224 px: 12 layers, width 768, 196 image
rows, an MLP projector to the text model's width), paired with the demo model (Gemma 3 270M,
width 640). The tower's cost depends on its shape, not on its weights.

    ./dev bench vision [--streams 16] [--tokens 64] [--layers 12] [--model PATH]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from picture_files import png  # noqa: E402
from vision_ggufs import write_tiny_mmproj  # noqa: E402

from llmpack.runtime.engine.engine import EngineConfig, LLMEngine  # noqa: E402
from llmpack.runtime.engine.sampling_params import SamplingParams  # noqa: E402
from llmpack.runtime.llm import collect  # noqa: E402

WORDS = ["water", "time", "people", "number", "word", "way", "day", "part", "sea", "wind", "hill", "road",
         "song", "city", "tree", "light"]


def text_streams(engine: LLMEngine, n: int, tokens: int) -> list:
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    return [engine.add_request(f"Write about the {WORDS[i % len(WORDS)]} of the world {i}.", params)
            for i in range(n)]


def image_ttft(engine: LLMEngine, seed: int) -> float:
    prompt = engine.mm.projector.prompt(["Describe this picture: ", png(224, 224, seed=seed), " It shows"],
                                        engine.bos_prefix)
    t0 = time.perf_counter()
    stream = engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    out = collect(stream)
    assert out.outputs[0].token_ids
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", help="text model (default: the demo Gemma 3 270M)")
    args = ap.parse_args()
    if args.model is None:
        from llmpack.demo_models import demo_model_path   # lazy: only without --model
        args.model = str(demo_model_path("gemma"))
    with tempfile.TemporaryDirectory() as tmp:
        engine = LLMEngine(EngineConfig(args.model, n_ctx=8192, max_num_seqs=32, gpu_layers=0))
        mmproj = write_tiny_mmproj(Path(tmp) / "mmproj-vitb16.gguf", n_embd_text=engine.runner.n_embd, n_embd=768,
                                   n_head=12, n_ff=3072, n_layer=args.layers + 1, image_size=224, patch_size=16)
        engine.shutdown()
        engine = LLMEngine(EngineConfig(args.model, n_ctx=8192, max_num_seqs=32, gpu_layers=0, mmproj_path=str(mmproj)))
        proj = engine.mm.projector
        span = proj.prompt(["x", png(224, 224, seed=0), "y"], []).spans[0]
        proj.encode(span)   # warm-up
        encode = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            proj.encode(span)
            encode.append(time.perf_counter() - t0)
        alone = statistics.median(image_ttft(engine, 100 + r) for r in range(args.repeats))

        def text_rate(with_image: bool, seed: int) -> tuple[float, float | None]:
            t0 = time.perf_counter()
            streams = text_streams(engine, args.streams, args.tokens)
            time.sleep(0.2)            # the text streams are decoding when the image arrives
            ttft = image_ttft(engine, seed) if with_image else None
            total = sum(collect(s).num_generated_tokens for s in streams)
            return total / (time.perf_counter() - t0), ttft

        rates_without, rates_with, beside = [], [], []
        for r in range(args.repeats):
            rates_without.append(text_rate(False, 0)[0])
            rate, ttft = text_rate(True, 200 + r)
            rates_with.append(rate)
            beside.append(ttft)
        engine.shutdown()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"projector: random ViT, {args.layers} layers run, width 768, 224 px -> {span.n_tokens} rows; "
          f"text model {Path(args.model).name}; load average {load:.2f}")
    print(f"image encode              {statistics.median(encode) * 1000:8.1f} ms (median of {args.repeats})")
    print(f"TTFT image prompt alone   {alone * 1000:8.1f} ms")
    print(f"TTFT beside {args.streams} streams    {statistics.median(beside) * 1000:8.1f} ms "
          f"(ratio to alone {statistics.median(beside) / alone:.2f})")
    w, wo = statistics.median(rates_with), statistics.median(rates_without)
    print(f"{args.streams} text streams tok/s  {wo:8.1f} without the image, {w:8.1f} with it (ratio {w / wo:.2f})")


if __name__ == "__main__":
    main()
