"""config.json import: each model type's own names and defaults, checked against published totals."""

import pytest

from app.core import DomainError, architecture_from_hf_config, param_count

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
        ({"model_type": "bert", "hidden_size": 768}, "model.hf_config.model_type"),
        ({"hidden_size": 768}, "model.hf_config.model_type"),
        ({k: v for k, v in LLAMA_2_7B.items() if k != "vocab_size"}, "model.hf_config.vocab_size"),
        ({**LLAMA_2_7B, "hidden_size": "4096"}, "model.hf_config.hidden_size"),
        ({**LLAMA_2_7B, "num_key_value_heads": 5}, "model.hf_config.num_key_value_heads"),
        ({**LLAMA_2_7B, "hidden_act": "tanh"}, "model.hf_config.hidden_act"),
        ([1, 2], "model.hf_config"),
    ],
)
def test_bad_configs_name_the_field(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field
