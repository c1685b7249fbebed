"""How many generated examples a test draws: each test names its budget for the whole suite (`make test`), and
`--examples-share` (tests/conftest.py; `make test-fast` gives 0.25) runs a share of it, at least ten. A test that
walks a fixed product of cases walks the same share of it (`spread`)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
MIN_EXAMPLES = 10
share = 1.0  # set once, from the command line, before any test module is imported


def examples(full: int) -> int:
    """`full` examples, or the run's share of them (never fewer than MIN_EXAMPLES, never more than `full`)."""
    return min(full, max(MIN_EXAMPLES, round(full * share)))


def spread(cases: Sequence[T], key: str) -> list[T]:
    """All of `cases`, or the run's share of them: every k-th, from an offset that `key` (the test's parameters)
    fixes, so that the parametrisations of one test keep different cases and a rerun keeps the same ones."""
    step = max(1, round(1 / share)) if share > 0 else 1
    return list(cases[zlib.crc32(key.encode()) % step::step])
