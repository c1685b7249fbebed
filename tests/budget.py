"""How many generated examples a test draws: each test names its budget for the whole suite (`make test`), and
`--examples-share` (tests/conftest.py; `make test-fast` gives 0.25) runs a share of it, at least ten."""

from __future__ import annotations

MIN_EXAMPLES = 10
share = 1.0  # set once, from the command line, before any test module is imported


def examples(full: int) -> int:
    """`full` examples, or the run's share of them (never fewer than MIN_EXAMPLES, never more than `full`)."""
    return min(full, max(MIN_EXAMPLES, round(full * share)))
