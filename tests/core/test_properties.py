"""Properties of the memory model that hold for every setup, checked on setups Hypothesis draws.

- More work never takes less memory: the peak does not fall as the micro-batch, the sequence or the model grows.
- Sharding moves bytes, it does not remove them: over the data-parallel group that holds one replica, ZeRO keeps
  exactly one copy of each sharded model state, and every rank's share adds up to at least that copy.
- Recomputation and fused attention never save more activations than storing everything does, flash against
  eager under selective recomputation included.
- The peak lies between what lives all run (weights, master copy, optimizer state, overhead, ...) and the sum
  of every buffer (per_gpu, which ignores that not everything is alive at once).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from app import core
from app.core.categories import MODEL_STATE_CATEGORIES
from app.core.states import sharded_categories
from app.core.units import ceil_div
from tests.budget import examples

PROPERTY = settings(max_examples=examples(200), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

PRESETS = sorted(core.model_presets())
# Small and mid-size presets keep each estimate quick; the large ones have the same shapes, only more of them.
QUICK_PRESETS = ["gpt2", "gpt2-medium", "llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b"]
# Adafactor factors each matrix by its rows and columns: a bare parameter count is refused with it.
COUNT_OPTIMIZERS = tuple(name for name in core.OPTIMIZERS if name != "adafactor")

CHECKPOINTING_ORDER = ("none", "selective", "full")
# "op" holds for dense Llama-style layers only, so random setups would mostly be refused: tests/core/test_op_policy.py
assert set(CHECKPOINTING_ORDER) | {"op"} == set(core.CHECKPOINTING_CHOICES)

# The ledger's keys for the model states themselves (not the unsharded gradients ZeRO-2/3 hold until they are
# reduce-scattered, nor the layers ZeRO-3 gathers whole: those are working copies).
STATE_KEYS = {"weights": "weights", "master_weights": "master_weights", "optimizer_states": "optimizer_states",
              "gradients": "gradients", "gradients.layers": "gradients", "gradients.head": "gradients",
              "gradients.embedding": "gradients"}


def architecture(preset: str) -> core.Architecture:
    return core.get_preset(preset).architecture


def activations(result: core.Estimate) -> int:
    """The activations' bytes per GPU, which an estimate from an architecture always has."""
    value = result.per_gpu["activations"]
    assert value is not None
    return value


@st.composite
def trainings(draw, *, micro_batch_size=None, seq_len=None, checkpointing=None, attention=None,
              optimizers=core.OPTIMIZERS) -> core.Training:
    return core.Training(
        micro_batch_size=micro_batch_size if micro_batch_size is not None else draw(st.integers(1, 8)),
        seq_len=seq_len if seq_len is not None else draw(st.sampled_from([1, 7, 128, 512, 2048, 4096, 8192])),
        precision=core.precision_preset(draw(st.sampled_from(sorted(core.PRECISION_PRESETS)))),
        optimizer=draw(st.sampled_from(optimizers)),
        optimizer_implementation=draw(st.sampled_from(sorted(core.OPTIMIZER_IMPLEMENTATIONS))),
        adafactor_momentum=draw(st.booleans()),
        activation_checkpointing=checkpointing or draw(st.sampled_from(CHECKPOINTING_ORDER)),
        attention=attention or draw(st.sampled_from(sorted(core.ATTENTION_CHOICES))),
        implementation=draw(st.sampled_from(sorted(core.IMPLEMENTATION_CHOICES))),
        loop=draw(st.sampled_from(sorted(core.LOOPS))),
        gradient_accumulation_steps=draw(st.integers(1, 4)),
        framework_overhead_bytes=draw(st.sampled_from([0, 2**30])),
    )


@st.composite
def parallelisms(draw, arch: core.Architecture, *, data=None, zero_stage=None, pipeline=None) -> core.Parallelism:
    """Degrees that the architecture allows: heads and key/value heads divisible by the tensor degree, layers by
    the pipeline degree."""
    tensor = draw(st.sampled_from([t for t in (1, 2, 4, 8) if arch.num_attention_heads % t == 0
                                   and arch.kv_heads % t == 0]))
    if pipeline is None:
        pipeline = draw(st.sampled_from([p for p in (1, 2, 4) if arch.num_hidden_layers % p == 0]))
    return core.Parallelism(
        data=data if data is not None else draw(st.sampled_from([1, 2, 3, 8, 64])),
        tensor=tensor,
        pipeline=pipeline,
        sequence_parallel=draw(st.booleans()),
        zero_stage=zero_stage if zero_stage is not None else draw(st.integers(0, 3)),
    )


@st.composite
def setups(draw, *, presets=QUICK_PRESETS, pipeline=None, **training_fixed):
    arch = architecture(draw(st.sampled_from(presets)))
    return arch, draw(trainings(**training_fixed)), draw(parallelisms(arch, pipeline=pipeline))


def estimate(**kwargs) -> core.Estimate:
    """The estimate, or the example set aside where the model refuses the setup (a combination it does not cover,
    e.g. Megatron-LM with mixture-of-experts layers): the properties are about the answers it gives."""
    try:
        return core.estimate(**kwargs)
    except core.DomainError:
        reject()


def peak(arch, training, parallelism) -> int:
    return estimate(architecture=arch, training=training, parallelism=parallelism).peak.bytes


# --- more work, no less memory ------------------------------------------------------------------------


@PROPERTY
@given(setup=setups(), batches=st.lists(st.integers(1, 64), min_size=2, max_size=4, unique=True))
def test_the_peak_never_falls_as_the_micro_batch_grows(setup, batches):
    arch, training, parallelism = setup
    peaks = [peak(arch, dataclasses.replace(training, micro_batch_size=b), parallelism) for b in sorted(batches)]
    assert peaks == sorted(peaks), (sorted(batches), peaks)


@PROPERTY
@given(setup=setups(), lengths=st.lists(st.integers(1, 16384), min_size=2, max_size=4, unique=True))
def test_the_peak_never_falls_as_the_sequence_grows(setup, lengths):
    arch, training, parallelism = setup
    peaks = [peak(arch, dataclasses.replace(training, seq_len=s), parallelism) for s in sorted(lengths)]
    assert peaks == sorted(peaks), (sorted(lengths), peaks)


@PROPERTY
@given(setup=setups(), more=st.integers(1, 8))
def test_the_peak_never_falls_with_more_layers(setup, more):
    arch, training, parallelism = setup
    deeper = dataclasses.replace(arch, num_hidden_layers=arch.num_hidden_layers + more * parallelism.pipeline)
    assert core.param_count(deeper) > core.param_count(arch)
    assert peak(deeper, training, parallelism) >= peak(arch, training, parallelism)


@PROPERTY
@given(setup=setups(), wider_heads=st.integers(1, 4))
def test_the_peak_never_falls_with_a_larger_hidden_size(setup, wider_heads):
    """A larger hidden size with the same heads: each head grows by `wider_heads` × 8 elements, so the hidden
    size stays divisible by the number of heads (and by the tensor degree)."""
    arch, training, parallelism = setup
    head = arch.head_size
    wider = dataclasses.replace(arch, hidden_size=arch.num_attention_heads * (head + 8 * wider_heads),
                                head_dim=None if arch.head_dim is None else head + 8 * wider_heads)
    assert core.param_count(wider) > core.param_count(arch)
    assert peak(wider, training, parallelism) >= peak(arch, training, parallelism)


@PROPERTY
@given(training=trainings(optimizers=COUNT_OPTIMIZERS), parallelism=st.builds(core.Parallelism, data=st.sampled_from([1, 2, 8]),
                                                    tensor=st.sampled_from([1, 2, 8]), pipeline=st.sampled_from([1, 4]),
                                                    zero_stage=st.integers(0, 3)),
       counts=st.lists(st.integers(1, 10**12), min_size=2, max_size=4, unique=True))
def test_the_peak_never_falls_with_more_parameters_when_only_the_count_is_known(training, parallelism, counts):
    peaks = [estimate(num_params=n, training=training, parallelism=parallelism).peak.bytes for n in sorted(counts)]
    assert peaks == sorted(peaks), (sorted(counts), peaks)


# --- sharding moves bytes without removing them -----------------------------------------------------


def _states(result: core.Estimate) -> dict[str, tuple[int, int]]:
    """The model-state buffers of the ledger: key -> (bytes on the most-loaded rank, bytes over the cluster)."""
    return {buffer.key: (buffer.bytes, buffer.cluster_bytes) for buffer in result.ledger if buffer.key in STATE_KEYS}


def _by_category(states: dict[str, tuple[int, int]], which: int) -> dict[str, int]:
    sums = dict.fromkeys(MODEL_STATE_CATEGORIES, 0)
    for key, sizes in states.items():
        sums[STATE_KEYS[key]] += sizes[which]
    return sums


@PROPERTY
@given(data=st.data(), preset=st.sampled_from(QUICK_PRESETS), d=st.sampled_from([2, 3, 8, 64, 1000]),
       stage=st.integers(1, 3))
def test_zero_keeps_one_copy_of_each_sharded_state_over_the_data_parallel_group(data, preset, d, stage):
    """For a fixed data degree d: without ZeRO each of the d ranks holds a whole replica of every model state,
    so the group holds d copies. ZeRO-k splits the states it shards over the d ranks: the group then holds
    exactly one copy of each (the ZeRO-0 cluster total ÷ d, the same bytes as the one replica at data degree 1),
    and a state that stage k does not shard still counts d times. On one rank, each sharded buffer is the
    ceiling of an even share, so the d shares together cover it, with less than d bytes of rounding."""
    arch = architecture(preset)
    training = data.draw(trainings())
    base = data.draw(parallelisms(arch, data=d, zero_stage=0, pipeline=1))
    unsharded = _states(estimate(architecture=arch, training=training, parallelism=base))
    sharded = _states(estimate(architecture=arch, training=training,
                                    parallelism=dataclasses.replace(base, zero_stage=stage)))
    one_replica = _by_category(_states(estimate(architecture=arch, training=training,
                                                     parallelism=dataclasses.replace(base, data=1))), 1)
    assert sharded.keys() == unsharded.keys()
    shards = sharded_categories(stage)
    on_group, unsharded_group = _by_category(sharded, 1), _by_category(unsharded, 1)
    for category in MODEL_STATE_CATEGORIES:
        assert unsharded_group[category] == d * one_replica[category], category
        expected = one_replica[category] if category in shards else unsharded_group[category]
        assert on_group[category] == expected, category
    for key, (rank_bytes, _) in sharded.items():
        whole = unsharded[key][0]
        if STATE_KEYS[key] in shards:
            assert rank_bytes == ceil_div(whole, d) and 0 <= d * rank_bytes - whole < d, key
        else:
            assert rank_bytes == whole, key


@PROPERTY
@given(training=trainings(optimizers=COUNT_OPTIMIZERS), num_params=st.integers(1, 10**12), d=st.sampled_from([2, 3, 8, 64]),
       stage=st.integers(1, 3), tensor=st.sampled_from([1, 2, 8]))
def test_zero_keeps_one_copy_when_only_the_count_is_known(training, num_params, d, stage, tensor):
    base = core.Parallelism(data=d, tensor=tensor)
    unsharded = estimate(num_params=num_params, training=training, parallelism=base).cluster
    sharded = estimate(num_params=num_params, training=training,
                            parallelism=dataclasses.replace(base, zero_stage=stage)).cluster
    shards = sharded_categories(stage)
    for category in MODEL_STATE_CATEGORIES:
        expected = unsharded[category] // d if category in shards else unsharded[category]
        assert unsharded[category] % d == 0 and sharded[category] == expected, category


# --- recomputation and fused attention ----------------------------------------------------------------
# With one pipeline stage: per_gpu is the most-loaded stage's (by peak), and with several stages two setups may
# have different ones (eager's first stage against flash's last, which holds the logits), so their activations
# would not be of the same GPU.


@PROPERTY
@given(setup=setups(checkpointing="none", pipeline=1))
def test_recomputation_never_saves_more_activations(setup):
    arch, training, parallelism = setup
    saved = [activations(estimate(architecture=arch, parallelism=parallelism,
                                  training=dataclasses.replace(training, activation_checkpointing=policy)))
             for policy in CHECKPOINTING_ORDER]
    assert saved == sorted(saved, reverse=True), dict(zip(CHECKPOINTING_ORDER, saved, strict=True))


@PROPERTY
@given(setup=setups(attention="eager", pipeline=1), checkpointing=st.sampled_from(["none", "full"]), seq_len=st.integers(2, 8192))
def test_flash_attention_never_saves_more_activations_than_eager(setup, checkpointing, seq_len):
    """From two tokens on: for a single token Megatron's eager path keeps s² half-precision probabilities per head
    (2 bytes), fewer than flash's fp32 log-sum-exp, s × 4 bytes (the test below)."""
    arch, eager, parallelism = setup
    eager = dataclasses.replace(eager, activation_checkpointing=checkpointing, seq_len=seq_len)
    flash = dataclasses.replace(eager, attention="flash")
    saved = {training.attention: activations(estimate(architecture=arch, training=training, parallelism=parallelism))
             for training in (eager, flash)}
    assert saved["flash"] <= saved["eager"], saved


def test_for_one_token_flash_keeps_more_than_megatron_eager():
    arch = architecture("llama-2-7b")
    training = core.Training(seq_len=1, attention="eager", implementation="megatron")
    eager, flash = (core.estimate(architecture=arch, training=dataclasses.replace(training, attention=kernel))
                    for kernel in ("eager", "flash"))
    per_layer = arch.num_attention_heads * (4 - 2)  # fp32 log-sum-exp against half-precision probabilities
    assert activations(flash) - activations(eager) == arch.num_hidden_layers * per_layer


@pytest.mark.parametrize("preset", ["llama-2-7b", "gpt2"])
def test_flash_attention_never_saves_more_activations_than_eager_under_selective_recomputation(preset):
    arch = architecture(preset)
    training = core.Training(seq_len=2048, attention="eager", activation_checkpointing="selective")
    eager, flash = (core.estimate(architecture=arch, training=dataclasses.replace(training, attention=kernel))
                    for kernel in ("eager", "flash"))
    assert activations(flash) <= activations(eager)


# --- the peak between what lives all run and the sum of everything -----------------------------------


def _check_peak_bounds(result: core.Estimate) -> None:
    assert result.peak.bytes == max(point.bytes for point in result.timeline)
    assert result.peak.bytes <= result.per_gpu.total_bytes
    # Buffers that live from before step 1 to the end (weights, the master copy, the overhead, ...) are alive at
    # every event; every "run" buffer (the optimizer state too, once created) is alive from step 2's start on.
    from_start = sum(b.bytes for b in result.ledger if b.life.scope == "run" and b.life.first == "start")
    whole_run = sum(b.bytes for b in result.ledger if b.life.scope == "run")
    assert min(point.bytes for point in result.timeline) >= from_start
    step_two_start = next(point for point in result.timeline if point.step == 2)
    assert step_two_start.bytes == whole_run
    assert result.peak.bytes >= whole_run >= from_start
    # What lives all run holds this rank's weights, master copy and optimizer state (ZeRO-3's gathered layers,
    # working copies, come on top of its weights).
    lasting = {category: sum(b.bytes for b in result.ledger if b.category == category and b.life.scope == "run")
               for category in ("weights", "master_weights", "optimizer_states")}
    assert lasting["master_weights"] == result.per_gpu["master_weights"]
    assert lasting["optimizer_states"] == result.per_gpu["optimizer_states"]
    weights = result.per_gpu["weights"]
    assert weights is not None and 0 < lasting["weights"] <= weights


@PROPERTY
@given(setup=setups(presets=PRESETS))
def test_the_peak_lies_between_what_lives_all_run_and_the_sum(setup):
    arch, training, parallelism = setup
    _check_peak_bounds(estimate(architecture=arch, training=training, parallelism=parallelism))


@PROPERTY
@given(training=trainings(optimizers=COUNT_OPTIMIZERS), num_params=st.integers(1, 10**15),
       parallelism=st.builds(core.Parallelism, data=st.sampled_from([1, 2, 8]), tensor=st.sampled_from([1, 2]),
                             pipeline=st.sampled_from([1, 4]), zero_stage=st.integers(0, 3)))
def test_the_peak_lies_between_what_lives_all_run_and_the_sum_for_a_count(training, num_params, parallelism):
    result = estimate(num_params=num_params, training=training, parallelism=parallelism)
    assume(result.per_gpu["activations"] is None)
    _check_peak_bounds(result)
