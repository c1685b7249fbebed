"""training.fp8 te-*: NVIDIA Transformer Engine's FP8 recipes as Megatron-LM runs them (TE 2.20, Megatron-LM core).

What the figures below are worked out from:

* Megatron-LM's TE layer spec (megatron/core/models/gpt/gpt_layer_specs.py): linear_qkv and linear_fc1 are TE
  LayerNormLinear, linear_proj and linear_fc2 TE Linear; one fused QKV weight ((a + 2g)·d × h) and one gate/up
  weight (2I × h).
* TE layernorm_linear.py, _LayerNormLinear.forward: the norm writes its output in FP8 and the column-wise copy is
  saved for the weight gradient (``ln_out.update_usage(rowwise_usage=False)``); the norm's 16-bit input stays saved.
  linear.py, _linear_forward_impl: the input's FP8 column-wise copy is saved
  (``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``), one byte an element.
* Megatron-LM's attention.py sets save_original_input on linear_proj for every recipe but delayed: delayed keeps an
  FP8 copy of the attention output beside the 16-bit one the fused attention saves; the others keep only the
  16-bit one.
* Per-tensor recipes: one fp32 scale_inv per FP8 tensor (float8_tensor.py, inner_tensor_specs: ``_scale_inv``
  (1,) float32), 4 B. MXFP8 (mxfp8_tensor.py, MXFP8Quantizer.get_scale_shape): row-wise scales
  roundup(rows, 128) × roundup(cols / 32, 4) bytes, column-wise roundup(rows / 32, 4) × roundup(cols, 128).
* The FP8 weights, row-wise and column-wise, stay cached (module/base.py, quantize_weight with cache=True), two
  bytes a weight plus the scales.
* Delayed scaling's state (module/base.py, set_meta_tensor; quantization.py, DelayedScalingRecipeState): per linear
  layer 3 forward + 2 backward FP8 tensors, each an fp32 scale and amax_history_len fp32 amax rows; Megatron-LM's
  TransformerConfig.fp8_amax_history_len is 1.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app import core
from tests.configs.helpers import assumed, ignored, imported, sample, understood

# A small Llama-shaped model: h 64, 4 query heads and 2 K/V heads of 16, SwiGLU of 128, 2 layers.
SMALL = core.Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=128, vocab_size=256, max_position_embeddings=64)
LLAMA = core.get_preset("llama-3-8b").architecture  # h 4,096, 32 heads, 8 K/V heads of 128, MLP 14,336, 32 layers
MEGATRON = core.Training(implementation="megatron", framework="megatron", attention="flash",
                         precision=core.precision_preset("megatron-bf16"))


SMALL_RUN = replace(MEGATRON, seq_len=64, micro_batch_size=2)  # n = 128 tokens


def buffers(arch: core.Architecture, training: core.Training, layout: core.Parallelism) -> dict[str, int]:
    result = core.estimate(architecture=arch, training=training, parallelism=layout)
    return {buffer.key: buffer.bytes for buffer in result.ledger}


def small(fp8: str) -> dict[str, int]:
    return buffers(SMALL, replace(SMALL_RUN, fp8=fp8), core.Parallelism())


def test_small_model_saved_tensors_under_delayed_scaling() -> None:
    # One layer, n = 128 tokens, bf16 = 2 B:
    #   attention norm input 128 × 64 × 2 = 16,384; QKV input in FP8 128 × 64 = 8,192 + 4 (scale_inv);
    #   Q 128 × 64 × 2 = 16,384; K and V 128 × 32 × 2 = 8,192 each; flash log-sum-exp 2 × 4 × 64 × 4 = 2,048;
    #   attention output (kept by the fused attention) 16,384 and its FP8 copy for linear_proj 8,192 + 4;
    #   MLP norm input 16,384; fc1 input in FP8 8,192 + 4; gate and up 2 × 128 × 128 × 2 = 65,536;
    #   fc2 input in FP8 128 × 128 = 16,384 + 4.
    layer = 16384 + 8196 + 16384 + 8192 + 8192 + 2048 + 16384 + 8196 + 16384 + 8196 + 65536 + 16388
    assert layer == 190_480
    assert small("te-delayed")["activations.layers"] == 2 * layer
    # 16-bit: QKV, MLP and fc2 inputs at 2 B (16,384, 16,384, 32,768), the attention output once, no scales.
    sixteen = 16384 + 16384 + 16384 + 8192 + 8192 + 2048 + 16384 + 16384 + 16384 + 65536 + 32768
    assert sixteen == 215_040
    assert small("none")["activations.layers"] == 2 * sixteen


def test_small_model_weight_cache_and_scaling_state() -> None:
    # Weights on this GPU: QKV 128 × 64 = 8,192, proj 64 × 64 = 4,096, fc1 256 × 64 = 16,384, fc2 64 × 128 = 8,192:
    # 36,864; row-wise and transposed, 1 B each, and one 4 B scale_inv per module: 73,744 a layer.
    ledger = small("te-delayed")
    assert ledger["fp8.weight_cache"] == 2 * (2 * 36864 + 4 * 4) == 147_488
    # 2 layers × 4 modules × (3 + 2) FP8 tensors × (1 scale + 1 amax) × 4 B.
    assert ledger["fp8.scaling_state"] == 2 * 4 * 5 * 2 * 4 == 320
    # Forward: fc2's row-wise FP8 input 128 × 128 + 4; backward: fc1's output gradient, row-wise and transposed.
    assert ledger["fp8.forward_casts"] == 128 * 128 + 4
    assert ledger["fp8.backward_casts"] == 2 * 128 * 256 + 4
    assert "fp8.scaling_state" not in small("te-tensorwise")
    assert "fp8.weight_cache" not in small("none")


def test_small_model_current_scaling_keeps_the_attention_output_once() -> None:
    # Megatron-LM's save_original_input on linear_proj: no FP8 copy (8,192 + 4) beside the 16-bit output.
    assert small("te-tensorwise")["activations.layers"] == 2 * (190_480 - 8196)


def test_small_model_mxfp8_block_scales() -> None:
    # Saved inputs, column-wise scales roundup(rows / 32, 4) × roundup(cols, 128):
    #   QKV and fc1 inputs (128, 64): 4 × 128 = 512 each; fc2 input (128, 128): 4 × 128 = 512.
    layer = 190_480 - 8196 - 3 * 4 + 3 * 512
    assert small("te-mxfp8")["activations.layers"] == 2 * layer
    # Weights (out, in): row-wise roundup(out, 128) × roundup(in / 32, 4), column-wise roundup(out / 32, 4) ×
    # roundup(in, 128): QKV (128, 64) 512 + 512; proj (64, 64) 512 + 512; fc1 (256, 64) 1,024 + 1,024;
    # fc2 (64, 128) 512 + 512. 5,120 B of scales beside 2 × 36,864 B of data, a layer.
    assert small("te-mxfp8")["fp8.weight_cache"] == 2 * (2 * 36864 + 5120) == 157_696


def llama(fp8: str, layout: core.Parallelism | None = None) -> dict[str, int]:
    return buffers(LLAMA, replace(MEGATRON, fp8=fp8, seq_len=8192), layout or core.Parallelism(data=8, zero_stage=1))


def test_llama3_8b_saved_tensors() -> None:
    n, h, inter = 8192, 4096, 14336
    # 16-bit layer: norm inputs, QKV input, Q, attention output, MLP input at n × h × 2 = 67,108,864 each (6),
    # K and V n × 1,024 × 2 = 16,777,216 each, log-sum-exp 32 × n × 4 = 1,048,576, gate and up 2 × n × I × 2 =
    # 469,762,048, fc2 input n × I × 2 = 234,881,024.
    sixteen = 6 * n * h * 2 + 2 * n * 1024 * 2 + 32 * n * 4 + 2 * n * inter * 2 + n * inter * 2
    assert sixteen == 1_141_899_264
    assert llama("none")["activations.layers"] == 32 * sixteen
    # Delayed: QKV and MLP inputs halve (-33,554,432 each), fc2's input halves (-117,440,512), and linear_proj adds
    # an FP8 copy of the attention output (+33,554,432); four scale_inv of 4 B.
    delayed = sixteen - 2 * n * h - n * inter + n * h + 4 * 4
    assert delayed == 990_904_336
    assert llama("te-delayed")["activations.layers"] == 32 * delayed == 31_708_938_752
    assert llama("te-tensorwise")["activations.layers"] == 32 * (delayed - n * h - 4)


def test_reported_layer_tensors_are_the_fp8_ones() -> None:
    """The answer's per-layer table (layer_activations) lists what the ledger counts: 990,904,336 B a layer under
    delayed scaling (test_llama3_8b_saved_tensors), 1,141,899,264 B without FP8."""
    for fp8, layer in (("te-delayed", 990_904_336), ("none", 1_141_899_264)):
        result = core.estimate(architecture=LLAMA, training=replace(MEGATRON, fp8=fp8, seq_len=8192),
                               parallelism=core.Parallelism(data=8, zero_stage=1))
        assert sum(item.bytes for item in result.layer_activations) == layer


def test_llama3_8b_weight_cache_outweighs_the_saved_bytes() -> None:
    # Linear weights of a layer: QKV 6,144 × 4,096 + proj 4,096² + gate/up 28,672 × 4,096 + down 4,096 × 14,336 =
    # 218,103,808; two FP8 copies and four scale_inv: 436,207,632 a layer, 13,958,644,224 for 32 layers, the
    # size of the bf16 weights themselves, against 4,831,837,696 B fewer saved activations.
    linear = 6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336
    assert linear == 218_103_808
    assert llama("te-delayed")["fp8.weight_cache"] == 32 * (2 * linear + 16) == 13_958_644_224
    assert llama("te-delayed")["fp8.scaling_state"] == 32 * 4 * 5 * 2 * 4 == 5120
    saved = llama("none")["activations.layers"] - llama("te-delayed")["activations.layers"]
    assert saved == 32 * (1_141_899_264 - 990_904_336) == 4_831_837_696


def test_llama3_8b_tensor_and_sequence_parallel() -> None:
    # t = 2 with sequence parallelism: what is split by sequence or by heads halves. The QKV and fc1 FP8 inputs are
    # each GPU's shard of the norm output (n / 2 × h), kept row-wise for the all-gather in backward.
    n, h, inter, t = 8192, 4096, 14336, 2
    layer = (4 * n * h * 2 // t  # two norm inputs, Q, the attention output
             + 3 * n * h // t + 3 * 4  # FP8 QKV input, linear_proj's copy, fc1 input, with their scale_inv
             + 2 * n * 1024 * 2 // t + 32 * n * 4 // t  # K, V, log-sum-exp
             + 2 * n * inter * 2 // t  # gate and up
             + n * inter // t + 4)  # fc2's FP8 input
    assert layer == 495_452_176
    layout = core.Parallelism(data=4, tensor=t, sequence_parallel=True, zero_stage=1)
    assert llama("te-delayed", layout)["activations.layers"] == 32 * layer


DELAYED = replace(SMALL_RUN, fp8="te-delayed")


@pytest.mark.parametrize(("training", "layout"), [
    (replace(DELAYED, implementation="transformers", framework="pytorch"), core.Parallelism()),  # Megatron-LM's
    (replace(DELAYED, precision=core.precision_preset("fp16-fp32-master")), core.Parallelism()),  # bf16 only
    (replace(DELAYED, framework="pytorch"), core.Parallelism(data=8, zero_stage=3)),  # FSDP: no FP8 weight cache
    (replace(DELAYED, seq_len=60, micro_batch_size=1), core.Parallelism()),  # 60 tokens: not a multiple of 8
])
def test_refused_by_name(training: core.Training, layout: core.Parallelism) -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=SMALL, training=training, parallelism=layout)
    assert caught.value.field == "training.fp8"


def test_mxfp8_needs_whole_blocks_of_tokens() -> None:
    training = replace(MEGATRON, fp8="te-mxfp8", seq_len=40, micro_batch_size=1)  # 40 tokens: 8 | 40, 32 ∤ 40
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=SMALL, training=training, parallelism=core.Parallelism())
    assert caught.value.field == "training.fp8"
    core.estimate(architecture=SMALL, training=replace(training, fp8="te-delayed"), parallelism=core.Parallelism())


# --- importers ----------------------------------------------------------------------------------------------------


def megatron_with(flags: str) -> dict:
    return imported("megatron", sample("megatron_llama3_8b.sh").replace("    --bf16\n", f"    --bf16 {flags}\n"))


@pytest.mark.parametrize(("flags", "recipe"), [
    ("--fp8-format hybrid", "te-delayed"),  # --fp8-recipe's default, delayed
    ("--fp8-format e4m3 --fp8-recipe delayed --fp8-amax-history-len 1", "te-delayed"),
    ("--fp8-format hybrid --fp8-recipe tensorwise", "te-tensorwise"),
    ("--transformer-impl transformer_engine --fp8-format e4m3 --fp8-recipe mxfp8", "te-mxfp8"),
])
def test_megatron_fp8_flags_select_the_recipe(flags: str, recipe: str) -> None:
    answer = megatron_with(flags)
    assert answer["request"]["training"]["fp8"] == recipe
    assert understood(answer)["--fp8-format"] == ["training.fp8"]
    if "--fp8-recipe" in flags:
        assert understood(answer)["--fp8-recipe"] == ["training.fp8"]


@pytest.mark.parametrize(("flags", "key", "words"), [
    ("--fp8-format hybrid --fp8-recipe blockwise", "--fp8-format", "blockwise FP8 recipe is not modelled"),
    ("--transformer-impl local --fp8-format hybrid", "--fp8-format", "Transformer Engine"),
    ("--fp8-recipe delayed", "--fp8-recipe", "no --fp8-format"),
    ("--fp8-format hybrid --fp8-param-gather", "--fp8-param-gather", "upper bound"),
    ("--fp8-format hybrid --fp8-amax-history-len 1024", "--fp8-amax-history-len", "default length 1"),
])
def test_megatron_fp8_flags_left_aside(flags: str, key: str, words: str) -> None:
    answer = megatron_with(flags)
    assert words in ignored(answer)[key]
    expected = "te-delayed" if "param-gather" in flags or "history" in flags else "none"
    assert answer["request"]["training"]["fp8"] == expected


def test_megatron_fp8_with_fp16_falls_back_with_the_core_reason() -> None:
    text = sample("megatron_llama3_8b.sh").replace("    --bf16\n", "    --fp16 --fp8-format hybrid\n")
    answer = imported("megatron", text)
    assert answer["request"]["training"]["fp8"] == "none"
    assert any("Transformer Engine" in why for _, why in assumed(answer)["training.fp8"])


def test_accelerate_megatron_plugin_passes_no_fp8() -> None:
    text = "distributed_type: MEGATRON_LM\nmixed_precision: fp8\nnum_processes: 8\nfp8_config:\n  backend: TE\n"
    answer = imported("accelerate", text)
    assert answer["request"]["training"]["fp8"] == "none"
    assert any("MegatronLMPlugin.set_mixed_precision" in why for _, why in assumed(answer)["training.precision"])
