"""The fine-tuning, offloading, loss and extra parallelism controls: each feeds its API field, each bad value errs on its control."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.web import links
from app.web.form import parse_form


def test_lora_fields_feed_the_finetuning_request():
    form = parse_form({"method": "lora", "rank": "8", "target_modules": "q_proj, v_proj", "lora_dropout": "0.05",
                       "save_lm_head": "true"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    finetuning = form.request.finetuning
    assert (finetuning.method, finetuning.rank, finetuning.target_modules) == ("lora", 8, ["q_proj", "v_proj"])
    assert finetuning.dropout == 0.05 and finetuning.modules_to_save == ["lm_head"]
    assert form.estimate.trainable_param_count < form.estimate.param_count


def test_target_modules_that_are_not_names_are_a_regular_expression():
    listed = parse_form({"method": "lora", "rank": "8", "target_modules": "q_proj, v_proj"})
    matched = parse_form({"method": "lora", "rank": "8", "target_modules": r" .*\.(q_proj|v_proj) "})
    assert matched.ok and matched.request is not None and matched.estimate is not None, matched.errors
    assert matched.request.finetuning.target_modules == r".*\.(q_proj|v_proj)"
    assert listed.estimate is not None and matched.estimate.peak == listed.estimate.peak
    refused = parse_form({"method": "lora", "target_modules": r"(a+)+b"})
    assert "target_modules" in refused.errors and "repeated group" in refused.errors["target_modules"]


def test_qlora_reads_its_quantization_and_all_linear():
    form = parse_form({"method": "qlora", "target_modules": "all-linear", "quantization": "int8"})
    assert form.ok and form.request is not None, form.errors
    assert form.request.finetuning.quantization == "int8"
    assert form.request.finetuning.target_modules == ["all-linear"]


def test_qlora_reads_the_bitsandbytes_version_and_blank_means_a_fixed_release():
    old = parse_form({"method": "qlora", "quantization": "nf4", "bitsandbytes_version": " 0.41.1 "})
    new = parse_form({"method": "qlora", "quantization": "nf4", "bitsandbytes_version": ""})
    assert old.ok and new.ok and old.request is not None and new.request is not None, (old.errors, new.errors)
    assert (old.request.finetuning.bitsandbytes_version, new.request.finetuning.bitsandbytes_version) == ("0.41.1", None)
    assert old.estimate is not None and new.estimate is not None
    assert old.estimate.peak.bytes > new.estimate.peak.bytes


def test_full_fine_tuning_reads_freezing_and_ignores_adapter_fields():
    form = parse_form({"method": "full", "freeze_embeddings": "true", "frozen_layers": "4", "rank": "oops",
                       "save_lm_head": "true"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    assert form.request.finetuning.freeze_embeddings is True and form.request.finetuning.frozen_layers == 4
    assert form.request.finetuning.modules_to_save == []
    assert form.estimate.trainable_param_count < form.estimate.param_count


@pytest.mark.parametrize(("params", "control"), [
    ({"method": "lora", "rank": "many"}, "rank"),
    ({"method": "lora", "rank": "0"}, "rank"),
    ({"method": "lora", "target_modules": " , "}, "target_modules"),
    ({"method": "lora", "target_modules": "not_a_module"}, "target_modules"),
    ({"method": "lora", "lora_dropout": "1.5"}, "lora_dropout"),
    ({"method": "lora", "lora_dropout": "x"}, "lora_dropout"),
    ({"method": "qlora", "quantization": "fp3"}, "quantization"),
    ({"method": "qlora", "bitsandbytes_version": "latest"}, "bitsandbytes_version"),
    ({"method": "sometimes"}, "method"),
    ({"method": "full", "frozen_layers": "-1"}, "frozen_layers"),
    ({"method": "full", "frozen_layers": "99"}, "frozen_layers"),
    ({"loss": "cubic"}, "loss"),
    ({"loss": "chunked", "loss_chunks": "0"}, "loss_chunks"),
    ({"context": "zero"}, "context"),
    ({"pipeline": "2", "virtual_stages": "v"}, "virtual_stages"),
    ({"data": "4", "zero_stage": "2", "offload": "disk"}, "offload"),
    ({"data": "4", "zero_stage": "0", "offload": "optimizer"}, "offload"),
    ({"data": "4", "zero_stage": "2", "offload": "optimizer", "gpus_per_node": "0"}, "gpus_per_node"),
    ({"data": "4", "zero_stage": "2", "offload": "optimizer", "host_ram": "lots"}, "host_ram"),
])
def test_a_bad_value_errs_on_its_control(params, control):
    form = parse_form(params)
    assert not form.ok
    assert control in form.errors, form.errors


def test_adapters_under_autocast_err_on_the_precision_control():
    form = parse_form({"method": "lora", "precision": "autocast-bf16"})
    assert list(form.errors) == ["precision"]
    assert "autocast" in form.errors["precision"]


def test_loss_context_and_virtual_stages_feed_their_fields():
    form = parse_form({"loss": "chunked", "loss_chunks": "16", "context": "2", "data": "2", "pipeline": "2",
                       "virtual_stages": "2", "gradient_accumulation_steps": "4"})
    assert form.ok and form.request is not None, form.errors
    assert (form.request.training.loss, form.request.training.loss_chunks) == ("chunked", 16)
    assert (form.request.parallelism.context, form.request.parallelism.virtual_stages) == (2, 2)


def test_hidden_controls_do_not_count():
    form = parse_form({"loss": "standard", "loss_chunks": "bad", "pipeline": "1", "virtual_stages": "bad",
                       "data": "1", "expert": "bad"})
    assert form.ok and form.request is not None, form.errors
    assert form.request.parallelism.expert == 1


def test_offload_feeds_the_host_estimate_and_the_host_ram():
    form = parse_form({"data": "8", "zero_stage": "3", "offload": "optimizer+parameters", "gpus_per_node": "4",
                       "host_ram": "1 TiB"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    assert form.request.parallelism.offload == "optimizer+parameters"
    assert form.request.parallelism.gpus_per_node == 4
    assert form.host_ram_bytes == 1 << 40
    assert form.estimate.host is not None and form.estimate.host.gpus_per_node == 4


def test_finetuning_links_set_the_page_controls():
    state = links.changed({"seq_len": "4096"}, {"finetuning.method": "qlora", "finetuning.dropout": 0.1,
                                                "finetuning.target_modules": "all-linear"})
    assert state == {"seq_len": "4096", "method": "qlora", "lora_dropout": "0.1", "target_modules": "all-linear"}


@pytest.fixture(scope="module")
def client():
    return TestClient(app)


def test_the_page_shows_the_trainable_count_and_preset_links(client):
    page = client.get("/", params={"method": "qlora", "target_modules": "all-linear", "seq_len": "4096"}).text
    assert re.search(r"Trainable</dt><dd>[0-9,]+ trainable of [0-9,]+", page)
    assert 'id="f-rank"' in page and 'for="f-rank"' in page
    hrefs = re.findall(r'class="apply preset-link" href="([^"]+)"', page)
    assert any("method=qlora" in h and "seq_len=4096" in h for h in hrefs)
    assert "q_proj, k_proj, v_proj" in page  # the family's module names as a hint
    full = client.get("/").text
    assert "trainable of" not in full


def test_the_page_shows_host_memory_only_when_offloading(client):
    params = {"data": "8", "zero_stage": "3", "offload": "optimizer+parameters", "host_ram": "64 GiB"}
    page = client.get("/", params=params).text
    assert 'id="host-bar"' in page and "Host memory does not fit" in page
    assert "Host memory fits" in client.get("/", params=params | {"host_ram": "4 TiB"}).text
    assert 'id="host-bar"' not in client.get("/", params={"data": "8", "zero_stage": "3"}).text


def test_a_paged_optimizers_state_shows_as_host_memory_it_may_take(client):
    page = client.get("/", params={"preset": "llama-2-7b", "precision": "bf16", "optimizer": "paged-adamw-8bit"}).text
    assert 'id="host-bar"' in page and "Up to" in page and "a paged optimizer&#39;s state" in page


def test_a_bad_new_field_is_an_inline_message_not_a_500(client):
    response = client.get("/", params={"method": "lora", "rank": "0"})
    assert response.status_code == 422
    assert re.search(r'id="error-rank"[^>]*><span class="sr-only">Error: </span>\S', response.text)
