"""Any setup the API accepts is answered or refused by name: an estimate either raises DomainError (the API's 422)
or comes back whole, every buffer's lifetime in words and the API's answer serialisable. Setups are drawn by
Hypothesis over every field a question may vary (app.core.job.JOB_FIELDS), from presets of each family."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import core, wire
from app.core.finetuning import Finetuning
from app.core.job import JOB_FIELDS, Job, with_field
from tests.budget import examples

SETTINGS = settings(max_examples=examples(400), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# One preset of each family the core knows, small enough to keep each estimate quick.
PRESETS = ("gpt2", "llama-3.2-1b", "qwen3-0.6b", "gemma-3-1b", "olmo-2-7b", "phi-4", "mixtral-8x7b",
           "qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b")
# Degrees and sizes kept small: the rules that refuse a layout are the same at any size.
SMALL = {"training.micro_batch_size": 4, "training.seq_len": 4096, "training.gradient_accumulation_steps": 4,
         "training.loss_chunks": 16, "parallelism.data": 16, "parallelism.tensor": 8, "parallelism.pipeline": 8,
         "parallelism.virtual_stages": 4, "parallelism.context": 4, "parallelism.expert": 16,
         "parallelism.expert_tensor": 8, "parallelism.gpus_per_node": 8, "finetuning.rank": 64,
         "finetuning.frozen_layers": 4, "parallelism.first_stage_layers": 12, "parallelism.last_stage_layers": 12}
VARIED = tuple(path for path in JOB_FIELDS if path.split(".")[0] in ("training", "parallelism", "finetuning")
               and path not in ("training.framework_overhead_bytes", "parallelism.reduce_bucket_size"))


# Degrees most layouts accept (layers and heads divide by them), so that refusals do not crowd out answers.
COMMON = {"parallelism.pipeline": (1, 2, 4), "parallelism.tensor": (1, 2, 4, 8), "parallelism.expert": (1, 2, 4, 8),
          "parallelism.expert_tensor": (1, 2, 4)}


def _value(path: str) -> st.SearchStrategy[Any]:
    if path in COMMON:
        return st.sampled_from(COMMON[path])
    item = JOB_FIELDS[path]
    if item.kind == "bool":
        return st.booleans()
    if item.kind == "choice":
        return st.sampled_from(item.choices)
    if item.kind == "version":
        return st.sampled_from(("0.41.1", "0.43.0", "0.43.2"))
    return st.integers(min_value=item.low, max_value=min(item.high, SMALL.get(path, item.high)))


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    arch = core.get_preset(draw(st.sampled_from(PRESETS))).architecture
    finetuning = Finetuning()
    if draw(st.booleans()):
        # Targets every family has: its linear modules, or a mixture's attention (all-linear is refused there).
        finetuning = Finetuning(method=draw(st.sampled_from(("lora", "qlora"))),
                                target_modules=("q_proj", "v_proj") if arch.is_moe else ("all-linear",),
                                modules_to_save=tuple(sorted(draw(st.sets(st.sampled_from(("embed_tokens", "lm_head")))))))
    job = Job(architecture=arch, training=core.Training(finetuning=finetuning),
              parallelism=core.Parallelism(pipeline=draw(st.sampled_from((1, 2, 4)))), gpu=core.get_gpu("h100-80gb"))
    for path in draw(st.lists(st.sampled_from(VARIED), max_size=5, unique=True)):
        try:
            job = with_field(job, path, draw(_value(path)))
        except core.DomainError:
            continue
    return job


@SETTINGS
@given(jobs())
def test_every_setup_is_answered_or_refused_by_name(job: Job) -> None:
    try:
        result = job.estimate()
    except core.DomainError as error:
        assert error.field and error.message
        return
    for buffer in (*result.ledger, *(result.host.ledger if result.host else ())):
        allocated, freed = buffer.when
        assert allocated and freed
    answer = wire.estimate_json(result)
    assert answer["peak"]["bytes"] == result.peak.bytes
