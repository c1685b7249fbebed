"""config.json import: each model type's own names and defaults, checked against published totals."""

import pytest

from app.core import DomainError, architecture_from_hf_config, param_count
from app.core.architecture import layer_tensors

# config.json fields as published on the Hugging Face Hub for each checkpoint (only the fields that
# shape the parameters are reproduced).
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}
LLAMA_2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
              "hidden_act": "silu", "tie_word_embeddings": False}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
              "max_position_embeddings": 32768, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN2_5_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
              "max_position_embeddings": 131072, "hidden_act": "silu", "tie_word_embeddings": False}
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_attention_heads": 16,
            "num_hidden_layers": 28, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
            "max_position_embeddings": 8192, "hidden_act": "gelu"}
GEMMA_2B = {**GEMMA_7B, "hidden_size": 2048, "intermediate_size": 16384, "num_attention_heads": 8,
            "num_hidden_layers": 18, "num_key_value_heads": 1}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
             "num_hidden_layers": 42, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
             "max_position_embeddings": 8192, "hidden_activation": "gelu_pytorch_tanh",
             "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
PHI3_MINI = {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32064,
             "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False}

# Gemma 3 and OLMo 2, config.json as published (google/gemma-3-1b-pt, google/gemma-3-4b-pt, google/gemma-3-27b-pt,
# allenai/OLMo-2-1124-7B, allenai/OLMo-2-1124-13B; only the fields that shape the parameters). The 4B and 27B
# checkpoints are multimodal (model_type gemma3): their text_config writes only what differs from
# Gemma3TextConfig's defaults (vocab_size 262,208, 8 heads, 4 key/value heads, head_dim 256).
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
             "num_hidden_layers": 26, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
             "max_position_embeddings": 32768, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
             "sliding_window_pattern": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None}
GEMMA3_4B = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                                     "intermediate_size": 10240, "num_hidden_layers": 34,
                                                     "sliding_window": 1024},
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                               "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 896,
                               "patch_size": 14, "vision_use_head": False}}
GEMMA3_27B = {**GEMMA3_4B, "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
                                           "intermediate_size": 21504, "num_attention_heads": 32,
                                           "num_hidden_layers": 62, "num_key_value_heads": 16, "head_dim": 128,
                                           "query_pre_attn_scalar": 168, "sliding_window": 1024}}
OLMO2_7B = {"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 100352, "max_position_embeddings": 4096,
            "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}
OLMO2_13B = {**OLMO2_7B, "hidden_size": 5120, "intermediate_size": 13824, "num_attention_heads": 40,
             "num_hidden_layers": 40, "num_key_value_heads": 40}


@pytest.mark.parametrize(
    ("config", "measured"),
    [
        # sum(p.numel() for p in model.parameters()) of the transformers 5.24 class built from the config on the
        # meta device: Gemma3ForCausalLM(Gemma3TextConfig(**config)) for gemma3_text, and for gemma3 the language
        # model of Gemma3Config(**config), Gemma3ForCausalLM(config.text_config) (Gemma3ForConditionalGeneration
        # adds the vision tower and projector: 4,300,079,472 for the 4B, 27,432,406,640 for the 27B, the totals
        # the Hub shows for those checkpoints); Olmo2ForCausalLM(Olmo2Config(**config)).
        (GEMMA3_1B, 999_885_952),
        (GEMMA3_4B, 3_880_263_168),
        (GEMMA3_27B, 27_009_346_304),
        (OLMO2_7B, 7_298_617_344),
        (OLMO2_13B, 13_716_198_400),
        ({"model_type": "gemma3_text"}, 2_628_658_432),  # every Gemma3TextConfig default
        ({"model_type": "gemma3"}, 2_628_658_432),  # Gemma3Config(): text_config=None builds Gemma3TextConfig()
        ({"model_type": "olmo2"}, 6_888_624_128),  # every Olmo2Config default
    ],
)
def test_gemma3_and_olmo2_counts_match_transformers(config, measured):
    assert param_count(architecture_from_hf_config(config)) == measured


def test_gemma3_and_olmo2_layouts():
    gemma3 = architecture_from_hf_config(GEMMA3_4B)
    assert (gemma3.vocab_size, gemma3.num_attention_heads, gemma3.kv_heads, gemma3.head_size) == (262_208, 8, 4, 256)
    assert gemma3.tie_word_embeddings and gemma3.norms_per_layer == 4 and gemma3.mlp == "geglu"
    assert gemma3.qk_norm and gemma3.qk_norm_over == "head" and gemma3.model_type == "gemma3_text"
    # Gemma3TextConfig: every 6th layer attends to all tokens, the rest within the window: 34 - 5 = 29.
    assert (gemma3.sliding_window, gemma3.sliding_window_layers) == (1024, 29)
    assert gemma3.max_position_embeddings == 131_072  # Gemma3TextConfig's default
    olmo2 = architecture_from_hf_config(OLMO2_7B)
    assert olmo2.qk_norm and olmo2.qk_norm_over == "projection" and olmo2.norm_placement == "post"
    assert not olmo2.tie_word_embeddings and olmo2.sliding_window is None
    # Olmo2Attention: q_norm over num_heads * head_dim, k_norm over num_kv_heads * head_dim
    norms = {t.name: t.shape for t in layer_tensors(olmo2) if "_norm" in t.name}
    assert norms == {"attn.q_norm.weight": (4096,), "attn.k_norm.weight": (4096,)}
    explicit = architecture_from_hf_config({**GEMMA3_1B, "layer_types": ["full_attention"] * 26})
    assert (explicit.sliding_window, explicit.sliding_window_layers) == (None, 0)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({**GEMMA3_4B, "text_config": [1]}, "model.hf_config.text_config"),
        ({**GEMMA3_4B, "text_config": {"hidden_size": "2560"}}, "model.hf_config.text_config.hidden_size"),
        ({**GEMMA3_4B, "text_config": {"num_key_value_heads": 3}}, "model.hf_config.text_config.num_key_value_heads"),
        ({**GEMMA3_1B, "layer_types": ["full_attention"]}, "model.hf_config.layer_types"),
        ({**GEMMA3_1B, "use_bidirectional_attention": True}, "model.hf_config.use_bidirectional_attention"),
    ],
)
def test_bad_gemma3_configs_name_the_field(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("config", "published"),
    [
        (GPT2, 124_439_808),  # transformers GPT2LMHeadModel.num_parameters()
        (LLAMA_2_7B, 6_738_415_616),  # Hub safetensors total, meta-llama/Llama-2-7b-hf
        (MISTRAL_7B, 7_241_732_096),  # Hub safetensors total, mistralai/Mistral-7B-v0.1
        (QWEN2_5_7B, 7_615_616_512),  # Hub safetensors total, Qwen/Qwen2.5-7B
        (GEMMA_7B, 8_537_680_896),  # Hub safetensors total, google/gemma-7b
        (GEMMA_2B, 2_506_172_416),  # Hub safetensors total, google/gemma-2b
        (GEMMA2_9B, 9_241_705_984),  # Hub safetensors total, google/gemma-2-9b
        (PHI3_MINI, 3_821_079_552),  # Hub safetensors total, microsoft/Phi-3-mini-4k-instruct
    ],
)
def test_config_import_reproduces_published_totals(config, published):
    assert param_count(architecture_from_hf_config(config)) == published


def test_model_type_specifics():
    gpt2 = architecture_from_hf_config(GPT2)
    assert (gpt2.intermediate_size, gpt2.tie_word_embeddings, gpt2.norm, gpt2.position_embedding) == (3072, True, "layernorm", "learned")
    assert gpt2.dropout == 0.1 and gpt2.hidden_act == "gelu_new"
    qwen = architecture_from_hf_config(QWEN2_5_7B)
    assert qwen.has_qkv_bias and not qwen.attention_bias
    gemma = architecture_from_hf_config(GEMMA_7B)
    assert gemma.tie_word_embeddings and gemma.head_size == 256 and gemma.mlp == "geglu"
    gemma2 = architecture_from_hf_config(GEMMA2_9B)
    assert gemma2.norms_per_layer == 4 and gemma2.extra("final_logit_softcapping") == 30.0
    phi3 = architecture_from_hf_config(PHI3_MINI)
    assert phi3.fused_qkv and phi3.fused_gate_up


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "distilbert", "hidden_size": 768}, "model.hf_config.model_type"),  # an encoder, whatever it holds
        ({"hidden_size": 768}, "model.hf_config.model_type"),
        ({k: v for k, v in LLAMA_2_7B.items() if k != "vocab_size"}, "model.hf_config.vocab_size"),
        ({**LLAMA_2_7B, "hidden_size": "4096"}, "model.hf_config.hidden_size"),
        ({**LLAMA_2_7B, "num_key_value_heads": 5}, "model.hf_config.num_key_value_heads"),
        ({**LLAMA_2_7B, "hidden_act": "tanh"}, "model.hf_config.hidden_act"),
        ({**GEMMA2_9B, "attn_logit_softcapping": -1}, "model.hf_config.attn_logit_softcapping"),
        ({**GEMMA2_9B, "final_logit_softcapping": -30.0}, "model.hf_config.final_logit_softcapping"),
        ([1, 2], "model.hf_config"),
    ],
)
def test_bad_configs_name_the_field(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field
