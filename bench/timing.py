"""One way of timing a call, shared by the main bench and the peer script so that their numbers compare.

Standard library only: the peer script imports this module from another virtual environment.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

RUNS = 200
WARM_UP_S = 0.3


def samples_s(fn: Callable[[], object], runs: int = RUNS) -> list[float]:
    """Seconds per call of `fn`, sorted, over `runs` calls after `WARM_UP_S` of calls.

    A process that has just waited (on the peer's subprocess, or any pause) runs its next hundreds of calls up to
    twice as slowly on this machine (measured: 138 µs per Llama-3-8B estimate before a 3 s pause, 268 µs for the
    200 calls after it): warming up for a fixed time, not a fixed count, times the steady state on both sides."""
    fn()
    deadline = time.perf_counter() + WARM_UP_S
    while time.perf_counter() < deadline:
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
