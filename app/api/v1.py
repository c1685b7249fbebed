"""JSON API v1: the memory model over HTTP. All memory figures are integers in bytes."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic_core import to_json

from app import core, wire
from app.api.config_schemas import ExportRequest, ExportResponse, ImportRequest, ImportResponse
from app.api.errors import domain_error_detail
from app.api.schemas import (
    EstimateRequest,
    EstimateResponse,
    GpuOut,
    ModelPresetOut,
    PrecisionPresetOut,
    PresetsResponse,
    SolveRequest,
    SolveResponse,
    SweepRequest,
    SweepResponse,
    run_estimate,
    to_job,
)
from app.configs import export, import_config, import_files
from app.core.series import series
from app.core.solver import solve

router = APIRouter(prefix="/api/v1", tags=["v1"])


class AnswerJSON(Response):
    """An answer already in its documented shape (app.wire builds it; the schema tests check it against the
    response model): serialised directly, without validating it a second time on the way out."""

    media_type = "application/json"

    def render(self, content: object) -> bytes:
        return to_json(content)

_EXAMPLE_ERROR = core.DomainError("parallelism.tensor",
                                  "num_attention_heads (32) must be divisible by the tensor-parallel degree (3)")
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "Invalid input: each entry of `detail` names the field (`loc`) and what is wrong (`msg`).",
        "content": {"application/json": {"example": {"detail": domain_error_detail(_EXAMPLE_ERROR)}}},
    }
}


@router.post("/estimate", response_model=EstimateResponse, responses=UNPROCESSABLE,
             summary="Estimate memory for a training step")
def post_estimate(request: EstimateRequest) -> AnswerJSON:
    """Memory for one training step: per GPU (the most-loaded rank) and for the whole cluster, in bytes."""
    # In a worker thread, as every route that computes: the allocator's replay takes milliseconds (3 to 15 ms per
    # estimate on the 2-core machine, docs/BENCHMARKS.md), which on the event loop would hold up every other request.
    return AnswerJSON(wire.estimate_json(run_estimate(request)))


@router.post("/solve", response_model=SolveResponse, responses=UNPROCESSABLE,
             summary="Solve for the largest batch or sequence, or the fewest GPUs")
def post_solve(request: SolveRequest) -> AnswerJSON:
    """The largest micro-batch or sequence, or the fewest data-parallel GPUs, whose peak fits the GPU; and for a
    setup that does not fit, the single changes that make it fit, cheapest first, each with its cost."""
    return AnswerJSON(wire.solution_json(solve(to_job(request), request.target)))


@router.post("/sweep", response_model=SweepResponse, responses=UNPROCESSABLE,
             summary="Sweep one field over many values")
def post_sweep(request: SweepRequest) -> AnswerJSON:
    """The peak, the per-GPU sum and the fit as one field takes each of up to 1,000 values; each point is what
    /estimate answers for that value."""
    field = request.vary.field
    return AnswerJSON(wire.series_json(field, series(to_job(request), field, request.vary.values)))


@router.post("/import", response_model=ImportResponse, responses=UNPROCESSABLE,
             summary="Import a training config as an estimate body")
def post_import(request: ImportRequest) -> AnswerJSON:
    """A training config (DeepSpeed, TrainingArguments, accelerate, axolotl, torchtitan, Megatron-LM flags), or
    several files of one run, read into an estimate body, with what was understood, ignored and assumed."""
    if request.files is not None:
        return AnswerJSON(import_files([item.model_dump() for item in request.files]))
    return AnswerJSON(import_config(request.kind or "auto", request.text))


@router.post("/export", response_model=ExportResponse, responses=UNPROCESSABLE,
             summary="Export an estimate body as a framework config")
def post_export(request: ExportRequest) -> AnswerJSON:
    """An estimate body written as a DeepSpeed, TrainingArguments, accelerate or axolotl config; the fields the file
    cannot carry are listed with why."""
    body = request.model_dump(include={"model", "training", "parallelism", "finetuning", "gpu"})
    return AnswerJSON(export.export_config(body, request.kind))


@router.get("/presets", response_model=PresetsResponse, summary="List the model and precision presets")
def get_presets() -> PresetsResponse:
    """Model presets with exact parameter counts and their sources, and the precision presets."""
    models = [
        ModelPresetOut(
            id=preset.id,
            name=preset.name,
            param_count=core.param_count(preset.architecture),
            architecture={k: v for k, v in dataclasses.asdict(preset.architecture).items() if k != "extras"},
            architecture_source=preset.architecture_source,
            param_count_source=preset.param_count_source,
            hub_id=preset.hub_id,
        )
        for preset in core.model_presets().values()
    ]
    precisions = [
        PrecisionPresetOut(id=p.id, name=p.name, description=p.description, dtypes=dataclasses.asdict(p.precision))
        for p in core.PRECISION_PRESETS.values()
    ]
    return PresetsResponse(models=models, precisions=precisions, model_types=list(core.SUPPORTED_MODEL_TYPES))


@router.get("/gpus", response_model=list[GpuOut], summary="List the GPU catalogue")
def get_gpus() -> list[GpuOut]:
    """The GPU catalogue: usable capacity in bytes as the driver reports it, with its source."""
    return [GpuOut(id=g.id, name=g.name, capacity=g.capacity_bytes, source=g.source, context_bytes=g.context_bytes,
                   workspace_bytes=g.workspace_bytes, context_source=g.context_source, interconnect=g.interconnect)
            for g in core.gpu_catalogue().values()]
