"""Mixture of experts and the newer layouts measured: transformers' Mixtral, Qwen3-MoE, Qwen2-MoE and Qwen3 on CPU.

Small models built from a config (no download); each case compares, to the byte, the parameter
count transformers' model class has, and the tensors autograd keeps in each layer, the embedding
and the head (validation/measure.py's recorder). Under autocast (fp32 weights, the forward in
``torch.autocast("cpu", dtype=torch.bfloat16)``) each case also compares the bytes of autocast's
parameter casts that autograd keeps, per layer and for the head, against `weight_copies`. The peak
of two training steps is measured by the timeline harness (`peak_cases`) as for dense models.

    python -m validation.moe           # prints one line per case
    python -m validation.moe --write   # and publishes them in docs/VALIDATION.md ("Mixture of experts")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import (
    MixtralConfig,
    MixtralForCausalLM,
    PretrainedConfig,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from app import core
from app.core import activations as act
from app.core.architecture import Architecture, active_param_count, layer_tensors
from validation.measure import measured_parts, predicted_parts
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32, "autocast-bf16": torch.float32}
SECTION: Final = "## Mixture of experts and Qwen3"
MODELS: Final = {"mixtral": MixtralForCausalLM, "qwen3_moe": Qwen3MoeForCausalLM, "qwen2_moe": Qwen2MoeForCausalLM,
                 "qwen3": Qwen3ForCausalLM}


@dataclass(frozen=True)
class Case:
    family: str  # a key of MODELS
    precision: str
    attention: str
    experts: int
    per_token: int
    batch: int
    seq: int
    width: int
    norm_topk_prob: bool = False  # Qwen3-MoE's and Qwen2-MoE's option (Mixtral always renormalises)
    output_router_logits: bool = False  # the load-balancing loss over every layer's router logits

    @property
    def label(self) -> str:
        experts = f" E{self.experts} k{self.per_token}" if self.experts else ""
        norm = " norm_topk_prob" if self.norm_topk_prob else ""
        norm += " output_router_logits" if self.output_router_logits else ""
        return (f"{self.family}{experts}{norm} I{self.width} {self.precision} {self.attention} "
                f"b{self.batch} s{self.seq}")

    def config(self) -> PretrainedConfig:
        shape = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                     max_position_embeddings=256, attn_implementation=self.attention)
        if self.family == "mixtral":
            return MixtralConfig(intermediate_size=self.width, num_local_experts=self.experts,
                                 num_experts_per_tok=self.per_token,
                                 output_router_logits=self.output_router_logits, **shape)
        if self.family == "qwen3_moe":
            return Qwen3MoeConfig(intermediate_size=96, moe_intermediate_size=self.width, head_dim=32,
                                  num_experts=self.experts, num_experts_per_tok=self.per_token,
                                  norm_topk_prob=self.norm_topk_prob,
                                  output_router_logits=self.output_router_logits, **shape)
        if self.family == "qwen2_moe":  # one shared expert of width 80 and its sigmoid gate beside the routed ones
            return Qwen2MoeConfig(intermediate_size=96, moe_intermediate_size=self.width,
                                  shared_expert_intermediate_size=80, num_experts=self.experts,
                                  num_experts_per_tok=self.per_token, norm_topk_prob=self.norm_topk_prob,
                                  output_router_logits=self.output_router_logits, **shape)
        return Qwen3Config(intermediate_size=self.width, head_dim=32, **shape)

    @property
    def autocast(self) -> bool:
        return self.precision.startswith("autocast")


CASES: Final = (
    *(Case("mixtral", precision, attention, experts, per_token, batch, seq, width)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for experts, per_token, batch, seq, width in ((4, 2, 2, 32, 96), (8, 2, 1, 48, 80), (6, 3, 3, 16, 64),
                                                    (4, 1, 2, 24, 96))),
    *(Case("qwen3_moe", precision, attention, experts, per_token, 2, 32, 48, norm)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for experts, per_token, norm in ((4, 2, False), (6, 3, True))),
    *(Case("qwen3", precision, attention, 0, 0, 2, 32, 96)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")),
    *(Case(family, precision, "sdpa", experts, per_token, batch, seq, 48, output_router_logits=True)
      for family, experts, per_token, batch, seq in (("mixtral", 4, 2, 2, 32), ("qwen3_moe", 6, 3, 1, 48))
      for precision in ("bf16", "fp32")),
    # Under autocast: fp32 weights, the forward in torch.autocast("cpu", dtype=torch.bfloat16).
    *(Case("mixtral", "autocast-bf16", attention, experts, per_token, batch, seq, width)
      for attention in ("sdpa", "eager")
      for experts, per_token, batch, seq, width in ((4, 2, 2, 32, 96), (8, 2, 1, 48, 80), (6, 3, 3, 16, 64),
                                                    (4, 1, 2, 24, 96))),
    *(Case("qwen3_moe", "autocast-bf16", attention, experts, per_token, 2, 32, 48, norm)
      for attention in ("sdpa", "eager") for experts, per_token, norm in ((4, 2, False), (6, 3, True))),
    *(Case("qwen2_moe", "autocast-bf16", attention, experts, per_token, batch, seq, 32, norm)
      for attention in ("sdpa", "eager")
      for experts, per_token, batch, seq, norm in ((6, 2, 2, 32, False), (8, 3, 1, 48, True))),
    *(Case(family, "autocast-bf16", "sdpa", experts, per_token, batch, seq, 48, output_router_logits=True)
      for family, experts, per_token, batch, seq in (("mixtral", 4, 2, 2, 32), ("qwen3_moe", 6, 3, 1, 48))),
)


def weight_copies(arch: Architecture, case: Case) -> dict[str, object]:
    """Autocast's bf16 casts of parameters that autograd keeps, by hand from torch's rules: autocast casts the fp32
    weight an F.linear reads to bf16 once per forward (a leaf parameter: its cast is cached) and the matmul keeps
    that cast, so a layer keeps one cast of each 2-D weight its F.linear calls read: the attention projections, the
    router's (E × h) and Qwen2-MoE's shared expert's three and its gate (1 × h). The routed experts' stacked 3-D
    weights (``moe.experts.*``) reach torch._grouped_mm, which has no autocast kernel, uncast: no copy. The head
    keeps the output layer's cast (V × h). Two bytes an element."""
    cast = sum(x.elements for x in layer_tensors(arch) if len(x.shape) == 2 and not x.name.startswith("moe.experts."))
    return {"layers": [2 * cast] * arch.num_hidden_layers, "head": 2 * arch.vocab_size * arch.hidden_size}


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: MODELS[case.family](case.config()), dtype=DTYPES[case.precision], vocab=300,
                          batch=case.batch, seq=case.seq, autocast=case.autocast)


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    layer = act.total_bytes(act.layer_activations(arch, setup))
    return predicted_parts(arch, setup, [layer] * arch.num_hidden_layers,
                           weight_copies=weight_copies(arch, case) if case.autocast else None)


def peak_cases() -> tuple:
    from dataclasses import replace

    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=2048)
    long = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=256, vocab=512, positions=2048, head_dim=64)
    return (tl.TimelineCase("mixtral", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("mixtral", precision="fp32", seq=128, batch=2, size=size, implementation="for-loop",
                            loop="hf-trainer"),
            tl.TimelineCase("mixtral-router-logits", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("mixtral-router-logits", precision="fp32", seq=128, batch=2, size=size,
                            implementation="for-loop", loop="hf-trainer"),
            # Under autocast (fp32 weights, bf16 activations).
            tl.TimelineCase("mixtral", precision="autocast-bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("mixtral", precision="autocast-bf16", seq=128, batch=2, size=size,
                            implementation="for-loop", loop="hf-trainer"),
            # Trained in full at 2,048 tokens with a small vocabulary and recomputation, where a layer's backward
            # decides the peak: the routed tokens' gradients (`moe.backward`), fp32 for Mixtral, bf16 for Qwen3-MoE.
            tl.TimelineCase("mixtral", precision="bf16", seq=2048, batch=1, size=long, checkpointing="full"),
            tl.TimelineCase("qwen3_moe", precision="bf16", seq=2048, batch=1,
                            size=Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=128, vocab=512,
                                      positions=2048, head_dim=64), checkpointing="full"),
            tl.TimelineCase("mixtral", precision="bf16", seq=2048, batch=1, size=long, checkpointing="full",
                            lora_rank=8, lora_targets=("q_proj", "v_proj")),
            tl.TimelineCase("qwen3_moe", precision="bf16", seq=2048, batch=1, checkpointing="full",
                            size=Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=128, vocab=512,
                                      positions=2048, head_dim=64), lora_rank=8, lora_targets=("q_proj", "v_proj")),
            # Experts four times as wide as the hidden size, where the experts' MLP backward holds the layer's peak:
            # trained in full, and with LoRA on the attention.
            tl.TimelineCase("mixtral", precision="bf16", seq=2048, batch=1, checkpointing="full",
                            size=replace(long, intermediate=1024)),
            tl.TimelineCase("qwen3_moe", precision="bf16", seq=2048, batch=1, checkpointing="full",
                            size=replace(long, intermediate=1024), lora_rank=8, lora_targets=("q_proj", "v_proj")))


def section(rows: list[tuple[Case, dict, dict]], peaks: list) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's Mixtral, Qwen3-MoE, Qwen2-MoE and Qwen3 on CPU (`python -m validation.moe`): the "
             "router's input, fp32 probabilities and top-k, the routing order, and for the n·k routed tokens the "
             "gathered inputs, the experts' gate-and-up output, activation, product and output, and the routing "
             "weights; Qwen2-MoE's shared expert and its gate; Qwen3's RMSNorm over each head of Q and K. Compared to "
             "the byte with the parameter count and each layer's, the embedding's and the head's saved tensors, and "
             "under autocast the bf16 weight copies autograd keeps. "
             f"**{exact} of {len(rows)} cases exact.**", "",
             "| case | params | active params | layer B | embedding B | head B | weight copies B (layer / head) | |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        arch = core.architecture_from_hf_config(case.config().to_dict())
        copies = measured.get("weight_copies")
        copies_text = f"{copies['layers'][0]:,} / {copies['head']:,}" if isinstance(copies, dict) else "–"
        lines.append(f"| {case.label} | {measured['params']:,} | {active_param_count(arch):,} | "
                     f"{measured['layers'][0]:,} | {measured['embedding']:,} | {measured['head']:,} | {copies_text} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    lines += ["", "Under autocast (`autocast-bf16`: fp32 weights, the forward in "
              "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`) the block's input is the post-attention norm's fp32 "
              "output. The router's F.linear keeps its own bf16 cast of it (so do Qwen2-MoE's shared expert's gate and "
              "up projections and its gate, one each) and returns bf16 logits, so Qwen3-MoE's and Qwen2-MoE's routing "
              "weights are bf16 as in a bf16 model and Mixtral's fp32. The routed experts run transformers' default "
              "`grouped_mm` path (integrations/moe.py), which autocast leaves alone (torch._grouped_mm has no autocast "
              "kernel): they compute in fp32 on their stacked fp32 weights, keep no bf16 copy of them, and every n·k-row "
              "tensor of theirs is fp32. The weight copies are one bf16 cast of each 2-D weight an F.linear reads "
              "(attention, router, shared expert), none of the routed experts'.", "",
              "The peak of two training steps (the timeline harness):", "",
              *peak_table(peaks)]
    lines += ["", "At 2,048 tokens with recomputation and a small vocabulary (the last six rows: trained in full, and "
              "with LoRA on the attention), a layer's backward decides the peak, and its peak comes before any of the layer's gradients is written: "
              "the gradients of the routed tokens' weighted outputs and of their combine, three n·k × h tensors in "
              "the routing weights' dtype (fp32 for Mixtral, the activations' for Qwen3-MoE), beside the layer's "
              "output gradient; without recomputation Mixtral's fp32 weighting adds n·k × h × 2 bytes more (the "
              "`moe.backward` line, half precision, trained in full or with LoRA on the attention). Derived from 28 measured setups (Mixtral and "
              "Qwen3-MoE, k 1 to 8, I/h 0.5 to 7) and checked on 11 after it (Mixtral k 1 to 3, Qwen3-MoE k 4 "
              "and 8, 512 to 2,048 tokens, E 4 to 32, experts up to the hidden size wide, "
              "and at I/h 3 from 2,048 tokens): within 324 bytes at the layers' backward under recomputation, 16 KB "
              "without; before this line these peaks came out up to 9.6% low, and with LoRA 28% low. With LoRA under "
              "recomputation a second moment can hold more: the combine's gradient for the routed tokens (n·k × h in "
              "the activations' dtype) beside two n·k × h in the routing weights' dtype and three n × h in the "
              "activations'; the larger of the two counts (for Mixtral they differ at k = 1 only, Qwen3-MoE's second "
              "holds 4 n·h bytes more, which left its LoRA row 4.1% low until it was counted). Checked with LoRA on "
              "25 setups (Mixtral and Qwen3-MoE, k 1 to 8, I/h 0.5 to 1, 1,024 and 2,048 tokens, h 256 and 512, with "
              "and without recomputation): within 0.8 n·h bytes at the layers' backward, except Qwen3-MoE at k = 1, "
              "where the attention's fp32 norm backward comes later and holds 1.7 n·h bytes more (5.7 without "
              "recomputation); every peak within 2% but one, Qwen3-MoE at h 512 without recomputation, 2.6% low at the "
              "output layer's backward, where the final norm's fp32 backward (five n × h fp32 tensors) outweighs a "
              "vocabulary of 512 and is not counted. "
              "Experts "
              "wider than the hidden size reach a later moment, inside their MLP's backward (the last two rows, I/h "
              "4): the gradients of the product and of both its factors (three n·k × I tensors), the experts' output "
              "freed, beside the layer's output gradient; trained in full the down projections' weight gradient is "
              "written by then and the product it kept is freed. Before it was counted these rows were 2.4% and "
              "17.8% low, and the H200's Mixtral-8x7B with LoRA (I/h 3.5) 0.31% low at another event; now, over 28 "
              "more setups trained in full (k 1 to 4, I/h 1 to 6, 1,024 and 2,048 tokens, h 256 and 512, with and "
              "without recomputation) and 24 with LoRA, every peak within 0.6% and in the measured event where the "
              "layers' backward holds it, and the H200's Mixtral-8x7B within 20 KB (\"On a GPU\"). fp32, autocast, "
              "gpt-oss's and DeepSeek's blocks are not measured for it."]
    lines += ["", "With `output_router_logits` the head keeps, for the load-balancing loss, each sparse layer's "
              "softmax over its router logits (n × E, the activations' dtype, bf16 under CPU autocast; CUDA autocast runs "
              "a softmax given no dtype in fp32) and its top-k's int64 indices (n × k), "
              "and the fp32 fraction of tokens per expert (E) once; the router logits themselves (L_s × n × E) are "
              "collected layer by layer in forward and live as long as the model's output, which the loop decides "
              "(the mixtral-router-logits peaks above).", "",
              "Expert parallelism (`parallelism.expert`) and expert tensor parallelism (`parallelism.expert_tensor`) "
              "are modelled from their sources, not measured here (one CPU process), as is the most-loaded expert "
              "GPU's share of the tokens (`parallelism.expert_load`: a capacity factor or the expected imbalance). "
              "LoRA on the attention of Mixtral, Qwen3-MoE, Qwen2-MoE, gpt-oss, DeepSeek-V3 and DeepSeek-V2, with "
              "the router and the experts (and DeepSeek's dense first layers and shared experts) frozen, is "
              "measured in \"Fine-tuning\", as is peft's all-linear on Mixtral, Qwen3-MoE and DeepSeek (the router "
              "and the stacked experts adapted), gpt-oss and Qwen2-MoE. Not modelled yet: MoE under Megatron-LM, "
              "frozen parts "
              "of a trained DeepSeek or of a mixture with dense layers; under autocast DeepSeek (multi-head latent attention, routers that cast to fp32 "
              "themselves; gpt-oss is measured in its own section), frozen parts of a mixture "
              "and expert parallelism (its send buffer would hold fp32 tokens): trainmem refuses those rather than "
              "guess.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict, lambda rows, _: section(rows, run_peaks(peak_cases())))


if __name__ == "__main__":
    sys.exit(main())
