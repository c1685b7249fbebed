"""Fine-tuning measured: peft's LoRA on small real models on CPU against trainmem's prediction.

For each case the model is built from a config (no download), cast to the base dtype, wrapped by
`peft.get_peft_model` with the case's LoraConfig, and run forward under the saved-tensor recorder of
`validation.measure` (every storage autograd keeps, attributed to the layer whose forward made it).
Compared, to the byte: the trainable parameter count (peft's own `get_nb_trainable_parameters`), all
parameters, the bytes of every parameter (the weights category), and the saved activations of each
layer, of the embedding and of the head.

    python -m validation.finetuning           # prints one line per case
    python -m validation.finetuning --write   # and publishes them in docs/VALIDATION.md ("Fine-tuning")

The peak of two training steps with LoRA is measured by the timeline harness (validation/timeline.py,
PEAK_CASES below) as for full training.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from dataclasses import dataclass
from typing import Final

import torch
from peft import LoraConfig, get_peft_model
from transformers import (
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GptOssConfig,
    GptOssForCausalLM,
    Llama4ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from app import core
from app.core import activations as act
from app.core import states
from app.core.finetuning import Finetuning, layer_role
from validation import litgpt
from validation.measure import SavedTensorRecorder
from validation.sections import peak_table, run_peaks, write_section

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
LAYERS = 3


@dataclass(frozen=True)
class Case:
    family: str  # llama, gpt2, mixtral, qwen3_moe, qwen2_moe, gpt_oss, deepseek_v3, deepseek_v2 or llama4_text
    precision: str  # bf16 or fp32 (the base's dtype; peft keeps the adapters in fp32)
    targets: tuple[str, ...]
    dropout: float = 0.0
    attention: str = "sdpa"
    modules_to_save: tuple[str, ...] = ()
    rank: int = 8
    batch: int = 2
    seq: int = 32

    @property
    def label(self) -> str:
        saved = f" save={','.join(self.modules_to_save)}" if self.modules_to_save else ""
        return (f"{self.family} {self.precision} r={self.rank} {','.join(self.targets)} dropout={self.dropout} "
                f"{self.attention}{saved} b={self.batch} s={self.seq}")


@dataclass(frozen=True)
class Result:
    case: Case
    measured: dict[str, object]
    predicted: dict[str, object]

    @property
    def passed(self) -> bool:
        return self.measured == self.predicted


def _model(case: Case) -> tuple[torch.nn.Module, dict]:
    if case.family == "llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=LAYERS, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=300, max_position_embeddings=256,
                             attn_implementation=case.attention)
        return LlamaForCausalLM(config), config.to_dict()
    if case.family == "mixtral":
        # Mixtral's experts are stacked parameters, not nn.Linear modules: adapters go on the attention alone.
        mixtral = MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS, num_attention_heads=4,
                                num_key_value_heads=2, vocab_size=300, max_position_embeddings=256,
                                num_local_experts=4, num_experts_per_tok=2, attn_implementation=case.attention)
        return MixtralForCausalLM(mixtral), mixtral.to_dict()
    if case.family == "qwen3_moe":
        qwen = Qwen3MoeConfig(hidden_size=64, intermediate_size=160, moe_intermediate_size=48, num_hidden_layers=LAYERS,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=300,
                              max_position_embeddings=256, num_experts=6, num_experts_per_tok=3, norm_topk_prob=True,
                              attn_implementation=case.attention)
        return Qwen3MoeForCausalLM(qwen), qwen.to_dict()
    if case.family == "qwen2_moe":
        # A gated shared expert beside the routed ones (nn.Linear modules, frozen here).
        qwen2 = Qwen2MoeConfig(hidden_size=64, intermediate_size=160, moe_intermediate_size=48,
                               shared_expert_intermediate_size=96, num_experts=6, num_experts_per_tok=2,
                               num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                               max_position_embeddings=256, decoder_sparse_step=1, mlp_only_layers=[],
                               attn_implementation=case.attention)
        return Qwen2MoeForCausalLM(qwen2), qwen2.to_dict()
    if case.family == "gpt_oss":
        # Attention with sinks (eager), a biased router and experts with biases, sliding and full layers.
        oss = GptOssConfig(vocab_size=300, hidden_size=64, intermediate_size=48, num_hidden_layers=LAYERS,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                           num_experts_per_tok=2, sliding_window=16,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
                           attn_implementation="eager")
        return GptOssForCausalLM(oss), oss.to_dict()
    if case.family == "llama4_text":
        # Llama 4 Scout's layout (validation/models.py): the rotating layers first and third, a mixture in each.
        from validation.models import FAMILIES, Size

        llama4 = FAMILIES["llama4_text"](Size(hidden=64, layers=LAYERS, heads=4, kv_heads=2, intermediate=96,
                                              vocab=300, positions=256, head_dim=16))
        llama4.use_cache = False
        llama4._attn_implementation = case.attention
        return Llama4ForCausalLM(llama4), llama4.to_dict()
    if case.family in ("deepseek_v3", "deepseek_v2"):
        # Multi-head latent attention (V3: Q through its low-rank q_a_proj and q_b_proj; V2-Lite's plain q_proj),
        # the first layer dense, then routed experts beside an ungated shared expert, all frozen.
        common = dict(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=160, vocab_size=300, max_position_embeddings=256, first_k_dense_replace=1,
                      n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=48,
                      kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, bos_token_id=0,
                      eos_token_id=1, attn_implementation=case.attention)
        if case.family == "deepseek_v3":
            v3 = DeepseekV3Config(n_group=2, topk_group=1, q_lora_rank=32, **common)
            return DeepseekV3ForCausalLM(v3), v3.to_dict()
        v2 = DeepseekV2Config(n_group=1, topk_group=1, q_lora_rank=None, topk_method="greedy", **common)
        return DeepseekV2ForCausalLM(v2), v2.to_dict()
    # GPT-2 without dropout in the base and eager attention: CPU sdpa keeps the fused QKV projection's whole
    # output for its views, which the base model's accounting of GPT-2 does not follow (the same with or without
    # adapters), so the adapters are measured where the base is exact.
    config = GPT2Config(n_embd=64, n_layer=LAYERS, n_head=4, vocab_size=300, n_positions=256,
                        attn_implementation=case.attention, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config), config.to_dict()


def measure(case: Case) -> dict[str, object]:
    torch.manual_seed(0)
    model, _ = _model(case)
    model = model.to(DTYPES[case.precision])
    targets = "all-linear" if case.targets == ("all-linear",) else list(case.targets)
    model = get_peft_model(model, LoraConfig(r=case.rank, lora_alpha=2 * case.rank, target_modules=targets,
                                             lora_dropout=case.dropout,
                                             modules_to_save=list(case.modules_to_save) or None))
    model.train()
    base = model.get_base_model()
    layers = base.transformer.h if case.family == "gpt2" else base.model.layers
    trainable, everything = model.get_nb_trainable_parameters()
    weights = sum(p.untyped_storage().nbytes() for p in {p.untyped_storage().data_ptr(): p
                                                          for p in model.parameters()}.values())
    recorder = SavedTensorRecorder(model, layers)
    ids = torch.randint(0, 300, (case.batch, case.seq))
    with recorder.recording():
        out = model(input_ids=ids, labels=ids)
    saved = recorder.measurement()
    out.loss.backward()
    return {"trainable": trainable, "params": everything, "weights": weights, "layers": list(saved.layers),
            "embedding": saved.embedding, "head": saved.head}


def predict(case: Case) -> dict[str, object]:
    _, config = _model(case)
    arch = core.architecture_from_hf_config(config)
    tuning = Finetuning(method="lora", rank=case.rank, target_modules=case.targets, dropout=case.dropout,
                        modules_to_save=case.modules_to_save)
    precision = core.precision_preset(case.precision)
    training = core.Training(micro_batch_size=case.batch, seq_len=case.seq, precision=precision,
                             attention=case.attention, finetuning=tuning)
    result = core.estimate(architecture=arch, training=training, device="cpu")
    setup = dataclasses.replace(core.activation_setup(training, core.Parallelism(), device="cpu"))
    stage = states.finetuned_stage(arch, tuning, precision.bits("weights"), 1, layers=LAYERS, first=True, last=True,
                                   first_layer=0)
    weights = stage.frozen_rank_bytes + sum(part.rank_elements * part.bits // 8 for part in stage.parts.values())
    # Llama 4's chunked layers keep what its rotating layers do (`act.sliding_window_layer`).
    kinds = config.get("layer_types") or ["full_attention"] * LAYERS
    layers = [act.total_bytes(act.sliding_window_layer(arch, setup, layer_role(tuning, index))
                              if kinds[index] == "chunked_attention" else
                              act.layer_activations(arch, setup, layer_role(tuning, index),
                                                    dense=index < arch.dense_layers)) for index in range(LAYERS)]
    return {"trainable": result.trainable_param_count, "params": result.param_count, "weights": weights,
            "layers": layers, "embedding": act.total_bytes(act.embedding_activations(arch, setup)),
            "head": act.total_bytes(act.head_activations(arch, setup))}


CASES = (
    *(Case("llama", precision, targets, dropout, attention)
      for precision in ("bf16", "fp32") for targets in (("q_proj", "v_proj"), ("all-linear",))
      for dropout in (0.0, 0.1) for attention in ("sdpa", "eager")),
    *(Case("gpt2", precision, targets, dropout, "eager")
      for precision in ("bf16", "fp32") for targets in (("c_attn",), ("c_proj",), ("all-linear",))
      for dropout in (0.0, 0.1)),
    Case("llama", "bf16", ("q_proj", "v_proj"), modules_to_save=("lm_head",)),
    Case("llama", "bf16", ("q_proj", "v_proj"), modules_to_save=("embed_tokens", "lm_head")),
    Case("llama", "bf16", ("q_proj", "k_proj", "o_proj", "down_proj"), rank=4, batch=1, seq=48),
    # Mixtures of experts: the attention adapted, the router and the experts frozen (peft's all-linear would adapt
    # the router and the experts' stacked parameters too, which trainmem refuses).
    *(Case(family, precision, targets, dropout, attention)
      for family in ("mixtral", "qwen3_moe") for precision in ("bf16", "fp32")
      for targets, dropout in ((("q_proj", "v_proj"), 0.0), (("q_proj", "k_proj", "v_proj", "o_proj"), 0.1))
      for attention in ("sdpa", "eager")),
    Case("mixtral", "bf16", ("q_proj", "v_proj"), modules_to_save=("lm_head",), batch=1, seq=48),
    # peft's all-linear on Mixtral and Qwen3-MoE: the router's weight and the stacked experts wrapped (ParamWrapper),
    # folded into new copies each forward (on DeepSeek beside the latent attention, the shared experts and dense
    # layers left); on gpt-oss it adapts the attention alone, on Qwen2-MoE the attention, the shared expert and its
    # gate.
    *(Case(family, precision, ("all-linear",), 0.0, attention)
      for family in ("mixtral", "qwen3_moe") for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")),
    Case("gpt_oss", "bf16", ("all-linear",), 0.0, "eager"),
    *(Case("qwen2_moe", precision, ("all-linear",), dropout, attention)
      for precision, dropout, attention in (("bf16", 0.0, "sdpa"), ("fp32", 0.0, "eager"), ("bf16", 0.1, "eager"))),
    *(Case(family, precision, ("all-linear",), 0.0, attention)
      for family, precision, attention in (("deepseek_v3", "bf16", "sdpa"), ("deepseek_v3", "fp32", "eager"),
                                           ("deepseek_v2", "bf16", "sdpa"))),
    # Qwen2-MoE's shared expert frozen beside the routed ones; gpt-oss's biased router and experts frozen.
    *(Case("qwen2_moe", precision, targets, dropout, attention)
      for precision in ("bf16", "fp32")
      for targets, dropout in ((("q_proj", "v_proj"), 0.0), (("q_proj", "k_proj", "v_proj", "o_proj"), 0.1))
      for attention in ("sdpa", "eager")),
    *(Case("gpt_oss", precision, targets, dropout, "eager")
      for precision in ("bf16", "fp32")
      for targets, dropout in ((("q_proj", "v_proj"), 0.0), (("q_proj", "k_proj", "v_proj", "o_proj"), 0.1))),
    # DeepSeek's latent attention adapted (V3's q_a_proj and q_b_proj, V2's plain q_proj), its dense first layer,
    # routers, routed and shared experts frozen; in the lowest layer only what an adapter feeds needs a gradient.
    *(Case("deepseek_v3", precision, targets, dropout, attention)
      for precision in ("bf16", "fp32")
      for targets, dropout in ((("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"), 0.0),
                               (("q_b_proj", "kv_b_proj"), 0.1))
      for attention in ("sdpa", "eager")),
    *(Case("deepseek_v3", "bf16", (target,)) for target in ("q_a_proj", "kv_a_proj_with_mqa", "o_proj")),
    *(Case("deepseek_v2", precision, targets, 0.0, attention)
      for precision in ("bf16", "fp32")
      for targets in (("q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"), ("kv_b_proj",))
      for attention in ("sdpa", "eager")),
    # Llama 4 with its attention adapted: the router, the experts (run on every token) and the shared expert frozen.
    *(Case("llama4_text", precision, targets, dropout, attention)
      for precision in ("bf16", "fp32")
      for targets, dropout in ((("q_proj", "v_proj"), 0.0), (("q_proj", "k_proj", "v_proj", "o_proj"), 0.1))
      for attention in ("sdpa", "eager")),
)


def peak_cases() -> tuple:
    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=704, vocab=2048)
    moe = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=2048)
    oss = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=256, vocab=2048, head_dim=64)
    long = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=1536, vocab=512, head_dim=64)
    mla = Size(hidden=256, layers=4, heads=4, kv_heads=4, intermediate=512, vocab=2048, head_dim=64)
    llama4 = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=2048, head_dim=64)
    return (
        tl.TimelineCase("llama", precision="bf16", seq=256, batch=2, size=size, lora_rank=8,
                        lora_targets=("q_proj", "v_proj")),
        tl.TimelineCase("llama", precision="bf16", seq=256, batch=2, size=size, lora_rank=16,
                        lora_targets=("all-linear",), lora_dropout=0.1, loop="hf-trainer"),
        tl.TimelineCase("llama", precision="fp32", seq=256, batch=2, size=size, lora_rank=8,
                        lora_targets=("q_proj", "v_proj"), implementation="for-loop"),
        # Mixtral with the attention adapted: the router and the experts frozen, full recomputation once.
        tl.TimelineCase("mixtral", precision="bf16", seq=256, batch=2, size=moe, lora_rank=8,
                        lora_targets=("q_proj", "v_proj")),
        tl.TimelineCase("mixtral", precision="fp32", seq=128, batch=2, size=moe, lora_rank=16,
                        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"), lora_dropout=0.1, loop="hf-trainer"),
        tl.TimelineCase("mixtral", precision="bf16", seq=256, batch=2, size=moe, lora_rank=8,
                        lora_targets=("q_proj", "v_proj"), checkpointing="full"),
        # gpt-oss with the attention adapted: the biased router and experts frozen.
        tl.TimelineCase("gpt_oss", precision="bf16", seq=256, batch=2, size=oss, attention="eager", lora_rank=8,
                        lora_targets=("q_proj", "v_proj")),
        # all-linear on Mixtral: the router and the stacked experts adapted; once at 1,024 tokens under recomputation
        # with a small vocabulary, where a layer's backward holds the peak.
        tl.TimelineCase("mixtral", precision="bf16", seq=256, batch=2, size=moe, lora_rank=8,
                        lora_targets=("all-linear",)),
        tl.TimelineCase("mixtral", precision="bf16", seq=1024, batch=1, checkpointing="full", lora_rank=8,
                        lora_targets=("all-linear",), size=Size(hidden=256, layers=4, heads=4, kv_heads=2,
                                                                intermediate=512, vocab=512, head_dim=64)),
        # DeepSeek-V3 with its latent attention adapted, the first layer dense; and V2-Lite's shape in fp32.
        tl.TimelineCase("deepseek_v3-dense-first", precision="bf16", seq=256, batch=2, size=mla, lora_rank=8,
                        lora_targets=("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")),
        tl.TimelineCase("deepseek_v2-lite", precision="fp32", seq=128, batch=2, size=mla, attention="eager",
                        lora_rank=8, lora_targets=("q_proj", "kv_b_proj"), loop="hf-trainer"),
        # Llama 4 with its attention adapted, the mixture frozen.
        tl.TimelineCase("llama4_text", precision="bf16", seq=256, batch=2, size=llama4, lora_rank=8,
                        lora_targets=("q_proj", "v_proj")),
        tl.TimelineCase("llama4_text", precision="fp32", seq=128, batch=2, size=llama4, attention="eager",
                        lora_rank=16, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"), lora_dropout=0.1),
        # Long sequences under recomputation with a small vocabulary, where a layer's backward decides the peak:
        # the MLP's working set (Llama), and the fp32 norm after the MLP before it (OLMo 2, Gemma 3).
        tl.TimelineCase("llama", precision="bf16", seq=1024, batch=1, size=long, lora_rank=8,
                        lora_targets=("q_proj", "v_proj"), checkpointing="full"),
        tl.TimelineCase("olmo2", precision="bf16", seq=1024, batch=1, size=long, lora_rank=8,
                        lora_targets=("q_proj", "v_proj"), checkpointing="full"),
        tl.TimelineCase("gemma3", precision="fp32", seq=1024, batch=1, size=long, lora_rank=8,
                        lora_targets=("q_proj", "v_proj"), checkpointing="full"),
    )


SECTION: Final = "## Fine-tuning"


def section(results: list[Result], peaks: list) -> list[str]:
    exact = sum(result.passed for result in results)
    lines = [
        SECTION, "",
        "LoRA with peft 0.21.2 on small Llama, GPT-2, Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss, DeepSeek-V3, "
        "DeepSeek-V2 and Llama 4 models built from a config, on CPU "
        "(`python -m validation.finetuning`). Each case compares, to the byte, peft's own trainable and total "
        "parameter counts, the bytes of every parameter (the frozen base in its dtype, the adapters in fp32 as "
        "peft's `autocast_adapter_dtype` leaves them, the copies `modules_to_save` makes) and the tensors "
        "autograd keeps for backward in each layer, the embedding and the head (frozen linear layers keep no "
        f"input; each adapter keeps an fp32 copy of its input, or its dropout's output and mask). In a mixture of "
        "experts the frozen router and experts keep neither the router's input, nor the gathered tokens, nor the "
        "down matmul's input (nor Qwen2-MoE's frozen shared expert its down projection's, nor gpt-oss's frozen "
        "biased router its input or the experts' biases their ids); a Q or K norm whose projection needs no "
        "gradient keeps nothing (Qwen3-MoE's first "
        "layer with K not adapted). peft 0.21's `all-linear` on Mixtral and Qwen3-MoE wraps the router's weight and "
        "the stacked experts (ParamWrapper: A of E·r × in and B of out × E·r, twice the rank for the fused "
        "gate_up_proj) and each forward folds the adapters into new copies of the router's weight and of both "
        "expert stacks (`torch.baddbmm`), which the layer keeps with the adapters' factors cast to the weights' "
        "dtype, the router's input, the gathered tokens and the down projection's input: a second copy of the "
        "experts per layer. On DeepSeek it does the same for the sparse layers (the router keeping its fp32 cast of "
        "the adapted weight in place of the adapted weight in a bf16 model), beside the latent attention, and "
        "leaves the shared experts and the dense layers' MLPs, whose module names peft maps to the routed "
        "experts. On gpt-oss it adapts the attention alone, and on Qwen2-MoE the attention, the shared "
        "expert's three linears and its gate, each adapter keeping what it keeps elsewhere. DeepSeek's latent "
        "attention keeps, of its low-rank paths, the fp32 input and "
        "reciprocal RMS of q_a_layernorm and kv_a_layernorm where their input needs a gradient and none of their "
        "normalised tensors or the projections' inputs; in the lowest layer each matmul of the attention keeps one "
        "operand only where the other needs a gradient, so adapting q_a_proj, kv_a_proj_with_mqa or o_proj alone "
        "leaves different tensors kept there; its dense first layer, routers and shared experts keep no inputs, "
        "and the routers keep their fp32 cast of the bf16 weight (E × h), as in full training. Llama 4's frozen "
        "mixture keeps neither the router's input, nor the scaled tokens every expert takes, nor the down matmuls' "
        "inputs, and in the lowest layer its rotating layers' L2 norms of Q and K keep their fp32 input only where "
        "the projection is adapted (with q_proj and v_proj, Q's alone); its LoRA is accepted on q_proj, k_proj, "
        "v_proj and o_proj alone (all-linear would adapt the router, an nn.Linear, and the shared expert; QLoRA "
        "is not measured). "
        f"**{exact} of {len(results)} cases exact.**", "",
        "| case | trainable | all params | weights B | layers B (first, others) | embedding B | head B | |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for result in results:
        m = result.measured
        layers = m["layers"]
        lines.append(f"| {result.case.label} | {m['trainable']:,} | {m['params']:,} | {m['weights']:,} | "
                     f"{layers[0]:,}, {layers[1]:,} | {m['embedding']:,} | {m['head']:,} | "
                     f"{'exact' if result.passed else 'differs'} |")
    lines += ["", "The peak of two training steps with LoRA (the timeline harness, as for full training; "
              "`tests/validation/test_finetuning.py`):", "",
              *peak_table(peaks)]
    lines += ["", "With the experts adapted (all-linear on Mixtral, the last rows above but DeepSeek's), a layer's "
              "backward holds at least the routed tokens' gradients that trained experts hold first (\"Mixture of "
              "experts and Qwen3\"); its later moments, where the adapted copies' gradients meet the experts' own, "
              "are not modelled, and the estimate warns where a layer's backward holds the peak. Over 10 setups "
              "with recomputation and a small vocabulary (bf16, I/h 1 to 4, 512 to 2,048 tokens): Mixtral within "
              "2.5 n·h bytes at the layers' backward (peaks within 1.2%), Qwen3-MoE up to 4.5 n·h over it at I/h up "
              "to 2 and 21 to 28 n·h short at I/h 4 (peaks 3.0% and 5.1% low).", "",
              "QLoRA's 4-bit and 8-bit storage is not measured here: bitsandbytes' quantized kernels need a GPU. "
              "trainmem counts it from bitsandbytes' source: `quantize_4bit` packs two 4-bit weights a byte with "
              "one fp32 absmax per block of 64 (`blocksize=64`), `compress_statistics` quantizes the absmax to 8 "
              "bits with an fp32 constant per 256 (`quantize_blockwise(absmax, blocksize=256)`) "
              "(bitsandbytes/functional.py); `Int8Params` keeps a byte per weight and an fp32 `SCB` scale per row; "
              "`MatMul4Bit.forward` saves the packed weight, not its input, and dequantizes the weight to the "
              "compute dtype for each matmul (bitsandbytes/autograd/_functions.py); before 0.43.2 it also kept its "
              "input on `ctx` until the graph is freed (`ctx.tensors = (A, B)`, 0.43.1 line 516; `(None, B)` since "
              "commit 9e75374, released in 0.43.2), which `finetuning.bitsandbytes_version` states. "
              "transformers 5.24 swaps "
              "bitsandbytes' layers in for `nn.Linear` modules only (integrations/bitsandbytes.py, "
              "`replace_with_bnb_linear`): a mixture's routed experts, stacked parameters, and its router stay in "
              "the dtype the model is loaded in, so QLoRA of Mixtral-8x7B stores 692,387,840 B of attention in NF4 "
              "beside 90,194,313,216 B of routed experts in bf16. Adapters under autocast are "
              "not modelled (trainmem refuses them): LoRA runs load the base in its training dtype.", "",
              *litgpt.text(), ""]
    return lines


def run(cases: tuple[Case, ...] = CASES) -> list[Result]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [Result(case, measure(case), predict(case)) for case in cases]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    results = run()
    for result in results:
        mark = "ok  " if result.passed else "DIFF"
        print(f"{mark} {result.case.label}: measured {result.measured} predicted {result.predicted}")
    failed = sum(not result.passed for result in results)
    print(f"{len(results) - failed} of {len(results)} cases exact")
    if "--write" in argv:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peaks = run_peaks(peak_cases())
        write_section(section(results, peaks))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
