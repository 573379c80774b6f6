"""The engine's own latency histograms: how long its steps take, and the gap between a sequence's
consecutive tokens as the engine makes them. /metrics reads them at scrape time (so a person
running the server sees what users feel while someone else's prompt is read), the benchmarks
read them too. Observed on the engine thread only; a scrape copies the counts.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

# seconds; fine around a step's target (0.2 s), coarse where a step of prompt would freeze a stream
GAP_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0)
STEP_BUCKETS = GAP_BUCKETS


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    buckets: tuple[float, ...]      # upper bounds; +Inf is implied
    counts: tuple[int, ...]         # per bucket, not cumulative; one more than buckets (+Inf)
    total: float                    # the sum of the observed values
    count: int

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as Prometheus writes them, +Inf last."""
        out, acc = [], 0
        for le, n in zip([*map(str, self.buckets), "+Inf"], self.counts):
            acc += n
            out.append((le, acc))
        return out


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.buckets, tuple(self.counts), self.total, self.count)
