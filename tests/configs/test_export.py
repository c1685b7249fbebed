"""Export, then import: the same estimate body for every field the framework's file carries.

For each kind, `carried` says which fields a file of that kind must bring back for a given setup (the framework
can say them: DeepSpeed's batch, ZeRO stage, precision with its fp32 master copy, optimizer; the Trainer's batch,
recomputation, optim; accelerate's process count and plugin; axolotl's model, batch, sequence, attention,
adapters). The property: those never show in `unexpressed`, and every field not in `unexpressed` comes back equal.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app import core, wire
from app.configs import import_config
from app.configs import yaml as reader
from app.configs.export import EXPORT_KINDS, complete, export_config, finetuning_of, same_implementation
from app.core import DomainError
from tests.budget import examples, spread

PRESETS = sorted(core.model_presets())
PRECISIONS = sorted(core.PRECISION_PRESETS)
LAYOUTS = [(1, 1, 1, 0), (8, 1, 1, 1), (8, 1, 1, 2), (4, 2, 1, 3), (2, 2, 2, 1), (16, 1, 1, 3)]
DS_PRECISIONS = {"fp32", "bf16-fp32-master", "fp16-fp32-master", "autocast-bf16", "autocast-fp16"}
BNB_OPTIMIZERS = {"adamw-8bit", "paged-adamw-8bit", "paged-adamw-32bit"}  # DeepSpeed's client optimizers
TRAINER_OPTIMIZERS = {"adamw", "sgd", "sgd-momentum", "lion", *BNB_OPTIMIZERS}


def carried(kind: str, setup: dict) -> set[str]:
    """The fields a `kind` file of this setup must bring back as they went in."""
    t, p = setup["training"], setup["parallelism"]
    optimizer, implementation, precision = t["optimizer"], t["optimizer_implementation"], t["precision"]
    masters = {"bf16-fp32-master", "fp16-fp32-master"}
    fields: set[str] = set()
    if kind == "deepspeed":
        fields |= {"training.micro_batch_size", "training.gradient_accumulation_steps", "parallelism.data",
                   "parallelism.zero_stage", "parallelism.tensor", "parallelism.offload"}
        if precision in DS_PRECISIONS or (precision == "megatron-bf16" and p["zero_stage"] == 1):
            fields.add("training.precision")
        if optimizer not in BNB_OPTIMIZERS:
            fields |= {"training.optimizer", "training.optimizer_implementation"}
    elif kind in ("training-arguments", "axolotl"):
        fields |= {"training.micro_batch_size", "training.gradient_accumulation_steps", "parallelism.zero_stage"}
        if t["loop"] == "hf-trainer":
            fields.add("training.loop")
        engine = p["zero_stage"] > 0 or p["tensor"] > 1 or p["offload"] != "none" or \
            precision in masters | {"megatron-bf16"}
        fields.add("parallelism.offload")
        if engine:
            fields |= {"parallelism.data", "parallelism.tensor"}
        if t["activation_checkpointing"] != "selective":
            fields.add("training.activation_checkpointing")
        if optimizer in TRAINER_OPTIMIZERS or (optimizer == "adafactor" and implementation == "for-loop"
                                               and not t["adafactor_momentum"]):
            fields.add("training.optimizer")
            if optimizer != "adamw" or implementation != "for-loop":
                fields.add("training.optimizer_implementation")
        if kind == "training-arguments":
            representable = {"fp32", "autocast-bf16", "autocast-fp16"} | masters
        else:
            representable = masters | {"fp32"} | (set() if engine else {"bf16"})
            fields |= {"model", "training.seq_len", "training.attention"}
            if setup["finetuning"] and setup["finetuning"]["method"] != "full":
                fields.add("finetuning")
        if precision in representable or (precision == "megatron-bf16" and p["zero_stage"] == 1):
            fields.add("training.precision")
    elif t["implementation"] == "megatron":  # accelerate's Megatron-LM plugin
        fields |= {"parallelism.gpus_per_node", "parallelism.data", "parallelism.tensor", "parallelism.pipeline", "parallelism.sequence_parallel",
                   "training.gradient_accumulation_steps", "training.implementation"}
        if p["zero_stage"] <= 1:
            fields.add("parallelism.zero_stage")
        if t["activation_checkpointing"] != "full":
            fields.add("training.activation_checkpointing")
        if precision in ("fp32", "megatron-bf16", "fp16-fp32-master"):
            fields.add("training.precision")
    else:  # accelerate: DDP, or its DeepSpeed plugin for sharding, offload and an fp32 master copy
        fields |= {"parallelism.zero_stage", "parallelism.offload"}
        if p["tensor"] == p["pipeline"] == 1:
            fields |= {"parallelism.data", "parallelism.gpus_per_node"}
        if p["zero_stage"] > 0 or p["offload"] != "none" or precision in masters:
            fields.add("training.gradient_accumulation_steps")
            if precision in masters | {"fp32"}:
                fields.add("training.precision")
        elif precision in ("fp32", "autocast-bf16", "autocast-fp16"):
            fields.add("training.precision")
    return fields


def returned(setup: dict, back: dict, field: str) -> bool:
    """Whether `back` reproduces `setup`'s `field` (implementations that allocate alike count as equal)."""
    if field == "model":
        return setup["model"] == back["model"]
    if field == "finetuning":
        return setup["finetuning"] == finetuning_of(back.get("finetuning"))
    section, name = field.split(".")
    mine, theirs = setup[section][name], back[section][name]
    if name == "optimizer_implementation":
        return setup["training"]["optimizer"] != back["training"]["optimizer"] or \
            same_implementation(setup["training"]["optimizer"], mine, theirs)
    if name == "adafactor_momentum" and setup["training"]["optimizer"] != "adafactor":
        return True
    if name == "gpus_per_node":  # at most the job's GPUs count
        world = setup["parallelism"]["data"] * setup["parallelism"]["tensor"] * setup["parallelism"]["pipeline"]
        back_world = back["parallelism"]["data"] * back["parallelism"]["tensor"] * back["parallelism"]["pipeline"]
        return min(mine, world) == min(theirs, back_world)
    return mine == theirs


ALL_FIELDS = ["model", "finetuning", *(f"training.{n}" for n in (
    "micro_batch_size", "seq_len", "precision", "optimizer", "optimizer_implementation", "adafactor_momentum",
    "activation_checkpointing", "attention", "implementation", "loop", "gradient_accumulation_steps")),
    *(f"parallelism.{n}" for n in ("data", "tensor", "pipeline", "sequence_parallel", "zero_stage", "offload",
                                   "gpus_per_node"))]


def check_round_trip(body: dict, kind: str) -> dict:
    out = export_config(body, kind)
    setup = complete(body)
    back = import_config(kind, out["text"])["request"]
    lost = {entry["field"] for entry in out["unexpressed"]}
    must = carried(kind, setup)
    assert not (must & lost), (kind, sorted(must & lost), out["unexpressed"], out["text"])
    for field in ALL_FIELDS:
        assert returned(setup, back, field) == (field not in lost), (kind, field, out["unexpressed"], out["text"])
    assert all(entry["why"] for entry in out["unexpressed"])
    assert wire.job_from(back).estimate(reserve=False).peak.bytes > 0
    return out


def body_of(preset, precision, optimizer, implementation, checkpointing, layout, implementation_kind="transformers",
            attention="sdpa", finetuning=None):
    data, tensor, pipeline, zero = layout
    body = {"model": {"preset": preset},
            "training": {"micro_batch_size": 2, "seq_len": 1024, "precision": precision, "optimizer": optimizer,
                         "optimizer_implementation": implementation, "activation_checkpointing": checkpointing,
                         "gradient_accumulation_steps": 4, "implementation": implementation_kind,
                         "attention": attention},
            "parallelism": {"data": data, "tensor": tensor, "pipeline": pipeline, "zero_stage": zero,
                            "sequence_parallel": tensor > 1}}
    if finetuning:
        body["finetuning"] = finetuning
    return body


@pytest.mark.parametrize("kind", EXPORT_KINDS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_round_trip_over_precisions_optimizers_and_layouts(kind, precision):
    checkpointing = itertools.cycle(("none", "selective", "full", "full"))
    for optimizer, implementation, layout in spread(
            list(itertools.product(core.OPTIMIZERS, ("foreach", "fused", "for-loop"), LAYOUTS)), kind + precision):
        check_round_trip(body_of("llama-3-8b", precision, optimizer, implementation, next(checkpointing), layout),
                         kind)


finetunings = st.one_of(
    st.none(),
    st.builds(lambda method, rank, targets, dropout, saved, quantization: {
        "method": method, "rank": rank, "target_modules": targets, "dropout": dropout, "modules_to_save": saved,
        "quantization": quantization},
        st.sampled_from(["lora", "qlora"]), st.sampled_from([4, 8, 16, 64]),
        st.sampled_from([["q_proj", "v_proj"], ["all-linear"], ["q_proj", "k_proj", "v_proj", "o_proj"]]),
        st.sampled_from([0.0, 0.05]), st.sampled_from([[], ["lm_head"], ["embed_tokens", "lm_head"]]),
        st.sampled_from(["nf4", "nf4-double", "int8"])))


@given(kind=st.sampled_from(EXPORT_KINDS), preset=st.sampled_from(PRESETS), precision=st.sampled_from(PRECISIONS),
       optimizer=st.sampled_from(core.OPTIMIZERS), implementation=st.sampled_from(["foreach", "fused", "for-loop"]),
       checkpointing=st.sampled_from(["none", "selective", "full"]), layout=st.sampled_from(LAYOUTS),
       implementation_kind=st.sampled_from(["transformers", "megatron"]),
       attention=st.sampled_from(["sdpa", "flash", "eager"]), finetuning=finetunings,
       momentum=st.booleans(), micro=st.integers(1, 16), seq=st.sampled_from([128, 2048, 8192]),
       accumulation=st.integers(1, 32), offload=st.sampled_from(["none", "none", "optimizer", "optimizer+parameters"]),
       per_node=st.sampled_from([8, 8, 4, 2]))
@settings(max_examples=examples(400), deadline=None, suppress_health_check=list(HealthCheck))
def test_round_trip_property(kind, preset, precision, optimizer, implementation, checkpointing, layout,
                             implementation_kind, attention, finetuning, momentum, micro, seq, accumulation, offload,
                             per_node):
    body = body_of(preset, precision, optimizer, implementation, checkpointing, layout, implementation_kind, attention,
                   finetuning)
    body["parallelism"].update(offload=offload, gpus_per_node=per_node)
    body["training"].update(micro_batch_size=micro, seq_len=seq, gradient_accumulation_steps=accumulation,
                            adafactor_momentum=momentum)
    try:
        wire.job_from(body).estimate()
    except DomainError:
        assume(False)  # a setup the estimate refuses (heads the tensor degree does not divide, LoRA under autocast)
    check_round_trip(body, kind)


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_a_plain_setup_comes_back_whole(kind):
    # What each framework says in full: nothing the file could carry is lost. Every exporter writes ZeRO-3 as a
    # DeepSpeed config, which brings DeepSpeed's own memory convention.
    body = body_of("mistral-7b", "bf16-fp32-master", "adamw", "fused", "full", (8, 1, 1, 3))
    body["training"]["loop"] = "plain" if kind in ("deepspeed", "accelerate") else "hf-trainer"
    body["training"]["framework"] = "deepspeed"
    out = check_round_trip(body, kind)
    lost = {entry["field"] for entry in out["unexpressed"]}
    expected = {"deepspeed": {"model", "training.seq_len", "training.activation_checkpointing"},
                "training-arguments": {"model", "training.seq_len"},
                "accelerate": {"model", "training.micro_batch_size", "training.seq_len", "training.optimizer_implementation",
                               "training.activation_checkpointing"},
                "axolotl": set()}[kind]
    assert lost == expected, out["unexpressed"]


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_a_convention_the_file_cannot_say_is_listed(kind):
    # ZeRO-2 written as DeepSpeed comes back under DeepSpeed's convention; the ZeRO paper's (pytorch) and FSDP2's are
    # lost, and the answer says which engine's convention the file implies instead.
    for framework, stage in (("pytorch", 2), ("fsdp2", 3)):
        body = body_of("llama-2-7b", "bf16-fp32-master", "adamw", "fused", "none", (8, 1, 1, stage))
        body["training"]["framework"] = framework
        out = check_round_trip(body, kind)
        assert import_config(kind, out["text"])["request"]["training"]["framework"] == "deepspeed"
        why = {entry["field"]: entry["why"] for entry in out["unexpressed"]}["training.framework"]
        assert "DeepSpeed" in why, why


def test_adapters_round_trip_through_axolotl():
    for finetuning in ({"method": "lora", "rank": 8, "target_modules": ["q_proj", "v_proj"], "dropout": 0.05},
                       {"method": "qlora", "rank": 16, "target_modules": ["all-linear"], "quantization": "nf4"},
                       {"method": "qlora", "rank": 16, "target_modules": ["q_proj"], "quantization": "int8",
                        "modules_to_save": ["lm_head"]},
                       {"method": "lora", "rank": 8, "target_modules": r".*\.(q_proj|v_proj)"},
                       {"method": "lora", "rank": 8, "target_modules": "all-linear"}):
        body = {"model": {"preset": "llama-2-7b"}, "training": {"precision": "bf16", "loop": "hf-trainer"},
                "finetuning": finetuning}
        out = check_round_trip(body, "axolotl")
        assert "finetuning" not in {entry["field"] for entry in out["unexpressed"]}


@pytest.mark.parametrize("kind", ["accelerate", "axolotl"])
def test_yaml_exports_read_the_same_with_pyyaml(kind):
    yaml = pytest.importorskip("yaml")
    for precision, layout in itertools.product(PRECISIONS, LAYOUTS):
        text = export_config(body_of("gpt2", precision, "adamw", "fused", "full", layout), kind)["text"]
        assert reader.loads(text) == yaml.safe_load(text)
        assert "# " in text  # the comments for what trainmem does not model


@pytest.mark.validation  # against accelerate itself, which the validate extra brings
def test_accelerate_reads_the_exported_config(tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    for precision, layout, impl in itertools.product(PRECISIONS, LAYOUTS, ["transformers", "megatron"]):
        path = tmp_path / "accelerate_config.yaml"
        path.write_text(export_config(body_of("gpt2", precision, "adamw", "fused", "full", layout, impl),
                                      "accelerate")["text"])
        config = ClusterConfig.from_yaml_file(str(path))
        assert config.num_processes == layout[0] * layout[1] * layout[2]


@pytest.mark.validation  # against transformers itself, which the validate extra brings
def test_trainer_export_uses_training_arguments_names():
    transformers = pytest.importorskip("transformers")
    fields = {f.name for f in transformers.TrainingArguments.__dataclass_fields__.values()}
    optims = {member.value for member in transformers.training_args.OptimizerNames}
    for precision, optimizer, layout in itertools.product(PRECISIONS, core.OPTIMIZERS, LAYOUTS):
        args = json.loads(export_config(body_of("gpt2", precision, optimizer, "foreach", "full", layout),
                                        "training-arguments")["text"])
        assert set(args) <= fields, set(args) - fields
        assert args["optim"] in optims


DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "zero_optimization", "bf16", "fp16", "torch_autocast", "data_types", "optimizer",
                  "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "gradient_clipping",
                  "tensor_parallel"}


def test_deepspeed_export_keys_are_deepspeeds():
    # Top-level keys from DeepSpeed's configuration reference (docs/_pages/config-json.md).
    for precision, optimizer, layout in itertools.product(PRECISIONS, core.OPTIMIZERS, LAYOUTS):
        out = export_config(body_of("gpt2", precision, optimizer, "foreach", "full", layout), "deepspeed")
        config = json.loads(out["text"])
        assert set(config) <= DEEPSPEED_KEYS
        assert config["train_batch_size"] == 2 * 4 * layout[0]
        assert out["filename"] == "ds_config.json" and out["notes"]


def test_export_refuses_what_the_estimate_refuses():
    with pytest.raises(DomainError) as error:
        export_config({"model": {"preset": "gpt2-xl"}, "parallelism": {"tensor": 2}}, "deepspeed")
    assert error.value.field == "parallelism.tensor"
    with pytest.raises(DomainError) as error:
        export_config({"model": {"preset": "gpt2"}}, "torchtitan")
    assert error.value.field == "kind"


def test_a_gpu_and_an_overhead_are_reported_as_not_carried():
    out = export_config({"model": {"preset": "gpt2"}, "gpu": "h100-80gb",
                         "training": {"framework_overhead_bytes": 1 << 30, "allocator": "expandable-segments"}},
                        "accelerate")
    unexpressed = {entry["field"]: entry["why"] for entry in out["unexpressed"]}
    assert {"gpu", "training.framework_overhead_bytes", "training.allocator"} <= set(unexpressed)
    assert "PYTORCH_CUDA_ALLOC_CONF" in unexpressed["training.allocator"]


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_the_bitsandbytes_version_is_the_environments_not_a_files(kind):
    body = {"model": {"preset": "llama-2-7b"}, "training": {"precision": "bf16"},
            "finetuning": {"method": "qlora", "quantization": "nf4", "bitsandbytes_version": "0.41.1"}}
    out = export_config(body, kind)
    said = {entry["field"]: entry["why"] for entry in out["unexpressed"]}
    assert "environment" in said["finetuning.bitsandbytes_version"]
    plain = export_config(body | {"finetuning": {"method": "qlora", "quantization": "nf4"}}, kind)
    assert ("finetuning" in said) == any(entry["field"] == "finetuning" for entry in plain["unexpressed"])


def test_activation_offloading_goes_to_axolotl_and_back_and_elsewhere_with_its_reason():
    body = {"model": {"preset": "llama-3-8b"},
            "training": {"activation_checkpointing": "full", "activation_offload": "torchtune"}}
    axolotl = export_config(body, "axolotl")
    assert "activation_offloading: true" in axolotl["text"]
    assert not [u for u in axolotl["unexpressed"] if u["field"].startswith("training.activation")]
    trainer = export_config(body, "training-arguments")
    assert [u["why"] for u in trainer["unexpressed"] if u["field"] == "training.activation_offload"] == [
        "TrainingArguments offload with transformers' own save_on_cpu (checkpoints-to-host), not torchtune's hooks"]


def test_offloaded_checkpoints_go_to_the_trainer_and_back():
    body = {"model": {"preset": "llama-3-8b"},
            "training": {"activation_checkpointing": "full", "activation_offload": "checkpoints-to-host"}}
    trainer = export_config(body, "training-arguments")
    assert json.loads(trainer["text"])["activation_checkpointing_kwargs"] == {"offload": True}
    assert not [u for u in trainer["unexpressed"] if u["field"].startswith("training.activation")]
    axolotl = export_config(body, "axolotl")
    assert [u["field"] for u in axolotl["unexpressed"] if u["field"] == "training.activation_offload"] == [
        "training.activation_offload"]
