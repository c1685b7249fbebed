"""Parameter counts against published totals and against hand-worked formulas."""

from dataclasses import replace
from typing import Any

import pytest

from app.core import Architecture, DomainError, get_preset, model_presets, param_count, parameter_tensors

# Exact totals as published for each checkpoint (Hugging Face Hub safetensors metadata, or
# transformers' num_parameters() for GPT-2, whose Hub figure also counts attention-mask buffers).
# Llama-2-7B is corroborated by PEFT's documented print_trainable_parameters output for LoRA r=8 on
# q_proj and v_proj: "all params: 6,742,609,920", less the 4,194,304 LoRA parameters.
PUBLISHED_TOTALS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "qwen2.5-7b": 7_615_616_512,
    "mixtral-8x7b": 46_702_792_704,  # safetensors total_size 93,405,585,408 B in bf16 (model.safetensors.index.json)
    # transformers 5.24's Gemma3ForCausalLM and Olmo2ForCausalLM built from each config.json on the meta device
    "gemma-3-1b": 999_885_952,
    "olmo-2-7b": 7_298_617_344,
    # DeepseekV3ForCausalLM from deepseek-ai/DeepSeek-V3's config.json on the meta device (tests/core/test_mla.py),
    # without the multi-token prediction module the checkpoint adds.
    "deepseek-v3": 671_026_404_352,
    # DeepseekV2ForCausalLM from deepseek-ai/DeepSeek-V2's and DeepSeek-V2-Lite's config.json on the meta device
    # (tests/core/test_deepseek_v2.py); DeepSeek publishes 236B and 15.7B (arXiv:2405.04434).
    "deepseek-v2": 235_741_434_880,
    "deepseek-v2-lite": 15_706_484_224,
    # GptOssForCausalLM from openai/gpt-oss-20b's and gpt-oss-120b's config.json on the meta device
    # (tests/core/test_gpt_oss.py); OpenAI publishes 20.91B and 116.83B (arXiv:2508.10925).
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    # transformers 5.24's Qwen3, Qwen3-MoE, Llama and Phi-3 causal LM classes built from each model's config.json on the
    # meta device; each equals the total of the checkpoint's safetensors on the Hub.
    "qwen3-0.6b": 596_049_920,
    "qwen3-8b": 8_190_735_360,
    "qwen3-30b-a3b": 30_532_122_624,  # Qwen publishes 30.5B total, 3.3B activated
    "qwen3-235b-a22b": 235_093_634_560,  # 235B total, 22B activated
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "phi-4": 14_659_507_200,
}


@pytest.mark.parametrize("preset_id", sorted(PUBLISHED_TOTALS))
def test_preset_matches_published_total(preset_id):
    assert param_count(get_preset(preset_id).architecture) == PUBLISHED_TOTALS[preset_id]


def test_every_preset_with_an_exact_total_is_checked_and_cites_sources():
    # The presets by Hub id state rounded figures instead: tests/core/test_hub_presets.py.
    exact = {preset.id: preset for preset in model_presets().values() if preset.published_param_count is not None}
    assert set(exact) == set(PUBLISHED_TOTALS)
    for preset in exact.values():
        assert preset.architecture_source.startswith("https://")
        assert preset.param_count_source
        assert preset.published_param_count == PUBLISHED_TOTALS[preset.id]


def test_gemma3_and_olmo2_presets_are_their_config_imports():
    from app.core import architecture_from_hf_config
    from tests.core.test_hf_config import GEMMA3_1B, OLMO2_7B

    for preset_id, config in (("gemma-3-1b", GEMMA3_1B), ("olmo-2-7b", OLMO2_7B)):
        imported = architecture_from_hf_config(config)
        assert replace(get_preset(preset_id).architecture, attention_dropout=0.0) == imported  # no dropout either way


def test_deepseek_v3_preset_is_its_config_import():
    from app.core import architecture_from_hf_config
    from tests.core.test_mla import DEEPSEEK_V3

    imported = architecture_from_hf_config(DEEPSEEK_V3)
    assert replace(get_preset("deepseek-v3").architecture, attention_dropout=0.0, extras=imported.extras) == imported


def test_gpt2_layer_is_12h2_plus_13h():
    # GPT-2 layer: c_attn h x 3h + 3h, c_proj h x h + h, c_fc h x 4h + 4h, c_proj 4h x h + h,
    # two LayerNorms of 2h: 12h^2 + 13h (Radford et al. 2019; the layout of Vaswani et al. 2017).
    h = 768
    one = Architecture(num_hidden_layers=1, hidden_size=h, num_attention_heads=12, vocab_size=50257,
                       max_position_embeddings=1024, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                       mlp="gelu", norm="layernorm", position_embedding="learned", fused_qkv=True)
    two = Architecture(**{**one.__dict__, "num_hidden_layers": 2})
    assert param_count(two) - param_count(one) == 12 * h * h + 13 * h == 7_087_872
    # embeddings V*h + positions P*h + final LayerNorm 2h
    assert param_count(one) - 7_087_872 == 50257 * h + 1024 * h + 2 * h


def test_llama_formula_with_grouped_query_attention():
    # Llama-3-8B: per layer 2h^2 (q, o) + 2 h (g d) (k, v) + 3 h I + 2h; plus 2 V h + h.
    h, layers, inter, vocab, kv_width = 4096, 32, 14336, 128256, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv_width + 3 * h * inter + 2 * h
    assert param_count(get_preset("llama-3-8b").architecture) == layers * per_layer + 2 * vocab * h + h


def test_qwen2_keeps_biases_on_qkv_only():
    arch = get_preset("qwen2.5-7b").architecture
    biases = {t.name: t.elements for t in parameter_tensors(arch)[:40] if t.name.endswith(".bias")}
    assert biases == {"attn.q.bias": 3584, "attn.k.bias": 512, "attn.v.bias": 512}


def test_fused_projections_do_not_change_the_count():
    base: dict[str, Any] = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                intermediate_size=128, vocab_size=100)
    assert param_count(Architecture(**base)) == param_count(Architecture(**base, fused_qkv=True, fused_gate_up=True))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_key_value_heads": 5}, "model.num_key_value_heads"),
        ({"hidden_size": 4095}, "model.num_attention_heads"),
        ({"num_hidden_layers": 0}, "model.num_hidden_layers"),
        ({"vocab_size": 10**12}, "model.vocab_size"),
        ({"dropout": 1.0}, "model.dropout"),
        ({"mlp": "tanh"}, "model.mlp"),
    ],
)
def test_impossible_shapes_name_their_field(changes, field):
    base = dict(num_hidden_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=1000)
    with pytest.raises(DomainError) as error:
        Architecture(**{**base, **changes})
    assert error.value.field == field


def test_mixtral_active_parameters():
    # Mixtral of Experts (Jiang et al. 2024, arXiv:2401.04088): 47B parameters, 13B active per token (2 of 8
    # experts). Exactly: all parameters less 6 unused experts × 3 × 4,096 × 14,336 in each of 32 layers.
    from app.core.architecture import active_param_count

    arch = get_preset("mixtral-8x7b").architecture
    assert active_param_count(arch) == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248


@pytest.mark.parametrize(("preset_id", "total_b", "active_b"), [
    ("qwen3-30b-a3b", 30.5, 3.3),  # Qwen's model card: 30.5B in total, 3.3B activated
    ("qwen3-235b-a22b", 235.0, 22.0),  # 235B in total, 22B activated (Qwen3 technical report, arXiv:2505.09388)
])
def test_qwen3_moe_presets_match_the_published_sizes(preset_id, total_b, active_b):
    """The published sizes are the counts cut to the digits shown (3,353,032,704 activated reads 3.3B)."""
    from app.core.architecture import active_param_count

    arch = get_preset(preset_id).architecture
    tenths = 10 if preset_id == "qwen3-30b-a3b" else 1
    assert param_count(arch) * tenths // 10**9 == int(total_b * tenths)
    assert active_param_count(arch) * tenths // 10**9 == int(active_b * tenths)
