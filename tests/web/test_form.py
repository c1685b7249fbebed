"""Form parsing: flat query parameters to an EstimateRequest, and every problem to the control at fault."""

from __future__ import annotations

import pytest

from app import core
from app.web.form import DEFAULT_PRESET, FormError, parse_bytes, parse_count, parse_form, parse_int


def test_defaults_compute_the_default_preset_on_the_default_gpu():
    form = parse_form({})
    assert form.ok and form.request is not None and form.estimate is not None
    assert form.request.model.preset == DEFAULT_PRESET
    assert form.request.gpu == "h100-80gb"
    # The form's defaults are the API's: bf16 with an fp32 master copy, AdamW, no sharding.
    assert form.request.training.precision == "bf16-fp32-master"
    assert form.request.training.optimizer == "adamw"
    assert form.estimate.param_count == core.param_count(core.get_preset(DEFAULT_PRESET).architecture)


def test_query_parameters_feed_the_api_fields_of_the_same_name():
    form = parse_form({"optimizer": "sgd", "seq_len": "4,096", "micro_batch_size": "2", "data": "8",
                       "zero_stage": "3", "tensor": "2", "sequence_parallel": "true", "pipeline": "4",
                       "attention": "eager", "activation_checkpointing": "full", "gpu": "a100-80gb"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    training, parallelism = form.request.training, form.request.parallelism
    assert (training.optimizer, training.seq_len, training.micro_batch_size) == ("sgd", 4096, 2)
    assert (training.attention, training.activation_checkpointing) == ("eager", "full")
    assert (parallelism.data, parallelism.zero_stage, parallelism.tensor, parallelism.pipeline) == (8, 3, 2, 4)
    assert parallelism.sequence_parallel is True
    assert form.estimate.per_gpu["optimizer_states"] == 0


def test_parameter_count_accepts_separators_and_suffixes():
    assert parse_count("num_params", "6,738,415,616") == 6_738_415_616
    assert parse_count("num_params", "7B") == 7 * 10**9
    assert parse_count("num_params", "1.5 T") == 1_500_000_000_000
    assert parse_count("num_params", "125M") == 125 * 10**6
    with pytest.raises(FormError):
        parse_count("num_params", "7 parsecs")
    with pytest.raises(FormError):
        parse_count("num_params", "1.5")


def test_sizes_accept_binary_and_decimal_units():
    assert parse_bytes("framework_overhead_bytes", "1 GiB") == 1 << 30
    assert parse_bytes("framework_overhead_bytes", "512MiB") == 512 << 20
    assert parse_bytes("framework_overhead_bytes", "2 GB") == 2 * 10**9
    assert parse_bytes("framework_overhead_bytes", "1,000") == 1000


@pytest.mark.parametrize("raw", ["1e-999999999 GiB", "1e-30 GiB", "0.5 B", "1e-999999999"])
def test_a_size_below_one_byte_is_refused_not_read_as_zero(raw):
    with pytest.raises(FormError, match="whole number"):
        parse_bytes("framework_overhead_bytes", raw)
    form = parse_form({"framework_overhead_bytes": raw})
    assert not form.ok and "framework_overhead_bytes" in form.errors


def test_an_empty_number_is_an_error_not_a_zero():
    with pytest.raises(FormError):
        parse_int("seq_len", "")
    form = parse_form({"seq_len": ""})
    assert not form.ok and "seq_len" in form.errors


@pytest.mark.parametrize(
    ("params", "control", "phrase"),
    [
        ({"tensor": "3"}, "tensor", "divisible by the tensor-parallel degree"),
        ({"pipeline": "5"}, "pipeline", "divisible by the pipeline degree"),
        ({"seq_len": "0"}, "seq_len", "Sequence length must be at least 1."),
        ({"seq_len": "many"}, "seq_len", "4096 or 4k"),
        ({"data": "-1"}, "data", "Data parallel must be at least 1."),
        ({"gpu": "h900"}, "gpu", "unknown GPU"),
        ({"preset": "gpt-7"}, "preset", "unknown preset"),
        ({"precision": "fp64"}, "precision", "Choose one of the precision options listed."),
        ({"precision": "custom", "weights": "fp64"}, "weights", "Choose one of the weights options listed."),
        ({"source": "params", "num_params": "7B", "optimizer": "adafactor"}, "optimizer", "needs the architecture"),
        ({"source": "params", "num_params": ""}, "num_params", "Enter a number"),
        ({"source": "config", "hf_config": "{not json"}, "hf_config", "not valid JSON"),
        ({"source": "config", "hf_config": '{"model_type": "llama"}'}, "hf_config", "num_attention_heads"),
        ({"source": "custom", "num_key_value_heads": "5"}, "num_key_value_heads", "multiple of"),
        ({"source": "custom", "hidden_size": ""}, "hidden_size", "whole number"),
    ],
)
def test_each_problem_is_reported_on_the_control_at_fault(params, control, phrase):
    form = parse_form(params)
    assert not form.ok
    assert control in form.errors, form.errors
    assert phrase.lower() in form.errors[control].lower()


def test_custom_architecture_starts_from_the_preset_and_keeps_exact_counts():
    preset = core.get_preset("llama-2-7b")
    switched = parse_form({"source": "custom", "preset": "llama-2-7b"})
    assert switched.ok and switched.estimate is not None, switched.errors
    assert switched.values["num_hidden_layers"] == str(preset.architecture.num_hidden_layers)
    assert switched.estimate.param_count == core.param_count(preset.architecture)

    edited = parse_form({**switched.values, "num_hidden_layers": "16"})
    assert edited.ok and edited.estimate is not None, edited.errors
    assert edited.estimate.param_count < switched.estimate.param_count

    refilled = parse_form({**edited.values, "fill": "preset"})
    assert refilled.values["num_hidden_layers"] == str(preset.architecture.num_hidden_layers)
    assert refilled.refilled


def test_a_pasted_config_json_is_used():
    config = ('{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, '
              '"num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000}')
    form = parse_form({"source": "config", "hf_config": config})
    assert form.ok and form.estimate is not None, form.errors
    assert form.estimate.per_gpu["activations"] is not None


def test_parameter_count_only_leaves_activations_uncomputed():
    form = parse_form({"source": "params", "num_params": "7B"})
    assert form.ok and form.estimate is not None
    assert form.estimate.param_count == 7 * 10**9
    assert form.estimate.per_gpu["activations"] is None


def test_custom_precision_reads_the_dtype_fields():
    form = parse_form({"precision": "custom", "weights": "bf16", "gradients": "fp32", "master_weights": "none",
                       "optimizer_states": "bf16", "activations": "bf16"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    precision = form.request.training.precision
    assert not isinstance(precision, str)
    assert (precision.weights, precision.gradients, precision.master_weights) == ("bf16", "fp32", None)
    assert form.estimate.per_gpu["master_weights"] == 0


def test_preset_precision_shows_its_dtypes_in_the_dtype_fields():
    form = parse_form({"precision": "megatron-bf16"})
    preset = core.PRECISION_PRESETS["megatron-bf16"].precision
    assert [form.values[name] for name in ("weights", "gradients", "master_weights")] == [
        preset.weights, preset.gradients, preset.master_weights]


@pytest.mark.parametrize(("raw", "tokens"), [("4k", 4096), ("32K", 32_768), ("4,096", 4096), ("128k", 131_072),
                                             ("1M", 1 << 20), ("2048", 2048)])
def test_a_sequence_length_is_read_as_people_write_it(raw, tokens):
    form = parse_form({"seq_len": raw})
    assert form.ok and form.request is not None, form.errors
    assert form.request.training.seq_len == tokens


@pytest.mark.parametrize("raw", ["4kb", "0.3k", "four"])
def test_a_sequence_length_that_is_not_one_is_a_message(raw):
    form = parse_form({"seq_len": raw})
    assert not form.ok and "seq_len" in form.errors


def test_megatron_lm_offloading_reads_its_layer_count_only_when_chosen():
    # Megatron-LM's offloading refuses recomputation, so the choice is shown whatever the recomputation; the layer
    # count is read only with it.
    base = {"preset": "llama-2-7b", "implementation": "megatron", "precision": "megatron-bf16", "seq_len": "16384",
            "tensor": "8", "sequence_parallel": "true", "activation_offload_layers": "8"}
    form = parse_form(base | {"activation_offload": "megatron"})
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    assert (form.request.training.activation_offload, form.request.training.activation_offload_layers) == ("megatron", 8)
    assert form.estimate.host is not None
    plain = parse_form(base | {"activation_offload": "none"})
    assert plain.ok and plain.request is not None, plain.errors
    assert plain.request.training.activation_offload_layers == 0
