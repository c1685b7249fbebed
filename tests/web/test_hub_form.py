"""The page's Hub id box: a model by Hub id estimates as its config.json does, and each failure shows at the box in
the page's words (the stand-in Hub of tests/conftest.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web.form import parse_form
from tests.api.test_hub import PARAMS, SMALL
from tests.hub_stand_in import StandInHub

client = TestClient(app)


def test_a_hub_id_estimates_as_its_config_does(stand_in_hub: StandInHub):
    stand_in_hub.add("org/small", SMALL)
    by_id = parse_form({"source": "hub", "hub": " org/small "})
    assert by_id.ok, by_id.errors
    assert by_id.estimate is not None and by_id.estimate.param_count == PARAMS
    assert by_id.request is not None and by_id.request.model.hub == "org/small"
    page = client.get("/", params={"source": "hub", "hub": "org/small"})
    assert page.status_code == 200
    assert 'id="f-hub" name="hub" type="text" value="org/small"' in page.text
    assert f"{PARAMS:,}" in page.text
    assert "/export/" not in page.text  # an export does not fetch: no link that would be refused


@pytest.mark.parametrize("typed", ["", "  ", "Qwen", "Qwen/", "/Qwen"])
def test_a_box_not_yet_holding_org_slash_name_is_waited_for(stand_in_hub: StandInHub, typed: str):
    form = parse_form({"source": "hub", "hub": typed})
    assert form.waiting == frozenset({"hub"}) and "Qwen/Qwen2.5-7B-Instruct" in form.errors["hub"]
    assert stand_in_hub.requests == []


@pytest.mark.parametrize(("hub_id", "said"), [
    ("org/no-such-model", "No model org/no-such-model on the Hugging Face Hub"),
    ("org/distilbert", "org/distilbert's config.json, model_type: model_type 'distilbert'"),
    ("not an/id", "String should match pattern"),
])
def test_a_failure_shows_at_the_box(stand_in_hub: StandInHub, hub_id: str, said: str):
    stand_in_hub.add("org/distilbert", {"model_type": "distilbert", "type_vocab_size": 2, "hidden_size": 768})
    form = parse_form({"source": "hub", "hub": hub_id})
    assert list(form.errors) == ["hub"] and form.errors["hub"].startswith(said), form.errors


def test_the_box_names_the_setting_when_the_server_does_not_fetch(stand_in_hub: StandInHub,
                                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRAINMEM_HUB")
    page = client.get("/", params={"source": "hub", "hub": "org/small"})
    assert page.status_code == 422  # as for any field the estimate refuses
    assert 'id="f-hub" name="hub" type="text" value="org/small"' in page.text
    assert 'aria-invalid="true"' in page.text.split('id="f-hub"', 1)[1].split(">", 1)[0]
    assert "TRAINMEM_HUB=1" in page.text
    assert stand_in_hub.requests == []
