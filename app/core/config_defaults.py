"""What each model type's configuration class in transformers 5.24 fills in when a config.json leaves a field out,
as hf_config reads them."""

from __future__ import annotations

from typing import Final

# max_position_embeddings when config.json omits it: each configuration class's default in
# transformers (LlamaConfig 2048, MistralConfig 4096 * 32, Qwen2Config 32768, GemmaConfig and
# Gemma2Config 8192, Phi3Config 4096). It shapes no parameter of these rotary models; it only
# decides when a sequence is longer than the model supports.
DEFAULT_MAX_POSITIONS: Final = {"llama": 2048, "mistral": 131072, "qwen2": 32768, "gemma": 8192, "gemma2": 8192, "phi3": 4096,
                                "mixtral": 131072, "qwen3": 32768, "qwen3_moe": 32768, "gemma3_text": 131072,
                                "olmo2": 2048, "granite": 2048, "glm4": 131072,
                                "starcoder2": 4096, "phi": 2048, "gpt_neox": 2048,
                                "glm4_moe": 131072, "cohere": 8192, "cohere2": 8192,
                                "falcon": 2048, "llama4_text": 131072}

# Every dimension a config.json may leave out, for the model types whose configuration class gives each one a
# default (transformers 5.24): Gemma3TextConfig (configuration_gemma3.py; a Gemma 3 config.json for the 4B, 12B
# and 27B models writes only what differs, so its text_config has no vocab_size or head counts) and Olmo2Config
# (configuration_olmo2.py; num_key_value_heads falls back to num_attention_heads, as for every type).
CONFIG_DEFAULTS: Final[dict[str, dict[str, int]]] = {
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
    "olmo2": {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32},
    # GraniteConfig (configuration_granite.py) and Glm4Config (configuration_glm4.py), transformers 5.24.
    "granite": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32},
    # Starcoder2Config (configuration_starcoder2.py), transformers 5.24.
    "starcoder2": {"vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
                   "num_attention_heads": 24, "num_key_value_heads": 2},
    # PhiConfig (configuration_phi.py), transformers 5.24.
    "phi": {"vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
            "num_attention_heads": 32},
    # GPTNeoXConfig (configuration_gpt_neox.py), transformers 5.24: GPT-NeoX-20B's numbers.
    "gpt_neox": {"vocab_size": 50432, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44,
                 "num_attention_heads": 64},
    # Glm4MoeConfig (configuration_glm4_moe.py), transformers 5.24.
    "glm4_moe": {"vocab_size": 151_552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
                 "num_attention_heads": 96, "num_key_value_heads": 8, "moe_intermediate_size": 1408,
                 "num_experts_per_tok": 8, "n_shared_experts": 1, "n_routed_experts": 128,
                 "first_k_dense_replace": 1},
    # CohereConfig (configuration_cohere.py) and Cohere2Config (configuration_cohere2.py), transformers 5.24: the same
    # numbers, Command R's (CohereForAI/c4ai-command-r-v01).
    **{model_type: {"vocab_size": 256_000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
                    "num_attention_heads": 64} for model_type in ("cohere", "cohere2")},
    # FalconConfig (configuration_falcon.py), transformers 5.24: Falcon-7B's numbers (ffn_hidden_size 4 × hidden).
    "falcon": {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71},
    # Llama4TextConfig (configuration_llama4.py), transformers 5.24: Llama-4-Scout-17B-16E's numbers.
    "llama4_text": {"vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16, "num_experts_per_tok": 1,
                    "no_rope_layer_interval": 4, "attention_chunk_size": 8192},
    "glm4": {"vocab_size": 151_552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
             "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128},
}
# Glm4Config.__post_init__ sets partial_rotary_factor 0.5 where a config leaves it out: half of each head turns.
GLM4_PARTIAL_ROTARY: Final = 0.5
# PhiConfig's rope_parameters default: partial_rotary_factor 0.5.
PHI_PARTIAL_ROTARY: Final = 0.5
# GPTNeoXConfig's: rotary_pct 0.25 (a quarter of each head turns).
GPT_NEOX_PARTIAL_ROTARY: Final = 0.25
# Cohere2Config: sliding_window 4096, and without layer_types every sliding_window_pattern-th layer (4) attends to
# all tokens, the others within the window.
COHERE2_SLIDING_WINDOW: Final = 4096
COHERE2_SLIDING_WINDOW_PATTERN: Final = 4
# DeepseekV3Config's defaults (configuration_deepseek_v3.py, transformers 5.24), which are DeepSeek-V3's own
# config.json numbers (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json) except
# max_position_embeddings (4096 in the class, 163840 in the checkpoint's file).
DEEPSEEK_V3_DEFAULTS: Final = {"vocab_size": 129_280, "hidden_size": 7168, "intermediate_size": 18432,
                               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
                               "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
                               "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "kv_lora_rank": 512,
                               "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                               "v_head_dim": 128, "max_position_embeddings": 4096}
DEEPSEEK_V3_ROUTED_SCALING: Final = 2.5
# DeepseekV2Config's defaults (configuration_deepseek_v2.py, transformers 5.24). It has none for num_experts_per_tok,
# n_group and topk_group (None, with which DeepseekV2TopkRouter cannot route): a config.json gives the first, and the
# other two where it routes by group (topk_method "group_limited_greedy"). DeepSeek-V2's and DeepSeek-V2-Lite's own
# numbers are their config.json files' (app/core/data/models.json).
DEEPSEEK_V2_DEFAULTS: Final = {"vocab_size": 102_400, "hidden_size": 4096, "intermediate_size": 11008,
                               "moe_intermediate_size": 1407, "num_hidden_layers": 32, "num_attention_heads": 32,
                               "n_shared_experts": 2, "n_routed_experts": 64, "first_k_dense_replace": 0,
                               "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                               "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 2048}
DEEPSEEK_V2_ROUTED_SCALING: Final = 1.0
# Gemma3TextConfig: sliding_window 4096, and without layer_types every sliding_window_pattern-th layer (6) attends
# to all tokens, the others within the window.
GEMMA3_SLIDING_WINDOW: Final = 4096
GEMMA3_SLIDING_WINDOW_PATTERN: Final = 6
# GptOssConfig's defaults (configuration_gpt_oss.py, transformers 5.24), which are gpt-oss-120b's config.json numbers
# (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json); without layer_types every second layer
# attends to all tokens, the others within sliding_window.
GPT_OSS_DEFAULTS: Final = {"vocab_size": 201_088, "hidden_size": 2880, "intermediate_size": 2880,
                           "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                           "num_local_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128,
                           "max_position_embeddings": 131_072}
GPT_OSS_SLIDING_WINDOW_PATTERN: Final = 2
# Qwen2MoeConfig's defaults (configuration_qwen2_moe.py, transformers 5.24), which are Qwen1.5-MoE-A2.7B's config.json
# numbers (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json) except max_position_embeddings
# (32768 in the class, 8192 in the checkpoint's file).
QWEN2_MOE_DEFAULTS: Final = {"vocab_size": 151_936, "hidden_size": 2048, "intermediate_size": 5632,
                             "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                             "max_position_embeddings": 32768, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
                             "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60}
GPT_OSS_SWIGLU: Final = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}
