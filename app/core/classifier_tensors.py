"""The parameters an encoder with a sequence-classification head has beyond its layers (`families.SequenceClassifier`):
the token-type table and the embeddings' LayerNorm, and the head in place of a final norm and an output layer.

BertEmbeddings and RobertaEmbeddings hold ``token_type_embeddings`` (type_vocab_size x h) and a LayerNorm (h weights,
h biases); BertPooler's dense and BertForSequenceClassification's classifier, or RobertaClassificationHead's dense
and out_proj, are h x h and num_labels x h with biases (modeling_bert.py, modeling_roberta.py, transformers 5.24).
Nothing here is split under tensor parallelism, which the rules refuse for these models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.families import DEFAULT_LABELS, family_of
from app.core.param_tensors import ParamTensor

if TYPE_CHECKING:
    from app.core.architecture import Architecture
    from app.core.saved.common import ActivationSetup


def num_labels(arch: Architecture) -> int:
    """The classifier's outputs: len(id2label) of the config, 2 where it names none (PretrainedConfig)."""
    return int(arch.extra("num_labels", DEFAULT_LABELS))


def classifier_dropout(arch: Architecture) -> float:
    """The dropout before the head's classifier: the config's classifier_dropout, the hidden states' where it is
    null (the config reader records it, `hf_encoders`)."""
    return float(arch.extra("classifier_dropout", arch.dropout))


def type_vocab_size(arch: Architecture) -> int:
    return int(arch.extra("type_vocab_size", 2))


def encoder_embedding_tensors(arch: Architecture) -> tuple[ParamTensor, ...]:
    h = arch.hidden_size
    return (ParamTensor("embed.token_types", (type_vocab_size(arch), h)),
            ParamTensor("input_norm.weight", (h,)), ParamTensor("input_norm.bias", (h,)))


def classifier_head_tensors(arch: Architecture) -> tuple[ParamTensor, ...]:
    h, labels = arch.hidden_size, num_labels(arch)
    return (ParamTensor("head.dense.weight", (h, h), matmul=True), ParamTensor("head.dense.bias", (h,)),
            ParamTensor("head.classifier.weight", (labels, h), matmul=True),
            ParamTensor("head.classifier.bias", (labels,)))


def logits_shape(arch: Architecture, setup: ActivationSetup) -> tuple[int, int, str]:
    """The logits the loss reads, as rows, columns and their dimensions in words: a language model's b × s × V, a
    classifier's b × num_labels (one row per sequence)."""
    b, s = setup.micro_batch_size, setup.seq_len
    if family_of(arch).classifier:
        return b, num_labels(arch), f"{b} × {num_labels(arch)} labels"
    return b * s, arch.vocab_size, f"{b} × {s:,} × {arch.vocab_size:,}"


def upcasts_logits(arch: Architecture, setup: ActivationSetup) -> bool:
    """Whether the loss reads the logits in fp32: ForCausalLMLoss upcasts them (``logits.float()``); a classifier's
    CrossEntropyLoss takes them as they are, except under autocast, which runs log_softmax in fp32."""
    return not family_of(arch).classifier or setup.autocast
