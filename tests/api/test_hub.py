"""A model by Hub id through POST /api/v1/estimate, /solve and /sweep, against the stand-in Hub (tests/conftest.py):
public, gated with and without a token, missing, offline with and without a cached copy, the server's setting off,
a config that is not a model's, a file too large, a Hub too slow or out of reach; each failure a 422 at model.hub
whose type names it."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app import core
from app.main import app
from tests.hub_stand_in import GRANTED_TOKEN, UNGRANTED_TOKEN, StandInHub

client = TestClient(app)

SMALL = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
         "num_hidden_layers": 8, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
         "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
         "architectures": ["LlamaForCausalLM"]}
PARAMS = core.param_count(core.architecture_from_hf_config(SMALL))
WEIGHTS_BYTES = PARAMS * 16 // 8  # bf16: what the checkpoint's index says for exactly these parameters


def estimate(model: dict, **rest: object) -> tuple[int, dict]:
    response = client.post("/api/v1/estimate", json={"model": model, **rest})
    return response.status_code, response.json()


def refusal(model: dict) -> tuple[list, str, str]:
    status, answer = estimate(model)
    assert status == 422, answer
    (detail,) = answer["detail"]
    return detail["loc"], detail["type"], detail["msg"]


def test_a_public_model_estimates_as_its_config_does(stand_in_hub: StandInHub):
    stand_in_hub.add("org/small", SMALL, total_size=WEIGHTS_BYTES)
    status, by_id = estimate({"hub": "org/small"}, gpu="h100-80gb")
    assert status == 200, by_id
    assert by_id == estimate({"hf_config": SMALL}, gpu="h100-80gb")[1]
    assert by_id["param_count"] == PARAMS
    assert stand_in_hub.downloads() == ["/org/small/resolve/main/config.json",
                                        f"/org/small/resolve/{stand_in_hub.repos['org/small'].commit}"
                                        "/model.safetensors.index.json"]
    # Fetched once: the next answer comes from huggingface_hub's cache (the Hub is asked only whether it changed).
    assert estimate({"hub": "org/small"}, gpu="h100-80gb")[1] == by_id
    assert len(stand_in_hub.downloads()) == 2


def test_solve_and_sweep_take_a_hub_id(stand_in_hub: StandInHub):
    stand_in_hub.add("org/small", SMALL)
    for path, extra in (("solve", {"target": "micro_batch_size"}),
                        ("sweep", {"vary": {"field": "training.seq_len", "values": [1024, 2048]}})):
        by_id = client.post(f"/api/v1/{path}", json={"model": {"hub": "org/small"}, "gpu": "h100-80gb", **extra})
        by_config = client.post(f"/api/v1/{path}", json={"model": {"hf_config": SMALL}, "gpu": "h100-80gb", **extra})
        assert by_id.status_code == 200, by_id.text
        assert by_id.json() == by_config.json()


def test_a_revision_is_fetched_as_named(stand_in_hub: StandInHub):
    repo = stand_in_hub.add("org/small", SMALL)
    assert estimate({"hub": "org/small", "revision": repo.commit})[0] == 200
    assert stand_in_hub.downloads()[0] == f"/org/small/resolve/{repo.commit}/config.json"
    loc, kind, message = refusal({"hub": "org/small", "revision": "v9"})
    assert (loc, kind) == (["body", "model", "revision"], "hub_not_found") and "'v9'" in message


def test_a_gated_model_needs_a_granted_token(stand_in_hub: StandInHub, monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/gated", SMALL, gated=True)
    loc, kind, message = refusal({"hub": "org/gated"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_gated")
    assert "gated" in message and "HF_TOKEN" in message
    monkeypatch.setenv("HF_TOKEN", "hf_unknown")
    assert refusal({"hub": "org/gated"})[1] == "hub_token_refused"
    monkeypatch.setenv("HF_TOKEN", UNGRANTED_TOKEN)
    loc, kind, message = refusal({"hub": "org/gated"})
    assert kind == "hub_gated" and "not been granted" in message
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    status, answer = estimate({"hub": "org/gated"})
    assert status == 200 and answer["param_count"] == PARAMS


def test_the_token_of_hf_auth_login_is_read_too(stand_in_hub: StandInHub, tmp_path):
    stand_in_hub.add("org/gated", SMALL, gated=True)
    (tmp_path / "hf-home" / "token").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "hf-home" / "token").write_text(GRANTED_TOKEN)  # where `hf auth login` saves it, under HF_HOME
    status, answer = estimate({"hub": "org/gated"})
    assert status == 200, answer


def test_a_missing_model_is_named(stand_in_hub: StandInHub):
    loc, kind, message = refusal({"hub": "org/no-such-model"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_not_found")
    assert "no model org/no-such-model" in message


def test_offline_reads_the_cache_alone(stand_in_hub: StandInHub, monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/small", SMALL, total_size=WEIGHTS_BYTES)
    stand_in_hub.add("org/never-fetched", SMALL)
    online = estimate({"hub": "org/small"})[1]
    asked = len(stand_in_hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert estimate({"hub": "org/small"}) == (200, online)
    loc, kind, message = refusal({"hub": "org/never-fetched"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_offline") and "HF_HUB_OFFLINE" in message
    assert len(stand_in_hub.requests) == asked  # not one request while offline


def test_the_server_fetches_only_when_its_operator_allows(stand_in_hub: StandInHub,
                                                          monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/small", SMALL)
    for setting in (None, "0", "off"):
        if setting is None:
            monkeypatch.delenv("TRAINMEM_HUB")
        else:
            monkeypatch.setenv("TRAINMEM_HUB", setting)
        loc, kind, message = refusal({"hub": "org/small"})
        assert (loc, kind) == (["body", "model", "hub"], "hub_disabled") and "TRAINMEM_HUB=1" in message
    assert stand_in_hub.requests == []


@pytest.mark.parametrize(("config", "says"), [
    ({"hidden_size": 64, "num_hidden_layers": 2}, "no 'model_type'"),
    ({"model_type": "xlm-roberta", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "vocab_size": 30522, "type_vocab_size": 2, "architectures": ["XLMRobertaForMaskedLM"]},
     "model_type 'xlm-roberta'"),
    (b"<html>not json</html>", "not valid JSON"),
    ([1, 2, 3], "not a JSON object"),
])
def test_a_config_that_is_not_a_models_is_refused(stand_in_hub: StandInHub, config: object, says: str):
    stand_in_hub.add("org/thing", config if isinstance(config, bytes | dict) else str(config).encode())
    loc, kind, message = refusal({"hub": "org/thing"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_not_a_model")
    assert message.startswith("org/thing's config.json") and says in message


def test_a_repository_without_a_config_is_not_a_model(stand_in_hub: StandInHub):
    stand_in_hub.add("org/data", SMALL).files.pop("config.json")
    loc, kind, message = refusal({"hub": "org/data"})
    assert kind == "hub_not_a_model" and "no config.json" in message


def test_a_config_over_the_size_limit_is_refused_before_it_is_downloaded(stand_in_hub: StandInHub):
    stand_in_hub.add("org/huge", {**SMALL, "padding": "x" * (1 << 20)})
    loc, kind, message = refusal({"hub": "org/huge"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_too_large") and "1,048,576" in message
    assert stand_in_hub.downloads() == []


def test_a_slow_hub_is_answered_within_the_time_limit(stand_in_hub: StandInHub, monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/small", SMALL)
    stand_in_hub.delay_s = 3.0
    monkeypatch.setenv("TRAINMEM_HUB_TIMEOUT_S", "0.5")
    started = time.monotonic()
    loc, kind, message = refusal({"hub": "org/small"})
    assert time.monotonic() - started < 2.5
    assert (loc, kind) == (["body", "model", "hub"], "hub_timeout")


def test_a_hub_out_of_reach_is_named(stand_in_hub: StandInHub, monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.stop()  # nothing listens on its port any more
    loc, kind, message = refusal({"hub": "org/small"})
    assert (loc, kind) == (["body", "model", "hub"], "hub_unreachable") and "could not be reached" in message


def test_the_checkpoints_size_cross_checks_the_count(stand_in_hub: StandInHub):
    stand_in_hub.add("org/agrees", SMALL, total_size=WEIGHTS_BYTES + WEIGHTS_BYTES // 100)
    stand_in_hub.add("org/larger", SMALL, total_size=WEIGHTS_BYTES * 5 // 4)
    stand_in_hub.add("org/quantized", {**SMALL, "quantization_config": {"quant_method": "fp8"}},
                     total_size=WEIGHTS_BYTES // 2)
    for repo in ("org/agrees", "org/quantized"):
        assert not any("checkpoint" in warning for warning in estimate({"hub": repo})[1]["warnings"])
    first = estimate({"hub": "org/larger"})[1]["warnings"][0]
    assert first.startswith(f"org/larger's checkpoint holds {WEIGHTS_BYTES * 5 // 4:,} bytes")
    assert f"{PARAMS * 5 // 4:,} parameters in bfloat16, 25% more than the {PARAMS:,} counted here" in first


@pytest.mark.parametrize("model", [
    {"hub": "no spaces/allowed"}, {"hub": "org/name", "num_hidden_layers": 4}, {"hub": "org/a", "preset": "gpt2"},
    {"preset": "gpt2", "revision": "main"}, {"hub": "org/" + "x" * 100},
])
def test_the_schema_refuses_a_malformed_hub_model(stand_in_hub: StandInHub, model: dict):
    status, answer = estimate(model)
    assert status == 422, answer
    assert stand_in_hub.requests == []


def test_export_does_not_fetch(stand_in_hub: StandInHub):
    stand_in_hub.add("org/small", SMALL)
    response = client.post("/api/v1/export", json={"model": {"hub": "org/small"}, "kind": "deepspeed"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "hub_unsupported"
