"""Answers kept for recent jobs, and worked out afresh for an argument that cannot be hashed."""

from __future__ import annotations

from functools import lru_cache

from app.web.memo import kept

CALLS: list[object] = []


@lru_cache(maxsize=4)
def _square(value):
    CALLS.append(value)
    return value[0] * value[0] if isinstance(value, (tuple, list)) else value * value


def test_a_hashable_argument_is_answered_from_the_cache():
    CALLS.clear()
    assert kept(_square, (3,)) == 9 and kept(_square, (3,)) == 9
    assert CALLS == [(3,)]


def test_an_unhashable_argument_is_worked_out_afresh():
    CALLS.clear()
    assert kept(_square, [4]) == 16 and kept(_square, [4]) == 16
    assert CALLS == [[4], [4]]
