"""Dtype widths and the few integer conversions every formula shares.

Widths are kept in bits so that 8-bit (and narrower) types never round to zero bytes;
bytes are derived once, rounding a tensor's total up to whole bytes.
"""

from __future__ import annotations

from typing import Final

DTYPE_BITS: Final[dict[str, int]] = {
    "fp32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "int8": 8,
}

BITS_PER_BYTE: Final = 8


def tensor_bytes(elements: int, bits: int) -> int:
    """Bytes of a tensor with `elements` entries of `bits` each: ceil(elements * bits / 8)."""
    return (elements * bits + BITS_PER_BYTE - 1) // BITS_PER_BYTE


def ceil_div(numerator: int, denominator: int) -> int:
    """The share of the most-loaded of `denominator` ranks when `numerator` items are split."""
    return -(-numerator // denominator)

