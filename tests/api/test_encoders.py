"""BERT and RoBERTa over the JSON API: the presets answer as sequence classifiers, /presets lists the model types,
and a setting not measured for them is a 422 naming its field."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
BERT = "google-bert/bert-base-uncased"


def test_a_bert_preset_answers_with_transformers_count():
    response = client.post("/api/v1/estimate", json={"model": {"preset": BERT},
                                                      "training": {"seq_len": 512, "micro_batch_size": 32}})
    assert response.status_code == 200, response.json()
    assert response.json()["param_count"] == 109_483_778  # BertForSequenceClassification on the meta device


def test_the_presets_list_the_encoders_model_types():
    model_types = client.get("/api/v1/presets").json()["model_types"]
    assert {"bert", "roberta"} <= set(model_types)


@pytest.mark.parametrize("body, loc", [
    ({"finetuning": {"method": "lora"}}, ["body", "finetuning", "method"]),
    ({"parallelism": {"tensor": 2}}, ["body", "parallelism", "tensor"]),
    ({"training": {"loss": "fused-linear"}}, ["body", "training", "loss"]),
])
def test_a_setting_not_measured_for_an_encoder_is_a_422_naming_it(body, loc):
    response = client.post("/api/v1/estimate", json={"model": {"preset": "FacebookAI/roberta-base"}, **body})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc and "encoder" in detail["msg"]
