"""Reading one control's text: integers, counts (7B), tokens (4k), sizes (24 GiB), probabilities and factors, each
refused in the page's words with the control named."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Final

from app.core.finetuning import MAX_VERSION_CHARS, VERSION_PATTERN
from app.core.gpus import MAX_CUSTOM_BYTES, MIN_CUSTOM_BYTES

_SEPARATORS = re.compile(r"[,_\s\u00a0\u202f']")
_SCALED = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)$", re.IGNORECASE)
COUNT_SUFFIXES: Final = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
BYTE_UNITS: Final = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}



class FormError(ValueError):
    """One control's value cannot be read; `control` is its name."""

    def __init__(self, control: str, message: str) -> None:
        super().__init__(message)
        self.control = control
        self.message = message


class Waiting(FormError):
    """A control left empty that the page waits for (a config.json not yet pasted): a note, not an error."""



# No field takes a number of more digits than this (the largest, a byte count, is under 10^16): longer
# input is refused before it is converted, so a 100,000-digit value costs nothing.
MAX_DIGITS: Final = 24


def _quoted(raw: str) -> str:
    text = raw.strip()
    return repr(text if len(text) <= 40 else text[:37] + "...")


def parse_int(control: str, raw: str) -> int:
    """A whole number; thousands separators (commas, spaces, underscores) are allowed."""
    text = _SEPARATORS.sub("", raw)
    if not text:
        raise FormError(control, "Enter a whole number.")
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise FormError(control, f"Enter a whole number (got {_quoted(raw)}).")
    if len(text.lstrip("+-").lstrip("0")) > MAX_DIGITS:
        raise FormError(control, f"Enter a number of at most {MAX_DIGITS} digits.")
    return int(text)


def _parse_scaled(control: str, raw: str, suffixes: Mapping[str, int], example: str) -> int:
    text = _SEPARATORS.sub("", raw)
    if not text:
        raise FormError(control, f"Enter a number, e.g. {example}.")
    match = _SCALED.match(text) if len(text) <= 4 * MAX_DIGITS else None
    if not match or match.group(2).lower() not in suffixes:
        raise FormError(control, f"Enter a number, e.g. {example} (got {_quoted(raw)}).")
    try:
        value = _scaled(control, raw, Decimal(match.group(1)), suffixes[match.group(2).lower()])
    except (InvalidOperation, ArithmeticError):
        raise FormError(control, f"Enter a number, e.g. {example}.") from None
    if value != value.to_integral_value():
        raise FormError(control, f"{raw.strip()} is not a whole number.")
    return int(value)


def _scaled(control: str, raw: str, number: Decimal, factor: int) -> Decimal:
    """`number` × `factor`, refused by magnitude before any arithmetic: 1e999999 would otherwise become a
    million-digit integer, and 1e-999999999 would underflow to a zero that passes for a whole number."""
    if number and number.adjusted() + len(str(factor)) > MAX_DIGITS:
        raise FormError(control, f"{raw.strip()[:40]} is far larger than any value this field takes.")
    if number and number.adjusted() < -MAX_DIGITS:
        raise FormError(control, f"{raw.strip()[:40]} is less than one, not a whole number.")
    return number * factor


def parse_count(control: str, raw: str) -> int:
    """A parameter count: ``8030261248``, ``8,030,261,248``, ``8.03e9`` or ``8.03B`` (k, M, B, T)."""
    return _parse_scaled(control, raw, COUNT_SUFFIXES, "7B or 6,738,415,616")


# Context lengths as people write them: 4k is 4,096 tokens, 128k 131,072, 1M 1,048,576 (powers of two).
TOKEN_SUFFIXES: Final = {"": 1, "k": 1 << 10, "m": 1 << 20}


def parse_tokens(control: str, raw: str) -> int:
    """A sequence length: ``4096``, ``4,096``, ``4k`` (4,096) or ``32K`` (32,768); k and M are powers of two, as
    context lengths are quoted."""
    return _parse_scaled(control, raw, TOKEN_SUFFIXES, "4096 or 4k")


def parse_bytes(control: str, raw: str) -> int:
    """A size in bytes, optionally with a unit: ``1 GiB``, ``512 MiB``, ``2GB``, ``1073741824``."""
    return _parse_scaled(control, raw, BYTE_UNITS, "1 GiB or 512 MiB")


def parse_gpu_capacity(control: str, raw: str) -> int:
    """A custom GPU's memory: ``24 GiB``, ``96 GB`` or a byte count, between 1 GiB and 4 TiB (as the API takes)."""
    if not raw.strip():
        raise Waiting(control, "Enter the GPU's memory, e.g. 24 GiB or 96 GB.")
    size = _parse_scaled(control, raw, BYTE_UNITS, "24 GiB or 96 GB")
    if not MIN_CUSTOM_BYTES <= size <= MAX_CUSTOM_BYTES:
        raise FormError(control, f"GPU memory must be between 1 GiB and 4 TiB (got {raw.strip()[:40]}).")
    return size


def parse_probability(control: str, raw: str) -> float:
    if not raw.strip():
        raise FormError(control, "Enter a probability between 0 and 1.")
    try:
        if len(raw.strip()) > 4 * MAX_DIGITS:
            raise ValueError(raw)
        return float(raw)
    except ValueError:
        raise FormError(control, f"Enter a probability between 0 and 1 (got {_quoted(raw)}).") from None


def parse_version(control: str, raw: str) -> str:
    """A package version as pip shows it, such as 0.41.1 (PEP 440: release numbers and optional suffixes)."""
    text = raw.strip()
    if len(text) > MAX_VERSION_CHARS or not re.match(VERSION_PATTERN, text):
        raise FormError(control, f"Enter a version such as 0.41.1 (got {_quoted(raw)}).")
    return text


def parse_factor(control: str, raw: str) -> float:
    """A multiple such as 1.25 (a finite number; the schema checks its range)."""
    text = raw.strip().removesuffix("×").removesuffix("x").strip()
    try:
        if not text or len(text) > 4 * MAX_DIGITS:
            raise ValueError(raw)
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(raw)
    except ValueError:
        raise FormError(control, f"Enter a multiple such as 1 or 1.25 (got {_quoted(raw)}).") from None
    return value
