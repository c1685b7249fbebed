"""`wire.loads_bounded` takes the parser's plain path only where no bound can be broken: on any JSON text it answers
exactly what the checked parse answers (the same value, or a refusal at the same field)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import core, wire
from app.configs import depth  # the nesting of a parsed value, walked
from tests.budget import examples
from tests.cpu import least_cpu_s

NUMBERS = st.one_of(st.integers(min_value=-(10**45), max_value=10**45),
                    st.floats(allow_nan=True, allow_infinity=True))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=40)


def always_checked(text: str) -> bool:  # every text takes the checked parse
    return True


def answer(text: str) -> object:
    try:
        return ("value", wire.loads_bounded(text, "body"))
    except core.DomainError as error:
        return ("refused", error.field)


def same(a: object, b: object) -> bool:
    # NaN never equals itself, and only the checked parse could ever see one; compare by their JSON text
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=examples(300), deadline=None)
@given(VALUES)
def test_plain_and_checked_parses_agree(value: object) -> None:
    text = json.dumps(value)
    plain = answer(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wire, "_needs_checks", always_checked)
        checked = answer(text)
    assert same(plain, checked)


@pytest.mark.parametrize("text", ['{"a": 1e999}', '{"a": 1E5}', '{"a": NaN}', '{"a": -Infinity}',
                                  '{"a": ' + "1" * 41 + "}", "[" * 33 + "]" * 33, '{"a": 1.5, "b": [1, 2]}',
                                  '{"a": "1e999"}', '{"a": 1', "{\"a\": 1e-400}"])
def test_edges_agree(text: str) -> None:
    plain = answer(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wire, "_needs_checks", always_checked)
        assert same(plain, answer(text))


def test_a_megabyte_of_numbers_is_scanned_in_milliseconds():
    # The scan that decides the parse took 80 ms of CPU on a megabyte of short numbers as a regular expression.
    text = json.dumps({"mlp_only_layers": list(range(140_000))})
    def five_scans() -> bool:
        return any(wire._needs_checks(text) for _ in range(5))

    cpu_s, needed = least_cpu_s(five_scans, 5 * 0.04)
    assert not needed
    assert cpu_s / 5 < 0.04
    assert wire._needs_checks(text.replace("139999", "1" * 41)) and wire._needs_checks('{"a": 1e5}')


TRICKY_TEXT = st.text(alphabet='[]{}"\\\n/ab\u00e9', max_size=12)
TRICKY = st.recursive(st.one_of(st.none(), st.integers(), TRICKY_TEXT),
                      lambda inner: st.one_of(st.lists(inner, max_size=4),
                                              st.dictionaries(TRICKY_TEXT, inner, max_size=4)), max_leaves=40)


@settings(max_examples=examples(300), deadline=None)
@given(TRICKY, st.booleans())
def test_the_depth_scan_agrees_with_the_parsed_value(value: object, ascii_only: bool) -> None:
    # Brackets, quotes and backslashes inside strings do not count: the parsed value's nesting is the answer.
    assert wire.json_depth(json.dumps(value, ensure_ascii=ascii_only)) == depth(value)


HALF_MB = wire.MAX_BODY_BYTES // 2


@pytest.mark.parametrize("text, deepest", [
    ("[" * 40 + '"' + '\\"' * (HALF_MB - 30) + "\\\n", 40),  # a broken string: 16 KB of it took 1.3 s
    ("[" * HALF_MB + "]" * HALF_MB, HALF_MB),  # 350 ms as a loop over the brackets
    (json.dumps({"text": '"\\[' * (wire.MAX_BODY_BYTES // 8)}), 1),  # escapes throughout
])
def test_the_depth_of_a_megabyte_is_scanned_in_milliseconds(text: str, deepest: int) -> None:
    cpu_s, found = least_cpu_s(lambda: wire.json_depth(text), 0.05)
    assert found == deepest
    assert cpu_s < 0.05, f"{cpu_s * 1000:.0f} ms"
