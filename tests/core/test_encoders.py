"""BERT and RoBERTa read as sequence classifiers: counts by hand from their modules (modeling_bert.py,
modeling_roberta.py, transformers 5.24) against transformers' own, saved tensors against CPU measurements, the loss
over num_labels, and what is refused."""

from __future__ import annotations

import pytest

from app import core
from app.core import DomainError
from app.core import activations as act
from app.core.finetuning import Finetuning
from app.core.hf_config import architecture_from_hf_config

# google-bert/bert-base-uncased's sizes (the hub preset's config.json) and BertConfig's defaults for the rest.
BERT_BASE = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
# FacebookAI/roberta-base's sizes: 514 positions (two kept for the padding offset), one token type.
ROBERTA_BASE = {**BERT_BASE, "model_type": "roberta", "vocab_size": 50265, "max_position_embeddings": 514,
                "type_vocab_size": 1}
# The small models of validation/encoders.py (h 64, 2 layers, 4 heads, I 96, V 300, 256 positions).
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
         "vocab_size": 300, "max_position_embeddings": 256}


def _by_hand(h: int, inter: int, layers: int, vocab: int, positions: int, types: int, labels: int) -> int:
    embeddings = vocab * h + positions * h + types * h + 2 * h  # word, position, token-type tables, LayerNorm
    # query, key, value and attention output with biases, LayerNorm; intermediate and output dense, LayerNorm
    layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    head = (h * h + h) + (labels * h + labels)  # BertPooler.dense or RobertaClassificationHead.dense; classifier
    return embeddings + layers * layer + head


@pytest.mark.parametrize("config, measured", [
    # AutoModelForSequenceClassification.from_config on the meta device, transformers 5.24: the sum of numel().
    (BERT_BASE, 109_483_778),
    (ROBERTA_BASE, 124_647_170),
])
def test_base_models_counted_as_transformers_counts_them(config, measured):
    by_hand = _by_hand(768, 3072, 12, config["vocab_size"], config["max_position_embeddings"],
                       config["type_vocab_size"], 2)
    assert by_hand == measured
    assert core.param_count(architecture_from_hf_config(config)) == measured


def test_the_labels_come_from_id2label_then_num_labels():
    three = {**BERT_BASE, "id2label": {"0": "a", "1": "b", "2": "c"}}
    assert core.param_count(architecture_from_hf_config(three)) == 109_483_778 + 768 + 1
    assert core.param_count(architecture_from_hf_config({**BERT_BASE, "num_labels": 5})) == 109_483_778 + 3 * 769


@pytest.mark.parametrize("model_type, attention, layer, embedding, head", [
    # Measured on CPU in bf16 at b 2, s 32 (validation/encoders.py): bytes autograd keeps.
    ("bert", "eager", 156_160, 19_456, 8_984),
    ("bert", "sdpa", 229_888, 19_456, 8_984),  # sdpa with dropout: CPU's math path, in fp32
    ("roberta", "eager", 156_160, 18_176, 1_304),
])
def test_saved_tensors_as_measured(model_type, attention, layer, embedding, head):
    config = {**SMALL, "model_type": model_type}
    if model_type == "roberta":
        config |= {"type_vocab_size": 1, "pad_token_id": 1}
    arch = architecture_from_hf_config(config)
    setup = act.ActivationSetup(micro_batch_size=2, seq_len=32, attention=attention, device="cpu",
                                precision=core.precision_preset("bf16"))
    assert act.total_bytes(act.layer_activations(arch, setup)) == layer
    assert act.total_bytes(act.embedding_activations(arch, setup)) == embedding
    assert act.total_bytes(act.head_activations(arch, setup)) == head


def test_the_loss_is_over_the_labels_not_the_vocabulary():
    result = core.estimate(architecture=architecture_from_hf_config(BERT_BASE),
                           training=core.Training(micro_batch_size=8, seq_len=512, precision=core.precision_preset("bf16")))
    loss = [buffer for buffer in result.ledger if buffer.key.startswith("loss.")]
    assert loss and all(buffer.bytes <= 8 * 2 * 2 for buffer in loss)  # b × 2 labels × 2 bytes each at most
    assert any("sequence classifier (2 labels" in warning for warning in result.warnings)


@pytest.mark.parametrize("config, field", [
    ({**BERT_BASE, "is_decoder": True}, "model.hf_config.is_decoder"),
    ({**BERT_BASE, "add_cross_attention": True}, "model.hf_config.add_cross_attention"),
    ({**BERT_BASE, "position_embedding_type": "relative_key"}, "model.hf_config.position_embedding_type"),
    ({**BERT_BASE, "problem_type": "regression"}, "model.hf_config.problem_type"),
    ({**BERT_BASE, "num_labels": 1}, "model.hf_config.num_labels"),
    ({**BERT_BASE, "id2label": {"0": "only"}}, "model.hf_config.id2label"),
    ({**ROBERTA_BASE, "hidden_act": "quick_gelu"}, "model.hf_config.hidden_act"),
])
def test_what_is_not_modelled_in_the_config_is_refused_by_name(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


@pytest.mark.parametrize("training, parallelism, field", [
    ({"finetuning": Finetuning(method="lora")}, {}, "finetuning.method"),
    ({"finetuning": Finetuning(frozen_layers=2)}, {}, "finetuning.frozen_layers"),
    ({}, {"tensor": 2}, "parallelism.tensor"),
    ({}, {"pipeline": 2}, "parallelism.pipeline"),
    ({"loss": "chunked"}, {}, "training.loss"),
    ({"attention": "flash"}, {}, "training.attention"),
    ({"activation_checkpointing": "selective"}, {}, "training.activation_checkpointing"),
    ({"framework": "torchtitan"}, {}, "training.framework"),
])
def test_what_was_not_measured_in_the_setup_is_refused_by_name(training, parallelism, field):
    with pytest.raises(DomainError) as error:
        core.estimate(architecture=architecture_from_hf_config(ROBERTA_BASE), training=core.Training(**training),
                      parallelism=core.Parallelism(**parallelism))
    assert error.value.field == field


def test_zero_and_data_parallelism_are_estimated():
    plain = core.estimate(architecture=architecture_from_hf_config(BERT_BASE), training=core.Training())
    sharded = core.estimate(architecture=architecture_from_hf_config(BERT_BASE), training=core.Training(),
                            parallelism=core.Parallelism(data=8, zero_stage=3))
    assert sharded.peak.bytes < plain.peak.bytes


def test_the_head_computes_over_one_token_per_sequence():
    from app.core.flops import step_flops

    flops = step_flops(architecture_from_hf_config(BERT_BASE), micro_batch_size=8, seq_len=512)
    assert flops.output_layer == 2 * 8 * (768 * 768 + 2 * 768)  # the dense and the classifier over 8 first tokens
