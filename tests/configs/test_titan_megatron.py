"""torchtitan's TOML job config and Megatron-LM's command line.

torchtitan: JobConfig in torchtitan/config/job_config.py (as of its last TOML release): [training]
local_batch_size, global_batch_size, seq_len, dtype, mixed_precision_param; [parallelism] degrees with
data_parallel_shard_degree -1 for the GPUs left over; [activation_checkpoint] mode and selective_ac_option;
llama3 flavours in torchtitan/models/llama3/__init__.py.
Megatron-LM: megatron/training/arguments.py and megatron/core/transformer/transformer_config.py (flags and
defaults: --ffn-hidden-size, dropout 0.1, tied embeddings, biases, vocabulary padding to 128 × tensor degree,
global batch = micro × data × micro-batches, --bf16's fp32 gradient accumulation).
"""

from __future__ import annotations

import pytest

from app import core
from app.configs.common import FP8, PATH
from tests.configs.helpers import assumed, ignored, imported, refused, sample, understood


def test_torchtitan_llama3_8b_on_one_node():
    answer = imported("torchtitan", sample("torchtitan_llama3_8b.toml"))
    request = answer["request"]
    assert request["model"] == {"preset": "llama-3-8b"}
    assert (request["training"]["micro_batch_size"], request["training"]["seq_len"]) == (1, 8192)
    # -1: every GPU left over is an FSDP shard; 8 assumed and said so.
    assert request["parallelism"]["data"] == 8 and request["parallelism"]["zero_stage"] == 3
    assert any("-1" in why for _, why in assumed(answer)["parallelism.data"])
    assert request["training"]["precision"] == "bf16-fp32-master"  # FSDP2 mixed precision: fp32 shards
    assert request["training"]["activation_checkpointing"] == "op"  # selective_ac_option = "op": torchtitan's op-level policy
    assert request["training"]["optimizer_implementation"] == "fused"
    assert request["training"]["loop"] == "hf-trainer"  # the step deletes the logits before backward
    why = ignored(answer)
    assert why["model.hf_assets_path"] == PATH
    assert why["quantize.linear.float8.enable_fsdp_float8_all_gather"] == FP8


def test_torchtitan_70b_with_tensor_parallelism_and_a_global_batch():
    request = imported("torchtitan", sample("torchtitan_llama3_70b_tp.toml"))["request"]
    assert request["model"] == {"preset": "llama-3-70b"}
    assert request["parallelism"].items() >= {"data": 8, "tensor": 8, "pipeline": 1, "sequence_parallel": True,
                                      "zero_stage": 3}.items()
    assert request["training"]["gradient_accumulation_steps"] == 128 // (8 * 8)
    assert request["training"]["activation_checkpointing"] == "full"


@pytest.mark.parametrize("extra, precision", [
    ("[training]\ndtype = \"bfloat16\"\n", "bf16"),  # everything in bf16, no fp32 copy
    ("[training]\nmixed_precision_param = \"float32\"\n", "fp32"),
    ("[parallelism]\ndata_parallel_shard_degree = 1\n", "autocast-bf16"),  # one GPU: autocast
    ("[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n", "fp32"),
])
def test_torchtitan_precision(extra, precision):
    text = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n" + extra
    assert imported("torchtitan", text)["request"]["training"]["precision"] == precision


def test_torchtitan_debug_model_resolves_and_unknown_flavours_are_ignored():
    request = imported("torchtitan", "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n")["request"]
    assert request["model"]["hidden_size"] == 256 and request["model"]["intermediate_size"] == 768
    answer = imported("torchtitan", "[model]\nname = \"deepseek_v3\"\nflavor = \"16B\"\n[training]\nseq_len = 4096\n")
    assert "not a shape trainmem has a preset for" in ignored(answer)["model.flavor"]
    assert answer["request"]["model"] == {"preset": "llama-3-8b"}


@pytest.mark.parametrize("text, field", [
    ("[training]\nseq_len = \"long\"\n", "text.training.seq_len"),
    ("[parallelism]\ndata_parallel_shard_degree = 0\n", "text.parallelism.data_parallel_shard_degree"),
    ("[activation_checkpoint]\nmode = \"sometimes\"\n", "text.activation_checkpoint.mode"),
    ("[activation_checkpoint]\nselective_ac_option = \"x\"\n", "text.activation_checkpoint.selective_ac_option"),
    ("[training]\nlocal_batch_size = 3\nglobal_batch_size = 10\n[parallelism]\ndata_parallel_shard_degree = 2\n",
     "text.training.global_batch_size"),
    ("[model\nname = 1", "text"),
])
def test_torchtitan_bad_values(text, field):
    assert refused("torchtitan", text).field == field


def test_megatron_llama3_8b_script():
    answer = imported("megatron", sample("megatron_llama3_8b.sh"))
    request = answer["request"]
    model = request["model"]
    assert model["num_hidden_layers"] == 32 and model["num_key_value_heads"] == 8 and model["head_dim"] == 128
    assert (model["mlp"], model["norm"], model["position_embedding"]) == ("swiglu", "rmsnorm", "rope")
    assert model["tie_word_embeddings"] is False and model["attention_bias"] is False
    # The tokenizer's model names a preset, whose vocabulary is padded to 128 × TP 2 = 256: 128,256 already is.
    assert model["vocab_size"] == 128256
    assert request["training"]["implementation"] == "megatron"
    assert request["training"]["precision"] == "megatron-bf16"
    assert request["training"]["activation_checkpointing"] == "selective"
    assert request["training"]["attention"] == "flash"  # --attention-backend fused
    # $GPUS_PER_NODE × $NNODES = 16 GPUs ÷ (TP 2 × PP 2) = 4 data-parallel ranks; 128 ÷ (1 × 4) micro-batches.
    assert request["parallelism"].items() >= {"data": 4, "tensor": 2, "pipeline": 2, "sequence_parallel": True,
                                      "zero_stage": 1}.items()
    assert request["training"]["gradient_accumulation_steps"] == 32
    assert understood(answer)["--num-layers"] == ["model.num_hidden_layers"]
    assert ignored(answer)["--data-path"] == PATH
    assert "--overlap-grad-reduce" in ignored(answer)


def test_megatron_gpt3_example_with_a_launch_too_small_for_its_layout():
    answer = imported("megatron", sample("megatron_gpt3_175b.sh"))
    request = answer["request"]
    model = request["model"]
    assert model["intermediate_size"] == 4 * 12288  # --ffn-hidden-size's default without --swiglu
    assert model["vocab_size"] == 51200  # GPT-2's 50,257 padded to a multiple of 128 × 8
    assert (model["dropout"], model["attention_dropout"]) == (0.1, 0.1)
    assert model["tie_word_embeddings"] is True and model["position_embedding"] == "learned"
    assert request["training"]["precision"] == "fp16-fp32-master"
    assert request["parallelism"]["data"] == 1  # 8 GPUs cannot hold TP 8 × PP 16: the count is not used
    assert "not a multiple" in ignored(answer)["--nproc-per-node"]
    assert request["training"]["gradient_accumulation_steps"] == 1536
    params = core.param_count(core.Architecture(**model))
    assert 174e9 < params < 176e9  # the 175B model


def test_megatron_swiglu_default_ffn_and_flags_with_equals():
    answer = imported("megatron", "--num-layers=2 --hidden-size=1024 --num-attention-heads=8 --swiglu "
                                  "--seq-length 512 --micro-batch-size 2")
    assert answer["request"]["model"]["intermediate_size"] == int((4 * 1024 * 2 / 3) / 64) * 64
    assert answer["request"]["training"]["precision"] == "fp32"


@pytest.mark.parametrize("text, field", [
    ("--num-layers 2 --num-attention-heads 8", "text.--hidden-size"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 8 --micro-batch-size 3 --global-batch-size 10",
     "text.--global-batch-size"),
    ("--num-layers x --hidden-size 64 --num-attention-heads 8", "text.--num-layers"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 8 --tensor-model-parallel-size $TP", "text.--tensor-model-parallel-size"),
    ("--num-layers 2 --hidden-size 96 --num-attention-heads 6 --tensor-model-parallel-size 4",
     "text.--tensor-model-parallel-size"),
    ("--bf16 --fp16 --micro-batch-size 1", "text.--fp16"),
    ("pretrain_gpt.py 'unclosed", "text"),
    ("no flags here", "text"),
])
def test_megatron_bad_flags(text, field):
    error = refused("megatron", text)
    assert error.field == field, error


def test_megatron_context_parallel_and_virtual_stages():
    # Megatron-LM's arguments.py: --context-parallel-size splits each sequence; --num-layers-per-virtual-pipeline-stage
    # gives the chunk size, so 96 layers on 8 pipeline ranks in chunks of 3 are 4 virtual stages a rank.
    text = ("pretrain_gpt.py --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 1536 "
            "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --context-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 3 --bf16 --sequence-parallel")
    answer = imported("megatron", text)
    assert answer["request"]["parallelism"].items() >= {"context": 2, "virtual_stages": 4}.items()
    assert understood(answer)["--num-layers-per-virtual-pipeline-stage"] == ["parallelism.virtual_stages"]
    direct = imported("megatron", text.replace("--num-layers-per-virtual-pipeline-stage 3",
                                               "--num-virtual-stages-per-pipeline-rank 2"))
    assert direct["request"]["parallelism"]["virtual_stages"] == 2


# torchtitan's ActivationCheckpoint defaults (torchtitan/config/job_config.py): mode "selective", selective_ac_option
# "2"; an integer option k wraps every k-th block counted from 1 (torchtitan/distributed/activation_checkpoint.py,
# _apply_ac_to_transformer_block: `_count % ac_freq == 0`).
@pytest.mark.parametrize("section, every", [
    ("", 2),  # no [activation_checkpoint]: the defaults
    ("[activation_checkpoint]\nmode = \"selective\"\n", 2),
    ("[activation_checkpoint]\nselective_ac_option = \"3\"\n", 3),
    ("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"1\"\n", 1),
])
def test_torchtitan_layer_selective_recomputation_is_every_kth_layer(section, every):
    answer = imported("torchtitan", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n" + section)
    training = answer["request"]["training"]
    assert training["activation_checkpointing"] == "full"
    assert training.get("recompute_every", 1) == every
    assert not any("upper bound" in why for _, why in assumed(answer).get("training.activation_checkpointing", []))


def test_torchtitan_every_second_layer_estimates_between_none_and_full():
    from fastapi.testclient import TestClient

    from app.main import app

    client = TestClient(app)
    request = imported("torchtitan", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nlocal_batch_size = 2\n"
                                     "seq_len = 8192\n")["request"]
    peaks = {}
    for name, changes in (("default", {}), ("none", {"activation_checkpointing": "none", "recompute_every": 1}),
                          ("full", {"recompute_every": 1})):
        body = request | {"training": request["training"] | changes, "gpu": "h100-80gb"}
        response = client.post("/api/v1/estimate", json=body)
        assert response.status_code == 200, response.text
        peaks[name] = response.json()["peak"]["bytes"]
    assert peaks["full"] < peaks["default"] < peaks["none"]


@pytest.mark.parametrize("flags, first", [
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 4", 4),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 1", 1),
])
def test_megatron_block_recomputation_is_the_first_n_layers(flags, first):
    answer = imported("megatron", "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
                                  "--max-position-embeddings 4096 --micro-batch-size 1 " + flags)
    training = answer["request"]["training"]
    assert training["activation_checkpointing"] == "full"
    assert training["recompute_first_layers"] == first
    assert "training.activation_checkpointing" not in assumed(answer)


def test_megatron_block_recomputation_of_every_layer_is_full():
    answer = imported("megatron", "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 "
                                  "--max-position-embeddings 1024 --micro-batch-size 1 --recompute-granularity full "
                                  "--recompute-method block --recompute-num-layers 8")
    training = answer["request"]["training"]
    assert training["activation_checkpointing"] == "full" and "recompute_first_layers" not in training
