"""gpt-oss under autocast (fp32 weights, bf16 activations: the ``autocast-bf16`` preset).

The rules, measured on CPU with validation/measure.py's SavedTensorRecorder (transformers 5.24, torch 2.13, the
forward in ``torch.autocast("cpu", dtype=torch.bfloat16)``; validation/gpt_oss.py's autocast cases, docs/VALIDATION.md
"gpt-oss"): the sinks are fp32 parameters and torch.cat (autocast's promote list) joins the bf16 scores to them in
fp32, so the softmax over s + 1 columns keeps an fp32 output, and on CPU the dropout an fp32 mask; the cast of the
probabilities to V's bf16 is a second copy, which the matmul with V keeps. Q, K and V, the router and its top-k
softmax keep what a bf16 model keeps; the experts run grouped_mm in fp32 (as Mixtral's under autocast). Autograd
keeps one bf16 cast of each 2-D weight an F.linear reads: the attention's four projections and the router's.
"""

from app.core import architecture_from_hf_config, precision_preset
from app.core.activations import ActivationSetup, layer_activations, total_bytes
from app.core.rules import validate_setup
from app.core.setup import Parallelism, Training
from app.core.states import stage_shapes

# validation/gpt_oss.py's first case: h = 64, a = 4 heads of d = 16, g = 2, E = 4 experts of width I = 48, k = 2.
GPT_OSS = {"model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 48,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16, "attention_bias": True,
           "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 256}


def _setup(precision: str = "autocast-bf16", *, batch: int = 2, seq: int = 32) -> ActivationSetup:
    return ActivationSetup(micro_batch_size=batch, seq_len=seq, attention="eager", device="cpu",
                           precision=precision_preset(precision))


def _named(arch, setup) -> dict[str, int]:
    return {item.name: item.bytes for item in layer_activations(arch, setup)}


def test_sink_softmax_is_fp32_and_the_matmul_keeps_a_bf16_copy():
    arch = architecture_from_hf_config(GPT_OSS)
    attention = _named(arch, _setup())
    # b = 2, s = 32, a = 4: the softmax over s + 1 = 33 columns in fp32, 2·4·32·33 · 4 B = 33,792 (measured
    # (2, 4, 32, 33) float32); its cast to bf16 without the sink column, 2·4·32·32 · 2 B = 16,384 (measured
    # (8, 32, 32) bfloat16, the second matmul's operand).
    assert attention["attn.softmax_with_sink"] == 33_792
    assert attention["attn.probs_half"] == 16_384
    # Q, K and V as in a bf16 model: the first matmul's bf16 casts of the fp32 rotated Q and K, and V repeated to
    # a heads, 64 tokens · 4·16 · 2 B = 8,192 each (measured (8, 32, 16) and (8, 16, 32) bfloat16).
    assert attention["attn.query"] == attention["attn.key"] == attention["attn.value"] == 8_192
    # In a bf16 model the softmax is bf16, 2·4·32·33 · 2 B = 16,896, and is the matmul's operand itself.
    bf16 = _named(arch, _setup("bf16"))
    assert bf16["attn.softmax_with_sink"] == 16_896
    assert "attn.probs_half" not in bf16


def test_layer_is_the_measured_one():
    # Measured: 427,024 B per layer (E4 k2 a4/kv2 window 16 autocast-bf16 eager b2 s32), by hand (n = 64 tokens,
    # n·k = 128 routed copies):
    #   two RMSNorms, each fp32 input 64·64·4 + fp32 rstd 64·4 + fp32 normalised 64·64·4 = 33,024  -> 66,048
    #   three bf16 casts of the norm's output for q, k and v: 3 · 64·64·2                          -> 24,576
    #   Q, K, V 3 · 8,192; row-max index 2·4·32 · 8 = 2,048; fp32 softmax 33,792; bf16 probabilities
    #   16,384; the output projection's bf16 input 64·64·2 = 8,192                                  -> 84,992
    #   router: bf16 cast of its input 64·64·2 = 8,192, top-k indices 64·2·8 = 1,024, bf16 top-k softmax
    #   64·2·2 = 256                                                                                -> 9,472
    #   routing order 2·128·8 = 2,048, sorted expert ids 128·8 = 1,024, int32 counts 4·4 = 16        -> 3,088
    #   fp32 experts (grouped_mm): gathered tokens 128·64·4 = 32,768, gate-and-up 128·96·4 = 49,152, the clamped
    #   SwiGLU's five 128·48·4 = 122,880, outputs 128·64·4 = 32,768                                 -> 237,568
    #   bf16 routing weights 128·2 = 256, scatter index 128·8 = 1,024                                -> 1,280
    # 66,048 + 24,576 + 84,992 + 9,472 + 3,088 + 237,568 + 1,280 = 427,024.
    assert total_bytes(layer_activations(architecture_from_hf_config(GPT_OSS), _setup())) == 427_024


def test_dropout_mask_is_fp32_on_cpu():
    # Measured: 329,488 B per layer (attention_dropout 0.1, autocast-bf16, b2 s24). The dropout acts on the fp32
    # probabilities: its CPU mask is fp32, 2·4·24·24 · 4 B = 18,432; the matmul with V keeps the bf16 cast of the
    # dropped probabilities, 2·4·24·24 · 2 B = 9,216, and no second copy.
    arch = architecture_from_hf_config({**GPT_OSS, "attention_dropout": 0.1})
    setup = _setup(seq=24)
    attention = _named(arch, setup)
    assert attention["attn.softmax_dropout_mask"] == 18_432
    assert attention["attn.softmax_dropout_output"] == 9_216
    assert "attn.probs_half" not in attention
    assert total_bytes(layer_activations(arch, setup)) == 329_488


def test_weight_copies_are_the_linear_weights():
    # Measured: 25,088 B of bf16 weight casts kept per layer, 12,544 elements: q 64·64 = 4,096, k 32·64 = 2,048,
    # v 32·64 = 2,048, o 64·64 = 4,096 and the router 4·64 = 256. The biases' casts (addmm keeps no bias), the
    # sinks (joined by torch.cat uncast) and the experts (grouped_mm, uncast) add nothing.
    shapes = stage_shapes(architecture_from_hf_config(GPT_OSS), 1, layers=2, first=True, last=True)
    assert shapes.layer_autocast_rank == 12_544
    # The head keeps the output layer's cast, 300 · 64 = 19,200 elements (measured 38,400 B).
    assert shapes.output_rank == 19_200


def test_gpt_oss_is_accepted_under_autocast():
    validate_setup(Training(micro_batch_size=2, seq_len=32, precision=precision_preset("autocast-bf16")),
                   Parallelism(), architecture_from_hf_config(GPT_OSS))
