"""Readers of the encoders estimated with a sequence-classification head (`families.SequenceClassifier`): BERT and
RoBERTa, with BertConfig's and RobertaConfig's field names and defaults (transformers 5.24). What either model does
beyond that head and its default attention is refused here, naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.families import DEFAULT_LABELS
from app.core.hf_reader import ConfigReader, short_value

# The activations whose MLP the saved tensors follow (`saved.mlp`): one kernel (gelu, gelu_pytorch_tanh), GPT-2's
# gelu_new, and relu.
ENCODER_ACTIVATIONS: Final = ("gelu", "gelu_pytorch_tanh", "gelu_new", "relu")
# What the classification loss is modelled for: PretrainedConfig.problem_type unset or single-label.
_PROBLEM_TYPES: Final = (None, "single_label_classification")


def bert_architecture(reader: ConfigReader) -> Architecture:
    """BertForSequenceClassification (BertConfig: vocab_size 30522)."""
    return _encoder(reader, "bert", vocab_size=30522)


def roberta_architecture(reader: ConfigReader) -> Architecture:
    """RobertaForSequenceClassification (RobertaConfig: vocab_size 50265)."""
    return _encoder(reader, "roberta", vocab_size=50265)


def _encoder(reader: ConfigReader, model_type: str, *, vocab_size: int) -> Architecture:
    """Both configuration classes' other defaults: 12 layers of 768 with 12 heads, intermediate_size 3072, gelu,
    dropout 0.1 on the hidden states and on the attention probabilities, 512 positions, 2 token types, and the
    classifier's dropout the hidden states' where classifier_dropout is null."""
    _refuse_unmodelled(reader)
    act = reader.str("hidden_act", "gelu")
    if act not in ENCODER_ACTIVATIONS:
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}; modelled: "
                                                       f"{', '.join(ENCODER_ACTIVATIONS)}")
    dropout = reader.float("hidden_dropout_prob", 0.1)
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", 12),
        hidden_size=reader.int("hidden_size", 768),
        num_attention_heads=reader.int("num_attention_heads", 12),
        intermediate_size=reader.int("intermediate_size", 3072),
        vocab_size=reader.int("vocab_size", vocab_size),
        max_position_embeddings=reader.int("max_position_embeddings", 512),
        attention_bias=True, mlp_bias=True, mlp="relu" if act == "relu" else "gelu", norm="layernorm",
        norm_placement="post", position_embedding="learned", dropout=dropout,
        attention_dropout=reader.float("attention_probs_dropout_prob", 0.1),
        model_type=model_type, hidden_act=act,
        extras=(("num_labels", _num_labels(reader)), ("type_vocab_size", _type_vocab_size(reader)),
                ("classifier_dropout", reader.float("classifier_dropout", dropout))),
    )


def _num_labels(reader: ConfigReader) -> int:
    """len(id2label), else num_labels, else 2 (PretrainedConfig keeps num_labels as the length of id2label)."""
    id2label = reader.config.get("id2label")
    if id2label is not None and not isinstance(id2label, Mapping):
        raise DomainError(reader._field("id2label"), f"must be an object of labels, got {short_value(id2label)}")
    labels = len(id2label) if id2label is not None else reader.int("num_labels", DEFAULT_LABELS)
    if not 2 <= labels <= 1_000_000:
        raise DomainError(reader._field("id2label" if id2label is not None else "num_labels"),
                          f"the classifier is modelled for 2 to 1,000,000 labels (one label is a regression, whose "
                          f"mean squared error is not modelled), got {labels}")
    return labels


def _type_vocab_size(reader: ConfigReader) -> int:
    types = reader.int("type_vocab_size", 2)
    if not 1 <= types <= 1_000_000:
        raise DomainError(reader._field("type_vocab_size"), f"must be between 1 and 1,000,000, got {types}")
    return types


def _refuse_unmodelled(reader: ConfigReader) -> None:
    """The encoder used as a decoder or with cross-attention, positions other than absolute, and losses other than
    single-label cross entropy are not modelled."""
    for name in ("is_decoder", "add_cross_attention"):
        if reader.bool(name, False):
            raise DomainError(reader._field(name), "only the encoder with a sequence-classification head is modelled "
                                                   "(bidirectional self-attention, no cross-attention)")
    positions = reader.str("position_embedding_type", "absolute")
    if positions != "absolute":
        raise DomainError(reader._field("position_embedding_type"),
                          f"only absolute (learned) positions are modelled, got {positions!r}")
    problem = reader.config.get("problem_type")
    if problem not in _PROBLEM_TYPES:
        raise DomainError(reader._field("problem_type"), "only single-label classification (cross entropy over "
                                                         f"num_labels) is modelled, got {short_value(problem)}")
