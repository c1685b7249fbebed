"""LitGPT's model (training.implementation litgpt): where it is modelled, and the settings it refuses by name."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app import core
from app.core.finetuning import Finetuning

LLAMA2_7B = core.get_preset("llama-2-7b").architecture
QLORA = Finetuning(method="qlora", rank=8, target_modules=("q_proj", "v_proj"), dropout=0.05, quantization="nf4")


def _estimate(arch: core.Architecture = LLAMA2_7B, finetuning: Finetuning = QLORA,
              parallelism: core.Parallelism | None = None, **training: Any) -> core.Estimate:
    setup = core.Training(micro_batch_size=1, seq_len=1024, precision=core.precision_preset("bf16"),
                          finetuning=finetuning, **({"implementation": "litgpt"} | training))
    return core.estimate(architecture=arch, training=setup, parallelism=parallelism or core.Parallelism(),
                         gpu=core.get_gpu("a100-40gb"))


@pytest.mark.parametrize(("change", "field"), [
    ({"finetuning": Finetuning()}, "finetuning.method"),
    ({"finetuning": dataclasses.replace(QLORA, modules_to_save=("lm_head",))}, "finetuning.modules_to_save"),
    ({"framework": "megatron"}, "training.framework"),
    ({"attention": "eager"}, "training.attention"),
    ({"loss": "fused-linear"}, "training.loss"),
    ({"activation_checkpointing": "selective"}, "training.activation_checkpointing"),
    ({"fp8": "torchao-tensorwise"}, "training.fp8"),
    ({"parallelism": core.Parallelism(tensor=2)}, "parallelism.tensor"),
    ({"parallelism": core.Parallelism(pipeline=2)}, "parallelism.pipeline"),
    ({"parallelism": core.Parallelism(context=2)}, "parallelism.context"),
    ({"parallelism": core.Parallelism(zero_stage=3, offload="optimizer")}, "parallelism.offload"),
    ({"activation_checkpointing": "full", "recompute_every": 2}, "training.recompute_every"),
    ({"activation_checkpointing": "full", "recompute_first_layers": 4}, "training.recompute_first_layers"),
    ({"activation_offload": "torchtune", "activation_checkpointing": "full"}, "training.activation_offload"),
    ({"framework": "deepspeed"}, "training.framework"),
    ({"framework": "fsdp2", "parallelism": core.Parallelism(data=2, zero_stage=3)}, "training.framework"),
    ({"framework": "hf-trainer"}, "training.framework"),
    ({"arch": core.get_preset("llama-3.2-1b").architecture}, "model.tie_word_embeddings"),
    ({"arch": core.get_preset("mixtral-8x7b").architecture}, "training.implementation"),
    ({"arch": core.get_preset("microsoft/phi-2").architecture}, "training.implementation"),
])
def test_what_litgpt_is_not_modelled_with_is_refused_by_name(change, field):
    with pytest.raises(core.DomainError) as error:
        _estimate(**change)
    assert error.value.field == field
    assert "LitGPT" in str(error.value) or field != "training.implementation"


def test_without_an_architecture_full_training_is_refused_too():
    with pytest.raises(core.DomainError) as error:
        core.estimate(num_params=7_000_000_000, training=core.Training(implementation="litgpt"))
    assert error.value.field == "finetuning.method"


@pytest.mark.parametrize("preset", ["llama-2-7b", "mistral-7b", "qwen2.5-7b"])
def test_llama_style_decoders_are_modelled(preset):
    arch = core.get_preset(preset).architecture
    assert _estimate(arch, activation_checkpointing="full").peak.bytes > 0


def test_the_output_layer_is_quantized_only_under_qlora():
    # Under LoRA nothing is quantized; under QLoRA the plugin's nn.Linear replacement reaches the output layer, so the
    # weights differ from transformers' by the output layer's bf16 bytes less its NF4 bytes (v·h/2 + an fp32 per 64).
    lora = dataclasses.replace(QLORA, method="lora")
    weights = [sum(b.bytes for b in _estimate(finetuning=ft, implementation=impl).ledger if b.key == "weights")
               for ft in (lora, QLORA) for impl in ("transformers", "litgpt")]
    v, h = LLAMA2_7B.vocab_size, LLAMA2_7B.hidden_size
    assert weights[0] == weights[1]
    assert weights[2] - weights[3] == v * h * 2 - (v * h // 2 + v * h // 64 * 4)


def test_a_tied_output_layer_is_refused_with_its_remedy():
    # LitGPT's GPT builds its own lm_head (litgpt/model.py, GPT.__init__) and its conversion copies the embedding
    # into it: the model it trains is the untied one, which the message names, and which is modelled.
    tied = core.get_preset("llama-3.2-1b").architecture
    assert tied.tie_word_embeddings
    with pytest.raises(core.DomainError) as error:
        _estimate(tied)
    assert "turn tie_word_embeddings off" in str(error.value)
    untied = dataclasses.replace(tied, tie_word_embeddings=False)
    assert _estimate(untied).param_count == _estimate(untied, implementation="transformers").param_count
    assert _estimate(untied).param_count - tied.vocab_size * tied.hidden_size == \
        _estimate(tied, implementation="transformers").param_count
