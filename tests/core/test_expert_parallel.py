"""parallelism.expert: a mixture's routed experts split over expert-parallel GPUs of the data-parallel group.

Counted by hand from DeepSeek-V3's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json):
58 sparse layers of 256 routed experts, each a gated MLP of 3 × 7,168 × 2,048 weights, so 653,908,770,816 routed-
expert parameters of the 671,026,404,352 DeepseekV3ForCausalLM counts (measured on the meta device).
"""

from dataclasses import replace

import pytest

from app import core

ARCH = core.get_preset("deepseek-v3").architecture
TOTAL = 671_026_404_352
EXPERTS = 58 * 256 * 3 * 7_168 * 2_048
TRAINING = core.Training(seq_len=4096, attention="flash", precision=core.precision_preset("bf16-fp32-master"))


def by_key(expert: int, zero_stage: int, data: int = 256) -> dict[str, int]:
    result = core.estimate(architecture=ARCH, training=TRAINING,
                           parallelism=core.Parallelism(data=data, zero_stage=zero_stage, expert=expert))
    return {buffer.key: buffer.bytes for buffer in result.ledger}


def test_routed_expert_count_by_hand() -> None:
    assert EXPERTS == 653_908_770_816
    assert core.param_count(ARCH) == TOTAL


@pytest.mark.parametrize("expert", [1, 8, 64, 256])
def test_unsharded_weights_hold_this_gpus_experts(expert: int) -> None:
    """ZeRO-1 shards the optimizer state and master copy only: the bf16 weights hold every dense parameter and
    1/expert of the routed experts."""
    assert by_key(expert, 1)["weights"] == 2 * (TOTAL - EXPERTS + EXPERTS // expert)


@pytest.mark.parametrize("expert", [8, 64])
def test_zero_sharded_states_do_not_change(expert: int) -> None:
    """Each expert's states shard over data ÷ expert GPUs, the rest over data: either way 1/data of the whole."""
    with_ep, without = by_key(expert, 3), by_key(1, 3)
    for key in ("weights", "master_weights", "optimizer_states"):
        assert with_ep[key] == without[key]
    assert with_ep["optimizer_states"] == -(-8 * TOTAL // 256)


def test_dispatch_buffer() -> None:
    # 4,096 tokens × k = 8 copies × h = 7,168 × 2 bytes (bf16), only with expert parallelism.
    assert by_key(64, 1)["moe.dispatch"] == 4096 * 8 * 7168 * 2
    assert "moe.dispatch" not in by_key(1, 1)


def test_cluster_weights_count_each_expert_replica() -> None:
    result = core.estimate(architecture=ARCH, training=TRAINING,
                           parallelism=core.Parallelism(data=256, zero_stage=1, expert=64))
    weights = next(buffer for buffer in result.ledger if buffer.key == "weights")
    # Dense parameters on all 256 GPUs, each expert on 256 ÷ 64 = 4 of them.
    assert weights.cluster_bytes == 2 * ((TOTAL - EXPERTS) * 256 + EXPERTS * 4)


@pytest.mark.parametrize(("arch", "layout", "message"), [
    (core.get_preset("llama-3-8b").architecture, {"data": 8, "expert": 2}, "has none"),
    (ARCH, {"data": 6, "expert": 3}, "split evenly"),
    (ARCH, {"data": 8, "expert": 16}, "divide data"),
])
def test_refused_by_name(arch: core.Architecture, layout: dict, message: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=arch, training=TRAINING, parallelism=core.Parallelism(**layout))
    assert caught.value.field == "parallelism.expert"
    assert message in str(caught.value)


def test_solver_counts_only_data_degrees_the_experts_divide() -> None:
    """The fewest data-parallel GPUs under expert parallelism over 64 is a multiple of 64 that fits and the one
    below it does not; the fixes skip changes the setup refuses (tensor parallelism for DeepSeek-V3's latent
    attention)."""
    from app.core.job import Job, with_field
    from app.core.solver import fixes, solve

    short = replace(TRAINING, seq_len=512)  # at 4,096 tokens the layers' activations alone exceed 80 GB
    job = Job(architecture=ARCH, training=short, parallelism=core.Parallelism(data=256, zero_stage=3, expert=64),
              gpu=core.get_gpu("h100-80gb"))
    answer = solve(job, "data", with_fixes=False)
    assert answer.value is not None and answer.value % 64 == 0
    assert with_field(job, "parallelism.data", answer.value).estimate().gpu.fits  # type: ignore[union-attr]
    if answer.value > 64:
        assert not with_field(job, "parallelism.data", answer.value - 64).estimate().gpu.fits  # type: ignore[union-attr]
    tight = Job(architecture=ARCH, training=short, parallelism=core.Parallelism(data=64, zero_stage=1, expert=64),
                gpu=core.get_gpu("h100-80gb"))
    assert all(fix.estimate.gpu is not None and fix.estimate.gpu.fits for fix in fixes(tight))


def test_gpt_oss_context_parallelism_needs_a_fused_kernel() -> None:
    arch = core.get_preset("gpt-oss-20b").architecture
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=arch, training=core.Training(seq_len=8192, attention="sdpa"),
                      parallelism=core.Parallelism(data=2, context=2))
    assert caught.value.field == "parallelism.context"
    core.estimate(architecture=arch, training=core.Training(seq_len=8192, attention="flash"),
                  parallelism=core.Parallelism(data=2, context=2))
