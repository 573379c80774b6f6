"""What the sha256-chained prefix-cache keys cost per engine step, against Python's hash().

A key is computed once per full 16-token block: while decoding, each sequence fills a block
every 16 steps; a prefill of P tokens hashes P/16 blocks at once (and the same again to look
the prompt up in the cache). Printed: microseconds per block for both keys, the cost of one
decode step of 32 sequences (the worst case: all 32 fill a block in the same step), and of a
2,000-token prompt's lookup + commit - to set beside a decode step of tens of milliseconds.

    ./dev bench prefix_hash
"""
from __future__ import annotations

import random
import timeit

from llmpack.runtime.engine.block_manager import chain_hash


def per_block_us(fn, blocks: list[tuple[int, ...]], repeat: int = 5) -> float:
    def run() -> None:
        prev = None
        for b in blocks:
            prev = fn(prev, b)
    best = min(timeit.repeat(run, number=1, repeat=repeat))
    return best / len(blocks) * 1e6


def main() -> None:
    rng = random.Random(0)
    blocks = [tuple(rng.randrange(262_144) for _ in range(16)) for _ in range(20_000)]
    sha = per_block_us(chain_hash, blocks)
    old = per_block_us(lambda prev, toks: hash((prev, toks)), blocks)
    print(f"per 16-token block: sha256 chain {sha:.2f} us, Python hash() {old:.2f} us")
    print(f"decode step, 32 sequences all filling a block: {32 * sha:.0f} us (hash(): {32 * old:.0f} us)")
    prompt_blocks = 2000 // 16
    print(f"2,000-token prompt, lookup + commit ({2 * prompt_blocks} blocks): {2 * prompt_blocks * sha / 1000:.2f} ms "
          f"(hash(): {2 * prompt_blocks * old / 1000:.2f} ms)")


if __name__ == "__main__":
    main()
