"""training.framework = deepspeed: model states per GPU against DeepSpeed's own estimators.

The golden figures come from DeepSpeed 0.19.8's estimator formulas, transcribed below as written in its
source (sdist deepspeed-0.19.8.tar.gz), never from trainmem's output:

* deepspeed/runtime/zero/stage_1_and_2.py:4017-4034, estimate_zero2_model_states_mem_needs
    cpu_offload:     gpu_mem = 2 * total_params                                               (line 4026)
                     cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor (4027)
    no offload:      gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)           (4031)
                     # 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states (4030)
                     cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor   (4032)
* deepspeed/runtime/zero/stage3.py:4016-4052, estimate_zero3_model_states_mem_needs
    largest_layer_memory = 4 * largest_layer_params                                             (4027)
    offload optimizer and params: gpu_mem = largest_layer_memory                                (4031)
                     cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor (zero_init, 4034)
    offload optimizer: gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)      (4039)
                     cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor (zero_init, 4042)
    no offload:      gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)       (4046)
  with total_gpus = num_nodes * num_gpus_per_node, gpus_factor = 1 / num_nodes, additional_buffer_factor 1.5,
  and largest_layer_params the most parameters any one module holds directly (model_to_params, 4055-4065).

Measured cross-check: `make validate` runs DeepSpeed 0.19.8's own functions in an environment of its own
(validation/ds_estimators.py, docs/VALIDATION.md "DeepSpeed's estimators") for the same cases; their printed figures
equal the literals below, which are the formulas above evaluated by hand.
"""

import pytest

from app import core
from app.core import states

MODEL_STATES = ("weights", "gradients", "master_weights", "optimizer_states")
BUFFER_FACTOR = 1.5  # additional_buffer_factor's default in both estimators


def ds_zero2(total_params: int, num_gpus_per_node: int, num_nodes: int, cpu_offload: bool) -> tuple[int, int]:
    """stage_1_and_2.py:4017-4034 as written: (cpu_mem, gpu_mem)."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * BUFFER_FACTOR
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * BUFFER_FACTOR
    return int(cpu_mem), int(gpu_mem)


def ds_zero3(total_params: int, largest_layer_params: int, num_gpus_per_node: int, num_nodes: int,
             cpu_offload: bool, cpu_offload_params: bool) -> tuple[int, int]:
    """stage3.py:4016-4052 as written, zero_init=True: (cpu_mem, gpu_mem)."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            cpu_mem = total_params * 18 * gpus_factor * BUFFER_FACTOR
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            cpu_mem = total_params * 16 * gpus_factor * BUFFER_FACTOR
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        cpu_mem = largest_layer_params * 4 * num_gpus_per_node * BUFFER_FACTOR
    return int(cpu_mem), int(gpu_mem)


# (preset, total_params, largest_layer_params): the largest module is the embedding or the output layer.
MODELS = [
    ("llama-3-8b", 8_030_261_248, 128_256 * 4_096),
    ("llama-2-7b", 6_738_415_616, 32_000 * 4_096),
    ("gpt2", 124_439_808, 50_257 * 768),  # tied: wte, shared with lm_head, counted once
]
GPUS = [(1, 1), (8, 1), (8, 8)]  # (gpus per node, nodes): 1, 8 and 64 GPUs


def _run(preset: str, zero_stage: int, gpus_per_node: int, nodes: int, offload: str) -> core.Estimate:
    training = core.Training(framework="deepspeed", framework_overhead_bytes=0)
    parallelism = core.Parallelism(data=gpus_per_node * nodes, zero_stage=zero_stage, offload=offload,
                                   gpus_per_node=gpus_per_node)
    return core.estimate(architecture=core.get_preset(preset).architecture, training=training,
                         parallelism=parallelism)


def _model_states(result: core.Estimate) -> int:
    """What the estimators count: the model-state categories without the gradient bucket, which they leave out."""
    bucket = sum(buffer.bytes for buffer in result.ledger if buffer.key == "deepspeed.reduce_bucket")
    return sum(result.per_gpu[category] or 0 for category in MODEL_STATES) - bucket


@pytest.mark.parametrize(("preset", "params", "largest"), MODELS)
def test_counts_are_deepspeeds(preset, params, largest):
    arch = core.get_preset(preset).architecture
    assert core.param_count(arch) == params
    assert states.largest_module(arch, 1, first=True, last=True) == largest


def test_llama_3_8b_figures_by_hand():
    p, largest = 8_030_261_248, 525_336_576
    # ZeRO-2, no offload: 2P + int(18P / N) (stage_1_and_2.py:4031)
    assert [ds_zero2(p, g, n, False)[1] for g, n in GPUS] == [160_605_224_960, 34_128_610_304, 18_319_033_472]
    # ZeRO-2, offload_optimizer=cpu: 2P (4026)
    assert ds_zero2(p, 8, 8, True)[1] == 16_060_522_496
    # ZeRO-3: 4L + int(18P / N) (stage3.py:4046); offload optimizer 4L + int(2P / N) (4039); and params 4L (4031)
    assert [ds_zero3(p, largest, g, n, False, False)[1] for g, n in GPUS] == [
        146_646_048_768, 20_169_434_112, 4_359_857_280]
    assert [ds_zero3(p, largest, g, n, True, False)[1] for g, n in GPUS] == [
        18_161_868_800, 4_108_911_616, 2_352_291_968]
    assert ds_zero3(p, largest, 8, 8, True, True)[1] == 2_101_346_304


@pytest.mark.parametrize(("gpus_per_node", "nodes"), GPUS)
@pytest.mark.parametrize(("preset", "params", "largest"), MODELS)
def test_zero2_gpu_matches(preset, params, largest, gpus_per_node, nodes):
    for offload, cpu_offload in (("none", False), ("optimizer", True)):
        result = _run(preset, 2, gpus_per_node, nodes, offload)
        _, gpu_mem = ds_zero2(params, gpus_per_node, nodes, cpu_offload)
        assert _model_states(result) == gpu_mem, offload


@pytest.mark.parametrize(("gpus_per_node", "nodes"), GPUS)
@pytest.mark.parametrize(("preset", "params", "largest"), MODELS)
def test_zero3_gpu_with_offload_matches(preset, params, largest, gpus_per_node, nodes):
    for offload, offload_params in (("optimizer", False), ("optimizer+parameters", True)):
        result = _run(preset, 3, gpus_per_node, nodes, offload)
        _, gpu_mem = ds_zero3(params, largest, gpus_per_node, nodes, True, offload_params)
        assert _model_states(result) == gpu_mem, offload


@pytest.mark.parametrize(("gpus_per_node", "nodes"), GPUS)
@pytest.mark.parametrize(("preset", "params", "largest"), MODELS)
def test_zero3_without_offload_counts_the_16_bit_gradient_partition_the_estimator_leaves_out(
        preset, params, largest, gpus_per_node, nodes):
    # stage3.py:4046 counts 18 bytes per parameter ÷ N; ZeRO-3 keeps the 16-bit parameter partition (2, the term
    # of line 4039), the 16-bit gradient partition (grad_partitions_flat_buffer, stage3.py:791), the fp32 copy of
    # it made for the step (2686-2693), the fp32 master copy and Adam's two moments: 2 + 2 + 4 + 4 + 8 = 20. The
    # ledger keeps all five; the estimator's figure is 2P ÷ N lower.
    n = gpus_per_node * nodes
    result = _run(preset, 3, gpus_per_node, nodes, "none")
    _, gpu_mem = ds_zero3(params, largest, gpus_per_node, nodes, False, False)
    assert _model_states(result) == gpu_mem + 2 * params // n


@pytest.mark.parametrize(("gpus_per_node", "nodes"), GPUS)
@pytest.mark.parametrize(("preset", "params", "largest"), MODELS)
def test_zero3_host_is_cpu_mem_without_the_buffer_factor(preset, params, largest, gpus_per_node, nodes):
    # stage3.py:4034 and 4042 (zero_init): 18 or 16 bytes per parameter ÷ nodes, times additional_buffer_factor.
    for offload, offload_params in (("optimizer", False), ("optimizer+parameters", True)):
        result = _run(preset, 3, gpus_per_node, nodes, offload)
        cpu_mem, _ = ds_zero3(params, largest, gpus_per_node, nodes, True, offload_params)
        assert result.host is not None
        assert result.host.per_node_bytes * BUFFER_FACTOR == cpu_mem, offload


def test_zero2_host_differs_from_cpu_mem_beyond_four_gpus():
    # stage_1_and_2.py:4027 charges max(4 × total_gpus, 16) bytes per parameter per node: up to 4 GPUs the 16 of
    # master copy, moments and fp32 gradients, which trainmem counts too; beyond, 4 bytes per GPU of the whole
    # cluster (a full fp32 model per process), which is no steady-state buffer of the step.
    p = 8_030_261_248
    one = _run("llama-3-8b", 2, 1, 1, "optimizer")
    assert one.host is not None and one.host.per_node_bytes * BUFFER_FACTOR == ds_zero2(p, 1, 1, True)[0]
    eight = _run("llama-3-8b", 2, 8, 1, "optimizer")
    assert eight.host is not None and eight.host.per_node_bytes == 16 * p
    assert ds_zero2(p, 8, 1, True)[0] == int(32 * p * BUFFER_FACTOR)


def test_deepspeed_buffers_are_their_own_lines_with_sources():
    result = _run("llama-3-8b", 3, 8, 1, "none")
    by_key = {buffer.key: buffer for buffer in result.ledger}
    for key in ("deepspeed.fp32_grad_partition", "deepspeed.largest_layer_params", "deepspeed.largest_layer_grads"):
        assert "DeepSpeed convention" in by_key[key].formula
        assert "deepspeed/runtime/zero/stage3.py:" in by_key[key].formula
    assert by_key["deepspeed.fp32_grad_partition"].bytes == 4 * 8_030_261_248 // 8
    assert by_key["deepspeed.largest_layer_params"].bytes == 2 * 525_336_576
    assert not any(key.startswith("zero.") for key in by_key)  # the pytorch convention's buffers give way
    for buffer in result.ledger:
        if buffer.category in MODEL_STATES:
            assert "DeepSpeed convention" in buffer.formula, buffer.key


def test_pytorch_is_the_default_and_unchanged():
    arch = core.get_preset("llama-3-8b").architecture
    parallelism = core.Parallelism(data=8, zero_stage=2)
    default = core.estimate(architecture=arch, parallelism=parallelism)
    explicit = core.estimate(architecture=arch, training=core.Training(framework="pytorch"), parallelism=parallelism)
    assert core.Training().framework == "pytorch"
    assert default.ledger == explicit.ledger
    assert not any(buffer.key.startswith("deepspeed.") for buffer in default.ledger)


def test_zero_stage_0_is_plain_data_parallelism():
    arch = core.get_preset("gpt2").architecture
    parallelism = core.Parallelism(data=8)
    pytorch = core.estimate(architecture=arch, parallelism=parallelism)
    deepspeed = core.estimate(architecture=arch, training=core.Training(framework="deepspeed"), parallelism=parallelism)
    assert pytorch.per_gpu == deepspeed.per_gpu


def test_parameter_count_gets_the_fp32_gradient_partition():
    p = 8_030_261_248
    result = core.estimate(num_params=p, training=core.Training(framework="deepspeed", framework_overhead_bytes=0),
                           parallelism=core.Parallelism(data=8, zero_stage=2))
    assert _model_states(result) == ds_zero2(p, 8, 1, False)[1]


def test_megatron_and_unknown_frameworks_are_refused():
    arch = core.get_preset("gpt2").architecture
    with pytest.raises(core.DomainError, match="training.framework"):
        core.estimate(architecture=arch, training=core.Training(framework="deepspeed", implementation="megatron"))
    with pytest.raises(core.DomainError, match="training.framework"):
        core.estimate(architecture=arch, training=core.Training(framework="jax"))


@pytest.mark.parametrize(("stage", "whole_run"), [(1, False), (2, False), (3, True)])
def test_gradient_bucket(stage, whole_run):
    """reduce_bucket_size elements (DeepSpeed's default, 500,000,000: deepspeed/runtime/zero/config.py:113) in the
    gradients' dtype, bf16 here: 1,000,000,000 bytes whatever the model. ZeRO-1/2 hold it through backward only
    (stage_1_and_2.py:3266 and 1061); ZeRO-3 from its set-up on (stage3.py:780-784)."""
    training = core.Training(precision=core.precision_preset("bf16-fp32-master"), framework="deepspeed")
    result = core.estimate(architecture=core.get_preset("gpt2").architecture, training=training,
                           parallelism=core.Parallelism(data=8, zero_stage=stage))
    bucket = next(buffer for buffer in result.ledger if buffer.key == "deepspeed.reduce_bucket")
    assert bucket.bytes == 1_000_000_000
    at = {(point.step, point.event): point.breakdown["gradients"] or 0 for point in result.timeline}
    assert (at[(2, "forward: embedding")] >= 1_000_000_000) == whole_run
    smaller = core.estimate(architecture=core.get_preset("gpt2").architecture, training=training,
                            parallelism=core.Parallelism(data=8, zero_stage=stage, reduce_bucket_size=50_000_000))
    assert (result.per_gpu["gradients"] or 0) - (smaller.per_gpu["gradients"] or 0) == 900_000_000
