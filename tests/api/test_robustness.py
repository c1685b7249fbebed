"""Whatever the body, the API answers 200 or 422, never a 500."""

import json
import random
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app, raise_server_exceptions=False)

ODD_VALUES = [None, 0, -1, 1, 2, 3, 7, 10**6, 10**30, -(10**30), 1.5, float("nan"), "", "x", "llama-3-8b", True, False,
              [], {}, [1], {"a": 1}, "1e400", 1e308]
FIELDS = {
    "model": ["preset", "num_params", "hf_config", "hub", "revision", "num_hidden_layers", "hidden_size",
              "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "dropout",
              "mlp", "norm"],
    "training": ["micro_batch_size", "seq_len", "precision", "optimizer", "activation_checkpointing", "attention",
                 "implementation", "framework_overhead_bytes"],
    "parallelism": ["data", "tensor", "pipeline", "sequence_parallel", "zero_stage"],
}
GOOD_CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_hidden_layers": 2, "vocab_size": 100}


def random_body(rng):
    body: dict[str, Any] = {"model": {"preset": "gpt2"}, "training": {}, "parallelism": {}}
    for _ in range(rng.randint(1, 4)):
        section = rng.choice(list(FIELDS))
        body[section][rng.choice(FIELDS[section])] = rng.choice(ODD_VALUES)
    if rng.random() < 0.2:
        body["model"] = {"hf_config": {**GOOD_CONFIG, rng.choice(list(GOOD_CONFIG)): rng.choice(ODD_VALUES)}}
    if rng.random() < 0.1:
        body["gpu"] = rng.choice(ODD_VALUES)
    return body


@pytest.mark.parametrize("seed", range(400))
def test_never_a_server_error(seed):
    body = random_body(random.Random(seed))
    # json.dumps writes NaN as a bare token, which is not JSON: that too must be a clean 422.
    response = client.post("/api/v1/estimate", content=json.dumps(body), headers={"content-type": "application/json"})
    assert response.status_code in (200, 422), (body, response.text)
    if response.status_code == 422:
        assert all(error["loc"] and error["msg"] for error in response.json()["detail"])
