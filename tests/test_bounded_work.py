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


# LoRA targets as a regular expression (app/core/lora_targets.py), on Llama's module names.
_LLAMA = {"model_type": "llama", "num_hidden_layers": 126, "hidden_size": 1024, "intermediate_size": 4096,
          "num_attention_heads": 8, "vocab_size": 1024}


def _targets(pattern: str, config: dict | None = None) -> None:
    from app.core import lora_targets
    from app.core.finetuning import Finetuning, validate_finetuning

    lora_targets._selection.cache_clear()  # each try matches afresh
    arch = architecture_from_hf_config(config or _LLAMA)
    validate_finetuning(Finetuning(method="lora", target_modules=pattern), arch)


@pytest.mark.parametrize("pattern", [
    "(a+)+b",  # nested repeats: seconds against a name of 60 characters
    "(.*)*q_proj", "(?:.|.)+q_proj", "(\\w+)\\1",  # a repeated group of repeats or alternatives; a back-reference
    ".*" * 6 + "Z",  # adjacent repeats: C(n + 6, 6) paths a name
    "(.|.)" * 20 + "Z",  # 2**20 alternatives a name
    "(" * 200,  # a compile error
    "a" * 100_000,  # past the length limit
])
def test_a_hostile_target_expression_is_refused_within_100_ms(pattern):
    _refused_quickly(lambda: _targets(pattern), "finetuning.target_modules")


def test_an_expression_on_the_most_layers_allowed_is_refused_within_100_ms():
    _refused_quickly(lambda: _targets(r".*\.q_proj", {**_LLAMA, "num_hidden_layers": 10_000}),
                     "finetuning.target_modules")


@pytest.mark.parametrize("pattern", [
    "(.|.)" * 8 + "Z",  # 2**8 alternatives a name, inside the step budget over 126 layers' names, and none match
    r"(?!.*Z).*Z",  # never matches: every split tried
    r"(?!.*mlp).*_proj",
])
def test_the_costliest_accepted_expressions_answer_within_100_ms(pattern):
    def matched() -> str:
        try:
            _targets(pattern)
        except DomainError as error:
            return error.message
        return ""

    cpu_s, message = least_cpu_s(matched, CPU_LIMIT_S)
    assert "steps" not in message  # matched against every name, not refused for its cost
    assert cpu_s < CPU_LIMIT_S
