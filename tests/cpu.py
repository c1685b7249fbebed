"""The CPU a call costs, measured so that a busy machine cannot fail a test that the code itself passes.

`time.process_time` counts every thread of the test process: a worker thread that an earlier test left running past
its deadline, a live server's threads, the garbage collector. They only ever add to a call's cost, so the least of a
few tries is the call's own; a call over its limit on every try is over it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
TRIES = 3


def least_cpu_s(call: Callable[[], T], limit_s: float, tries: int = TRIES) -> tuple[float, T]:
    """The least CPU seconds of up to `tries` calls (stopping at the first under `limit_s`), and the last result."""
    least = float("inf")
    for attempt in range(tries):
        if attempt:
            time.sleep(0.2)  # lets a stray thread of an earlier test finish or yield
        gc.collect()  # a collection of the whole heap is not this call's cost
        start = time.process_time()
        result = call()
        least = min(least, time.process_time() - start)
        if least < limit_s:
            break
    return least, result
