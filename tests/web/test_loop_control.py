"""The training-loop control shows only under the conventions that do not bring their own loop."""

import re

from fastapi.testclient import TestClient

from app.main import app


def test_loop_control_condition_lists_the_frameworks_without_a_loop() -> None:
    page = TestClient(app).get("/").text
    shown = re.search(r'data-show-when="framework=([^"]+)"[^>]*>\s*<legend class="sr-only">Training loop', page)
    assert shown is not None
    assert set(shown.group(1).split(",")) == {"pytorch", "deepspeed", "fsdp2", "megatron"}


def test_trainer_convention_hides_the_loop_and_counts_its_own() -> None:
    client = TestClient(app)
    params = {"preset": "llama-3-8b", "seq_len": "4096", "gpu": "h100-80gb"}
    loop_fieldset = re.compile(r'data-show-when="framework=[^"]+"( hidden disabled)?>\s*<legend class="sr-only">'
                               r'Training loop')
    trainer = client.get("/", params=params | {"framework": "hf-trainer", "loop": "plain"})
    plain = client.get("/", params=params | {"loop": "plain"})
    assert trainer.status_code == plain.status_code == 200
    hidden, shown = loop_fieldset.search(trainer.text), loop_fieldset.search(plain.text)
    assert hidden is not None and hidden.group(1) == " hidden disabled"
    assert shown is not None and shown.group(1) is None
    # The estimate under the Trainer's convention is the pytorch one with the Trainer's loop, through the API too.
    body = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096, "loop": "plain"}}
    as_trainer = client.post("/api/v1/estimate", json=body | {"training": {"seq_len": 4096, "framework": "hf-trainer"}})
    with_loop = client.post("/api/v1/estimate", json=body | {"training": {"seq_len": 4096, "loop": "hf-trainer"}})
    keeps_output = client.post("/api/v1/estimate", json=body)
    assert as_trainer.json()["peak"] == with_loop.json()["peak"] != keeps_output.json()["peak"]


def test_pages_of_new_layouts_render_with_their_fixes() -> None:
    """Expert parallelism, FP8 and the conventions on the page: each renders (its fixes and charts skip what the
    setup refuses) rather than failing."""
    client = TestClient(app)
    for params in ({"preset": "deepseek-v3", "data": "256", "zero_stage": "1", "expert": "64", "seq_len": "4096"},
                   {"preset": "llama-3-8b", "data": "8", "zero_stage": "3", "framework": "fsdp2",
                    "fp8": "torchao-fsdp-fp8", "seq_len": "8192"},
                   {"preset": "llama-3-8b", "fp8": "torchao", "seq_len": "65536"}):
        response = client.get("/", params=params | {"gpu": "h100-80gb"})
        assert response.status_code == 200, (params, response.text[:300])
        assert "text/html" in response.headers["content-type"]
