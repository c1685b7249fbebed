"""The categories memory is reported in, and a breakdown keyed by them.

One table holds each category's label, its one-letter mark and what it means; the API, the page and
the command line all read it from here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Category:
    id: str
    label: str
    short: str
    about: str


CATEGORY_TABLE: Final[dict[str, Category]] = {
    category.id: category
    for category in (
        Category("weights", "Weights", "W",
                 "The parameters the forward and backward passes read, in the training dtype (with ZeRO-3, also "
                 "the layers gathered whole while they compute)."),
        Category("gradients", "Gradients", "G",
                 "One gradient per parameter, written by the backward pass and read by the optimizer step (with "
                 "ZeRO-2/3, also a layer's unsharded gradient until it is reduce-scattered)."),
        Category("master_weights", "Master weights", "M",
                 "A higher-precision copy of the weights that the optimizer updates, so small updates are not lost."),
        Category("optimizer_states", "Optimizer state", "O",
                 "What the optimizer keeps between steps (Adam: two moments per parameter). It is created by the "
                 "first optimizer.step()."),
        Category("activations", "Activations", "A",
                 "Tensors the forward pass saves for the backward pass; they grow with batch size and sequence "
                 "length, and are freed layer by layer in backward."),
        Category("temporary", "Temporary", "T",
                 "Short-lived buffers: logits and their gradients, recomputation, autocast copies, the optimizer "
                 "step's own scratch, and the framework's own overhead."),
    )
}
CATEGORIES: Final = tuple(CATEGORY_TABLE)
MODEL_STATE_CATEGORIES: Final = ("weights", "gradients", "master_weights", "optimizer_states")


class Breakdown(Mapping[str, int | None]):
    """Bytes per category, in table order. Activations and temporary are None when the architecture is unknown."""

    __slots__ = ("_listed", "_mapped")

    def __init__(self, values: Mapping[str, int | None]) -> None:
        unknown = set(values) - set(CATEGORIES)
        if unknown:
            raise KeyError(f"not a category: {', '.join(sorted(unknown))}")
        self._listed: Sequence[int | None] | None = None
        self._mapped: dict[str, int | None] | None = {category: values.get(category, 0) for category in CATEGORIES}

    @classmethod
    def of(cls, values: list[int]) -> Breakdown:
        """From one value per category, in table order (the mapping is built when first read)."""
        if len(values) != len(CATEGORIES):
            raise ValueError(f"expected {len(CATEGORIES)} values, got {len(values)}")
        return cls.of_trusted(values)  # the caller hands the list over

    @classmethod
    def of_trusted(cls, values: Sequence[int]) -> Breakdown:
        """`of` for a caller that built `values` one per category itself (the timeline's sweep), unchecked; a tuple
        serves as well as a list."""
        breakdown = cls.__new__(cls)
        breakdown._listed, breakdown._mapped = values, None
        return breakdown

    @property
    def _values(self) -> dict[str, int | None]:
        if self._mapped is None:
            self._mapped = dict(zip(CATEGORIES, self._listed or (), strict=True))
        return self._mapped

    def __getitem__(self, category: str) -> int | None:
        return self._values[category]

    def __iter__(self) -> Iterator[str]:
        return iter(CATEGORIES)

    def __len__(self) -> int:
        return len(CATEGORIES)

    def __repr__(self) -> str:
        return f"Breakdown({self._values!r})"

    @property
    def total_bytes(self) -> int:
        values = self._listed if self._mapped is None else self._mapped.values()
        return sum(value or 0 for value in values or ())

    def categories(self) -> dict[str, int | None]:
        """Every category and its bytes, as a plain dict (``dict(breakdown)`` without the mapping protocol's cost)."""
        if self._mapped is None:
            return dict(zip(CATEGORIES, self._listed or (), strict=True))
        return dict(self._mapped)

    def as_dict(self) -> dict[str, int | None]:
        """Every category, then ``total``: the sum of the categories."""
        return dict(self._values) | {"total": self.total_bytes}
