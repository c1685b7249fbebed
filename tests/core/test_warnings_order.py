"""Caveats in the order they matter for the setup: what is news about it first, general notes last."""

from app.core import Parallelism, Training, estimate, get_preset, precision_preset
from app.core.finetuning import Finetuning
from app.core.warnings import is_general

LLAMA3 = get_preset("llama-3-8b").architecture


def _general_last(warnings: tuple[str, ...]) -> bool:
    flags = [is_general(warning) for warning in warnings]
    return flags == sorted(flags)


def test_eager_attention_at_long_context_comes_before_the_general_notes():
    result = estimate(architecture=LLAMA3, training=Training(seq_len=16384, attention="eager"))
    eager = next(i for i, w in enumerate(result.warnings) if w.startswith("Eager attention stores the s × s"))
    adam = next(i for i, w in enumerate(result.warnings) if w.startswith("The often-quoted 16 bytes"))
    # The sequence exceeds Llama 3's 8,192 positions: an input to check leads, the score matrix next.
    assert result.warnings[0].startswith("seq_len (16,384) exceeds")
    assert eager == 1 < adam
    assert not is_general(result.warnings[eager]) and is_general(result.warnings[adam])
    assert _general_last(result.warnings)


def test_qlora_has_only_general_notes_and_they_are_known_as_such():
    training = Training(precision=precision_preset("bf16"), finetuning=Finetuning(method="qlora"))
    result = estimate(architecture=LLAMA3, training=training)
    assert result.warnings and all(is_general(warning) for warning in result.warnings)


def test_a_parameter_count_says_first_that_activations_are_left_out():
    result = estimate(num_params=7_000_000_000, training=Training(optimizer_implementation="for-loop"))
    assert result.warnings[0].startswith("Activations and temporary buffers depend on the architecture")
    assert result.warnings[1].startswith("The for-loop optimizer's scratch")
    assert is_general(result.warnings[-1]) and _general_last(result.warnings)


def test_inputs_that_do_nothing_lead_and_recomputation_is_a_general_note():
    training = Training(activation_checkpointing="full", gradient_accumulation_steps=1)
    result = estimate(architecture=LLAMA3, training=training,
                      parallelism=Parallelism(data=1, zero_stage=1, pipeline=4))
    assert result.warnings[0].startswith("ZeRO shards over the data-parallel group")
    assert result.warnings[1].startswith("With 1 micro-batch per step and 4 pipeline stages")
    recompute = [w for w in result.warnings if w.startswith("Recomputation replays")]
    assert len(recompute) == 1 and is_general(recompute[0])
    assert _general_last(result.warnings)


def test_specific_caveats_keep_the_order_they_are_made_in_within_their_weight():
    """Model assumptions (weight MODEL) stay in the order the estimate makes them."""
    training = Training(activation_checkpointing="selective", gradient_accumulation_steps=8)
    result = estimate(architecture=LLAMA3, training=training, parallelism=Parallelism(data=2, tensor=2, pipeline=2))
    order = [w.split(" ")[0] for w in result.warnings if not is_general(w)]
    assert order == ["Each", "Hugging", "Tensor-parallel", "Pipeline"]
