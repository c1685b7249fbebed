"""LoRA targets as one string (app/core/lora_targets.py): peft 0.21's regular expressions, bounded before use."""

from __future__ import annotations

from itertools import combinations
from math import comb, prod

import pytest

from app import core
from app.core import DomainError
from app.core.finetuning import Finetuning, validate_finetuning
from app.core.lora_targets import MATCH_BUDGET, MAX_LINE_KINDS, pattern_shape, targets_from_text
from validation.lora_targets import CONFIGS, Case, predict

# Trainable parameters peft 0.21.2 counts (get_nb_trainable_parameters) for these targets on the small models of
# validation/lora_targets.py (12 layers), measured on CPU with transformers 5.24: `python -m validation.lora_targets`.
PEFT_COUNTS = {
    ("llama", r".*\.(q_proj|v_proj)"): 21_504,
    ("llama", r".*self_attn\.[qkvo]_proj"): 43_008,
    ("llama", "all-linear"): 89_088,
    ("llama", r"(?!.*mlp).*_proj"): 43_008,
    ("qwen2", r".*\.(q_proj|v_proj)"): 21_504,
    ("glm4", r".*\.(gate_up_proj|o_proj)"): 79_872,
    ("starcoder2", r".*mlp\.c_.*"): 30_720,
    ("gpt_neox", r".*attention\.(query_key_value|dense)"): 36_864,
    ("gpt_neox", r".*dense.*"): 43_008,
    ("falcon", r".*self_attention\.query_key_value"): 15_360,
    ("gpt2", r".*\.c_proj"): 43_008,
    ("gpt2", r".*attn\.c_proj"): 12_288,
    ("gpt2", r"transformer\.h\.\d+\.mlp\.c_(fc|proj)"): 61_440,
    # What all-linear adapts, family by family: every linear module of the layers, not the output layer.
    ("glm4", "all-linear"): 211_968,
    ("starcoder2", "all-linear"): 73_728,
    ("phi", "all-linear"): 73_728,
    ("gpt_neox", "all-linear"): 67_584,
    ("falcon", "all-linear"): 89_088,
    ("gpt2", "all-linear"): 98_304,
}


@pytest.mark.parametrize(("family", "targets"), sorted(PEFT_COUNTS))
def test_an_expression_adapts_what_peft_adapts(family, targets):
    assert predict(Case(family, targets)) == PEFT_COUNTS[family, targets]


def test_phi_at_rank_4_as_peft_counts_it():
    assert predict(Case("phi", r".*\.(dense|fc1)", rank=4)) == 13_824  # peft 0.21.2, as above


def test_q_and_v_by_hand():
    # 12 layers, r = 8: q_proj 64 -> 64 takes 8 * (64 + 64); v_proj 64 -> 2 heads * 16 takes 8 * (64 + 32).
    assert predict(Case("llama", r".*\.(q_proj|v_proj)")) == 12 * (8 * (64 + 64) + 8 * (64 + 32))


def test_a_list_and_an_expression_of_the_same_modules_agree():
    arch = core.architecture_from_hf_config(CONFIGS["llama"])
    training = core.Training(micro_batch_size=1, seq_len=16, precision=core.precision_preset("bf16"),
                             finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj")))
    listed = core.estimate(architecture=arch, training=training, device="cpu")
    training = core.Training(micro_batch_size=1, seq_len=16, precision=core.precision_preset("bf16"),
                             finetuning=Finetuning(method="lora", target_modules=r".*\.(q_proj|v_proj)"))
    matched = core.estimate(architecture=arch, training=training, device="cpu")
    assert (matched.peak, matched.per_gpu, matched.ledger) == (listed.peak, listed.per_gpu, listed.ledger)


@pytest.mark.parametrize(("family", "targets", "reason"), [
    ("llama", r".*layers\.(0|1|2)\..*q_proj", "some layers only"),  # peft adapts 3 of 12 layers: 3,072
    ("llama", r".*layers\.1\d?\.self_attn\.q_proj", "some layers only"),
    ("gpt2", r".*\.h\.[0-5]\.attn\.c_attn", "some layers only"),
    ("llama", r".*", "'model'"),  # peft: "Target module LlamaModel(...) is not supported"
    ("llama", r".*self_attn", "'model.layers.0.self_attn'"),
    ("llama", r"model\.layers\.\d+\.mlp\..*", "'model.layers.0.mlp.act_fn'"),  # peft refuses SiLUActivation
    ("llama", r".*(q_proj|norm)", "'model.norm'"),
    ("llama", r"lm_head|.*q_proj", "'lm_head'"),  # peft wraps the output layer too: 13,824
    ("llama", "q_proj", "matches no linear module"),  # peft: "Target modules q_proj not found"
])
def test_what_is_not_modelled_is_refused_naming_why(family, targets, reason):
    refusal = predict(Case(family, targets))
    assert isinstance(refusal, str) and reason in refusal


def _validate(targets: str, config: dict | None = None) -> None:
    arch = core.architecture_from_hf_config(config or CONFIGS["llama"])
    validate_finetuning(Finetuning(method="lora", target_modules=targets), arch)


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a+)+b", "repeated group"),
    (r"(?:q|v_proj)+", "repeated group"),
    (r"(?:(?=q).)*", "repeated group"),
    (r"(.)\1", "back-references"),
    (r"(?P<x>q)(?P=x)", "back-references"),
    (r"(?:\b)*q_proj", "at least one character"),
    ("(", "not a regular expression"),
    ("x" * 257, "at most 256"),
    (".*" * 5 + "q_proj", "steps"),
    ("(.|.)" * 16 + "q_proj", "steps"),
])
def test_a_hostile_or_broken_expression_is_refused_before_any_match(pattern, reason):
    with pytest.raises(DomainError) as caught:
        _validate(pattern)
    assert caught.value.field == "finetuning.target_modules"
    assert reason in caught.value.message


def test_mixtures_and_unknown_families_take_lists_only():
    mixtral = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
               "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "num_local_experts": 4,
               "num_experts_per_tok": 2}
    for config in (mixtral, {**CONFIGS["llama"], "model_type": "some_new_model"}):
        with pytest.raises(DomainError, match="dense decoders only"):
            _validate(r".*\.q_proj", config)


def test_all_linear_as_a_string_in_any_case():
    arch = core.architecture_from_hf_config(CONFIGS["llama"])
    for targets in ("all-linear", "ALL-Linear", ("all-linear",)):
        validate_finetuning(Finetuning(method="lora", target_modules=targets), arch)
    assert predict(Case("llama", "ALL-LINEAR")) == PEFT_COUNTS["llama", "all-linear"]


def test_the_step_bound_by_hand():
    # Two unbounded repeats share at most n characters: C(n + 2, 2) ways; three alternatives of one character
    # fold into a class; (ab|cd) doubles.
    assert pattern_shape(r".*x.*").steps(10) == comb(12, 2)
    assert pattern_shape(r"(ab|cd).?.?").steps(10) == 2 * 2 * 2
    assert pattern_shape(r"[qv]_proj").steps(30) == 1
    # A look-around is bounded on its own: ahead of any choice it runs once, (n + 1) for its .* beside the line's
    # (n + 1); after a choice, at each of the line's paths.
    assert pattern_shape(r"(?!.*mlp).*_proj").steps(10) == 11 + 11
    assert pattern_shape(r".*(?!.*mlp)_proj").steps(10) == 11 * 11
    # Alternatives are tried one line at a time: the three lines through (gate|up|down) and the other branch's one
    # each hold a single repeat (n + 1 ways), where counting both repeats in every line gave 4 · C(n + 2, 2).
    assert pattern_shape(r".*mlp\.(gate|up|down)_proj|.*attn\.[qv]_proj").steps(10) == 4 * 11
    assert pattern_shape(r"(a.*|b)(c|d.*)").steps(10) == 1 * 1 + 1 * 11 + 11 * 1 + comb(12, 2)
    assert MATCH_BUDGET == 1_000_000


def test_lines_past_the_cap_are_counted_together_never_fewer():
    # 2^11 lines of eleven different kinds of repeat: past MAX_LINE_KINDS, each line is counted with all eleven.
    pattern = "".join(f"(a|b.{{0,{i}}})" for i in range(1, 12))
    exact = sum(min(prod(i + 1 for i in chosen), comb(40 + len(chosen), len(chosen)))
                for size in range(12) for chosen in combinations(range(1, 12), size))
    assert 2**11 > MAX_LINE_KINDS
    assert pattern_shape(pattern).steps(40) >= exact


@pytest.mark.parametrize("preset", ["llama-3-8b", "llama-3.1-405b"])
def test_alternatives_of_whole_paths_are_accepted_on_deep_models(preset):
    # Every projection named by its path, in two branches: the modules all-linear adapts (checked against peft's
    # count above), so the trainable count is all-linear's.
    pattern = r".*mlp\.(gate|up|down)_proj|.*self_attn\.[qkvo]_proj"
    counts = [core.estimate(architecture=core.get_preset(preset).architecture,
                            training=core.Training(finetuning=Finetuning(method="lora", target_modules=targets)),
                            reserve=False).trainable_param_count for targets in (pattern, "all-linear")]
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize(("text", "targets"), [
    ("q_proj, v_proj", ["q_proj", "v_proj"]),
    ("q_proj v_proj q_proj", ["q_proj", "v_proj"]),
    ("all-linear", ["all-linear"]),
    ("All-Linear", ["all-linear"]),  # any case, as the API takes it (peft lowers the string)
    (r".*\.(q_proj|v_proj)", r".*\.(q_proj|v_proj)"),
    (r" model\.layers\.\d+\.mlp\.down_proj ", r"model\.layers\.\d+\.mlp\.down_proj"),
    ("a{1,2}", "a{1,2}"),
])
def test_typed_text_is_a_list_of_names_or_an_expression(text, targets):
    assert targets_from_text(text) == targets
