"""Fine-tuning against published figures: peft's counts, the QLoRA paper's bits per parameter, and what trains."""

from __future__ import annotations

import dataclasses

import pytest

from app import core
from app.core.finetuning import Finetuning, quantized_bytes, stored_weight_bytes

LLAMA2 = core.get_preset("llama-2-7b").architecture
GPT2 = core.get_preset("gpt2").architecture


def _estimate(arch, finetuning: Finetuning, precision: str = "bf16", **training) -> core.Estimate:
    return core.estimate(architecture=arch, training=core.Training(
        precision=core.precision_preset(precision), finetuning=finetuning, **training))


def test_llama2_lora_q_v_counts_as_peft_prints():
    # peft's print_trainable_parameters for Llama-2-7B with LoraConfig(r=8, target_modules=["q_proj", "v_proj"]):
    # "trainable params: 4,194,304 || all params: 6,742,609,920".
    result = _estimate(LLAMA2, Finetuning(method="lora", rank=8, target_modules=("q_proj", "v_proj")))
    assert (result.trainable_param_count, result.param_count) == (4_194_304, 6_742_609_920)


def test_all_linear_is_every_layer_linear_but_the_output_layer():
    h, i, layers, r = 4096, 11008, 32, 16
    per_layer = r * (4 * (h + h) + 2 * (h + i) + (i + h))  # q, k, v, o; gate, up; down
    result = _estimate(LLAMA2, Finetuning(method="lora", rank=r, target_modules=("all-linear",)))
    assert result.trainable_param_count == layers * per_layer
    # GPT-2's c_proj names both the attention output and the MLP output (peft matches by suffix).
    gpt2 = _estimate(GPT2, Finetuning(method="lora", rank=8, target_modules=("c_proj",)))
    assert gpt2.trainable_param_count == 12 * 8 * ((768 + 768) + (3072 + 768))


@pytest.mark.parametrize("quantization, bits", [("nf4", 4.5), ("nf4-double", 4.127)])
def test_qlora_storage_per_parameter(quantization, bits):
    # Dettmers et al. 2023 (arXiv:2305.14314), section 3: 4-bit NormalFloat with an fp32 absmax per block of 64
    # costs 32/64 = 0.5 extra bits; double quantization brings the constants to 8/64 + 32/(64 × 256) ≈ 0.127 bits.
    elements = 4096 * 4096
    assert quantized_bytes(elements, quantization) * 8 / elements == pytest.approx(bits, abs=5e-4)
    assert stored_weight_bytes((4096, 11008), "int8") == 4096 * 11008 + 4 * 4096  # a byte each, a scale per row


def test_model_states_only_for_what_trains():
    lora = _estimate(LLAMA2, Finetuning(method="lora", rank=8, target_modules=("q_proj", "v_proj")),
                     optimizer_implementation="fused")
    trainable = 4_194_304
    assert lora.per_gpu["gradients"] == 4 * trainable  # fp32 adapters (peft's autocast_adapter_dtype)
    assert lora.per_gpu["optimizer_states"] == 2 * 4 * trainable  # Adam's m and v like the fp32 parameter
    assert lora.per_gpu["master_weights"] == 0
    assert lora.per_gpu["weights"] == 2 * 6_738_415_616 + 4 * trainable
    frozen = _estimate(LLAMA2, Finetuning(freeze_embeddings=True, frozen_layers=8), optimizer_implementation="fused")
    full = _estimate(LLAMA2, Finetuning(), optimizer_implementation="fused")
    layer = 202_383_360  # one Llama-2-7B layer's parameters
    embedding = 32000 * 4096
    assert frozen.trainable_param_count == full.param_count - 8 * layer - embedding
    assert frozen.per_gpu["gradients"] == 2 * frozen.trainable_param_count
    assert frozen.per_gpu["weights"] == full.per_gpu["weights"]


def test_qlora_weights_and_the_dequantized_temporary():
    result = _estimate(LLAMA2, Finetuning(method="qlora", rank=16, target_modules=("all-linear",)))
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    others = 6_738_415_616 - linear
    buffers = {buffer.key: buffer for buffer in result.ledger}
    assert buffers["weights"].bytes == 2 * others + sum(
        32 * stored_weight_bytes(shape, "nf4-double") for shape in [(4096, 4096)] * 4 + [(11008, 4096)] * 3
    ) + 4 * result.trainable_param_count
    assert buffers["qlora.dequantized"].bytes == 2 * 4096 * 11008


def test_frozen_bottom_layers_keep_nothing_and_adapters_cost_activations():
    def activations(finetuning: Finetuning) -> int:
        value = _estimate(LLAMA2, finetuning, seq_len=2048).per_gpu["activations"]
        assert value is not None
        return value

    full = activations(Finetuning())
    assert activations(Finetuning(freeze_embeddings=True, frozen_layers=8)) < full
    assert activations(Finetuning(method="lora", target_modules=("q_proj", "v_proj"))) < full


@pytest.mark.parametrize("finetuning, field", [
    (Finetuning(method="dora"), "finetuning.method"),
    (Finetuning(method="lora", target_modules=("c_attn",)), "finetuning.target_modules"),
    (Finetuning(method="lora", rank=0), "finetuning.rank"),
    (Finetuning(method="lora", dropout=1.0), "finetuning.dropout"),
    (Finetuning(method="lora", frozen_layers=2), "finetuning.frozen_layers"),
    (Finetuning(modules_to_save=("lm_head",)), "finetuning.modules_to_save"),
    (Finetuning(frozen_layers=32), "finetuning.frozen_layers"),
])
def test_what_cannot_be_fine_tuned_names_its_field(finetuning, field):
    with pytest.raises(core.DomainError) as error:
        _estimate(LLAMA2, finetuning)
    assert error.value.field == field


def test_adapters_need_shapes_and_a_base_in_its_own_dtype():
    with pytest.raises(core.DomainError) as error:
        core.estimate(num_params=7_000_000_000, training=core.Training(finetuning=Finetuning(method="lora")))
    assert error.value.field == "finetuning.method"
    with pytest.raises(core.DomainError) as error:
        _estimate(LLAMA2, Finetuning(method="lora"), precision="autocast-bf16")
    assert error.value.field == "training.precision"
    assert dataclasses.replace(Finetuning(), method="full") == Finetuning()


def test_tied_output_layer_copy_trains_with_the_head_on_the_last_stage():
    """GPT-2 ties its output layer to the embedding: modules_to_save=["lm_head"] trains a copy of that matrix
    (50,257 × 768 in bf16), whose gradient comes with the output layer's backward, on the last pipeline stage."""
    arch = core.get_preset("gpt2").architecture
    tuning = Finetuning(method="lora", target_modules=("c_attn",), modules_to_save=("lm_head",))
    training = core.Training(seq_len=512, precision=core.precision_preset("bf16"), finetuning=tuning)
    for pipeline in (1, 2):
        result = core.estimate(architecture=arch, training=training, parallelism=core.Parallelism(pipeline=pipeline))
        head = next(buffer for buffer in result.ledger if buffer.key == "gradients.head")
        assert head.bytes == 50_257 * 768 * 2
        assert head.allocated == "backward: output layer, each step"
        assert "gradients.embedding" not in {buffer.key for buffer in result.ledger}
