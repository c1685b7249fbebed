"""The loss's buffers: standard, chunked (torchtune) and Liger's fused linear cross entropy (from its source)."""

from __future__ import annotations

from typing import Any

import pytest

from app import core
from app.core.finetuning import Finetuning

LLAMA2 = core.get_preset("llama-2-7b").architecture  # V = 32,000, H = 4,096


def _ledger(loss: str, **training: Any) -> dict[str, core.Buffer]:
    options: dict[str, Any] = {"seq_len": 4096, "micro_batch_size": 4, "loss": loss, "loop": "hf-trainer"} | training
    result = core.estimate(architecture=LLAMA2, training=core.Training(**options))
    return {buffer.key: buffer for buffer in result.ledger}


def test_fused_linear_chunks_as_its_source_says():
    # liger_kernel/ops/fused_linear_cross_entropy.py (0.8.5), the comment beside the chunk size: "BT = 4096*4,
    # V = 32000, H = 4096 ==> inc_factor = 8, chunk_size = 2048".
    buffers = _ledger("fused-linear")
    assert buffers["loss.logits_chunk"].bytes == 2048 * 32000 * 2
    assert buffers["loss.grad_input"].bytes == 4 * 4096 * 4096 * 2
    assert buffers["loss.grad_weight"].bytes == 32000 * 4096 * 2
    assert not {"loss.logits", "loss.upcast", "loss.grad_logits", "activations.loss"} & set(buffers)


def test_fused_linear_keeps_no_weight_gradient_for_a_frozen_head():
    buffers = _ledger("fused-linear", precision=core.precision_preset("bf16"),
                      finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj")))
    assert "loss.grad_weight" not in buffers and "loss.grad_input" in buffers


@pytest.mark.parametrize("chunks", [2, 8, 16])
def test_chunked_loss_divides_the_fp32_transients_only(chunks):
    standard, chunked = _ledger("standard"), _ledger("chunked", loss_chunks=chunks)
    tokens_vocab = 4 * 4096 * 32000
    for key in ("loss.upcast", "loss.grad_log_probs", "loss.grad_logits"):
        assert standard[key].bytes == 4 * tokens_vocab
        assert chunked[key].bytes == 4 * tokens_vocab // chunks
    assert chunked["loss.logits"].bytes == standard["loss.logits"].bytes  # every chunk's logits are returned
    assert chunked["activations.loss"].bytes == standard["activations.loss"].bytes  # fp32 log-probs saved per chunk


def test_megatron_keeps_its_own_loss():
    with pytest.raises(core.DomainError) as error:
        _ledger("fused-linear", implementation="megatron")
    assert error.value.field == "training.loss"


def test_liger_modules_keep_less_than_transformers_by_their_source():
    # liger_kernel/ops/rms_norm.py (0.8.5) keeps X in its own dtype and an fp32 RSTD (lines 465-466, 674-676) where
    # transformers' LlamaRMSNorm keeps an fp32 copy of X, the RSTD and the normalised tensor: per norm, n·h·4 bytes
    # fewer at bf16. LigerSiLUMulFunction keeps gate and up (swiglu.py, line 272) where transformers also keeps the
    # activation's output: n·I·2 fewer. Llama-3-8B, n = 4,096 tokens, h = 4,096, I = 14,336.
    arch = core.get_preset("llama-3-8b").architecture
    per_layer = {impl: sum(t.bytes for t in core.estimate(architecture=arch, training=core.Training(
        seq_len=4096, implementation=impl)).layer_activations) for impl in ("transformers", "liger")}
    n, h, i = 4096, 4096, 14336
    assert per_layer["transformers"] - per_layer["liger"] == 2 * n * h * 4 + n * i * 2
    with pytest.raises(core.DomainError) as error:
        core.estimate(architecture=core.get_preset("gpt2").architecture, training=core.Training(implementation="liger"))
    assert error.value.field == "training.implementation"
