"""The CPU a call costs, measured so that a busy machine cannot fail a test that the code itself passes.

`time.process_time` counts every thread of the test process: a worker thread that an earlier test left running past
its deadline, a live server's threads, the garbage collector. They only ever add to a call's cost, so the least of a
few tries is the call's own; a call over its limit on every try is over it.

The limits are set on an idle 2-core machine. Other processes on a busy machine slow a process's CPU too (shared
cores and caches: a fixed workload cost 18 ms idle and up to 28 ms at a load of 8), so each try also times a fixed
workload of plain Python (`_calibration`, nothing of the code under test) and a cost is scaled by how much slower
that ran than on the idle machine (never by less than 1): the costs compared are the idle machine's.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
TRIES = 3
# The calibration's CPU time on the idle 2-core machine the limits were set on (the least of 15 runs).
CALIBRATION_S = 0.018


def _calibration() -> int:
    """Work of the kind the code does (tuples in sorted lists, dicts, small strings), about 18 ms of CPU."""
    ordered: list[tuple[int, int]] = []
    table: dict[int, tuple[tuple[int, int], str]] = {}
    for i in range(20_000):
        item = (i * 7919 % 10_007, i)
        bisect.insort(ordered, item)
        table[i] = (item, str(i))
        if len(ordered) > 500:
            ordered.pop(len(ordered) // 2)
    return sum(len(text) for _, text in table.values())


def _cpu_s(call: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    result = call()
    return time.process_time() - start, result


def least_cpu_s(call: Callable[[], T], limit_s: float, tries: int = TRIES) -> tuple[float, T]:
    """The least CPU seconds of up to `tries` calls, each scaled to the idle machine (stopping at the first under
    `limit_s`), and the last result."""
    least = float("inf")
    for attempt in range(tries):
        if attempt:
            time.sleep(0.2)  # lets a stray thread of an earlier test finish or yield
        # A collection of the whole heap is not this call's cost: collected, then frozen, so that a collection the
        # call itself sets off scans only what was made since (each pass over the test process's heap, modules,
        # fixtures and all, cost 60-100 ms of the 0.3 s each of these tests took).
        gc.collect()
        gc.freeze()
        slowness = max(_cpu_s(_calibration)[0] / CALIBRATION_S, 1.0)
        cpu_s, result = _cpu_s(call)
        least = min(least, cpu_s / slowness)
        if least < limit_s:
            break
    return least, result


# How long a measurement of the wall-clock slowness stands for the machine's load: tests that each ask for it (one per
# hostile request) share one, rather than spending 54 ms of CPU on each.
WALL_SLOWNESS_KEPT_S = 2.0
_wall_slowness: list[tuple[float, float]] = []  # (when it was measured, the slowness)


def wall_slowness(tries: int = TRIES, kept_s: float = WALL_SLOWNESS_KEPT_S) -> float:
    """How much slower than on the idle machine the calibration runs by the wall clock (never less than 1): what a
    busy machine adds to the time a request waits for a core, for limits on latency. A measurement stands for
    `kept_s`."""
    now = time.perf_counter()
    if _wall_slowness and now - _wall_slowness[-1][0] < kept_s:
        return _wall_slowness[-1][1]
    least = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        _calibration()
        least = min(least, time.perf_counter() - start)
    _wall_slowness[:] = [(time.perf_counter(), max(least / CALIBRATION_S, 1.0))]
    return _wall_slowness[-1][1]
