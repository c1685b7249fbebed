"""Reading a Hugging Face ``config.json`` field by field: each value checked for its type and range, each error
naming the field as the request spells it (``model.hf_config.num_hidden_layers``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.core.architecture import MAX_LAYERS
from app.core.errors import DomainError

FIELD_PREFIX: Final = "model.hf_config"
# Config numbers beyond this are no model's (the architecture's own ranges are far smaller); refusing
# them early keeps huge integers out of float conversion.
MAX_CONFIG_NUMBER: Final = 10**18


def short_value(value: Any) -> str:
    """A value for an error message, cut short (a pasted config may hold anything)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "an integer of more than 30 digits"
    return text if len(text) <= 60 else text[:57] + "..."


class ConfigReader:
    def __init__(self, config: Mapping[str, Any], prefix: str = FIELD_PREFIX) -> None:
        self.config = config
        self.prefix = prefix

    def _field(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def optional_int(self, name: str, default: int | None) -> int | None:
        value = self.config.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise DomainError(self._field(name), f"must be an integer, got {short_value(value)}")
        return value

    def layers(self, name: str, default: int | None) -> int:
        """A layer count, checked against its limit before any per-layer list is built from it."""
        value = self.int(name, default)
        if not 1 <= value <= MAX_LAYERS:
            raise DomainError(self._field(name), f"must be between 1 and {MAX_LAYERS:,}, got {short_value(value)}")
        return value

    def int(self, name: str, default: int | None = None) -> int:
        value = self.optional_int(name, default)
        if value is None:
            raise DomainError(self._field(name), f"config.json has no {name!r}, which this model type needs")
        return value

    def bool(self, name: str, default: bool) -> bool:
        value = self.config.get(name, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise DomainError(self._field(name), f"must be true or false, got {value!r}")
        return value

    def float(self, name: str, default: float) -> float:
        value = self.config.get(name, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DomainError(self._field(name), f"must be a number, got {short_value(value)}")
        if isinstance(value, int) and abs(value) > MAX_CONFIG_NUMBER:
            raise DomainError(self._field(name), f"must be at most {MAX_CONFIG_NUMBER:,} in size")
        return float(value)

    def str_list(self, name: str) -> list[str] | None:
        value = self.config.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise DomainError(self._field(name), f"must be a list of strings, got {short_value(value)}")
        return value

    def str(self, name: str, default: str) -> str:
        value = self.config.get(name, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise DomainError(self._field(name), f"must be a string, got {value!r}")
        return value


def output_router_logits(reader: ConfigReader) -> bool:
    """``output_router_logits`` (default false): the model keeps every sparse layer's router logits for the
    load-balancing loss (load_balancing_loss_func in modeling_mixtral.py and its copies, transformers 5.24).

    ``router_aux_loss_coef`` only scales that loss (a 0-d tensor): it is checked to be a number and changes
    no memory.
    """
    reader.float("router_aux_loss_coef", 0.0)
    return reader.bool("output_router_logits", False)


def window_layers(reader: ConfigReader, layers: int, *, pattern: int, window: int | None) -> tuple[int | None, int]:
    """The window and how many layers attend within it: those ``layer_types`` names ``sliding_attention``, or without
    layer_types all but every `pattern`-th; `window` is the configuration class's default ``sliding_window``."""
    layer_types = reader.str_list("layer_types")
    if layer_types is None:
        layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    elif len(layer_types) != layers:
        raise DomainError(reader._field("layer_types"), f"must name {layers} layers (num_hidden_layers), "
                                                        f"got {len(layer_types)}")
    sliding = sum(kind == "sliding_attention" for kind in layer_types)
    span = reader.optional_int("sliding_window", window)
    return (span, sliding) if span is not None and sliding else (None, 0)
