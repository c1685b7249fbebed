"""Multi-head latent attention measured: transformers' DeepSeek-V3 (DeepseekV3ForCausalLM) on CPU.

Small models built from a DeepseekV3Config (no download): the first layer dense (``first_k_dense_replace``),
the others mixtures of experts with shared experts and group-limited routing. Each case compares, to the byte,
the parameter count the model class has, and the tensors autograd keeps in each layer, the embedding and the
head (validation/measure.py's recorder). DeepSeek-V3's multi-token prediction module is not part of
DeepseekV3ForCausalLM, so neither side counts it. The peak of two training steps is measured by the timeline
harness where it builds the model (`peak_cases`).

    python -m validation.mla           # prints one line per case
    python -m validation.mla --write   # and publishes them in docs/VALIDATION.md ("Multi-head latent attention")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

from app import core
from app.core import activations as act
from app.core.architecture import active_param_count
from validation.measure import measured_parts, predicted_parts
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32}
SECTION: Final = "## Multi-head latent attention (DeepSeek-V3)"
VOCAB: Final = 300
LAYERS: Final = 3
DENSE: Final = 1


@dataclass(frozen=True)
class Case:
    precision: str
    attention: str
    batch: int
    seq: int
    q_lora_rank: int | None = 32
    shared: int = 1
    norm_topk_prob: bool = True
    groups: tuple[int, int] = (2, 1)  # n_group, topk_group
    experts: tuple[int, int] = (8, 2)  # n_routed_experts, num_experts_per_tok
    bias: bool = False  # attention_bias

    @property
    def label(self) -> str:
        q = f"q_lora {self.q_lora_rank}" if self.q_lora_rank else "q_proj"
        norm = ("" if self.norm_topk_prob else " no norm_topk_prob") + (" attention_bias" if self.bias else "")
        return (f"E{self.experts[0]} k{self.experts[1]} groups {self.groups[0]}/{self.groups[1]} shared "
                f"{self.shared} {q}{norm} {self.precision} {self.attention} b{self.batch} s{self.seq}")

    def config(self) -> DeepseekV3Config:
        return DeepseekV3Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=LAYERS, first_k_dense_replace=DENSE, num_attention_heads=4, num_key_value_heads=4,
            n_shared_experts=self.shared, n_routed_experts=self.experts[0], num_experts_per_tok=self.experts[1],
            n_group=self.groups[0], topk_group=self.groups[1], norm_topk_prob=self.norm_topk_prob,
            q_lora_rank=self.q_lora_rank, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            attention_bias=self.bias, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, attn_implementation=self.attention)


CASES: Final = (
    *(Case(precision, attention, batch, seq, q_lora)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for batch, seq, q_lora in ((2, 32, 32), (1, 48, 32), (3, 16, None))),
    *(Case(precision, "sdpa", 2, 24, 32, shared=2, norm_topk_prob=False, groups=(4, 2), experts=(8, 3))
      for precision in ("bf16", "fp32")),
    Case("bf16", "eager", 1, 40, None, shared=0, groups=(1, 1), experts=(6, 2)),
    Case("fp32", "sdpa", 2, 16, 32, bias=True),
)


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: DeepseekV3ForCausalLM(case.config()), dtype=DTYPES[case.precision], vocab=VOCAB, batch=case.batch,
                          seq=case.seq)


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    dense = act.total_bytes(act.layer_activations(arch, setup, dense=True))
    sparse = act.total_bytes(act.layer_activations(arch, setup))
    return predicted_parts(arch, setup, [dense] * arch.dense_layers + [sparse] * (arch.num_hidden_layers - arch.dense_layers))


def peak_cases() -> tuple:
    """The timeline harness's DeepSeek-V3 families (validation/models.py): every layer a mixture of experts, and
    the first layer dense as DeepSeek-V3's first three are."""
    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=4, intermediate=512, vocab=2048, head_dim=64)
    return (tl.TimelineCase("deepseek_v3", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("deepseek_v3", precision="fp32", seq=128, batch=2, size=size, attention="eager"),
            tl.TimelineCase("deepseek_v3-dense-first", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("deepseek_v3-dense-first", precision="fp32", seq=128, batch=2, size=size,
                            attention="eager"))


def section(rows: list[tuple[Case, dict, dict]], peaks: list) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's DeepseekV3ForCausalLM on CPU (`python -m validation.mla`), three layers: the first "
             "dense, the others mixtures of experts. Multi-head latent attention keeps the fp32 input, reciprocal "
             "RMS and normalised tensor of q_a_layernorm and kv_a_layernorm and the inputs of q_b_proj and "
             "kv_b_proj; Q and K of a·(d_n + d_r) per token, V of a·d_v (at micro-batch 1 the whole kv_b_proj "
             "output, which V views), and the probabilities. CPU sdpa takes the math path, because the value "
             "heads are narrower than the query and key heads. The router keeps its fp32 input and sigmoid "
             "scores, the group and expert indices and the group mask, and in a bf16 model the fp32 cast of its "
             "weight (E × h) that its linear runs on; the shared experts keep a gated MLP's "
             "tensors. Compared to the byte with the parameter count and each layer's, the embedding's and the "
             f"head's saved tensors. **{exact} of {len(rows)} cases exact.**", "",
             "| case | params | active params | layer B (dense / sparse) | embedding B | head B | |",
             "| --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        arch = core.architecture_from_hf_config(case.config().to_dict())
        layers = measured["layers"]
        lines.append(f"| {case.label} | {measured['params']:,} | {active_param_count(arch):,} | "
                     f"{layers[0]:,} / {layers[-1]:,} | {measured['embedding']:,} | {measured['head']:,} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    if peaks:
        lines += ["", "The peak of two training steps (the timeline harness):", "",
                  *peak_table(peaks)]
    lines += ["", "DeepSeek-V3 itself (config.json, https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json, "
              "whose numbers are DeepseekV3Config's defaults): DeepseekV3ForCausalLM on the meta device has "
              "671,026,404,352 parameters and trainmem counts the same; 37,552,282,624 are used per token (8 of "
              "256 routed experts in each of the 58 sparse layers). The multi-token prediction module "
              "(`num_nextn_predict_layers`, the checkpoint's layer 61) is not part of that class and is counted by "
              "neither. The router's `e_score_correction_bias` is a buffer (256 per sparse layer), not a parameter.",
              "",
              "The estimate's stages count a mixture's dense first layers with their own parameters and saved "
              "tensors (`states.dense_layers_on`); in a pipeline whose middle stages hold some of them, the middle "
              "kind is counted as its sparse stages, the heavier ones. "
              "Not measured: CUDA's memory-efficient kernel, which sdpa picks for MLA there (modelled). Refused "
              "rather than guessed: tensor parallelism for MLA, Megatron-LM, "
              "Liger, autocast and fine-tuning. DeepSeek-V2, whose rotary embedding (complex numbers) and softmax "
              "router keep other tensors, is measured in its own section (\"DeepSeek-V2\").", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict, lambda rows, _: section(rows, run_peaks(peak_cases())))


if __name__ == "__main__":
    sys.exit(main())
