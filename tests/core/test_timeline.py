"""The step timeline and its peak, against figures worked out by hand from the lifetimes PyTorch gives buffers."""

import pytest

from app.core import Architecture, Parallelism, Training, estimate, get_preset, precision_preset
from app.core.optimizers import OPTIMIZER_INFO

P = 1_000_000  # parameters of the bare-count model below


def _count(**training):
    return estimate(num_params=P, training=Training(**training))


def test_count_only_timeline_by_hand():
    # fp32 AdamW (plain PyTorch): weights 4P, gradients 4P (from backward to optimizer.step),
    # m and v 8P (created by the first optimizer.step), foreach's sqrt(v) 4P during the step.
    result = _count(precision=precision_preset("fp32"), optimizer="adamw", framework_overhead_bytes=0)
    live = {(p.step, p.event): p.bytes for p in result.timeline}
    assert live[(1, "step start")] == 4 * P
    assert live[(1, "backward")] == 8 * P
    assert live[(1, "optimizer.step")] == 4 * P + 4 * P + 8 * P + 4 * P
    assert live[(1, "zero_grad")] == 12 * P  # gradients freed, state kept
    assert live[(2, "forward")] == 12 * P  # step 2 starts with the optimizer state
    assert result.peak.bytes == 20 * P and result.peak.event == "optimizer.step" and result.peak.step == 1


@pytest.mark.parametrize(("implementation", "scratch"), [("foreach", 4 * P), ("fused", 0)])
def test_optimizer_implementation_decides_the_step_scratch(implementation, scratch):
    result = _count(precision=precision_preset("fp32"), optimizer="adamw", optimizer_implementation=implementation,
                    framework_overhead_bytes=0)
    assert result.peak.bytes == 16 * P + scratch


def test_for_loop_scratch_is_two_copies_of_the_largest_tensor():
    # _single_tensor_adam: exp_avg_sq.sqrt() and its quotient by bias_correction2_sqrt, one tensor at a time.
    arch = get_preset("gpt2").architecture  # largest tensor: the 50,257 × 768 embedding (tied output layer)
    result = estimate(architecture=arch, training=Training(precision=precision_preset("fp32"),
                                                           optimizer_implementation="for-loop"))
    scratch = next(b for b in result.ledger if b.key == "optimizer.scratch")
    assert scratch.bytes == 2 * 50_257 * 768 * 4


def _tiny(**overrides):
    fields = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000, intermediate_size=128)
    return Architecture(**(fields | overrides))


def test_gradients_never_meet_the_first_micro_batchs_full_activations():
    arch = _tiny()
    result = estimate(architecture=arch, training=Training(seq_len=64, framework_overhead_bytes=0))
    by_event = {(p.step, p.event): p.breakdown for p in result.timeline}
    full = by_event[(1, "forward: layer 2")]
    full_activations = full["activations"]
    assert full["gradients"] == 0 and full_activations is not None and full_activations > 0
    last = by_event[(1, "backward: embedding")]["activations"]
    assert last is not None and (last == 0 or last < full_activations)
    # With accumulation the second micro-batch runs its forward with every gradient alive.
    accumulated = estimate(architecture=arch, training=Training(seq_len=64, gradient_accumulation_steps=4,
                                                                framework_overhead_bytes=0))
    second = {(p.step, p.event): p.breakdown for p in accumulated.timeline}[(1, "micro-batch 2: forward: layer 2")]
    persistent = sum(b.bytes for b in accumulated.ledger if b.key.startswith("gradients"))
    assert second["gradients"] == persistent
    assert accumulated.peak.bytes > result.peak.bytes


def test_optimizer_state_is_absent_until_the_first_step():
    result = estimate(architecture=_tiny(), training=Training(seq_len=64))
    first = [p for p in result.timeline if p.step == 1 and p.event.startswith(("forward", "backward"))]
    second = [p for p in result.timeline if p.step == 2 and p.event.startswith(("forward", "backward"))]
    state = result.per_gpu["optimizer_states"]
    assert state is not None and state > 0
    assert all(p.breakdown["optimizer_states"] == 0 for p in first)
    assert all(p.breakdown["optimizer_states"] == state for p in second)


def test_hf_trainer_loop_frees_the_logits_before_backward():
    # Llama-3-8B at 4,096 tokens: bf16 logits are 2 B × 4,096 × 128,256 = 1,050,673,152 B.
    arch = get_preset("llama-3-8b").architecture
    logits = 2 * 4096 * 128_256
    plain = estimate(architecture=arch, training=Training(seq_len=4096, loop="plain", optimizer_implementation="fused"))
    trainer = estimate(architecture=arch, training=Training(seq_len=4096, loop="hf-trainer",
                                                            optimizer_implementation="fused"))
    at = {(p.step, p.event): p.bytes for p in plain.timeline}
    at_trainer = {(p.step, p.event): p.bytes for p in trainer.timeline}
    assert at[(2, "backward: loss gradients")] - at_trainer[(2, "backward: loss gradients")] == logits
    # Backward of the loss: nll_loss's and log_softmax's fp32 gradients, 2 × 4 B × 4,096 × 128,256, on top
    # of everything alive at the end of the forward (the forward's fp32 upcast of the logits is gone by then).
    end_of_forward = at_trainer[(2, "forward: loss")] - 4 * 4096 * 128_256 - logits
    assert at_trainer[(2, "backward: loss gradients")] == end_of_forward + 2 * 4 * 4096 * 128_256


def test_sdpa_kernel_follows_torchs_rule():
    llama = get_preset("llama-3-8b").architecture  # 8 of 32 heads for K and V: grouped
    gpt2 = get_preset("gpt2").architecture  # multi-head
    kernel = lambda arch, precision: estimate(architecture=arch, training=Training(  # noqa: E731
        precision=precision_preset(precision), seq_len=256)).attention_kernel
    assert kernel(llama, "bf16-fp32-master") == "flash"
    assert kernel(llama, "fp32") == "math"  # flash refuses fp32, memory-efficient refuses grouped K/V
    assert kernel(gpt2, "fp32") == "memory-efficient"
    eager = estimate(architecture=llama, training=Training(precision=precision_preset("fp32"), seq_len=4096,
                                                           attention="eager"))
    math = estimate(architecture=llama, training=Training(precision=precision_preset("fp32"), seq_len=4096))
    # math and eager both store fp32 s × s probabilities: 4 B × 32 heads × 4,096² per layer
    for result in (eager, math):
        assert any(t.name == "attn.softmax" and t.bytes == 4 * 32 * 4096 * 4096 for t in result.layer_activations)


def test_zero3_gathers_a_layer_and_its_prefetched_neighbour():
    arch = get_preset("llama-3-8b").architecture
    result = estimate(architecture=arch, training=Training(seq_len=4096),
                      parallelism=Parallelism(data=8, zero_stage=3))
    gathered = next(b for b in result.ledger if b.key == "zero.gathered.layers")
    # Llama-3-8B layer: 4 × 4096² × (1 + 1/4 + 1/4 + 1) ... computed from the shapes: q 4096², k and v
    # 1024 × 4096, o 4096², gate/up/down 3 × 14,336 × 4096, two norms of 4,096 = 218,112,000 parameters.
    assert gathered.bytes == 2 * 218_112_000 * 2
    unsharded = next(b for b in result.ledger if b.key == "zero.unsharded_grad.layers")
    assert unsharded.bytes == 218_112_000 * 2


def test_each_choice_has_every_implementation_listed():
    for info in OPTIMIZER_INFO.values():
        assert set(info.scratch) == {"foreach", "fused", "for-loop"}, info.id


def test_autocast_output_layer_gradient_is_half_precision_until_its_cast():
    # Autocast runs lm_head on a bf16 copy: its backward writes a bf16 gradient, 2 B × 128,256 × 4,096,
    # and the fp32 .grad (4 B × (128,256 × 4,096 + 4,096 for the final norm)) appears only after it.
    arch = get_preset("llama-3-8b").architecture
    result = estimate(architecture=arch, training=Training(seq_len=4096, precision=precision_preset("autocast-bf16")))
    at = {(p.step, p.event): p for p in result.timeline}
    head = at[(1, "backward: output layer")].breakdown["gradients"]
    after = at[(1, "backward: layer 32")].breakdown["gradients"]
    assert head == 2 * 128_256 * 4096
    fp32_head = 4 * (128_256 * 4096 + 4096)
    one_layer = 4 * 218_112_000  # the ramp has reached layer 32: its 218,112,000 fp32 gradients
    assert after == fp32_head + one_layer


def test_eager_layer_backward_holds_an_fp32_gradient_of_the_probabilities():
    # Llama's eager attention: softmax(scores, dtype=float32).to(bf16); backward's cast gradient is
    # fp32, 4 B × 32 heads × 4,096² = 2,147,483,648 B, alive while one layer's backward runs.
    arch = get_preset("llama-3-8b").architecture
    eager = estimate(architecture=arch, training=Training(seq_len=4096, attention="eager"))
    buffer = next(b for b in eager.ledger if b.key == "attention.grad_probs")
    assert buffer.bytes == 4 * 32 * 4096 * 4096
    assert buffer.allocated.startswith("backward: layer 32") and buffer.freed == "after backward: layer 1"
    flash = estimate(architecture=arch, training=Training(seq_len=4096))
    assert not any(b.key == "attention.grad_probs" for b in flash.ledger)


@pytest.mark.parametrize("pipeline", [3, 4, 8])
def test_a_middle_stage_never_outweighs_the_first(pipeline):
    # The estimate skips the middle stages' timelines on this ground: check it on their own ledgers.
    from app.core.ledger import ACTS, FORWARDED, GRADS, stage_ledger
    from app.core.setup import activation_setup
    from app.core.stages import stage_kinds
    from app.core.timeline import plan, sweep

    arch = get_preset("llama-3-8b").architecture
    for training in (Training(seq_len=4096, gradient_accumulation_steps=pipeline),
                     Training(seq_len=8192, attention="eager", precision=precision_preset("autocast-bf16"))):
        parallelism = Parallelism(pipeline=pipeline, data=2, zero_stage=3)
        setup = activation_setup(training, parallelism)
        peaks = []
        for kind in stage_kinds(arch, pipeline=pipeline, micro_batches=training.gradient_accumulation_steps):
            ledger, phases, _ = stage_ledger(arch, training, parallelism, kind, setup)
            steps = plan(phases, micro_batches=training.gradient_accumulation_steps, carried={GRADS: kind.layers})
            totals = dict.fromkeys((ACTS, FORWARDED, GRADS), kind.layers)
            peaks.append(sweep([(b.category, b.bytes, b.life) for b in ledger], steps, totals)[1].bytes)
        first, middle = peaks[0], peaks[1]
        assert middle <= first
