"""What the two samplers share: llama.cpp's candidate layout as a numpy dtype, and the probability
mass a sampler without top_p may drop. Its own module so that `sampler` (free rows) and
`grammar_sampler` (constrained rows, which start as free ones) both import it from below."""
from __future__ import annotations

import ctypes

import numpy as np

from llmpack.runtime.hardware.bindings import lc

# Same memory layout as llama_token_data {int32 id; float logit; float p;}
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert TOKEN_DATA.itemsize == ctypes.sizeof(lc.llama_token_data)

TAIL = 1e-6  # with no top_p, the probability mass we allow ourselves to drop
