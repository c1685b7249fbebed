"""Links that change the page's state: API field paths to query parameters, and the URL they make."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

import pytest

from app.web import links
from app.web.form import ALL_CONTROLS, parse_form

NAMES = ALL_CONTROLS | {links.PIN}


def test_the_state_is_the_known_parameters_the_last_of_repeated_ones():
    params = {"seq_len": "4096", "fill": "preset", "utm": "x", "gpu": "h100-80gb", "pin": "seq_len=2048"}
    assert links.state_of(params, names=NAMES) == {"seq_len": "4096", "gpu": "h100-80gb", "pin": "seq_len=2048"}


def test_api_paths_map_to_the_controls_that_feed_them():
    assert links.control_for("training.micro_batch_size") == "micro_batch_size"
    assert links.control_for("parallelism.zero_stage") == "zero_stage"
    assert links.control_for("training.gradient_accumulation_steps") == "gradient_accumulation_steps"
    assert links.control_for("gpu") == "gpu"
    for path in ("model.hidden_size", "model.preset", "training.unknown", "seq_len", "parallelism.source"):
        with pytest.raises(ValueError):
            links.control_for(path)


def test_a_change_sets_its_fields_and_keeps_the_rest():
    state = {"preset": "llama-3-8b", "seq_len": "4096", "micro_batch_size": "8"}
    out = links.changed(state, {"training.micro_batch_size": 2, "training.gradient_accumulation_steps": 4})
    assert out == {"preset": "llama-3-8b", "seq_len": "4096", "micro_batch_size": "2", "gradient_accumulation_steps": "4"}
    assert state["micro_batch_size"] == "8"  # the state itself is left alone


def test_boxes_are_sent_when_ticked_and_left_out_when_not():
    assert links.changed({}, {"parallelism.sequence_parallel": True}) == {"sequence_parallel": "true"}
    assert links.changed({"sequence_parallel": "true"}, {"parallelism.sequence_parallel": False}) == {}


def test_a_precision_preset_drops_the_custom_dtypes():
    state = {"precision": "custom", "weights": "fp32", "master_weights": "none", "seq_len": "512"}
    assert links.changed(state, {"training.precision": "bf16"}) == {"seq_len": "512", "precision": "bf16"}


def test_the_href_is_this_page_with_the_state_as_its_query():
    assert links.href({}) == "/"
    url = links.href({"preset": "llama-3-8b", "framework_overhead_bytes": "1 GiB", "pin": "a=1&b=2"})
    query = dict(parse_qsl(urlparse(url).query))
    assert urlparse(url).path == "/"
    assert query == {"preset": "llama-3-8b", "framework_overhead_bytes": "1 GiB", "pin": "a=1&b=2"}
    # What the link says is what the form reads.
    assert parse_form(query).values["framework_overhead_bytes"] == "1 GiB"
