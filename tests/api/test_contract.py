"""The cross-field rules the OpenAPI document states: each clause is there, a body breaking it is refused with a
422 naming the field (the core decides, as before), and what schemathesis generates from the document as valid is
refused only for the rules the schema leaves to the fields' descriptions."""

from __future__ import annotations

import json
import re
from collections import Counter

import jsonschema_rs
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from app.api import schemas
from app.main import app
from tests import budget

client = TestClient(app)
DOCUMENT = app.openapi()
COMPONENTS = DOCUMENT["components"]["schemas"]


def _validator(name: str):
    """A validator for one component, its references pointed at the document's components."""
    defs = json.loads(json.dumps(COMPONENTS).replace("#/components/schemas/", "#/$defs/"))
    return jsonschema_rs.validator_for({"$ref": f"#/$defs/{name}", "$defs": defs})


def _clauses(name: str) -> list[dict]:
    return COMPONENTS[name].get("allOf", [])


def test_sections_carry_their_rules():
    assert len(_clauses("TrainingIn")) == len(schemas.TRAINING_RULES)
    assert len(_clauses("ParallelismIn")) == len(schemas.PARALLELISM_RULES)
    assert len(_clauses("FinetuningIn")) == len(schemas.FINETUNING_RULES)
    assert len(_clauses("EstimateRequest")) == len(schemas.REQUEST_RULES)
    offload = _clauses("ParallelismIn")[0]
    assert offload["if"]["required"] == ["offload"] and offload["then"]["properties"]["zero_stage"] == {"minimum": 1}
    uneven = _clauses("EstimateRequest")[0]
    assert uneven["then"]["allOf"][0]["properties"]["parallelism"]["properties"]["pipeline"] == {"minimum": 2}


def test_solve_requires_a_gpu_and_model_a_known_preset():
    solve = _clauses("SolveRequest")
    ids_or_custom = {"anyOf": [{"enum": list(schemas.core.gpu_catalogue())}, {"type": "object"}]}
    assert {"properties": {"gpu": ids_or_custom}, "required": ["gpu"]} in solve  # a custom GPU is an object
    assert "llama-3-8b" in COMPONENTS["ModelIn"]["properties"]["preset"]["enum"]


def test_every_example_is_valid():
    for name in ("EstimateRequest", "SolveRequest", "SweepRequest", "ExportRequest", "ImportRequest", "ModelIn",
                 "FinetuningIn"):
        validator = _validator(name)
        for example in COMPONENTS[name].get("examples", []):
            assert validator.is_valid(example), (name, example)


LLAMA = {"preset": "llama-3-8b"}
# A body breaking one stated rule, the field the 422 names, and the same body with the rule kept.
BROKEN = [
    ("EstimateRequest", {"model": LLAMA, "parallelism": {"first_stage_layers": 8}}, "parallelism.first_stage_layers",
     {"model": LLAMA, "parallelism": {"first_stage_layers": 8, "pipeline": 2}}),
    ("EstimateRequest", {"model": LLAMA, "parallelism": {"offload": "optimizer"}}, "parallelism.offload",
     {"model": LLAMA, "parallelism": {"offload": "optimizer", "zero_stage": 1}}),
    ("EstimateRequest", {"model": LLAMA, "parallelism": {"offload": "optimizer+parameters", "zero_stage": 2}},
     "parallelism.offload", {"model": LLAMA, "parallelism": {"offload": "optimizer+parameters", "zero_stage": 3}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"framework": "fsdp2"}}, "parallelism.zero_stage",
     {"model": LLAMA, "training": {"framework": "fsdp2"}, "parallelism": {"zero_stage": 3}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"framework": "megatron"}}, "training.framework",
     {"model": LLAMA, "training": {"framework": "megatron", "implementation": "megatron"}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"attention": "eager"}, "parallelism": {"context": 2}},
     "parallelism.context", {"model": LLAMA, "parallelism": {"context": 2}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"fp8": "te-delayed"}}, "training.fp8",
     {"model": LLAMA, "training": {"fp8": "te-delayed", "implementation": "megatron"}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"fp8": "torchao", "precision": "fp32"}}, "training.fp8",
     {"model": LLAMA, "training": {"fp8": "torchao"}}),
    ("EstimateRequest", {"model": LLAMA, "finetuning": {"method": "full", "modules_to_save": ["lm_head"]}},
     "finetuning.modules_to_save", {"model": LLAMA, "finetuning": {"method": "lora", "modules_to_save": ["lm_head"]}}),
    ("EstimateRequest", {"model": LLAMA, "finetuning": {"method": "lora", "frozen_layers": 2}},
     "finetuning.frozen_layers", {"model": LLAMA, "finetuning": {"method": "full", "frozen_layers": 2}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"use_reentrant": True}}, "training.use_reentrant",
     {"model": LLAMA, "training": {"use_reentrant": True, "activation_checkpointing": "full"}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"use_reentrant": True, "activation_checkpointing": "full",
                                                     "recompute_every": 2}}, "training.use_reentrant",
     {"model": LLAMA, "training": {"use_reentrant": True, "activation_checkpointing": "full", "recompute_every": 1}}),
    ("EstimateRequest", {"model": LLAMA, "training": {"activation_offload": "torchtune"}},
     "training.activation_offload",
     {"model": LLAMA, "training": {"activation_offload": "torchtune", "activation_checkpointing": "full"}}),
    ("EstimateRequest", {"model": {"preset": "llama-9"}}, "model.preset", {"model": LLAMA}),
    ("EstimateRequest", {"model": {"hidden_size": 4096}}, "model.num_hidden_layers",
     {"model": {"hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32, "vocab_size": 1000}}),
    ("SolveRequest", {"model": LLAMA, "target": "seq_len", "gpu": None}, "gpu",
     {"model": LLAMA, "target": "seq_len", "gpu": "h100-80gb"}),
    ("SolveRequest", {"model": {"num_params": 10**9}, "target": "seq_len", "gpu": "h100-80gb"}, "model",
     {"model": {"num_params": 10**9}, "target": "data", "gpu": "h100-80gb"}),
]
ROUTES = {"EstimateRequest": "/api/v1/estimate", "SolveRequest": "/api/v1/solve"}


@pytest.mark.parametrize(("name", "body", "field", "kept"), BROKEN, ids=[case[2] for case in BROKEN])
def test_a_body_breaking_a_clause_is_invalid_and_refused_by_name(name, body, field, kept):
    validator = _validator(name)
    assert not validator.is_valid(body)
    assert validator.is_valid(kept)
    response = client.post(ROUTES[name], json=body)
    assert response.status_code == 422
    assert [".".join(map(str, item["loc"][1:])) for item in response.json()["detail"]] == [field]
    assert client.post(ROUTES[name], json=kept).status_code == 200


# --- what the generator draws as valid ----------------------------------------------------------------------

# The refusals of the rules the schema states: none of these may meet a body the schema calls valid.
STATED = re.compile("|".join([
    "uneven stages need more than one", "the solver needs a GPU", "unknown preset", "unknown GPU",
    "give only one of", "cannot be combined with", "is required for a custom architecture", "offloading runs under ZeRO",
    "parameters are offloaded only", r"ring attention\); choose sdpa or flash", "the fsdp2 convention shards",
    "the megatron convention is Megatron-LM's own", "Megatron-LM keeps its own gradient buffer and distributed "
    "optimizer; choose the pytorch", "Megatron-LM runs its own loop", "vocabulary-parallel cross entropy",
    "Transformer Engine's FP8 recipes are modelled as", "torchao's float8 recipes run the model in bf16",
    "freezing applies to full fine-tuning", "applies to LoRA and QLoRA", "needs an architecture .*not num_params\\)",
    "give text \\(with kind\\)", "is the checkpoint variant of full recomputation of every layer",
    "torchtune refuses offloading without it", "is modelled with every layer recomputed",
]))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
REFUSED: Counter[str] = Counter()  # what was refused, for a failing run's report


def _positive(path: str, examples: int):
    operation = schema[path]["POST"]

    @given(case=operation.as_strategy())
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call()
        if response.status_code == 422:
            detail = response.json()["detail"][0]
            message = f"{'.'.join(map(str, detail['loc'][1:]))}: {detail['msg']}"
            REFUSED[message[:80]] += 1
            assert not STATED.search(detail["msg"]), (case.body, message)
        else:
            assert response.status_code == 200, response.text

    return check


@pytest.mark.parametrize("path", ["/api/v1/estimate", "/api/v1/solve", "/api/v1/sweep", "/api/v1/export",
                                  "/api/v1/import"])
def test_valid_bodies_are_refused_only_for_unstated_rules(path):
    _positive(path, examples=budget.examples(25))()
