"""Recomputing some layers: every k-th (torchtitan's selective_ac_option) or the first N of each stage (Megatron-LM's
block method). Each figure here is checked against the estimates of the two policies the mixture is made of: a kept
layer keeps what it keeps without recomputation, a recomputed one what it keeps under full recomputation."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from app import core
from app.core.finetuning import Finetuning
from app.core.job import Job, with_field
from app.core.recompute import recomputed_below, stage_recomputed
from app.core.solver import fixes
from app.main import app
from tests.core.test_formulas import value

client = TestClient(app)
LLAMA = core.get_preset("llama-3-8b").architecture  # 32 layers
H100 = core.get_gpu("h100-80gb")


def _training(**changes) -> core.Training:
    return core.Training(**{"seq_len": 4096, "precision": core.precision_preset("bf16-fp32-master"), **changes})


def _layers_line(result: core.Estimate) -> int:
    (line,) = [buffer for buffer in result.ledger if buffer.key == "activations.layers"]
    return line.bytes


def _per_layer(checkpointing: str) -> int:
    result = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing=checkpointing), reserve=False)
    return _layers_line(result) // LLAMA.num_hidden_layers


@pytest.mark.parametrize(("every", "recomputed"), [(2, 16), (3, 10), (4, 8), (32, 1), (33, 0)])
def test_every_kth_layer_keeps_the_mixture_of_both_policies(every, recomputed):
    result = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full",
                                                                  recompute_every=every), reserve=False)
    kept = LLAMA.num_hidden_layers - recomputed
    assert _layers_line(result) == kept * _per_layer("none") + recomputed * _per_layer("full")


@pytest.mark.parametrize("first", [1, 8, 16, 31])
def test_the_first_n_layers_keep_the_mixture_of_both_policies(first):
    result = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full",
                                                                  recompute_first_layers=first), reserve=False)
    kept = LLAMA.num_hidden_layers - first
    assert _layers_line(result) == kept * _per_layer("none") + first * _per_layer("full")


def test_every_layer_and_all_layers_are_full_recomputation():
    full = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full"), gpu=H100)
    for changes in ({"recompute_every": 1}, {"recompute_first_layers": 32}, {"recompute_first_layers": 40}):
        same = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full", **changes),
                             gpu=H100)
        assert same.peak == full.peak
        assert _layers_line(same) == _layers_line(full)


def test_the_rebuild_counts_where_the_top_layer_is_recomputed():
    # The top layer (the 32nd) is recomputed with every 2nd layer: its rebuild adds to its backward. With the first
    # 16 layers recomputed the 16 kept layers above have freed more than one layer rebuilds by then.
    def rebuilt(**changes) -> int:
        result = core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full", **changes),
                               reserve=False)
        return sum(buffer.bytes for buffer in result.ledger if buffer.key == "recompute")

    full = rebuilt()
    assert full > 0
    assert rebuilt(recompute_every=2) == full
    assert rebuilt(recompute_first_layers=16) == 0
    # The 30th recomputed, the 31st and 32nd kept above it: they have freed what they keep, less the gradients they
    # leave (measured on CPU: docs/VALIDATION.md, "Recomputing some layers")
    plain = core.estimate(architecture=LLAMA, training=_training(), reserve=False)
    (gradients,) = [buffer.bytes for buffer in plain.ledger if buffer.key == "gradients.layers"]
    freed = _per_layer("none") - gradients // LLAMA.num_hidden_layers
    assert rebuilt(recompute_every=3) == max(0, full - 2 * freed) > 0


def test_more_recomputed_layers_lower_the_peak():
    # Sharded over 8 GPUs, so that the peak is in the step, where the layers' activations are, not at the optimizer
    sharded = core.Parallelism(data=8, zero_stage=3)
    peaks = [core.estimate(architecture=LLAMA, training=_training(activation_checkpointing="full",
                                                                  recompute_first_layers=n),
                           parallelism=sharded, reserve=False).peak.bytes
             for n in (1, 4, 8, 16, 24, 31)]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)
    none = core.estimate(architecture=LLAMA, training=_training(), parallelism=sharded, reserve=False).peak.bytes
    assert none > peaks[0]


def test_which_layers_each_policy_recomputes():
    every = stage_recomputed("full", 10, every=3)  # layers 3, 6 and 9 counted from 1: indices 2, 5, 8
    assert (every.count, every.highest, every.top) == (3, 8, False)
    assert [index for index in range(10) if every.is_recomputed(index)] == [2, 5, 8]
    first = stage_recomputed("full", 10, first_layers=4)
    assert [index for index in range(10) if first.is_recomputed(index)] == [0, 1, 2, 3]
    assert recomputed_below(first, 2) == 2
    assert stage_recomputed("selective", 10, every=3).count == 0
    assert stage_recomputed("full", 10, every=2).top


@pytest.mark.parametrize(("training", "field"), [
    ({"activation_checkpointing": "selective", "recompute_every": 2}, "training.recompute_every"),
    ({"activation_checkpointing": "none", "recompute_first_layers": 4}, "training.recompute_first_layers"),
    ({"activation_checkpointing": "full", "recompute_every": 2, "recompute_first_layers": 4},
     "training.recompute_first_layers"),
    ({"activation_checkpointing": "full", "recompute_every": 0}, "training.recompute_every"),
    ({"activation_checkpointing": "full", "recompute_first_layers": 0}, "training.recompute_first_layers"),
])
def test_a_layer_choice_without_full_recomputation_is_refused_by_name(training, field):
    response = client.post("/api/v1/estimate", json={"model": {"preset": "llama-3-8b"}, "training": training})
    assert response.status_code == 422
    locations = [".".join(str(part) for part in error["loc"][1:]) for error in response.json()["detail"]]
    assert field in locations, response.json()


def test_the_fixes_offer_the_fewest_layers_that_fit():
    job = Job(architecture=LLAMA, training=_training(seq_len=12288, framework="torchtitan"),
              parallelism=core.Parallelism(data=8, zero_stage=3), gpu=H100)
    found = [fix for fix in fixes(job) if "training.recompute_first_layers" in fix.change]
    assert len(found) == 1
    (fix,) = found
    n = fix.change["training.recompute_first_layers"]
    assert isinstance(n, int) and 1 <= n < LLAMA.num_hidden_layers
    full = with_field(job, "training.activation_checkpointing", "full")
    fitted, short = (with_field(full, "training.recompute_first_layers", k).estimate().gpu for k in (n, n - 1))
    assert fitted is not None and short is not None
    assert fitted.fits and not short.fits
    # cheaper in compute than recomputing every layer, and offered before it
    every = [f for f in fixes(job) if f.change == {"training.activation_checkpointing": "full"}]
    assert every and (fix.cost.extra_compute or 0) < (every[0].cost.extra_compute or 0)
    order = list(fixes(job))
    assert order.index(fix) < order.index(every[0])


def test_a_stage_with_fewer_layers_than_k_recomputes_none():
    arch = dataclasses.replace(LLAMA, num_hidden_layers=2)
    kept = core.estimate(architecture=arch, training=_training(), reserve=False)
    none_recomputed = core.estimate(architecture=arch, training=_training(activation_checkpointing="full",
                                                                          recompute_every=3), reserve=False)
    assert none_recomputed.peak.bytes == kept.peak.bytes
    assert _layers_line(none_recomputed) == _layers_line(kept)


@pytest.mark.parametrize("preset", ["llama-3-8b", "gemma-3-1b", "qwen3-30b-a3b", "deepseek-v2-lite"])
@pytest.mark.parametrize("changes", [{"recompute_every": 2}, {"recompute_every": 3}, {"recompute_first_layers": 4}])
@pytest.mark.parametrize("finetuning", [Finetuning(),
                                        Finetuning(method="lora", target_modules=("q_proj", "o_proj")),
                                        Finetuning(frozen_layers=5)])
def test_the_saved_tensors_formula_multiplies_out_to_its_bytes(preset, changes, finetuning):
    arch = core.get_preset(preset).architecture
    training = _training(activation_checkpointing="full", finetuning=finetuning, **changes)
    try:
        result = core.estimate(architecture=arch, training=training, reserve=False)
    except core.DomainError as error:  # frozen layers of a mixture with dense layers: refused whatever recomputes
        assert error.field == "finetuning.method"
        return
    (line,) = [buffer for buffer in result.ledger if buffer.key == "activations.layers"]
    # Gemma 3's sliding-window layers add a line in words (what sdpa keeps past the window): not arithmetic
    assert value(line.formula) == (None if arch.sliding_window_layers else line.bytes), line.formula
    for buffer in result.ledger:
        checked = value(buffer.formula)
        assert checked is None or checked == buffer.bytes, (buffer.key, buffer.formula)


@pytest.mark.parametrize(("field", "values"), [("training.recompute_first_layers", [1, 8, 16, 31]),
                                                 ("training.recompute_every", [4, 3, 2, 1])])
def test_a_sweep_varies_the_recomputed_layers(field, values):
    body = {"model": {"preset": "llama-3-8b"}, "gpu": "h100-80gb", "parallelism": {"data": 8, "zero_stage": 3},
            "training": {"seq_len": 8192, "activation_checkpointing": "full"}, "vary": {"field": field, "values": values}}
    response = client.post("/api/v1/sweep", json=body)
    assert response.status_code == 200, response.text
    peaks = [point["peak"]["bytes"] for point in response.json()["points"]]
    assert [point["value"] for point in response.json()["points"]] == values
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)  # more recomputed, lower peak
