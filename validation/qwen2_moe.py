"""Qwen2-MoE measured: transformers' Qwen2MoeForCausalLM on CPU (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).

Small models built from a Qwen2MoeConfig (no download): query, key and value projections with biases, a softmax
router, and beside the routed experts one shared expert with its own width and a sigmoid gate; some cases keep
their first layers dense (``mlp_only_layers``, or ``decoder_sparse_step`` over two layers). Each case compares, to
the byte, the parameter count the model class has, and the tensors autograd keeps in each layer, the embedding and
the head (validation/measure.py's recorder).

    python -m validation.qwen2_moe           # prints one line per case
    python -m validation.qwen2_moe --write   # and publishes them in docs/VALIDATION.md ("Qwen2-MoE")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

from app import core
from app.core import activations as act
from app.core.architecture import active_param_count
from validation.measure import measured_parts, predicted_parts
from validation.sections import run_module

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32}
SECTION: Final = "## Qwen2-MoE"
VOCAB: Final = 300

# Qwen2MoeForCausalLM on the meta device, transformers 5.24, for the two published checkpoints' config.json
# (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json,
# https://huggingface.co/Qwen/Qwen2-57B-A14B/blob/main/config.json): the fields the class reads.
PUBLISHED: Final = {
    "Qwen1.5-MoE-A2.7B": {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048,
                          "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
                          "num_key_value_heads": 16, "moe_intermediate_size": 1408,
                          "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
                          "max_position_embeddings": 8192, "decoder_sparse_step": 1, "norm_topk_prob": False,
                          "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 32768,
                          "max_window_layers": 21, "hidden_act": "silu"},
    "Qwen2-57B-A14B": {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 3584,
                       "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                       "num_key_value_heads": 4, "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480,
                       "num_experts": 64, "num_experts_per_tok": 8, "max_position_embeddings": 131072,
                       "decoder_sparse_step": 1, "norm_topk_prob": False, "tie_word_embeddings": False,
                       "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28,
                       "hidden_act": "silu"},
}


@dataclass(frozen=True)
class Case:
    precision: str
    attention: str
    batch: int
    seq: int
    experts: tuple[int, int] = (6, 2)  # num_experts, num_experts_per_tok
    norm_topk_prob: bool = False
    mlp_only_layers: tuple[int, ...] = ()
    sparse_step: int = 1
    layers: int = 2

    @property
    def label(self) -> str:
        dense = f" mlp_only {list(self.mlp_only_layers)}" if self.mlp_only_layers else ""
        step = f" sparse_step {self.sparse_step}" if self.sparse_step > 1 else ""
        norm = " norm_topk_prob" if self.norm_topk_prob else ""
        return (f"E{self.experts[0]} k{self.experts[1]}{norm}{dense}{step} L{self.layers} {self.precision} "
                f"{self.attention} b{self.batch} s{self.seq}")

    def config(self) -> Qwen2MoeConfig:
        return Qwen2MoeConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            shared_expert_intermediate_size=80, num_hidden_layers=self.layers, num_attention_heads=4,
            num_key_value_heads=2, num_experts=self.experts[0], num_experts_per_tok=self.experts[1],
            norm_topk_prob=self.norm_topk_prob, mlp_only_layers=list(self.mlp_only_layers),
            decoder_sparse_step=self.sparse_step, max_position_embeddings=256, attn_implementation=self.attention)


CASES: Final = (
    *(Case(precision, attention, batch, seq)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for batch, seq in ((2, 32), (1, 48))),
    *(Case(precision, "sdpa", 2, 24, experts=(8, 3), norm_topk_prob=True) for precision in ("bf16", "fp32")),
    *(Case(precision, attention, 2, 16, mlp_only_layers=(0,), layers=3)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")),
    Case("bf16", "eager", 3, 16, experts=(4, 1), sparse_step=2),
)


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: Qwen2MoeForCausalLM(case.config()), dtype=DTYPES[case.precision], vocab=VOCAB, batch=case.batch,
                          seq=case.seq)


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    dense = act.total_bytes(act.layer_activations(arch, setup, dense=True))
    sparse = act.total_bytes(act.layer_activations(arch, setup))
    return predicted_parts(arch, setup, [dense] * arch.dense_layers + [sparse] * (arch.num_hidden_layers - arch.dense_layers))


def published_counts() -> dict[str, tuple[int, int]]:
    """Each published checkpoint's parameter count as Qwen2MoeForCausalLM has it on the meta device, and trainmem's."""
    counts = {}
    for name, config in PUBLISHED.items():
        with torch.device("meta"):
            model = Qwen2MoeForCausalLM(Qwen2MoeConfig(**{k: v for k, v in config.items() if k != "model_type"}))
        counts[name] = (sum(p.numel() for p in model.parameters()),
                        core.param_count(core.architecture_from_hf_config(config)))
    return counts


def section(rows: list[tuple[Case, dict, dict]], counts: dict[str, tuple[int, int]]) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's Qwen2MoeForCausalLM on CPU (`python -m validation.qwen2_moe`): the router keeps "
             "its input, fp32 softmax and top-k indices (and with `norm_topk_prob` the k weights and their sum), the "
             "routed experts what Qwen3-MoE's keep; the shared expert a gated MLP's tensors of "
             "`shared_expert_intermediate_size`, its gate's sigmoid (n × 1) and its output (n × h), which the "
             "gate's product keeps. Dense layers (`mlp_only_layers`, `decoder_sparse_step`) keep a dense MLP's. "
             "Compared to the byte with the parameter count and each layer's, the embedding's and the head's saved "
             f"tensors. **{exact} of {len(rows)} cases exact.**", "",
             "| case | params | active params | layer B (first / last) | embedding B | head B | |",
             "| --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        arch = core.architecture_from_hf_config(case.config().to_dict())
        layers = measured["layers"]
        lines.append(f"| {case.label} | {measured['params']:,} | {active_param_count(arch):,} | "
                     f"{layers[0]:,} / {layers[-1]:,} | {measured['embedding']:,} | {measured['head']:,} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    lines += ["", "The published checkpoints (config.json), Qwen2MoeForCausalLM on the meta device:", "",
              "| model | transformers | trainmem | active per token (trainmem) |", "| --- | ---: | ---: | ---: |"]
    for name, (measured_count, counted) in counts.items():
        active = active_param_count(core.architecture_from_hf_config(PUBLISHED[name]))
        lines.append(f"| {name} | {measured_count:,} | {counted:,} | {active:,} |")
    lines += ["", "A config whose dense layers are not its first ones (e.g. `decoder_sparse_step` 2 over more than two "
              "layers) is refused, naming the key: the estimate's stages count a mixture's dense layers as its first "
              "k. Sliding-window attention (`use_sliding_window`, off in both checkpoints) is refused too. Not "
              "measured here: the peak of two steps (the timeline harness has no Qwen2-MoE family yet).", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict, section, counts=published_counts)


if __name__ == "__main__":
    sys.exit(main())
