"""Sizes that drive a loop, a list or a string are checked before anything is built from them: each reproducer of
a request that once cost seconds of CPU (or all the machine's memory) is refused within 100 ms of CPU, in process.

Figures before the bounds, measured on the server (2 cores): a gpt_oss config of 100,000,000 layers held the event
loop 6.9 s, 2**63 layers grew the process to 24 GB; a TOML key of 20,000 dotted parts took 9.3 s and 1.8 GB; a 1 MB
Megatron token 22 s; variables doubling per line 3.3 s at 301 bytes, 4x per extra line.
"""

from __future__ import annotations

import pytest

from app.configs import import_config
from app.core import DomainError
from app.core.hf_config import architecture_from_hf_config
from tests.cpu import least_cpu_s

CPU_LIMIT_S = 0.1


def _refused_quickly(call, field_part: str) -> None:
    def refused() -> DomainError:
        with pytest.raises(DomainError) as caught:
            call()
        return caught.value

    cpu_s, error = least_cpu_s(refused, CPU_LIMIT_S)
    assert cpu_s < CPU_LIMIT_S
    assert field_part in error.field


@pytest.mark.parametrize("model_type", ["gpt_oss", "gemma3_text", "qwen2_moe", "llama", "deepseek_v3"])
@pytest.mark.parametrize("layers", [10_001, 100_000_000, 2**63 - 1])
def test_a_huge_layer_count_is_refused_before_any_layer_list(model_type, layers):
    config = {"model_type": model_type, "num_hidden_layers": layers, "num_attention_heads": 32}
    _refused_quickly(lambda: architecture_from_hf_config(config), "num_hidden_layers")


def test_gpt2s_layer_count_too():
    _refused_quickly(lambda: architecture_from_hf_config({"model_type": "gpt2", "n_layer": 10**12}), "n_layer")


def test_the_largest_allowed_layer_count_builds_its_lists_quickly():
    cpu_s, arch = least_cpu_s(
        lambda: architecture_from_hf_config({"model_type": "gpt_oss", "num_hidden_layers": 10_000}), CPU_LIMIT_S)
    assert arch.num_hidden_layers == 10_000 and arch.sliding_window_layers == 5_000  # every second layer slides
    assert cpu_s < CPU_LIMIT_S


def test_a_long_mlp_only_layers_list_costs_no_more_than_its_length():
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 10_000, "mlp_only_layers": list(range(100_000))}
    cpu_s, arch = least_cpu_s(lambda: architecture_from_hf_config(config), CPU_LIMIT_S)
    assert arch.num_hidden_layers == 10_000
    assert cpu_s < CPU_LIMIT_S


@pytest.mark.parametrize("kind", ["auto", "torchtitan"])
def test_a_toml_key_of_20000_parts_is_refused(kind):
    _refused_quickly(lambda: import_config(kind, "[job]\n" + "a." * 20_000 + "a = 1\n"), "text")


def test_toml_beyond_64_kb_is_refused():
    _refused_quickly(lambda: import_config("torchtitan", "[job]\n" + "x = 1 #" * 128_000 + "\n"), "text")


def test_megatron_text_and_its_expansions_are_bounded():
    _refused_quickly(lambda: import_config("megatron", "--num-layers " + "a" * 900_000), "text")
    doubling = "A=xxxxxxxxxxxxxxxx\n" + "A=$A$A$A$A\n" * 40 + "--num-layers $A --hidden-size 64"
    _refused_quickly(lambda: import_config("megatron", doubling), "text")
