"""One way of timing a call, shared by the main bench and the peer script so that their numbers compare.

Standard library only: the peer script imports this module from another virtual environment.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

RUNS = 200


def samples_s(fn: Callable[[], object], runs: int = RUNS) -> list[float]:
    """Seconds per call of `fn`, sorted, over `runs` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return samples


def median_p95(samples: list[float]) -> tuple[float, float]:
    """Median and 95th percentile of sorted samples."""
    return statistics.median(samples), samples[int(0.95 * len(samples)) - 1]
