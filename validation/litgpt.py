"""LitGPT's published fine-tuning memory, the rows trainmem is checked against (tests/core/test_bitsandbytes.py) and
the text docs/VALIDATION.md shows of them (validation.finetuning's section; tests/validation/test_litgpt.py keeps
the two in step).

The source: Lightning-AI/litgpt, tutorials/resource-tables.md at commit 0cc02afa (2023-10-27; the same rows in
tutorials/finetune_lora.md), made by finetune/lora.py of LitGPT commit 8641822 on one A100-SXM4-40GB with PyTorch
2.1.0 and bitsandbytes 0.41.1, --precision bf16-true, micro-batch 1 (2 where said), Alpaca's longest sample first
(1,034 tokens with StableLM Alpha's tokenizer, 1,304 with Llama 2's); "Max GPU RAM" is
torch.cuda.max_memory_allocated() / 1e9 as the script prints it.
"""

from __future__ import annotations

import dataclasses
from typing import Final, NamedTuple

from app import core
from app.core.finetuning import Finetuning

LLAMA2_7B: Final = core.get_preset("llama-2-7b").architecture
LLAMA2_13B: Final = core.get_preset("llama-2-13b").architecture
# stabilityai/stablelm-base-alpha-3b as LitGPT configures it (lit_gpt/config.py at 8641822: the Config defaults,
# n_layer 16, n_embd 4096, n_head 32, bias, LayerNorm, GptNeoxMLP with intermediate 4 × n_embd, vocabulary 50,254
# padded to 50,688), as a plain decoder: its parallel residual and rotary on a quarter of each head are not modelled.
STABLELM_3B: Final = core.Architecture(
    num_hidden_layers=16, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32, intermediate_size=16384,
    vocab_size=50688, max_position_embeddings=4096, mlp="gelu", norm="layernorm", position_embedding="rope",
    attention_bias=True, mlp_bias=True, tie_word_embeddings=False)
# finetune/lora.py at 8641822: r 8, alpha 16, dropout 0.05, on the query and value only.
LORA: Final = Finetuning(method="lora", rank=8, target_modules=("q_proj", "v_proj"), dropout=0.05)
RELEASE: Final = "0.41.1"  # the bitsandbytes the tables were made with


def qlora(quantization: str, version: str | None = None) -> Finetuning:
    """LitGPT's LoRA over a base quantized by bitsandbytes (`--quantize bnb.nf4` or `bnb.nf4-dq`)."""
    return dataclasses.replace(LORA, method="qlora", quantization=quantization, bitsandbytes_version=version)


class Row(NamedTuple):
    name: str
    arch: core.Architecture
    tokens: int
    micro_batch: int
    finetuning: Finetuning
    published_gb: float
    within: float  # how close trainmem must come, as a fraction of the published figure


ROWS: Final = (
    # The plain decoder standing in for GPT-NeoX is 3.8% high on the LoRA row below; its QLoRA rows are as close.
    Row("StableLM Alpha 3B, bnb.nf4", STABLELM_3B, 1034, 1, qlora("nf4", RELEASE), 6.35, 0.04),
    Row("StableLM Alpha 3B, bnb.nf4-dq", STABLELM_3B, 1034, 1, qlora("nf4-double", RELEASE), 6.19, 0.04),
    Row("Llama 2 7B, bnb.nf4", LLAMA2_7B, 1304, 1, qlora("nf4", RELEASE), 14.14, 0.02),
    Row("Llama 2 7B, bnb.nf4-dq", LLAMA2_7B, 1304, 1, qlora("nf4-double", RELEASE), 13.84, 0.02),
    Row("Llama 2 13B, bnb.nf4", LLAMA2_13B, 1304, 1, qlora("nf4", RELEASE), 23.14, 0.02),
    Row("Llama 2 13B, bnb.nf4-dq", LLAMA2_13B, 1304, 1, qlora("nf4-double", RELEASE), 22.55, 0.02),
    Row("Llama 2 7B, LoRA", LLAMA2_7B, 1304, 1, LORA, 21.30, 0.004),
    Row("Llama 2 7B, LoRA, micro-batch 2", LLAMA2_7B, 1304, 2, LORA, 29.07, 0.004),
    Row("Llama 2 13B, LoRA", LLAMA2_13B, 1304, 1, LORA, 38.12, 0.005),
    Row("StableLM Alpha 3B, LoRA", STABLELM_3B, 1034, 1, LORA, 9.69, 0.04),
)


def estimate(row: Row, *, implementation: str = "litgpt", finetuning: Finetuning | None = None) -> core.Estimate:
    """trainmem's estimate of a row: LitGPT's model unless said otherwise. finetune/lora.py steps with bitsandbytes'
    PagedAdamW when it quantizes, torch's AdamW otherwise; the adapters' tensors are under 100,000 elements, so
    nothing of its state is paged."""
    finetuning = finetuning or row.finetuning
    optimizer = "paged-adamw-32bit" if finetuning.method == "qlora" else "adamw"
    training = core.Training(micro_batch_size=row.micro_batch, seq_len=row.tokens, optimizer=optimizer,
                             precision=core.precision_preset("bf16"), finetuning=finetuning,
                             implementation=implementation)  # type: ignore[arg-type]
    return core.estimate(architecture=row.arch, training=training, gpu=core.get_gpu("a100-40gb"))


def _cell(row: Row, **kwargs: object) -> str:
    gb = estimate(row, **kwargs).peak.bytes / 1e9  # type: ignore[arg-type]
    return f"{gb:.2f} ({(gb / row.published_gb - 1) * 100:+.1f}%)".replace("-", "−")


def table() -> list[str]:
    """The rows beside trainmem's estimates: with transformers' layers (and a bitsandbytes of 0.43.2 or later), with
    them and 0.41.1 stated, and with LitGPT's model and 0.41.1 (the LoRA rows need no release)."""
    lines = ["| Row | Published GB | transformers' layers | the same, bitsandbytes 0.41.1 | LitGPT's model (0.41.1) |",
             "|-----|-------------:|------:|------:|------:|"]
    for row in ROWS:
        name = row.name + (f" ({row.tokens:,} tokens)" if row.name.endswith("bnb.nf4") else "")
        if row.finetuning.method == "qlora":
            fixed = dataclasses.replace(row.finetuning, bitsandbytes_version=None)
            cells = [_cell(row, implementation="transformers", finetuning=fixed),
                     _cell(row, implementation="transformers"), _cell(row)]
        else:
            cells = [_cell(row, implementation="transformers"), "", _cell(row)]
        lines.append(f"| {name} | {row.published_gb:.2f} | {' | '.join(cells)} |")
    return lines


def text() -> list[str]:
    """What docs/VALIDATION.md says of the rows."""
    return [
        "Against LitGPT's published fine-tuning memory (Lightning-AI/litgpt, `tutorials/resource-tables.md` at commit",
        "0cc02afa: LitGPT 8641822, A100-SXM4-40GB, PyTorch 2.1.0, bitsandbytes 0.41.1, bf16-true, r 8 on the query and",
        "value, dropout 0.05, Alpaca's longest sample; `torch.cuda.max_memory_allocated()` in GB; `pytest",
        "tests/core/test_bitsandbytes.py`). Stating `finetuning.bitsandbytes_version: \"0.41.1\"` counts two things of",
        "that release: each 4-bit layer's input kept until the backward ends (before 0.43.2), and each weight dequantized",
        "to fp16 and then cast to bf16 for its matmul, both copies alive for a moment (before 0.43.0, which quantizes a",
        "weight in its own dtype rather than from `.half()`: bitsandbytes commit dcfb6f81; 0.42.0 `nn/modules.py` line",
        "168). `training.implementation: litgpt` counts LitGPT's model where it differs from transformers' layers:",
        "",
        *table(),
        "",
        "What LitGPT's model changes, from its source (`tests/core/test_bitsandbytes.py` checks each by hand):",
        "",
        "- **The attention output is copied.** `CausalSelfAttention` (lit_gpt/model.py at 8641822, lines 213-229 and",
        "  251-254) joins the rotated q by `torch.cat`, so q is contiguous as (B, heads, T, head size); PyTorch's flash",
        "  kernel allocates its output like q (`empty_like`), LitGPT transposes it to (B, T, heads, head size), and",
        "  `y.reshape(B, T, C)` copies it. The copy is the output projection's input: a transient where the projection",
        "  is a frozen `nn.Linear` (the LoRA rows do not change), kept in every layer by MatMul4Bit before 0.43.2",
        "  (342 MB on 7B, 534 MB on 13B). transformers' Llama hands the projection the kernel's own output. Where sdpa",
        "  runs the memory-efficient kernel (fp32, or heads wider than 256), its output is laid out (B, T, heads, head",
        "  size) whatever q's layout (`meta__efficient_attention_forward`), and the reshape is a view: nothing is copied.",
        "- **The output layer is quantized.** Lightning's bitsandbytes plugin",
        "  (lightning/fabric/plugins/precision/bitsandbytes.py as stored at 003e307: `_convert_layers`, and the",
        "  `torch.nn.Linear` replacement of `init_context`) replaces every `nn.Linear` unless given `ignore_modules`,",
        "  which LitGPT's script does not give; transformers leaves the output layer in 16 bits. On 7B that stores",
        "  0.19 GB less, keeps the final norm's output for MatMul4Bit, and dequantizes the output layer's weight, in",
        "  fp16 and then bf16 (0.52 GB together), for its two matmuls: in the backward beside the logits' gradient, in",
        "  the forward beside the logits it writes, before the loss's fp32 copy and log-probabilities (on 7B it outweighs",
        "  those by 10 MB, on 13B by 38 MB; neither sets the peak).",
        "",
        "Llama 2's rows peak in the loss's backward; StableLM's QLoRA rows in the output layer's backward, where its",
        "larger vocabulary's weight is dequantized. StableLM Alpha is GPT-NeoX, estimated as a plain decoder (its",
        "parallel residual and quarter-head rotary are not modelled), 3.8% high on its LoRA row. LitGPT's model",
        "is modelled under LoRA and QLoRA only: its RMSNorm multiplies by its weight in fp32, so full fine-tuning keeps",
        "an fp32 product that transformers' layers do not, and that is refused rather than estimated. Its `GPT` builds",
        "its own `lm_head` (litgpt/model.py, `GPT.__init__`) and its checkpoint conversion copies a tied embedding into",
        "it, so a model with `tie_word_embeddings` is refused with the remedy (turn it off: the model LitGPT trains).",
    ]
