"""The page's messages speak its own labels, not the API's words or its field names."""

from __future__ import annotations

import pytest

from app.web.form import in_page_words, parse_form


@pytest.mark.parametrize(("params", "control", "said"), [
    ({"micro_batch_size": "0"}, "micro_batch_size", "Micro-batch size must be at least 1."),
    ({"micro_batch_size": "100000"}, "micro_batch_size", "Micro-batch size must be at most 65,536."),
    ({"gradient_accumulation_steps": "0"}, "gradient_accumulation_steps", "Gradient accumulation must be at least 1."),
    ({"method": "lora", "rank": "0"}, "rank", "LoRA rank must be at least 1."),
    ({"method": "lora", "lora_dropout": "2"}, "lora_dropout", "LoRA dropout must be less than 1."),
    ({"optimizer": "sgd-with-dreams"}, "optimizer", "Choose one of the optimizer options listed."),
    ({"tensor": "3"}, "tensor", "Attention heads (32) must be divisible by the tensor-parallel degree (3)"),
    ({"pipeline": "5"}, "pipeline", "Layers (32) must be divisible by the pipeline degree (5)"),
    ({"context": "3"}, "context", "Sequence length (2,048) must be divisible by 2 × context (6)"),
    ({"source": "custom", "num_key_value_heads": "5"}, "num_key_value_heads",
     "Attention heads (32) must be a multiple of key/value heads (5)"),
    ({"preset": "llama-3.2-1b", "implementation": "litgpt", "method": "qlora"}, "preset",
     "Tied input and output embeddings: LitGPT's model (implementation litgpt) is modelled with an untied output "
     "layer"),
])
def test_a_message_names_the_pages_labels(params: dict, control: str, said: str):
    form = parse_form(params)
    assert form.errors[control].startswith(said), form.errors
    assert "Input should" not in form.errors[control]


def test_field_names_become_labels_mid_sentence_with_their_capitals():
    assert in_page_words("expert_tensor × expert must divide seq_len") == \
        "Expert tensor parallel × expert must divide sequence length"
    assert in_page_words("x needs num_key_value_heads and intermediate_size") == \
        "x needs key/value heads and MLP inner size"


def test_a_config_jsons_own_keys_stay_as_the_file_writes_them():
    form = parse_form({"source": "config", "hf_config": '{"model_type": "llama"}'})
    assert "num_attention_heads" in form.errors["hf_config"]


def test_an_empty_config_json_is_waited_for_not_an_error():
    form = parse_form({"source": "config", "hf_config": "  "})
    assert not form.ok and form.waiting == frozenset({"hf_config"})
    assert form.errors["hf_config"] == "Paste a model's config.json to estimate it."
    assert parse_form({"source": "config", "hf_config": "{"}).waiting == frozenset()


@pytest.mark.parametrize(("written", "tokens"), [("1e5", 100_000), ("1E5", 100_000), ("1.5e4", 15_000), ("4k", 4096)])
def test_a_sequence_length_in_scientific_notation(written: str, tokens: int):
    form = parse_form({"seq_len": written})
    assert form.ok and form.request is not None, form.errors
    assert form.request.training.seq_len == tokens
