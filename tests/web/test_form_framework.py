"""The memory convention control (training.framework): its options are the core's registry, it feeds the API field,
and a convention the setup refuses is a message at the control to change, never a 500."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import parse_qs, urlparse

import pytest
from fastapi.testclient import TestClient

from app import configs, core
from app.api.schemas import FinetuningIn, ParallelismIn, TrainingIn
from app.main import app
from app.web import controls, imports, links
from app.web.form import parse_form

FSDP2 = {"framework": "fsdp2", "data": "8", "zero_stage": "3"}
DEEPSPEED = json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                        "zero_optimization": {"stage": 3}})


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


def _error(page: str, name: str) -> str:
    found = re.search(rf'id="error-{name}"[^>]*>(.*?)</p>', page, re.S)
    assert found, name
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def test_every_api_field_of_the_run_has_a_control_on_the_page(client):
    page = client.get("/").text
    names = set(re.findall(r'<(?:input|select|textarea)[^>]* name="([^"]+)"', page))
    for section, model in (("training", TrainingIn), ("parallelism", ParallelismIn), ("finetuning", FinetuningIn)):
        for name in model.model_fields:
            assert links.control_for(f"{section}.{name}") in names, f"{section}.{name}"


def test_the_options_are_the_registry_with_its_labels_and_texts(client):
    assert [option.value for option in controls.options()["framework"]] == list(core.FRAMEWORKS)
    assert [option.label for option in controls.options()["framework"]] == [f.label for f in core.FRAMEWORKS.values()]
    help_text = controls.help_text("framework")
    assert all(f.label in help_text for f in core.FRAMEWORKS.values())

    page = client.get("/").text
    assert '<label for="f-framework">Memory convention</label>' in page
    select = re.search(r'<select id="f-framework" name="framework"[^>]*>(.*?)</select>', page, re.S)
    assert select
    shown = re.findall(r'<option value="([^"]+)"( selected)?>([^<]+)</option>', select.group(1))
    assert [(value, html.unescape(label)) for value, _, label in shown] == [
        (f.id, f.label) for f in core.FRAMEWORKS.values()]
    assert [value for value, selected, _ in shown if selected] == ["pytorch"]  # the API's default


def test_the_convention_feeds_the_api_field_and_changes_the_breakdown(client):
    form = parse_form(FSDP2)
    base = parse_form(FSDP2 | {"framework": "pytorch"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    assert base.ok and base.estimate is not None, base.errors
    assert form.request.training.framework == "fsdp2"
    assert form.estimate.peak.bytes != base.estimate.peak.bytes

    page = client.get("/", params=FSDP2).text
    assert "FSDP2 convention" in page and "FSDP2 convention" not in client.get("/", params=FSDP2 | {
        "framework": "pytorch"}).text
    assert re.search(r'<option value="fsdp2" selected>', page)
    megatron = parse_form({"framework": "megatron", "implementation": "megatron"})
    assert megatron.ok and megatron.request is not None, megatron.errors  # no data parallelism needed


@pytest.mark.parametrize(("params", "control", "words"), [
    (FSDP2 | {"zero_stage": "1"}, "zero_stage", "choose ZeRO stage 3"),
    ({"framework": "fsdp2"}, "zero_stage", "choose ZeRO stage 3"),  # at one GPU too: ZeRO is on screen
    (FSDP2 | {"method": "lora"}, "framework", "Fine-tuning under the fsdp2 convention"),
    ({"framework": "megatron"}, "framework", "choose the megatron implementation"),
    ({"framework": "megatron", "implementation": "megatron", "data": "8", "zero_stage": "2"}, "zero_stage",
     "choose stage 0 or 1"),
    ({"framework": "deepspeed", "implementation": "megatron"}, "framework", "choose the pytorch convention"),
    ({"framework": "tensorflow"}, "framework", ""),
])
def test_a_refused_convention_is_a_message_at_the_control_to_change(client, params, control, words):
    form = parse_form(params)
    assert list(form.errors) == [control], form.errors
    assert words in form.errors[control]
    response = client.get("/", params=params)
    assert response.status_code == 422
    assert words in _error(response.text, control)
    update = client.get("/", params=params, headers={"HX-Request": "true"})
    assert update.status_code == 200 and update.headers["HX-Reswap"] == "none"
    assert words in _error(update.text, control)


def test_a_link_sets_the_convention():
    assert links.changed({"data": "8"}, {"training.framework": "fsdp2", "parallelism.zero_stage": 3}) == {
        "data": "8", "framework": "fsdp2", "zero_stage": "3"}


@pytest.fixture
def deepspeed_says_its_convention(monkeypatch):
    """The DeepSpeed import as it reads a config, saying the convention its own estimator follows."""
    real = configs.import_config

    def import_config(kind: str, text: str):
        answer = real(kind, text)
        if answer["kind"] == "deepspeed" and "framework" not in answer["request"].get("training", {}):
            answer["request"].setdefault("training", {})["framework"] = "deepspeed"
            answer["assumed"].append({"field": "training.framework", "value": "deepspeed", "file": "ds_config.json",
                                      "why": "a DeepSpeed config: its estimator's convention"})
        return answer

    monkeypatch.setattr(configs, "import_config", import_config)


@pytest.mark.usefixtures("deepspeed_says_its_convention")
def test_a_pasted_deepspeed_config_sets_the_convention(client):
    result = imports.read_paste("auto", DEEPSPEED, {"data": "8"})
    assert isinstance(result, imports.Imported), result
    assert result.state["framework"] == "deepspeed"
    assert not any("framework" in line for line in result.not_carried)
    assert parse_form(result.state).ok

    response = client.post("/import", data={"config_text": DEEPSPEED, "config_kind": "auto", "state": "data=8"})
    assert response.status_code == 200
    assert re.search(r'<select id="f-framework"[^>]*>.*?<option value="deepspeed" selected>', response.text, re.S)
    link = re.search(r'<a class="imported-link" href="([^"]+)"', response.text)
    assert link and parse_qs(urlparse(html.unescape(link.group(1))).query)["framework"] == ["deepspeed"]
