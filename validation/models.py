"""Small, randomly initialised Hugging Face models, built locally from a config (no downloads).

Each family is a function from a few sizes to a transformers config object. The harness builds
the model from that object and hands ``config.to_dict()`` to trainmem's
`architecture_from_hf_config`, so the prediction and the measurement see the very same config.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, PretrainedConfig  # noqa: E402


@dataclass(frozen=True)
class Size:
    """The dimensions a family is built with; families read what they need."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 176
    vocab: int = 384
    positions: int = 1024
    head_dim: int | None = None

    def label(self) -> str:
        kv = f"/kv{self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"h{self.hidden} L{self.layers} a{self.heads}{kv} I{self.intermediate} V{self.vocab}"


def _gpt2(size: Size) -> PretrainedConfig:
    # Defaults kept on purpose: gelu_new, dropout 0.1 on embeddings, residuals and attention.
    return transformers.GPT2Config(
        n_embd=size.hidden, n_layer=size.layers, n_head=size.heads, n_inner=size.intermediate,
        vocab_size=size.vocab, n_positions=size.positions, bos_token_id=0, eos_token_id=0,
    )


def _gpt2_no_dropout(size: Size) -> PretrainedConfig:
    config = _gpt2(size)
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    return config


def _llama(size: Size) -> PretrainedConfig:
    return transformers.LlamaConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim,
    )


def _llama_attention_dropout(size: Size) -> PretrainedConfig:
    config = _llama(size)
    config.attention_dropout = 0.1
    return config


def _mistral(size: Size) -> PretrainedConfig:
    return transformers.MistralConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim, sliding_window=None,
    )


def _qwen2(size: Size) -> PretrainedConfig:
    return transformers.Qwen2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, use_sliding_window=False,
    )


def _gemma(size: Size) -> PretrainedConfig:
    return transformers.GemmaConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim or size.hidden // size.heads,
    )


def _mixtral(size: Size) -> PretrainedConfig:
    return transformers.MixtralConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim, num_local_experts=4, num_experts_per_tok=2,
    )


def _gemma3(size: Size) -> PretrainedConfig:
    # Sliding-window and full-attention layers alternate; the window (Gemma3TextConfig's 4096) is longer than
    # the sequences measured, so both kinds keep the same tensors (app.core.activations.sliding_window_activations).
    return transformers.Gemma3TextConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim or size.hidden // size.heads,
        layer_types=["sliding_attention" if index % 2 == 0 else "full_attention" for index in range(size.layers)],
    )


def _olmo2(size: Size) -> PretrainedConfig:
    return transformers.Olmo2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, eos_token_id=1,  # Olmo2Config's 50279 lies outside small vocabularies
    )


def _deepseek_v3(size: Size) -> PretrainedConfig:
    # Multi-head latent attention and a mixture of experts in every layer (first_k_dense_replace 0: trainmem's
    # estimate counts its stages' layers alike), with a shared expert and two groups of routed experts.
    width = size.head_dim or size.hidden // size.heads
    return transformers.DeepseekV3Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, first_k_dense_replace=0, n_routed_experts=8, num_experts_per_tok=2,
        n_group=2, topk_group=1, n_shared_experts=1, moe_intermediate_size=size.intermediate // 4,
        q_lora_rank=size.hidden // 2, kv_lora_rank=size.hidden // 4, qk_nope_head_dim=width,
        qk_rope_head_dim=width // 2, v_head_dim=width, bos_token_id=0, eos_token_id=1,
    )


def _deepseek_v3_dense_first(size: Size) -> PretrainedConfig:
    # As above, with the first layer dense (DeepSeek-V3 keeps three): a dense MLP of intermediate_size there.
    config = _deepseek_v3(size)
    config.first_k_dense_replace = 1
    return config


def _deepseek_v2(size: Size) -> PretrainedConfig:
    # DeepSeek-V2's layout: the first layer dense, then mixtures of experts with two shared experts and softmax
    # routing within the 2 best of 4 groups (group_limited_greedy), multi-head latent attention with a low-rank query.
    width = size.head_dim or size.hidden // size.heads
    return transformers.DeepseekV2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
        topk_method="group_limited_greedy", n_group=4, topk_group=2, n_shared_experts=2,
        moe_intermediate_size=size.intermediate // 4, q_lora_rank=size.hidden // 2, kv_lora_rank=size.hidden // 4,
        qk_nope_head_dim=width, qk_rope_head_dim=width // 2, v_head_dim=width, bos_token_id=0, eos_token_id=1,
    )


def _deepseek_v2_lite(size: Size) -> PretrainedConfig:
    # As above with DeepSeek-V2-Lite's choices: greedy routing over all experts and a plain q_proj (q_lora_rank null).
    config = _deepseek_v2(size)
    config.topk_method = "greedy"
    config.q_lora_rank = None
    return config


def _gpt_oss(size: Size) -> PretrainedConfig:
    # Every layer a mixture of experts with biases, attention sinks, sliding-window and full-attention layers
    # alternating with a window (64) shorter than the sequences measured. transformers runs it with eager attention
    # only (no sdpa path); the default rotary parameters, as YaRN's scaling changes no tensor kept.
    return transformers.GptOssConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim or size.hidden // size.heads,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=64,
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    )


def _qwen3_moe(size: Size) -> PretrainedConfig:
    # Eight experts of the size's width, four per token, the top-k weights renormalised and cast to the activations'
    # dtype (Qwen3MoeTopKRouter), Q and K normalised per head.
    return transformers.Qwen3MoeConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, moe_intermediate_size=size.intermediate,
        vocab_size=size.vocab, max_position_embeddings=size.positions, head_dim=size.head_dim, num_experts=8,
        num_experts_per_tok=4, norm_topk_prob=True,
    )


def _gpt_oss_top1(size: Size) -> PretrainedConfig:
    # One expert per token: the fewest routed copies, where the post-attention norm's backward decides.
    config = _gpt_oss(size)
    config.num_experts_per_tok = 1
    return config


def _gpt_oss_e8_top4(size: Size) -> PretrainedConfig:
    config = _gpt_oss(size)
    config.num_local_experts, config.num_experts_per_tok = 8, 4
    return config


def _mixtral_router_logits(size: Size) -> PretrainedConfig:
    # Mixtral with the load-balancing loss on: the model returns its router logits and adds the auxiliary loss.
    config = _mixtral(size)
    config.output_router_logits = True
    return config


def _granite(size: Size) -> PretrainedConfig:
    # Llama's layout with ibm-granite/granite-3.1-8b-base's four scalar multipliers (its config.json).
    return transformers.GraniteConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, embedding_multiplier=12.0, residual_multiplier=0.22,
        attention_multiplier=0.0078125, logits_scaling=16.0,
    )


def _glm4(size: Size) -> PretrainedConfig:
    # GLM-4-0414's layout: four norms a layer, biases on Q, K and V, a fused gate_up_proj, half of each head rotated.
    return transformers.Glm4Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim or size.hidden // size.heads,
        pad_token_id=0, eos_token_id=1,  # Glm4Config's 151329 lies outside small vocabularies
    )


def _starcoder2(size: Size) -> PretrainedConfig:
    # LayerNorms, biases everywhere, an MLP without a gate (gelu_pytorch_tanh), no dropout and no window.
    return transformers.Starcoder2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim, bos_token_id=0, eos_token_id=0,
    )


def _starcoder2_published(size: Size) -> PretrainedConfig:
    # bigcode/starcoder2-3b's choices: dropout 0.1 on the embeddings, the residuals and attention, a window of 16.
    config = _starcoder2(size)
    config.residual_dropout = config.embedding_dropout = config.attention_dropout = 0.1
    config.sliding_window = 16
    return config


def _phi(size: Size) -> PretrainedConfig:
    # Phi-2's layout: one LayerNorm feeding attention and the MLP side by side, half of each head rotated, gelu_new.
    return transformers.PhiConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, bos_token_id=0, eos_token_id=0,
    )


def _phi2_dropout(size: Size) -> PretrainedConfig:
    # microsoft/phi-2's dropout: 0.1 on the attention's and the MLP's outputs, none on the embeddings or attention.
    config = _phi(size)
    config.resid_pdrop = 0.1
    return config


def _gpt_neox(size: Size) -> PretrainedConfig:
    # Pythia's layout: attention and the MLP side by side, a quarter of each head rotated, exact gelu, no dropout.
    return transformers.GPTNeoXConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        intermediate_size=size.intermediate, vocab_size=size.vocab, max_position_embeddings=size.positions,
        bos_token_id=0, eos_token_id=0,
    )


def _glm4_moe(size: Size) -> PretrainedConfig:
    # GLM-4.5's layout: DeepSeek-V3's mixture (a shared expert, two groups of routed experts, sigmoid routing) in every
    # layer (first_k_dense_replace 0), Q/K/V biases, half of each head rotated, Q and K normalised per head.
    return transformers.Glm4MoeConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, head_dim=size.head_dim or size.hidden // size.heads,
        first_k_dense_replace=0, n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
        n_shared_experts=1, moe_intermediate_size=size.intermediate // 4, attention_bias=True, use_qk_norm=True,
        bos_token_id=0, eos_token_id=1,
    )


def _glm4_moe_dense_first(size: Size) -> PretrainedConfig:
    # As above with the first layer dense (GLM-4.5 keeps three, GLM-4.5-Air one), without the Q/K norms (GLM-4.5-Air).
    config = _glm4_moe(size)
    config.first_k_dense_replace, config.use_qk_norm = 1, False
    return config


def _cohere(size: Size) -> PretrainedConfig:
    # Command R's layout: one fp32 LayerNorm without a bias feeding attention and the MLP side by side, cos and sin
    # interleaved, a gated MLP, tied embeddings, logits times logit_scale.
    return transformers.CohereConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, pad_token_id=0, bos_token_id=0, eos_token_id=1,
    )


def _cohere2(size: Size) -> PretrainedConfig:
    # Command R7B's layout: Cohere's, with every layer but the first attending within a window of 16 (shorter than
    # the sequence) and alone rotating Q and K; the first attends in full without positions.
    return transformers.Cohere2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, pad_token_id=0, bos_token_id=0, eos_token_id=1, sliding_window=16,
        layer_types=["full_attention"] + ["sliding_attention"] * (size.layers - 1),
    )


def _falcon(size: Size) -> PretrainedConfig:
    # Falcon-7B's layout (tiiuae/falcon-7b's config.json): multi-query attention, one LayerNorm feeding attention and
    # the MLP side by side, no biases, rotary positions, exact gelu, no dropout.
    return transformers.FalconConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        ffn_hidden_size=size.intermediate, vocab_size=size.vocab, max_position_embeddings=size.positions,
        new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False, bos_token_id=0,
        eos_token_id=0,
    )


def _falcon_new_decoder(size: Size) -> PretrainedConfig:
    # Falcon-40B's and -180B's layout: the new decoder architecture, grouped key/value heads broadcast to every head,
    # two LayerNorms of the layer's input.
    config = _falcon(size)
    config.new_decoder_architecture, config.num_kv_heads = True, size.kv_heads
    return config


def _falcon_one_norm(size: Size) -> PretrainedConfig:
    # Falcon2-11B's layout: the new decoder architecture with one LayerNorm a layer (num_ln_in_parallel_attn 1).
    config = _falcon_new_decoder(size)
    config.num_ln_in_parallel_attn = 1
    return config


def _bert(size: Size) -> PretrainedConfig:
    # BertConfig's defaults kept: gelu, dropout 0.1 on the embeddings, residuals, attention and the classifier's
    # input; two token types; two labels; the sequence classifier (pooler, dropout, classifier).
    return transformers.BertConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        intermediate_size=size.intermediate, vocab_size=size.vocab, max_position_embeddings=size.positions,
        architectures=["BertForSequenceClassification"],
    )


def _bert_no_dropout(size: Size) -> PretrainedConfig:
    config = _bert(size)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    return config


def _bert_three_labels(size: Size) -> PretrainedConfig:
    config = _bert(size)
    config.num_labels = 3
    return config


def _roberta(size: Size) -> PretrainedConfig:
    # FacebookAI/roberta-base's choices: one token type, padding index 1 (positions numbered from 2), 2 labels.
    return transformers.RobertaConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        intermediate_size=size.intermediate, vocab_size=size.vocab, max_position_embeddings=size.positions + 2,
        type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        architectures=["RobertaForSequenceClassification"],
    )


def _roberta_no_dropout(size: Size) -> PretrainedConfig:
    config = _roberta(size)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    return config


def _llama4_text(size: Size) -> PretrainedConfig:
    # Llama-4-Scout's layout: a mixture in every layer (four experts, one per token, a shared expert), Q and K
    # L2-normalised on the rotating layers, temperature tuning on the others; layers alternate rotating (chunked
    # attention, chunks of 8,192 tokens) and not (Scout's every fourth layer), so that two layers hold one of each.
    return transformers.Llama4TextConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads, head_dim=size.head_dim or size.hidden // size.heads,
        intermediate_size=size.intermediate, intermediate_size_mlp=2 * size.intermediate, vocab_size=size.vocab,
        max_position_embeddings=size.positions, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=1, no_rope_layers=[int(index % 2 == 0) for index in range(size.layers)],
        attention_chunk_size=8192, pad_token_id=0, bos_token_id=0, eos_token_id=1,
    )


def _llama4_text_chunk16(size: Size) -> PretrainedConfig:
    # As above with chunks of 16 tokens, shorter than the sequence: sdpa is handed the chunks as a mask.
    config = _llama4_text(size)
    config.attention_chunk_size = 16
    return config


FAMILIES: dict[str, Callable[[Size], PretrainedConfig]] = {
    "gpt2": _gpt2,
    "gpt2-no-dropout": _gpt2_no_dropout,
    "llama": _llama,
    "llama-attn-dropout": _llama_attention_dropout,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "gemma": _gemma,
    "mixtral": _mixtral,
    "mixtral-router-logits": _mixtral_router_logits,
    "qwen3_moe": _qwen3_moe,
    "gemma3": _gemma3,
    "olmo2": _olmo2,
    "deepseek_v3": _deepseek_v3,
    "deepseek_v3-dense-first": _deepseek_v3_dense_first,
    "deepseek_v2": _deepseek_v2,
    "deepseek_v2-lite": _deepseek_v2_lite,
    "gpt_oss": _gpt_oss,
    "gpt_oss-top1": _gpt_oss_top1,
    "gpt_oss-e8-top4": _gpt_oss_e8_top4,
    "granite": _granite,
    "glm4": _glm4,
    "starcoder2": _starcoder2,
    "starcoder2-dropout-window": _starcoder2_published,
    "phi": _phi,
    "phi-dropout": _phi2_dropout,
    "gpt_neox": _gpt_neox,
    "glm4_moe": _glm4_moe,
    "glm4_moe-dense-first": _glm4_moe_dense_first,
    "cohere": _cohere,
    "cohere2": _cohere2,
    "falcon": _falcon,
    "falcon-new-decoder": _falcon_new_decoder,
    "falcon-new-decoder-one-norm": _falcon_one_norm,
    "bert": _bert,
    "bert-no-dropout": _bert_no_dropout,
    "bert-three-labels": _bert_three_labels,
    "roberta": _roberta,
    "roberta-no-dropout": _roberta_no_dropout,
    "llama4_text": _llama4_text,
    "llama4_text-chunk16": _llama4_text_chunk16,
}

# Dtypes of the precision presets the harness runs.
PARAM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "autocast-bf16": torch.float32}


def build(family: str, size: Size, *, attention: str, precision: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """A model in training mode and the config dict it was built from."""
    config = FAMILIES[family](size)
    config._attn_implementation = attention
    torch.manual_seed(seed)
    model = auto_class(config).from_config(config, attn_implementation=attention)
    model.to(PARAM_DTYPES[precision])
    model.train()
    return model, config.to_dict()


def is_classifier(config: PretrainedConfig) -> bool:
    """Whether the config names a sequence classifier (BertForSequenceClassification...) rather than a causal LM."""
    return any(name.endswith("ForSequenceClassification") for name in config.architectures or ())


def auto_class(config: PretrainedConfig) -> type:
    return transformers.AutoModelForSequenceClassification if is_classifier(config) else AutoModelForCausalLM


def labels_for(config: PretrainedConfig, ids: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The labels a training step passes: the token ids for a causal LM, one class per sequence for a classifier."""
    if not is_classifier(config):
        return ids
    return torch.randint(0, config.num_labels, (ids.shape[0],), generator=generator)


def output_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose output is the logits: the output layer, or a classifier's last linear layer."""
    head = model.get_output_embeddings()
    if head is not None:
        return head
    classifier = model.classifier
    return getattr(classifier, "out_proj", classifier)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (``model.layers`` for Llama-style models, ``transformer.h`` for GPT-2), or
    an encoder's layers (``encoder.layer``: BERT, RoBERTa)."""
    if hasattr(model, "get_base_model"):  # a peft model: the transformers model it wraps
        model = model.get_base_model()
    base = model.base_model
    if base is model:  # Llama4ForCausalLM names its base model language_model but holds it as model
        base = model.model
    if hasattr(base, "encoder"):
        return base.encoder.layer
    return base.h if hasattr(base, "h") else base.layers
