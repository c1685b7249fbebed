"""Which layers full recomputation applies to, on the page: two controls shown under full recomputation, read into
the request, refused inline where they are wrong, and left alone while hidden."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from app.web.form import parse_form
from app.web.recompute import recompute_choices


def test_the_controls_feed_the_request_under_full_recomputation():
    form = parse_form({"activation_checkpointing": "full", "recompute_every": "2", "seq_len": "8192"})
    assert form.ok and form.request is not None, form.errors
    assert (form.request.training.recompute_every, form.request.training.recompute_first_layers) == (2, None)
    form = parse_form({"activation_checkpointing": "full", "recompute_first_layers": "4"})
    assert form.ok and form.request is not None, form.errors
    assert form.request.training.recompute_first_layers == 4
    assert form.estimate is not None
    (line,) = [b for b in form.estimate.ledger if b.key == "activations.layers"]
    assert "4 recomputed layers" in line.formula


def test_hidden_they_do_not_count():
    form = parse_form({"activation_checkpointing": "none", "recompute_every": "bad", "recompute_first_layers": "0"})
    assert form.ok and form.request is not None, form.errors
    assert form.request.training.recompute_every == 1


@pytest.mark.parametrize(("params", "control"), [
    ({"activation_checkpointing": "full", "recompute_every": "0"}, "recompute_every"),
    ({"activation_checkpointing": "full", "recompute_every": "two"}, "recompute_every"),
    ({"activation_checkpointing": "full", "recompute_first_layers": "0"}, "recompute_first_layers"),
    ({"activation_checkpointing": "full", "recompute_every": "2", "recompute_first_layers": "3"},
     "recompute_first_layers"),
])
def test_a_bad_value_errs_on_its_control(params, control):
    form = parse_form(params)
    assert not form.ok
    assert control in form.errors, form.errors


def test_the_recomputation_table_compares_every_layer_policies_with_a_partial_one():
    form = parse_form({"activation_checkpointing": "full", "recompute_every": "2", "seq_len": "8192"})
    job = form.job
    assert form.ok and form.estimate is not None and job is not None, form.errors
    choices = recompute_choices(job, form.estimate, form.unit)
    assert choices is not None
    assert [choice.choice for choice in choices] == ["partial", "none", "selective", "op", "full"]
    assert [choice.current for choice in choices] == [True, False, False, False, False]
    assert choices[0].label == "Full, every 2nd layer recomputed"
    by = {choice.choice: choice for choice in choices}
    assert by["full"].compute.startswith("+") and by["none"].compute.startswith("\u2212")


@pytest.mark.browser
def test_the_controls_appear_with_full_recomputation_and_move_the_verdict(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?seq_len=8192")
    expect(page.locator("#f-recompute_every")).to_be_hidden()
    page.select_option("#f-activation_checkpointing", "full")
    expect(page.locator("#f-recompute_every")).to_be_visible()
    expect(page.locator("#f-recompute_first_layers")).to_be_visible()
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("activation_checkpointing") == ["full"])
    page.fill("#f-recompute_first_layers", "4")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("recompute_first_layers") == ["4"])
    expect(page.locator("#checkpointing-cost")).to_contain_text(
        re.compile(r"Full, the first 4 layers of each stage recomputed: as chosen, peak"))
