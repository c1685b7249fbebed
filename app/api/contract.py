"""The cross-field rules the API's JSON Schema states (if/then clauses), and the model's sources: what a client or
a generator of requests sees in the OpenAPI document. The core decides every rule (app/core/rules.py,
app/wire.py architecture_from); what JSON Schema cannot state is said in each field's description instead."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from app import core, wire
from app.core import setup as limits

ARCHITECTURE_FIELDS = wire.ARCHITECTURE_FIELDS
# The fields a model needs without a preset, a count or a config (wire.architecture_from).
CUSTOM_ARCHITECTURE: Final = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


# --- cross-field rules the schema states -----------------------------------------------------------------
# The core decides (app/core/rules.py, wire.architecture_from); these clauses state in JSON Schema the rules it
# can state exactly, so that a client or a generator sees them. What it cannot state (divisibility by the model's
# heads or layers, anything that depends on the architecture) is said in the field's description instead.

Schema: TypeAlias = dict[str, Any]
Clauses: TypeAlias = list[Any]  # as pydantic's json_schema_extra takes them
NOT_NULL: Final[Schema] = {"not": {"type": "null"}}


def _given(*names: str) -> Schema:
    """Each named property present and not null."""
    return {"required": list(names), "properties": {name: NOT_NULL for name in names}}


def _at(path: str, schema: Schema, *, present: bool = True) -> Schema:
    """`schema` for the value at a dotted request path; with present=False an absent value (its default) passes."""
    *parents, name = path.split(".")
    result: Schema = {"properties": {name: schema}}
    for parent in reversed(parents):
        result = {"properties": {parent: result}}
    if present:
        node = result
        for part in path.split("."):
            node["required"] = [part]
            node = node["properties"][part]
    return result


def _all(*schemas: Schema) -> Schema:
    return schemas[0] if len(schemas) == 1 else {"allOf": list(schemas)}


@dataclass(frozen=True)
class SchemaRule:
    """One cross-field rule as JSON Schema: when `when` holds, `then` must. `fields` are the request paths it
    reads; a sweep that varies one of them leaves the rule to each value's estimate."""

    fields: tuple[str, ...]
    when: Schema
    then: Schema

    def clause(self) -> Schema:
        return {"if": self.when, "then": self.then}


def _not(value: object) -> Schema:
    return {"not": {"const": value}}


_TE_RECIPES: Final = [id for id, recipe in limits.FP8_RECIPES.items() if recipe.transformer_engine is not None]
_TORCHAO_RECIPES: Final = [id for id in limits.FP8_RECIPES if id != "none" and id not in _TE_RECIPES]
_NOT_MEGATRON_FRAMEWORKS: Final = ["deepspeed", "hf-trainer", "torchtitan", "fsdp2"]
_OPTIMIZER_OFFLOADS: Final = [id for id, offload in limits.OFFLOADS.items() if offload.optimizer]
_PARAMETER_OFFLOADS: Final = [id for id, offload in limits.OFFLOADS.items() if offload.parameters]
# Precision with bf16 activations, as a preset id or explicit dtypes.
_BF16: Final[Schema] = {"anyOf": [
    {"enum": [id for id, preset in core.PRECISION_PRESETS.items() if preset.precision.activations == "bf16"]},
    {"type": "object", "properties": {"activations": {"const": "bf16"}}}]}
_NUM_PARAMS: Final[Schema] = _at("model.num_params", {"type": "integer"})
# The architecture's rules run when there is one: the model is not a bare parameter count.
_ARCHITECTURE: Final[Schema] = _at("model.num_params", {"type": "null"}, present=False)
_MODEL_FIELDS: Final = ("model.num_params", "model.preset")

# Full recomputation of every layer: what the reentrant checkpoint and activation offloading need.
_EVERY_LAYER_RECOMPUTED: Final[Schema] = _all(_at("activation_checkpointing", {"const": "full"}),
                                              _at("recompute_every", {"const": 1}, present=False),
                                              _at("recompute_first_layers", {"type": "null"}, present=False))

# Rules within one section, stated in that section's schema (paths relative to it).
TRAINING_RULES: Final = (
    SchemaRule(("training.framework", "training.implementation"),
               _at("framework", {"enum": _NOT_MEGATRON_FRAMEWORKS}), _at("implementation", _not("megatron"), present=False)),
    SchemaRule(("training.framework", "training.implementation"),
               _at("framework", {"const": "megatron"}), _at("implementation", {"const": "megatron"})),
    SchemaRule(("training.loss", "training.implementation"),
               _at("loss", _not("standard")), _at("implementation", _not("megatron"), present=False)),
    SchemaRule(("training.fp8", "training.implementation", "training.precision"),
               _at("fp8", {"enum": _TE_RECIPES}),
               _all(_at("implementation", {"const": "megatron"}), _at("precision", _BF16, present=False))),
    SchemaRule(("training.fp8", "training.implementation", "training.precision"),
               _at("fp8", {"enum": _TORCHAO_RECIPES}),
               _all(_at("implementation", _not("megatron"), present=False), _at("precision", _BF16, present=False))),
    SchemaRule(("training.use_reentrant", "training.activation_checkpointing", "training.recompute_every",
                "training.recompute_first_layers"), _at("use_reentrant", {"const": True}), _EVERY_LAYER_RECOMPUTED),
    SchemaRule(("training.activation_offload", "training.activation_checkpointing", "training.recompute_every",
                "training.recompute_first_layers"), _at("activation_offload", _not("none")), _EVERY_LAYER_RECOMPUTED),
)
PARALLELISM_RULES: Final = (
    SchemaRule(("parallelism.offload", "parallelism.zero_stage"),
               _at("offload", {"enum": _OPTIMIZER_OFFLOADS}), _at("zero_stage", {"minimum": 1})),
    SchemaRule(("parallelism.offload", "parallelism.zero_stage"),
               _at("offload", {"enum": _PARAMETER_OFFLOADS}), _at("zero_stage", {"const": 3})),
)
FINETUNING_RULES: Final = (
    SchemaRule(("finetuning.method", "finetuning.freeze_embeddings", "finetuning.frozen_layers"),
               _at("method", _not("full")),
               _all(_at("freeze_embeddings", {"const": False}, present=False),
                    _at("frozen_layers", {"const": 0}, present=False))),
    SchemaRule(("finetuning.method", "finetuning.modules_to_save"),
               _at("method", {"const": "full"}, present=False), _at("modules_to_save", {"maxItems": 0}, present=False)),
)
# Rules across sections, stated in the request's schema. Few: each doubles the branches a generator explores, and
# beyond four at the request's root schemathesis 4 gives up on the operation; the rest are in the descriptions.
REQUEST_RULES: Final = (
    SchemaRule((*_MODEL_FIELDS, "parallelism.first_stage_layers", "parallelism.last_stage_layers",
                "parallelism.pipeline", "parallelism.virtual_stages"),
               _all(_ARCHITECTURE, {"anyOf": [_at("parallelism.first_stage_layers", {"type": "integer"}),
                                              _at("parallelism.last_stage_layers", {"type": "integer"})]}),
               _all(_at("parallelism.pipeline", {"minimum": 2}),
                    _at("parallelism.virtual_stages", {"maximum": 1}, present=False))),
    SchemaRule(("training.framework", "parallelism.zero_stage"),
               _at("training.framework", {"const": "fsdp2"}), _at("parallelism.zero_stage", {"const": 3})),
    SchemaRule(("parallelism.context", "training.attention"),
               _at("parallelism.context", {"minimum": 2}), _at("training.attention", _not("eager"), present=False)),
)
# Stated in words (each field's description) for want of room: fp8, megatron or the fsdp2 convention with
# fine-tuning; Transformer Engine or the megatron convention above ZeRO stage 1; float8 all-gather outside the fsdp2
# convention; adapters under autocast; a bare parameter count with fine-tuning; virtual stages on one stage; the
# expert load without expert parallelism.


def clauses(rules: tuple[SchemaRule, ...]) -> Clauses:
    return [rule.clause() for rule in rules]


def request_rules(*, varied: bool = False) -> Clauses:
    """The request's rules as `if`/`then` clauses. For a sweep (`varied`), a rule whose fields include vary.field is
    left out where it is varied: each value's estimate checks it."""
    if not varied:
        return clauses(REQUEST_RULES)
    return [{"if": _all(rule.when, _at("vary.field", {"not": {"enum": list(rule.fields)}}, present=False)),
             "then": rule.then} for rule in REQUEST_RULES]


def _model_rules() -> Clauses:
    """One source of the model (a preset, a count, a config, a Hub id or the architecture fields); the architecture
    fields only over a preset or alone, and then the four that size it; a revision only with a Hub id."""
    sources = wire.MODEL_SOURCES
    no_architecture: Schema = {"properties": {name: {"type": "null"} for name in ARCHITECTURE_FIELDS}}
    return [
        {"not": {"anyOf": [_given(a, b) for a, b in itertools.combinations(sources, 2)]}},
        {"if": _given("num_params"), "then": no_architecture},
        {"if": _given("hf_config"), "then": no_architecture},
        {"if": _given("hub"), "then": no_architecture},
        {"if": _given("revision"), "then": _given("hub")},
        {"if": {"not": {"anyOf": [_given(name) for name in sources]}}, "then": _given(*CUSTOM_ARCHITECTURE)},
    ]
