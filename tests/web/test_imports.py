"""A pasted training config on the page (app/web/imports.py and POST /import): the form filled from it, what the
config does not say kept from the page, the URL holding the state and never the text, and bad text answered at
the paste box, never with a 500."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from fastapi.testclient import TestClient

from app import configs, wire
from app.main import app
from app.web import imports
from app.web.form import DEFAULT_GPU, parse_form
from tests.budget import examples

HX = {"HX-Request": "true"}
SAMPLES = Path(__file__).resolve().parents[1] / "configs" / "samples"
SAMPLE_NAMES = sorted(path.name for path in SAMPLES.iterdir())
DEEPSPEED = json.dumps({"train_micro_batch_size_per_gpu": 6, "gradient_accumulation_steps": 4,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}, "steps_per_print": 10})
HF_CONFIG = json.dumps({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
                        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                        "vocab_size": 32000, "max_position_embeddings": 2048})


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


def _sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def _imported(text: str, state: dict[str, str] | None = None, kind: str = "auto") -> imports.Imported:
    result = imports.read_paste(kind, text, state or {})
    assert isinstance(result, imports.Imported), result
    return result


def _post(client: TestClient, text: str, *, kind: str = "auto", state: str = "", headers: dict | None = None,
          fields: dict[str, str] | None = None):
    data = {"config_text": text, "config_kind": kind, "state": state} | (fields or {})
    return client.post("/import", data=data, headers=headers or {})


def _error_slot(html: str, name: str) -> str:
    found = re.search(rf'<p class="field-error" id="error-{name}">(.*?)</p>', html, re.S)
    assert found, name
    return found.group(1)


def test_the_kinds_offered_are_the_importers_and_a_model_config():
    assert set(imports.KINDS) == {*configs.IMPORT_KINDS, imports.HF_CONFIG}
    assert imports.KINDS[0] == imports.AUTO  # detect from the text is the default


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_the_page_estimates_what_the_api_estimates_for_each_sample(name: str):
    """From a fresh page (nothing kept), the form's estimate is the import's body estimated on the page's GPU."""
    text = _sample(name)
    form = parse_form(_imported(text).state)
    assert form.ok and form.estimate is not None, form.errors
    body = configs.import_config("auto", text)["request"] | {"gpu": DEFAULT_GPU}
    expected = wire.job_from(body).estimate()
    assert form.estimate.param_count == expected.param_count
    assert form.estimate.peak.bytes == expected.peak.bytes


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_the_state_never_holds_the_pasted_text(name: str):
    text = _sample(name)
    result = _imported(text)
    lines = [line.strip() for line in text.splitlines() if len(line.strip()) > 12]
    for value in result.state.values():
        assert not any(line in value for line in lines), value
    assert not imports.NAMES & set(result.state)


def test_what_the_config_does_not_say_stays_as_the_page_had_it():
    page = {"source": "preset", "preset": "mistral-7b", "gpu": "a100-80gb", "seq_len": "4096", "data": "8"}
    result = _imported(DEEPSPEED, page)
    assert result.state["preset"] == "mistral-7b" and result.state["gpu"] == "a100-80gb"
    assert result.state["seq_len"] == "4096" and result.state["data"] == "8"
    assert result.state["micro_batch_size"] == "6" and result.state["zero_stage"] == "2"
    assert result.state["gradient_accumulation_steps"] == "4" and result.state["precision"] == "bf16-fp32-master"
    assert {"Model", "GPU", "Sequence length"} <= set(result.kept)
    assert {u.key for u in result.understood} >= {"train_micro_batch_size_per_gpu", "zero_optimization.stage"}
    assert {i.key for i in result.ignored} == {"steps_per_print"}


def test_a_config_that_names_its_model_replaces_the_pages():
    page = {"source": "custom", "preset": "mistral-7b", "num_hidden_layers": "8", "hidden_size": "1024"}
    result = _imported(_sample("axolotl_qlora.yaml"), page)
    # NousResearch/Meta-Llama-3-8B-Instruct: the preset stored under Meta's Hub id, matched by its name.
    assert result.state["source"] == "preset" and result.state["preset"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert "num_hidden_layers" not in result.state and "Model" not in result.kept
    assert result.state["method"] == "qlora" and result.state["target_modules"] == "all-linear"
    assert result.state["save_embed_tokens"] == "true" and result.state["save_lm_head"] == "true"


def test_megatron_flags_become_the_architecture_fields():
    result = _imported(_sample("megatron_llama3_8b.sh"))
    assert result.state["source"] == "custom"
    assert result.state["num_hidden_layers"] == "32" and result.state["num_key_value_heads"] == "8"
    assert result.state["tensor"] == "2" and result.state["sequence_parallel"] == "true"


def test_a_model_config_json_sets_the_model_from_it():
    result = _imported(HF_CONFIG, {"seq_len": "1024"})
    assert result.kind == imports.HF_CONFIG
    assert result.state["source"] == "config" and json.loads(result.state["hf_config"])["hidden_size"] == 2048
    assert result.state["seq_len"] == "1024"
    assert parse_form(result.state).ok


def test_offloading_with_one_gpu_is_carried_to_the_page():
    """DeepSpeed offloads with one GPU (ZeRO-Offload); the page reads ZeRO and offloading at one GPU too, so nothing
    of it is left behind."""
    text = json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}}})
    result = _imported(text)
    assert not any(line.startswith("Offload to host memory") for line in result.not_carried), result.not_carried
    assert not _imported(_sample("accelerate_multi_gpu.yaml")).not_carried  # no difference to the estimate


@pytest.mark.parametrize(("kind", "text", "control", "words"), [
    ("auto", '{"zero_optimization": {"stage": "two"}}', "config_text", "zero_optimization.stage: must be an integer"),
    ("auto", "{oops", "config_text", "not valid JSON"),
    ("auto", "a: [1,\n", "config_text", "not YAML"),
    ("torchtitan", "[training\nsteps = 1", "config_text", "The config"),
    ("deepspeed", "distributed_type: MULTI_GPU\nnum_processes: 2\n", "config_text", "not valid JSON"),
    ("auto", '{"per_device_train_batch_size": "four"}', "config_text", "per_device_train_batch_size"),
    ("auto", '{"zero_optimization": {"stage": 7}}', "config_text", "zero_optimization.stage: must be between 0 and 3"),
    ("auto", "just: some\nyaml: here\n", "config_kind", "Could not tell which config"),
    ("auto", '{"model_type": "nonsense"}', "config_text", "model_type"),
    ("cobol", "{}", "config_kind", "Choose one of the kinds"),
    ("auto", "   ", "config_text", "Paste a config first"),
])
def test_text_that_cannot_be_read_gets_a_message_at_the_box(client, kind, text, control, words):
    result = imports.read_paste(kind, text, {})
    assert isinstance(result, imports.PasteError) and result.control == control and words in result.message

    page = _post(client, text, kind=kind, state="seq_len=4096")
    assert page.status_code == 422
    assert words in _error_slot(page.text, control)
    assert re.search(rf'id="f-{control}"[^>]*aria-invalid="true"', page.text)
    assert 'id="imported-title"' not in page.text
    assert re.search(r'name="seq_len" type="text" value="4096"', page.text)  # the state is as it was

    swapped = _post(client, text, kind=kind, fields={"source": "preset", "seq_len": "4096"}, headers=HX)
    assert swapped.status_code == 200 and "hx-push-url" not in swapped.headers
    assert words in _error_slot(swapped.text, control)


def test_without_javascript_the_post_answers_the_page_filled_with_the_report(client):
    response = _post(client, DEEPSPEED, state="preset=mistral-7b&seq_len=4096")
    assert response.status_code == 200 and "<html" in response.text
    html = response.text
    assert re.search(r'<select id="f-zero_stage"[^>]*>.*?<option value="2" selected>', html, re.S)
    assert re.search(r'name="micro_batch_size" type="text" value="6"', html)
    assert re.search(r'<option value="mistral-7b" selected>', html)
    assert "<code>zero_optimization.stage</code>" in html and "<code>steps_per_print</code>" in html
    link = re.search(r'<a class="imported-link" href="([^"]+)"', html)
    assert link
    query = parse_qs(urlparse(link.group(1).replace("&amp;", "&")).query)
    assert query["zero_stage"] == ["2"] and query["preset"] == ["mistral-7b"] and query["seq_len"] == ["4096"]
    assert not any("zero_optimization" in value for values in query.values() for value in values)
    # The paste box posts the new state next time.
    state = re.search(r'<input type="hidden" name="state" value="([^"]*)"', html)
    assert state and "zero_stage=2" in state.group(1).replace("&amp;", "&")


def test_htmx_gets_the_page_and_the_url_of_the_new_state(client):
    fields = {"source": "preset", "preset": "mistral-7b", "seq_len": "4096", "unit": "GiB"}
    response = _post(client, _sample("training_args.json"), fields=fields, state="seq_len=9", headers=HX)
    assert response.status_code == 200
    assert "HX-Request" in response.headers["vary"]
    pushed = parse_qs(urlparse(response.headers["hx-push-url"]).query)
    assert pushed["seq_len"] == ["4096"]  # the live fields win over the state the box was drawn with
    assert pushed["micro_batch_size"] == ["4"] and pushed["loop"] == ["hf-trainer"]
    assert 'id="page"' in response.text and 'id="imported-title"' in response.text


def test_the_paste_box_is_a_real_form_enhanced_with_htmx(client):
    html = client.get("/?seq_len=4096").text
    form = re.search(r'<form id="paste-form"[^>]*>', html)
    assert form
    tag = form.group(0)
    assert 'method="post"' in tag and 'action="/import"' in tag and 'hx-post="/import"' in tag
    assert 'hx-include="#calc"' in tag and 'hx-select="#page"' in tag
    assert re.search(r'<input type="hidden" name="state" value="seq_len=4096">', html)
    assert '<label for="f-config_text">' in html and '<label for="f-config_kind">' in html
    assert re.search(r'<option value="auto" selected>Detect from the text</option>', html)
    assert re.search(r'<section id="imported"[^>]*hidden', html)  # nothing read yet


def test_opening_the_import_address_goes_to_the_calculator(client):
    response = client.get("/import", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_a_text_over_the_limit_is_refused_like_the_apis(client):
    response = _post(client, "x" * (configs.MAX_TEXT_BYTES + 1))
    assert response.status_code == 413


GARBAGE = ["{", "}", "[", "]", ":", "=", "-", "--", "\n", "\t", "'", '"', "a", "1", "null", "true", "é", "#", " ",
           "\x00", "[model]", "zero_optimization", "{}", "--num-layers", "stage: 3"]


@pytest.mark.search  # a search over generated pastes, which make test runs in full
def test_no_paste_gives_a_500(client):
    rng = random.Random(20261130)
    for _ in range(examples(150)):
        text = "".join(rng.choice(GARBAGE) for _ in range(rng.randint(0, 30)))
        kind = rng.choice(imports.KINDS)
        for headers in ({}, HX):
            response = _post(client, text, kind=kind, headers=headers)
            assert response.status_code in (200, 422), (kind, text, response.status_code)
