"""The server's heap gives back what requests freed (llmpack/heap.py, issue 46). Each case runs
in a process of its own, since glibc's settings are process-wide and a test process's memory is
everybody's. Blocks come from C's malloc through ctypes, as llama.cpp's and Python's large objects
do, with small live blocks between them: the layout that kept a fuzzed server's memory."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap: Linux only")

PRELUDE = """
import ctypes, time
from llmpack import heap
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def fill(size, count):
    '''`count` touched blocks of `size` bytes, each followed by a small block that stays.'''
    blocks = []
    for _ in range(count):
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)
        blocks.append(p)
        libc.malloc(64)
    return blocks

def mib():
    return heap.resident_kib() / 1024
"""


def run(body: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [float(x) for x in out.stdout.split()]


def test_the_keeper_gives_back_memory_freed_between_live_blocks():
    full, freed, kept, trims = run("""
        heap.tune()
        blocks = fill(64 * 1024, 3000)        # 188 MiB, under the mapping threshold: in the arena
        full = mib()
        for p in blocks:
            libc.free(p)
        freed = mib()
        keeper = heap.HeapKeeper(check_s=0.1)
        keeper.start()
        time.sleep(1)
        keeper.stop()
        print(full, freed, mib(), keeper.trims)
    """)
    assert freed > full - 20, "glibc returned the pages by itself: this case no longer tests the keeper"
    assert kept < freed - 150, (full, freed, kept)
    assert trims >= 1


def test_a_large_block_freed_does_not_raise_the_mapping_threshold():
    """glibc's default raises the threshold to the size of each mapped block freed, so after one
    long request the next ones' 256 KiB strings were carved out of the arena, where small blocks
    allocated later pin their pages; tune() keeps them in mappings of their own, returned on free.
    (A chunk's size word has bit 2 set when it is a mapping of its own: glibc's IS_MMAPPED.)"""
    def mapped_after_a_large_block(tune: bool) -> float:
        [mapped] = run(f"""
            if {tune}:
                assert heap.tune()
            libc.free(fill(8 * 1024 * 1024, 1)[0])   # one long request's body
            p = libc.malloc(256 * 1024)              # the next one's
            print(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 2)
        """)
        return mapped

    assert not mapped_after_a_large_block(tune=False), "glibc's default changed: this case no longer tests tune()"
    assert mapped_after_a_large_block(tune=True)


def test_tune_and_the_keeper_are_harmless_twice_and_stopped():
    assert run("""
        print(int(heap.tune()), int(heap.tune()))
        keeper = heap.HeapKeeper(check_s=0.05)
        keeper.start(); keeper.start(); keeper.stop()
        time.sleep(0.2)
        print(keeper.trims)
    """) == [1, 1, 1]
