"""Answers kept for recent jobs: a pure function of a frozen job, asked again for the same job, answers at once.

The page asks the same questions of the same job more than once (the unit switch, a pin, the way
back, a sweep that does not depend on the field being typed into), so the costly ones are kept in
`functools.lru_cache`. A job is a tree of frozen dataclasses and tuples; should one ever hold
something that cannot be hashed, the answer is worked out afresh instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def kept(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` from its cache, or computed without it when an argument cannot be hashed."""
    try:
        hash(args)
    except TypeError:
        return function.__wrapped__(*args)  # type: ignore[attr-defined]
    return function(*args)
