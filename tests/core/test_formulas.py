"""Every ledger line's formula multiplies out to the bytes beside it.

A formula is read as arithmetic once its words are set aside: the names of tensors (``embed.token_ids``), the
counting words (layers, params, embedding, head), the unit (B, bit) and where a total lives ("on tensor rank 1 of
2"); what follows a colon is its explanation, and ⌈a ÷ b⌉ a ceiling. A line that still holds words after that (a
sentence about a kernel, "set by you") is not checkable and is counted apart. Where a formula states a total
("(32 layers × … ) = 4,015,263,744 params"), its two sides must agree as well. Setups are drawn over every field a
question may vary, from a preset of each family (as in test_any_setup_answers)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from hypothesis import given

from app import core
from app.core.job import Job
from tests.budget import examples
from tests.core.test_any_setup_answers import SETTINGS, jobs

_WORDS = re.compile(r"\b(?:(?:kept|recomputed) )?(?:dense |sliding-window )?(?:(?:full|bottom|through|off) )?"
                    r"(?:layers?|embedding|head|params|elements|tokens|chunks?)\b")
_NAME = re.compile(r"\b[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+\b")
_WHERE = re.compile(r"\bon (?:tensor|expert|pipeline) rank \d+ of \d+\b")
_ARITHMETIC = re.compile(r"[\d\s*/+\-().c_]+")


class Unequal(AssertionError):
    pass


def value(formula: str) -> Fraction | None:
    """The formula's value in bytes, or None where it is not arithmetic."""
    text = re.sub(r"\[.*?\]", "", formula.split(": ")[0])
    if " = " in text:
        left, _, right = text.partition(" = ")
        stated, whole = _arithmetic(right.split(" × ")[0]), _arithmetic(right)
        counted = _arithmetic(left)
        if counted is not None and stated is not None and counted != stated:
            raise Unequal(f"{formula!r}: {counted} on the left, {stated} stated")
        return whole
    return _arithmetic(text)


def _arithmetic(text: str) -> Fraction | None:
    for pattern in (_WHERE, _NAME, _WORDS):
        text = pattern.sub("", text)
    text = re.sub(r"\b(?:B|bits?)\b", "", text)
    text = text.replace("⌈", " _c(").replace("⌉", ")").replace("×", "*").replace("÷", "/")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    if not re.search(r"\d", text) or not _ARITHMETIC.fullmatch(text):
        return None
    text = re.sub(r"(\d+(?:\.\d+)?)", r"F('\1')", text)
    try:
        result = eval(text, {"F": Fraction, "_c": math.ceil, "__builtins__": {}})  # digits and operators only
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None
    return Fraction(result)


def test_the_reader_of_formulas():
    assert value("2 B × ⌈1 × 4,096 × 128,256 ÷ 2⌉") == 2 * math.ceil(4096 * 128256 / 2)
    assert value("32 layers × 545,554,432 B") == 32 * 545_554_432
    assert value("embed.token_ids 32,768 B + rope.cos_sin 2,097,152 B") == 32_768 + 2_097_152
    assert value("(2 layers × 10 + head 5) = 25 params on tensor rank 1 of 2 × 16 bit ÷ 8") == 50
    assert value("set by you") is None
    assert value("4 B × 3: the kernel keeps one copy") == 12
    try:
        value("2 × (2 layers × 10) = 20 params × 32 bit ÷ 8")
    except Unequal:
        pass
    else:
        raise AssertionError("a stated total that the terms do not give passed")


CHECKED: list[int] = []


@SETTINGS
@given(jobs())
def test_every_checkable_formula_gives_its_bytes(job: Job) -> None:
    try:
        result = job.estimate(reserve=False)
    except core.DomainError:
        return
    for buffer in (*result.ledger, *(result.host.ledger if result.host else ())):
        bytes_ = value(buffer.formula)
        if bytes_ is None:
            continue
        CHECKED.append(1)
        assert bytes_ == buffer.bytes, f"{buffer.key}: {buffer.formula!r} gives {bytes_}, the ledger {buffer.bytes:,}"


def test_most_lines_were_checkable():
    # Runs after the search above (pytest keeps the module's order): it checked lines, not only skipped them.
    assert len(CHECKED) >= examples(1_000)  # 2.5 a setup drawn, of the search's budget
