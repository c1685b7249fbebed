"""The one error type the domain core raises for input it cannot model."""

from __future__ import annotations


class DomainError(ValueError):
    """Input that the memory model rejects, naming the field at fault.

    `field` is a dotted path in the API's terms (e.g. ``"parallelism.tensor"``,
    ``"model.num_key_value_heads"``) so both edges can point a person at the control to fix. `kind` sorts the
    rejection for a program reading it (the API's ``type``): ``value_error`` unless a cause needs telling apart,
    such as the Hub's ``hub_gated`` or ``hub_offline``.
    """

    def __init__(self, field: str, message: str, *, kind: str = "value_error") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.kind = kind
