"""A config.json of a model type with no record: estimated as a Llama-style decoder when it carries the standard
sizes and nothing says it is another kind of model, with the assumption named in the answer and on the page;
refused otherwise, with what is missing or what the model is."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

from app import core
from app.core import DomainError
from app.core.hf_config import architecture_from_hf_config
from app.main import app

# ibm-granite/granite-3.1-8b-base's config.json (its sizes and multipliers). The model card gives 8.17B parameters.
GRANITE = {"model_type": "granite", "architectures": ["GraniteForCausalLM"], "hidden_size": 4096,
           "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 12800,
           "vocab_size": 49155, "hidden_act": "silu", "max_position_embeddings": 131072, "tie_word_embeddings": True,
           "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125}
# Granite's sizes under a model type with no record, which the estimate stands in for.
UNKNOWN = {**GRANITE, "model_type": "newdecoder", "architectures": ["NewDecoderForCausalLM"]}
# An encoder with no record here (XLM-RoBERTa), with BERT-base's sizes.
ENCODER = {"model_type": "xlm-roberta", "architectures": ["XLMRobertaForMaskedLM"], "hidden_size": 768,
           "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
           "type_vocab_size": 2}


def _estimate(config: dict) -> core.Estimate:
    return core.estimate(architecture=architecture_from_hf_config(config), training=core.Training(),
                         gpu=core.get_gpu("h100-80gb"))


def test_an_unknown_decoder_is_estimated_as_llama_style_and_says_so():
    result = _estimate(UNKNOWN)
    assert round(result.param_count / 1e7) / 100 == 8.17  # Granite's sizes: the model card's 8.17B
    stand_in = [w for w in result.warnings if "'newdecoder' has no record" in w]
    assert len(stand_in) == 1 and "Llama-style" in stand_in[0] and "not counted" in stand_in[0]
    assert result.warnings[0] == stand_in[0]  # the assumption this answer stands on comes first


@pytest.mark.parametrize("architecture", [core.get_preset("llama-3-8b").architecture,
                                          architecture_from_hf_config(GRANITE)])
def test_a_known_model_type_says_nothing_of_the_kind(architecture):
    result = core.estimate(architecture=architecture, training=core.Training())
    assert not any("has no record" in w for w in result.warnings)


def test_granite_is_counted_by_its_own_record():
    assert round(_estimate(GRANITE).param_count / 1e7) / 100 == 8.17  # the model card's 8.17B


@pytest.mark.parametrize("config, words", [
    (ENCODER, "an encoder"),
    ({**ENCODER, "model_type": "newbert"}, "XLMRobertaForMaskedLM"),  # the class says what the type does not
    ({**GRANITE, "model_type": "mystery", "architectures": ["MysteryForSequenceClassification"]}, "no ...ForCausalLM"),
    ({**GRANITE, "model_type": "vlm", "vision_config": {"hidden_size": 1024}}, "multimodal"),
    ({**GRANITE, "model_type": "seq2seq", "is_encoder_decoder": True}, "encoder-decoder"),
    # A stand-in would count these as dense Llama layers: OLMoE-1B-7B's 6.9B parameters as 0.6B, GPT-BigCode's
    # ungated MLP 1.5 times over.
    ({**GRANITE, "model_type": "olmoe", "num_experts": 64, "num_experts_per_tok": 8}, "mixture of experts"),
    ({**GRANITE, "model_type": "newhybrid", "layers_block_type": ["mamba", "attention"]}, "state-space"),
    ({**GRANITE, "model_type": "mamba", "architectures": ["MambaForCausalLM"]}, "state-space model"),
    ({**GRANITE, "model_type": "gpt_bigcode", "hidden_act": "gelu_pytorch_tanh"}, "without a gate"),
    ({**GRANITE, "model_type": "newgelu", "hidden_act": "gelu_new"}, "may have no gate"),
])
def test_what_is_not_a_decoder_is_refused_at_its_model_type(config, words):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == "model.hf_config.model_type"
    assert words in error.value.message and "Llama-style" in error.value.message


def test_missing_sizes_are_named():
    config = {key: value for key, value in UNKNOWN.items() if key not in ("intermediate_size", "vocab_size")}
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == "model.hf_config.intermediate_size"
    assert "lacks intermediate_size, vocab_size" in error.value.message


@pytest.mark.parametrize("model_type", [["newdecoder"], "", "x" * 65, 7])
def test_a_model_type_that_is_no_name_is_refused(model_type):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**GRANITE, "model_type": model_type})
    assert error.value.field == "model.hf_config.model_type"


def test_the_api_and_the_page_show_the_assumption():
    client = TestClient(app)
    answer = client.post("/api/v1/estimate", json={"model": {"hf_config": UNKNOWN}, "gpu": "h100-80gb"})
    assert answer.status_code == 200
    assert "'newdecoder' has no record" in answer.json()["warnings"][0]
    page = client.get("/?" + urlencode({"source": "config", "hf_config": json.dumps(UNKNOWN)}))
    assert page.status_code == 200
    assert "newdecoder" in page.text and "has no record here" in page.text.replace("&#39;", "'")
