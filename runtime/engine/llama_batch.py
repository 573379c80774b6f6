"""llama.cpp's `llama_batch`, backed by numpy arrays, so that filling a step of 2048 rows is five
vectorised copies instead of 10,000 ctypes item writes (llama_batch_init's arrays can only be
written one item at a time from Python). One sequence id per row: the `seq_id` pointers are set
once, each to its own slot of one int32 array."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from llmpack.runtime.hardware.bindings import lc


@dataclass(slots=True)
class BatchPlan:
    """The rows of one step, as the runner built them from the scheduled chunks."""
    tokens: list[int]
    positions: list[int]
    seq_ids: list[int]
    want_logits: list[bool]
    out_row: list[int]         # per chunk: index of its first logits row among the step's outputs, -1 if none
    n_outputs: int = 0         # logits rows the step asks for


class LlamaBatch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        seq_ptr = ctypes.POINTER(lc.llama_seq_id)
        base = self.seq.ctypes.data
        self._seq_ptrs = (seq_ptr * capacity)(*[ctypes.cast(base + 4 * i, seq_ptr) for i in range(capacity)])
        self.struct = lc.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(ctypes.POINTER(lc.llama_token)),
            embd=None,
            pos=self.pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos)),
            n_seq_id=self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=self._seq_ptrs,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))

    def fill(self, plan: BatchPlan) -> None:
        n = len(plan.tokens)
        self.token[:n] = plan.tokens
        self.pos[:n] = plan.positions
        self.seq[:n] = plan.seq_ids
        self.logits[:n] = plan.want_logits
        self.struct.n_tokens = n
