"""One record per model type a config.json may name: the reader that reads it, and for the Llama-style decoders that
share one reader, what each one's configuration class and modules do differently (transformers 5.24). `hf_config`
looks a config's model type up here once; no reader asks which model type it reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from app.core.architecture import Architecture
from app.core.hf_decoder import (
    DecoderTraits,
    Experts,
    decoder_architecture,
    glm4_architecture,
    gpt2_architecture,
)
from app.core.hf_encoders import bert_architecture, roberta_architecture
from app.core.hf_llama4 import llama4_text_architecture
from app.core.hf_mixtures import (
    deepseek_v2_architecture,
    deepseek_v3_architecture,
    gpt_oss_architecture,
    qwen2_moe_architecture,
)
from app.core.hf_more_families import (
    cohere2_architecture,
    cohere_architecture,
    falcon_architecture,
    glm4_moe_architecture,
    gpt_neox_architecture,
    phi_architecture,
    starcoder2_architecture,
)
from app.core.hf_reader import ConfigReader

Reader = Callable[[ConfigReader], Architecture]


@dataclass(frozen=True)
class ConfigRecord:
    """How a config.json of one model type is read: by a reader of its own, or by the common decoder reader with
    the traits of its configuration class and modules."""

    model_type: str
    own_reader: Reader | None = None  # None: the common decoder reader, with `decoder`
    decoder: DecoderTraits = DecoderTraits()
    # A multimodal config.json whose language model, its text_config, is read as this model type's (Gemma 3, Llama 4).
    text_config_as: str | None = None

    def read(self, reader: ConfigReader) -> Architecture:
        if self.own_reader is None:
            return decoder_architecture(reader, self.model_type, self.decoder)
        return self.own_reader(reader)


# GemmaConfig: gelu_pytorch_tanh, head_dim 256, tied embeddings (Gemma2Config and Gemma3TextConfig alike).
_GEMMA: Final = DecoderTraits(hidden_act="gelu_pytorch_tanh", head_dim=256, tie_word_embeddings=True)

RECORDS: Final[dict[str, ConfigRecord]] = {record.model_type: record for record in (
    ConfigRecord("gpt2", gpt2_architecture),
    ConfigRecord("llama"),
    ConfigRecord("mistral"),
    # Qwen2Attention: biases on q_proj, k_proj and v_proj, none on o_proj.
    ConfigRecord("qwen2", decoder=DecoderTraits(qkv_bias=True)),
    ConfigRecord("gemma", decoder=_GEMMA),
    # Gemma 2 caps the attention scores and the logits, and norms before and after attention and the MLP.
    ConfigRecord("gemma2", decoder=replace(_GEMMA, norms_per_layer=4,
                                           softcaps=("attn_logit_softcapping", "final_logit_softcapping"))),
    # Phi3Attention's qkv_proj and Phi3MLP's gate_up_proj; resid_pdrop drops the attention's and the MLP's outputs.
    ConfigRecord("phi3", decoder=DecoderTraits(dropout_key="resid_pdrop", fused_qkv=True, fused_gate_up=True)),
    # MixtralConfig: num_local_experts 8, num_experts_per_tok 2, intermediate_size each expert's width.
    ConfigRecord("mixtral", decoder=DecoderTraits(experts=Experts(num_local_experts=8, num_experts_per_tok=2))),
    # Qwen3Config: head_dim 128; Qwen3Attention's q_norm and k_norm over each head.
    ConfigRecord("qwen3", decoder=DecoderTraits(head_dim=128, qk_norm=True)),
    # Qwen3MoeConfig: num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768, norm_topk_prob False.
    ConfigRecord("qwen3_moe", decoder=DecoderTraits(qk_norm=True, experts=Experts(
        num_local_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=False,
        num_experts_alias=True, sparse_step=True))),
    ConfigRecord("qwen2_moe", qwen2_moe_architecture),
    # Gemma 3 caps the logits only: Gemma3Attention keeps attn_logit_softcapping but does not pass it to the
    # attention function (modeling_gemma3.py). Four norms a layer, q_norm and k_norm, sliding-window layers.
    ConfigRecord("gemma3_text", decoder=replace(_GEMMA, norms_per_layer=4, softcaps=("final_logit_softcapping",),
                                                qk_norm=True, sliding_layers=True)),
    ConfigRecord("gemma3", text_config_as="gemma3_text"),
    # Olmo2DecoderLayer norms each block's output; Olmo2Attention's q_norm and k_norm span the whole projection.
    ConfigRecord("olmo2", decoder=DecoderTraits(norm_placement="post", qk_norm=True, qk_norm_over="projection")),
    ConfigRecord("deepseek_v2", deepseek_v2_architecture),
    ConfigRecord("deepseek_v3", deepseek_v3_architecture),
    ConfigRecord("gpt_oss", gpt_oss_architecture),
    ConfigRecord("granite"),
    ConfigRecord("glm4", glm4_architecture),
    ConfigRecord("starcoder2", starcoder2_architecture),
    ConfigRecord("phi", phi_architecture),
    ConfigRecord("gpt_neox", gpt_neox_architecture),
    ConfigRecord("glm4_moe", glm4_moe_architecture),
    ConfigRecord("cohere", cohere_architecture),
    ConfigRecord("cohere2", cohere2_architecture),
    ConfigRecord("falcon", falcon_architecture),
    # Encoders, estimated with a sequence-classification head (families.SequenceClassifier).
    ConfigRecord("bert", bert_architecture),
    ConfigRecord("roberta", roberta_architecture),
    ConfigRecord("llama4_text", llama4_text_architecture),
    ConfigRecord("llama4", text_config_as="llama4_text"),
)}
