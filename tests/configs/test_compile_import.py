"""torch_compile in the Trainer's arguments and in axolotl's config: training.compile "inductor" where the core
models it (app/core/saved/compiled.py), else eager with the reason."""

from __future__ import annotations

import json

import pytest

from tests.configs.helpers import assumed, ignored, imported, merged, sample, understood


def test_the_trainers_torch_compile_imports_as_inductor_where_it_was_measured():
    # bf16 under DeepSpeed: bf16 weights with an fp32 master copy, no autocast
    args = json.loads(sample("training_args.json")) | {"torch_compile": True}
    answer = merged(("training-arguments", args), ("deepspeed", sample("ds_config_zero3.json")))
    assert answer["request"]["training"]["compile"] == "inductor"
    assert understood(answer)["torch_compile"] == ["training.compile"]
    # bf16 alone is torch.autocast over fp32 weights, not measured: counted as eager, and said why
    alone = imported("training-arguments", args | {"deepspeed": None})
    assert alone["request"]["training"]["compile"] == "none"
    assert any("autocast" in why for _, why in assumed(alone)["training.compile"])
    other = imported("training-arguments", {"output_dir": "out", "torch_compile": True,
                                            "torch_compile_backend": "aot_eager"})
    assert other["request"]["training"].get("compile", "none") == "none"
    assert "aot_eager" in ignored(other)["torch_compile"]


@pytest.mark.parametrize("value", [True, "auto"])
def test_axolotls_torch_compile_imports_as_inductor(value):
    answer = imported("axolotl", {"base_model": "meta-llama/Meta-Llama-3-8B", "torch_compile": value, "bf16": True,
                                  "torch_compile_mode": "max-autotune"})
    assert answer["request"]["training"]["compile"] == "inductor"
    assert "torch_compile_mode" in ignored(answer)
