"""parallelism.expert_tensor: each routed expert's matrices split over their own degree (Megatron-LM's
--expert-tensor-parallel-size), the expert grid carved from tensor × data × context.

Counted by hand from Mixtral-8x7B's config.json (https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/
config.json): hidden 4,096, 32 layers, 32 heads of 128 with 8 K/V heads, 8 experts of width 14,336 routed top-2,
vocabulary 32,000, untied embeddings.
"""

from typing import Any

import pytest

from app import core
from app.core.setup import data_step

ARCH = core.get_preset("mixtral-8x7b").architecture
H, WIDTH, LAYERS, E, K, VOCAB = 4096, 14_336, 32, 8, 2, 32_000
EXPERT = 3 * H * WIDTH  # one expert's gate, up and down matrices
TRAINING = core.Training(seq_len=4096, attention="flash", precision=core.precision_preset("bf16"))


def estimate(**layout: Any) -> core.Estimate:
    return core.estimate(architecture=ARCH, training=TRAINING, parallelism=core.Parallelism(**layout))


def by_key(result: core.Estimate) -> dict[str, int]:
    return {buffer.key: buffer.bytes for buffer in result.ledger}


def test_mixtral_counts_by_hand() -> None:
    attention = H * H + 2 * (8 * 128) * H + H * H
    per_layer = attention + E * EXPERT + E * H + 2 * H  # + the router's E × h and two RMSNorms
    assert core.param_count(ARCH) == LAYERS * per_layer + 2 * VOCAB * H + H


def test_equal_to_tensor_is_the_default() -> None:
    """Megatron-LM's default expert-tensor degree is the tensor-parallel one: saying so changes nothing."""
    default = estimate(data=8, tensor=8, expert=8)
    explicit = estimate(data=8, tensor=8, expert=8, expert_tensor=8)
    assert by_key(default) == by_key(explicit)
    assert default.peak == explicit.peak


def test_whole_experts_on_each_gpu() -> None:
    """tensor 8, expert 8, expert_tensor 1 (no ZeRO): each GPU holds one whole expert per layer, 1/8 of the
    attention (Q and O split by rows or columns, K and V too), the replicated router and norms, and 1/8 of the
    vocabulary rows of the embedding and the output layer."""
    attention_rank = (H * H + 2 * (8 * 128) * H + H * H) // 8
    per_layer = attention_rank + (E // 8) * EXPERT + E * H + 2 * H
    params = LAYERS * per_layer + 2 * (VOCAB // 8) * H + H
    assert by_key(estimate(data=8, tensor=8, expert=8, expert_tensor=1))["weights"] == 2 * params
    # The same experts split 8 ways with the rest (expert_tensor = tensor): 1/8 of one expert per layer.
    per_layer_split = attention_rank + EXPERT // 8 + E * H + 2 * H
    assert by_key(estimate(data=8, tensor=8, expert=8))["weights"] == 2 * (LAYERS * per_layer_split
                                                                          + 2 * (VOCAB // 8) * H + H)


def test_zero_sharded_states_do_not_move() -> None:
    """Each expert shards over the expert data-parallel group (tensor × data ÷ (expert_tensor × expert) = 8 GPUs for
    1 × 8 on 8 × 8): 1/64 of each expert either way, like the rest."""
    folded, plain = estimate(data=8, tensor=8, expert=8, expert_tensor=1, zero_stage=3), \
        estimate(data=8, tensor=8, expert=8, zero_stage=3)
    for key in ("weights", "optimizer_states"):
        assert by_key(folded)[key] == by_key(plain)[key]


def test_routed_tokens_shared_out_over_tensor_ranks() -> None:
    """With expert_tensor 1 under tensor 8 each GPU's experts take 1/8 of the micro-batch's n·k token copies, at
    full width; the n·k × h tensors shrink by 8, the experts' n·k × I ones do not (their width grows by 8)."""
    n = 4096
    folded = {item.name: item.bytes for item in estimate(data=8, tensor=8, expert=8, expert_tensor=1)
              .layer_activations}
    plain = {item.name: item.bytes for item in estimate(data=8, tensor=8, expert=8).layer_activations}
    assert plain["moe.gathered_tokens"] == n * K * H * 2
    assert folded["moe.gathered_tokens"] == n * K * H * 2 // 8
    assert folded["moe.gate_up"] == plain["moe.gate_up"] == n * K * 2 * WIDTH * 2 // 8
    # The all-to-all send buffer follows the copies this GPU sends.
    assert by_key(estimate(data=8, tensor=8, expert=8, expert_tensor=1))["moe.dispatch"] == n * K * H * 2 // 8


def test_expert_grid_may_span_tensor_ranks() -> None:
    """MoE parallel folding: 8 expert-parallel GPUs taken from the 8 tensor-parallel ones, one data-parallel GPU."""
    result = estimate(data=1, tensor=8, expert=8, expert_tensor=1)
    assert by_key(result)["weights"] == by_key(estimate(data=8, tensor=8, expert=8, expert_tensor=1))["weights"]
    # Without expert_tensor the expert GPUs must come from data × context, as before.
    with pytest.raises(core.DomainError) as caught:
        estimate(data=1, tensor=8, expert=8)
    assert caught.value.field == "parallelism.expert"


@pytest.mark.parametrize(("arch", "layout", "field", "message"), [
    (core.get_preset("llama-3-8b").architecture, {"tensor": 8, "expert_tensor": 1}, "parallelism.expert_tensor",
     "has none"),
    (ARCH, {"data": 2, "tensor": 2, "expert_tensor": 8}, "parallelism.expert_tensor", "must divide"),
    (ARCH, {"data": 2, "tensor": 4, "expert": 8, "expert_tensor": 2}, "parallelism.expert", "must divide"),
    (ARCH, {"tensor": 2, "expert_tensor": 0}, "parallelism.expert_tensor", "between"),
])
def test_refused_by_name(arch: core.Architecture, layout: dict, field: str, message: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=arch, training=TRAINING, parallelism=core.Parallelism(**layout))
    assert caught.value.field == field
    assert message in caught.value.message


@pytest.mark.parametrize(("layout", "step"), [
    ({}, 1),
    ({"expert": 8}, 8),  # the expert GPUs come from data: multiples of 8
    ({"tensor": 8, "expert": 8, "expert_tensor": 1}, 1),  # 8 experts' GPUs folded into the 8 tensor-parallel ones
    ({"tensor": 4, "expert": 8, "expert_tensor": 1}, 2),  # a grid of 8 over 4 tensor-parallel GPUs: data in twos
    ({"tensor": 4, "expert": 4, "expert_tensor": 2, "context": 2}, 1),
])
def test_data_step(layout: dict, step: int) -> None:
    assert data_step(core.Parallelism(**layout)) == step


def test_expert_load_scales_what_the_experts_take() -> None:
    """parallelism.expert_load 1.25 (a capacity factor of 1.25 with padding): the most-loaded GPU's experts take
    1.25 × the balanced n·k copies; what the router keeps (n × E, n × k) and the all-to-all send buffer (this GPU's
    own copies) do not change."""
    n = 4096
    balanced = {item.name: item.bytes for item in estimate(data=8, expert=8).layer_activations}
    loaded = {item.name: item.bytes for item in estimate(data=8, expert=8, expert_load=1.25).layer_activations}
    assert loaded["moe.gathered_tokens"] == 5 * n * K * H * 2 // 4
    assert loaded["moe.gate_up"] == 5 * n * K * 2 * WIDTH * 2 // 4
    assert loaded["moe.expert_output"] == 5 * balanced["moe.expert_output"] // 4
    for name in ("moe.router_probs_fp32", "moe.topk_indices", "moe.routing_order"):
        assert loaded[name] == balanced[name]
    assert by_key(estimate(data=8, expert=8, expert_load=1.25))["moe.dispatch"] == n * K * H * 2


@pytest.mark.parametrize(("layout", "message"), [
    ({"data": 8, "expert": 8, "expert_load": 0.9}, "at most 4"),  # 8 GPUs × min(k = 2, 1 expert each) ÷ 2
    ({"data": 8, "expert": 8, "expert_load": 4.5}, "at most 4"),
    ({"data": 8, "expert_load": 1.5}, "it is 1"),
])
def test_expert_load_bounds(layout: dict, message: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        estimate(**layout)
    assert caught.value.field == "parallelism.expert_load"
    assert message in caught.value.message
