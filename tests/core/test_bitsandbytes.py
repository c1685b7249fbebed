"""bitsandbytes' version: before 0.43.2 every 4-bit linear layer keeps its input until the backward ends, checked by
hand from bitsandbytes' source and against LitGPT's published QLoRA memory."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app import core
from app.core.finetuning import Finetuning, version_before
from validation import litgpt

LLAMA2_7B = litgpt.LLAMA2_7B
LITGPT_LORA = litgpt.LORA
STABLELM_3B = litgpt.STABLELM_3B


def _peak(arch: core.Architecture, finetuning: Finetuning, *, seq_len: int, micro_batch_size: int = 1,
          attention: Any = "sdpa", checkpointing: Any = "none") -> int:
    # LitGPT's setup with transformers' layers (validation/litgpt.py, estimate): PagedAdamW under QLoRA.
    optimizer = "paged-adamw-32bit" if finetuning.method == "qlora" else "adamw"
    training = core.Training(micro_batch_size=micro_batch_size, seq_len=seq_len, precision=core.precision_preset("bf16"),
                             optimizer=optimizer, attention=attention, activation_checkpointing=checkpointing,
                             finetuning=finetuning)
    return core.estimate(architecture=arch, training=training, gpu=core.get_gpu("a100-40gb")).peak.bytes


def _qlora(quantization: str, version: str | None = None) -> Finetuning:
    return litgpt.qlora(quantization, version)


@pytest.mark.parametrize(("version", "before"), [
    ("0.41.1", True), ("0.43.1", True), ("0.43", True), ("0.43.2rc1", True), ("0.43.2.dev0", True),
    ("0.42.0+cu118", True), ("0.43.2", False), ("0.43.2.post1", False), ("0.44.1", False), ("1.0", False),
])
def test_versions_before_the_fix(version, before):
    # PEP 440 orders pre-releases and development builds before their release.
    assert version_before(version, (0, 43, 2)) is before


@pytest.mark.parametrize("version", ["latest", "v0.41.1", "0.41.1.2.3.4", ""])
def test_a_version_that_is_not_one_is_refused_naming_the_field(version):
    with pytest.raises(core.DomainError) as error:
        _peak(LLAMA2_7B, _qlora("nf4", version), seq_len=128)
    assert error.value.field == "finetuning.bitsandbytes_version"


def test_the_kept_inputs_by_hand():
    # Llama-2-7B, bf16, b = 1, s = 1,304: n·(h + h + I)·2 B a layer for the attention's input (q, k and v share it),
    # the MLP's (gate and up share it) and the down projection's; the output projection's input is the flash
    # kernel's output, kept anyway. In the lowest layer the attention's input needs no gradient, so MatMul4Bit keeps
    # nothing there (bitsandbytes 0.43.1, bitsandbytes/autograd/_functions.py lines 515-518).
    n, h, i = 1304, 4096, 11008
    full, bottom = n * (h + h + i) * 2, n * (h + i) * 2
    kept = _peak(LLAMA2_7B, _qlora("nf4", "0.43.1"), seq_len=n) - _peak(LLAMA2_7B, _qlora("nf4"), seq_len=n)
    assert kept == 31 * full + bottom == 1_591_672_832


def _peak_in(precision: str, version: str | None) -> int:
    training = core.Training(micro_batch_size=1, seq_len=512, precision=core.precision_preset(precision),
                             optimizer="adamw", finetuning=_qlora("nf4", version))
    return core.estimate(architecture=LLAMA2_7B, training=training, gpu=core.get_gpu("a100-40gb")).peak.bytes


@pytest.mark.parametrize(("precision", "copy"), [("bf16", 11008 * 4096 * 2), ("fp16-fp32-master", 0), ("fp32", 11008 * 4096 * 2)])
def test_before_0_43_0_the_weight_is_dequantized_to_fp16_then_cast(precision, copy):
    # bitsandbytes 0.42.0 quantizes from .half() (nn/modules.py line 168), so dequantize_4bit returns fp16 and
    # MatMul4Bit casts it to the input's dtype: beside the largest weight (Llama-2-7B's MLP, 11,008 × 4,096) in the
    # compute dtype, an fp16 copy of it, except where the compute dtype is fp16. 0.43.0 quantizes in the weight's own
    # dtype (commit dcfb6f81). Both releases keep the 4-bit layers' inputs, so only the copy differs.
    assert _peak_in(precision, "0.42.0") - _peak_in(precision, "0.43.0") == copy
    assert _peak_in(precision, "0.43.0") - _peak_in(precision, "0.43.1") == 0


def test_eager_attention_keeps_the_output_projections_input_too():
    # Eager attention's output is a fresh copy (transpose, then reshape), which only MatMul4Bit keeps.
    n, h = 1024, 4096
    plain = _peak(LLAMA2_7B, _qlora("nf4"), seq_len=n, attention="eager")
    old = _peak(LLAMA2_7B, _qlora("nf4", "0.41.1"), seq_len=n, attention="eager")
    flash = (_peak(LLAMA2_7B, _qlora("nf4", "0.41.1"), seq_len=n)
             - _peak(LLAMA2_7B, _qlora("nf4"), seq_len=n))
    assert old - plain == flash + 32 * n * h * 2


def test_recomputation_keeps_them_too():
    # transformers 5.24 recomputes with the non-reentrant checkpoint, whose hooks see only saved tensors, not
    # MatMul4Bit's ctx attribute: the inputs stay, and the layer's own saved tensors no longer hold any of them.
    n, h, i = 1024, 4096, 11008
    plain = _peak(LLAMA2_7B, _qlora("nf4"), seq_len=n, checkpointing="full")
    old = _peak(LLAMA2_7B, _qlora("nf4", "0.41.1"), seq_len=n, checkpointing="full")
    assert old - plain >= 31 * n * (3 * h + i) * 2


def test_the_fixed_release_and_int8_keep_nothing_more():
    plain = _peak(LLAMA2_7B, _qlora("nf4"), seq_len=512)
    assert _peak(LLAMA2_7B, _qlora("nf4", "0.43.2"), seq_len=512) == plain
    int8 = _peak(LLAMA2_7B, _qlora("int8"), seq_len=512)
    assert _peak(LLAMA2_7B, _qlora("int8", "0.41.1"), seq_len=512) == int8


# LitGPT's published rows (validation/litgpt.py: the source, the setups and how close each must come), estimated with
# LitGPT's model (implementation litgpt).
LITGPT_ROWS = litgpt.ROWS


@pytest.mark.parametrize("row", LITGPT_ROWS, ids=lambda row: row.name)
def test_litgpt_published_memory(row):
    predicted = litgpt.estimate(row).peak.bytes
    assert abs(predicted / 1e9 / row.published_gb - 1) <= row.within


@pytest.mark.parametrize("row", [row for row in LITGPT_ROWS if row.finetuning.method == "qlora"], ids=lambda row: row.name)
def test_stating_the_old_release_closes_most_of_the_gap(row):
    current = dataclasses.replace(row.finetuning, bitsandbytes_version=None)
    old_error = abs(litgpt.estimate(row, finetuning=current).peak.bytes / 1e9 / row.published_gb - 1)
    new_error = abs(litgpt.estimate(row).peak.bytes / 1e9 / row.published_gb - 1)
    assert old_error > 0.12 and new_error < old_error / 3


@pytest.mark.parametrize("row", [row for row in LITGPT_ROWS if row.arch is not STABLELM_3B], ids=lambda row: row.name)
def test_litgpt_against_the_hugging_face_layers_by_hand(row):
    # What LitGPT's model changes, by hand, on Llama 2 (vocabulary 32,000, untied):
    # * its attention (lit_gpt/model.py at 8641822, CausalSelfAttention.forward) joins the rotated q by torch.cat, so
    #   the flash kernel's output, allocated like q (empty_like), is laid out (B, heads, T, head size), and
    #   y.reshape(B, T, C) copies it for the output projection. A frozen nn.Linear lets the copy go (LoRA: nothing
    #   changes); MatMul4Bit before 0.43.2 keeps it, in every layer (q and v, adapted, lie upstream): one n·h bf16
    #   tensor a layer more than transformers' Llama, whose projection reads the kernel's own output;
    # * Lightning's bitsandbytes plugin replaces every nn.Linear, the output layer's too: its weight is stored in
    #   NF4 (v·h/2 B and an fp32 absmax per 64, double-quantized: 8 bits per 64 and an fp32 per 256 of those), and
    #   MatMul4Bit keeps its input, the final norm's n·h bf16 output.
    arch, finetuning = row.arch, row.finetuning
    hf, lit = litgpt.estimate(row, implementation="transformers"), litgpt.estimate(row)
    n, h, v, layers = row.micro_batch * row.tokens, arch.hidden_size, 32_000, arch.num_hidden_layers

    def buffer(estimate: Any, key: str) -> int:
        return sum(b.bytes for b in estimate.ledger if b.key == key)

    if finetuning.method == "lora":
        assert lit.peak.bytes == hf.peak.bytes
        return
    nf4 = v * h // 2 + (v * h // 64 * 4 if finetuning.quantization == "nf4" else v * h // 64 + v * h // 64 // 256 * 4)
    assert buffer(hf, "weights") - buffer(lit, "weights") == v * h * 2 - nf4
    assert buffer(lit, "qlora.kept_inputs.held") - buffer(hf, "qlora.kept_inputs.held") == layers * n * h * 2
    assert buffer(lit, "qlora.kept_head_input") == n * h * 2 and buffer(hf, "qlora.kept_head_input") == 0
    # In the output layer's backward its weight is dequantized in place of the largest layer weight (the MLP's, I × h),
    # in fp16 and again in bf16 before 0.43.0; in its forward it lives beside the bf16 logits it writes, and the
    # moment counts what the loss makes after them: their fp32 copy, the fp32 log-probabilities and the int64 labels,
    # padded by one before the shift (transformers' ForCausalLMLoss: ``nn.functional.pad(labels, (0, 1))``, then
    # ``labels[..., 1:].contiguous()``, a view of the padded n + 1 at micro-batch 1), n·v·(4 + 4) + (n + 1)·8 B; what
    # the dequantized weight outweighs beyond those is the forward's term.
    assert buffer(lit, "qlora.dequantized_head") == (v - arch.intermediate_size) * h * (2 + 2)
    assert row.micro_batch == 1
    beyond = (v - arch.intermediate_size) * h * (2 + 2) - (n * v * (4 + 4) + (n + 1) * 8)
    assert buffer(lit, "qlora.dequantized_head.forward") == max(beyond, 0)


@pytest.mark.parametrize(("preset", "implementation", "precision", "copied"), [
    ("llama-2-7b", "transformers", "bf16", False), ("llama-2-7b", "litgpt", "bf16", True),
    ("microsoft/phi-2", "transformers", "bf16", True), ("llama-2-7b", "litgpt", "fp32", False),
])
def test_the_output_projection_keeps_the_attention_output_where_it_is_a_copy(preset, implementation, precision,
                                                                             copied):
    # Under the flash kernel the output projection's input is the kernel's output, which the kernel keeps anyway,
    # unless the attention copies it first: Phi's (its rotated prefix joined by torch.cat, `Family.rotary_cat`) and
    # LitGPT's (every model). Then only MatMul4Bit before 0.43.2 keeps the copy: b·s·a·d in bf16 a layer. In fp32 sdpa
    # runs the memory-efficient kernel, whose output is laid out (b, s, a, d) whatever Q's layout: LitGPT's reshape is
    # then a view, and nothing more is kept.
    from app.core.saved.bnb import kept_4bit_inputs
    from app.core.setup import activation_setup

    arch = core.get_preset(preset).architecture
    finetuning = dataclasses.replace(_qlora("nf4", "0.41.1"), target_modules=("all-linear",))
    training = core.Training(micro_batch_size=1, seq_len=1024, precision=core.precision_preset(precision),
                             finetuning=finetuning, implementation=implementation)
    setup = activation_setup(training, core.Parallelism())
    kept = {x.name: x for x in kept_4bit_inputs(arch, setup, "through")}
    assert ("attn.out_proj_input" in kept) is copied
    if copied:
        assert kept["attn.out_proj_input"].bytes == 1024 * arch.num_attention_heads * arch.head_size * 2
