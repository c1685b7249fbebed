"""training.fp8: torchao's float8 recipes (torchao 0.18, torchao/float8/float8_linear.py).

matmul_with_hp_or_float8_args saves the 16-bit input and weight for backward (ctx.save_for_backward(input_hp,
weight_hp_t)) and casts both to float8 for the forward matmul; backward casts the output's gradient (once per
scaling axis), the weight and the input. So the activations are 16-bit training's and the float8 copies are
transients; with FSDP2's float8 all-gather (torchao/float8/fsdp_utils.py, fsdp_pre_all_gather) the gathered
linear weights take one byte each.
"""

from dataclasses import replace

import pytest

from app import core

ARCH = core.get_preset("llama-3-8b").architecture  # h 4,096, MLP 14,336, 32 heads, 8 K/V heads
BASE = core.Training(seq_len=8192, attention="flash", precision=core.precision_preset("bf16-fp32-master"),
                     framework="fsdp2")
LAYOUT = core.Parallelism(data=8, zero_stage=3)


def ledger(fp8: str) -> dict[str, int]:
    result = core.estimate(architecture=ARCH, training=replace(BASE, fp8=fp8), parallelism=LAYOUT)
    return {buffer.key: buffer.bytes for buffer in result.ledger}


def test_activations_are_sixteen_bit_trainings() -> None:
    assert ledger("torchao")["activations.layers"] == ledger("none")["activations.layers"]


def test_casts_of_the_largest_linear_by_hand() -> None:
    n = 8192
    # Forward, down_proj (in 14,336, out 4,096): n × 14,336 input + 4,096 × 14,336 weight, one byte each.
    assert ledger("torchao")["fp8.forward_casts"] == n * 14336 + 4096 * 14336 == 176_160_768
    # Backward, gate_proj (in 4,096, out 14,336): 2 × n × 14,336 + 14,336 × 4,096 + n × 4,096.
    assert ledger("torchao")["fp8.backward_casts"] == 2 * n * 14336 + 14336 * 4096 + n * 4096 == 327_155_712
    assert "fp8.forward_casts" not in ledger("none")


def test_float8_all_gather_halves_the_gathered_linear_weights() -> None:
    # A layer: 218,103,808 linear weights (4,096² × 2 + 4,096 × 1,024 × 2 + 3 × 4,096 × 14,336) and two norms of
    # 4,096; two layers gathered (the one computing and the next).
    linear = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336
    assert ledger("none")["fsdp2.gathered.layers"] == 2 * (linear + 2 * 4096) * 2
    assert ledger("torchao-fsdp-fp8")["fsdp2.gathered.layers"] == 2 * (linear * 1 + 2 * 4096 * 2)


@pytest.mark.parametrize(("training", "layout", "field"), [
    (replace(BASE, fp8="torchao-fsdp-fp8", framework="pytorch"), LAYOUT, "training.fp8"),
    (replace(BASE, fp8="torchao", precision=core.precision_preset("fp32")), LAYOUT, "training.fp8"),
    (replace(BASE, fp8="torchao", framework="pytorch", implementation="megatron"), core.Parallelism(), "training.fp8"),
])
def test_refused_by_name(training: core.Training, layout: core.Parallelism, field: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=training, parallelism=layout)
    assert caught.value.field == field


def test_torchtitan_float8_is_read() -> None:
    from app.configs import import_config

    text = """
[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]
[training]
local_batch_size = 1
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
[float8]
enable_fsdp_float8_all_gather = true
"""
    request = import_config("torchtitan", text)["request"]
    assert request["training"]["fp8"] == "torchao-fsdp-fp8"
    unsharded = import_config("torchtitan", text.replace("data_parallel_shard_degree = 8",
                                                          "data_parallel_shard_degree = 1"))
    assert unsharded["request"]["training"]["fp8"] == "torchao"
