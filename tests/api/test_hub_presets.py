"""A stored model by its Hub id: as model.preset or model.hub, answered offline from its stored config.json, and
listed with its Hub id and source by GET /api/v1/presets."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app import core, wire
from app.main import app
from tests.hub_stand_in import StandInHub

client = TestClient(app)
LLAMA_31_8B = "meta-llama/Llama-3.1-8B"


def estimate(model: dict) -> tuple[int, dict]:
    response = client.post("/api/v1/estimate", json={"model": model, "training": {"seq_len": 2048},
                                                      "gpu": "h100-80gb"})
    return response.status_code, response.json()


def test_a_hub_id_preset_answers_without_the_hub():
    # The server's own setting is off (tests/conftest.py) and HF_ENDPOINT points nowhere.
    status, answer = estimate({"preset": LLAMA_31_8B})
    assert status == 200, answer
    assert answer["param_count"] == 8_030_261_248  # 8.03B (the Hub's count for the checkpoint)


def test_a_stored_hub_id_is_not_fetched_even_where_the_server_may(stand_in_hub: StandInHub):
    status, by_hub = estimate({"hub": LLAMA_31_8B})
    assert status == 200, by_hub
    assert stand_in_hub.downloads() == []
    by_preset = estimate({"preset": LLAMA_31_8B})[1]
    note, *rest = by_hub["warnings"]
    assert "nothing was fetched" in note and "litgpt" in note
    assert {**by_hub, "warnings": rest} == by_preset


def test_a_stored_hub_id_at_a_revision_is_fetched(stand_in_hub: StandInHub):
    status, answer = estimate({"hub": LLAMA_31_8B, "revision": "main"})
    assert status == 422 and answer["detail"][0]["type"] == "hub_not_found"  # the stand-in Hub has no such model
    assert stand_in_hub.requests == [("HEAD", f"/{LLAMA_31_8B}/resolve/main/config.json")]


def test_the_server_answers_a_stored_hub_id_with_fetching_off():
    status, answer = estimate({"hub": "meta-llama/meta-llama-3-8b"})  # an alias, in another case
    assert status == 200, answer
    assert answer["param_count"] == core.param_count(core.get_preset("llama-3-8b").architecture)


def test_the_command_lines_fetch_is_not_called_for_a_stored_model():
    def refuse(repo_id: str, revision: str | None) -> object:
        raise AssertionError(f"fetched {repo_id}")

    job = wire.job_from({"model": {"hub": "google/gemma-2-9b"}}, fetch=refuse)  # type: ignore[arg-type]
    assert job.architecture == core.get_preset("google/gemma-2-9b").architecture


@pytest.mark.parametrize("alias, preset_id", [("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),
                                              ("Qwen/Qwen2.5-7B", "qwen2.5-7b")])
def test_a_presets_hub_id_is_an_alias_for_it(alias, preset_id):
    assert estimate({"preset": alias}) == estimate({"preset": preset_id})


def test_the_presets_list_shows_hub_ids_and_sources():
    models = client.get("/api/v1/presets").json()["models"]
    assert len(models) == len(core.model_presets()) >= 60 + 27
    by_id = {model["id"]: model for model in models}
    assert by_id["llama-3-8b"]["hub_id"] == "meta-llama/Meta-Llama-3-8B"
    stored = by_id[LLAMA_31_8B]
    assert stored["hub_id"] == LLAMA_31_8B and stored["param_count"] == 8_030_261_248
    assert stored["architecture_source"].startswith("https://github.com/Lightning-AI/litgpt/blob/")
    assert stored["param_count_source"].startswith("8.03B (total): https://huggingface.co/meta-llama/Llama-3.1-8B")
    assert all(model["hub_id"] and model["architecture_source"] for model in models)


def test_an_unknown_hub_id_preset_is_a_422_naming_the_field():
    status, answer = estimate({"preset": "someone/unknown"})
    assert status == 422
    assert answer["detail"][0]["loc"] == ["body", "model", "preset"]
