"""DeepSeek-V2 measured: transformers' DeepseekV2ForCausalLM on CPU, counts and saved tensors to the byte.

Small models built from a DeepseekV2Config (no download): the first layer dense (``first_k_dense_replace``), the
others mixtures of experts with shared experts and softmax routing, greedy or group-limited (``topk_method``);
multi-head latent attention with a low-rank query (``q_lora_rank``) or a plain q_proj (DeepSeek-V2-Lite's), and
rotary positions through complex numbers. Each case compares, to the byte, the parameter count the model class has,
and the tensors autograd keeps in each layer, the embedding and the head (validation/measure.py's recorder). The
peak of two training steps is measured by the timeline harness where it builds the model (`peak_cases`).
DeepSeek-V2's and DeepSeek-V2-Lite's own counts are measured on the meta device from their config.json numbers
(`published_counts`).

    python -m validation.deepseek_v2           # prints one line per case
    python -m validation.deepseek_v2 --write   # and publishes them in docs/VALIDATION.md ("DeepSeek-V2")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

from app import core
from app.core import activations as act
from app.core.architecture import active_param_count
from validation.measure import measured_parts, predicted_parts
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32}
SECTION: Final = "## DeepSeek-V2"
VOCAB: Final = 300
LAYERS: Final = 3
DENSE: Final = 1
GREEDY, GROUPED = "greedy", "group_limited_greedy"

# DeepSeek-V2-Lite's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json), the
# fields DeepseekV2ForCausalLM reads and those it ignores (scoring_func, moe_layer_freq, aux_loss_alpha, seq_aux);
# DeepSeek-V2's (https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json) differs where V2 says.
YARN: Final = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
               "original_max_position_embeddings": 4096, "type": "yarn"}
DEEPSEEK_V2_LITE: Final = {
    "model_type": "deepseek_v2", "attention_bias": False, "attention_dropout": 0.0, "aux_loss_alpha": 0.001,
    "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1,
    "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1,
    "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_scaling": YARN,
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": GREEDY, "use_cache": True, "v_head_dim": 128,
    "vocab_size": 102400,
}
DEEPSEEK_V2: Final = {
    **DEEPSEEK_V2_LITE, "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_group": 8,
    "n_routed_experts": 160, "num_attention_heads": 128, "num_hidden_layers": 60, "num_key_value_heads": 128,
    "q_lora_rank": 1536, "routed_scaling_factor": 16.0, "topk_group": 3, "topk_method": GROUPED,
}


@dataclass(frozen=True)
class Case:
    precision: str
    attention: str
    batch: int
    seq: int
    q_lora_rank: int | None = 32
    method: str = GROUPED  # topk_method
    groups: tuple[int, int] = (4, 2)  # n_group, topk_group (read by group_limited_greedy only)
    experts: tuple[int, int] = (8, 2)  # n_routed_experts, num_experts_per_tok
    shared: int = 2
    bias: bool = False  # attention_bias

    @property
    def label(self) -> str:
        q = f"q_lora {self.q_lora_rank}" if self.q_lora_rank else "q_proj"
        routing = f"{self.method} {self.groups[0]}/{self.groups[1]}" if self.method == GROUPED else self.method
        return (f"E{self.experts[0]} k{self.experts[1]} {routing} shared {self.shared} {q}"
                f"{' attention_bias' if self.bias else ''} {self.precision} {self.attention} b{self.batch} s{self.seq}")

    def config(self) -> DeepseekV2Config:
        return DeepseekV2Config(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=LAYERS, first_k_dense_replace=DENSE, num_attention_heads=4, num_key_value_heads=4,
            n_shared_experts=self.shared, n_routed_experts=self.experts[0], num_experts_per_tok=self.experts[1],
            topk_method=self.method, n_group=self.groups[0], topk_group=self.groups[1], routed_scaling_factor=2.0,
            q_lora_rank=self.q_lora_rank, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            attention_bias=self.bias, max_position_embeddings=256, bos_token_id=0, eos_token_id=1,
            attn_implementation=self.attention)


CASES: Final = (
    *(Case(precision, attention, batch, seq, q_lora, method)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for batch, seq, q_lora, method in ((2, 32, 32, GROUPED), (1, 48, None, GREEDY), (3, 16, None, GROUPED),
                                         (2, 24, 32, GREEDY))),
    *(Case(precision, "sdpa", 2, 24, None, GROUPED, groups=(1, 1), experts=(6, 3), shared=1)
      for precision in ("bf16", "fp32")),
    Case("bf16", "eager", 1, 40, 32, GREEDY, shared=0),
    Case("fp32", "sdpa", 2, 16, 32, GROUPED, groups=(8, 3), bias=True),
)


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: DeepseekV2ForCausalLM(case.config()), dtype=DTYPES[case.precision], vocab=VOCAB,
                          batch=case.batch, seq=case.seq)


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    dense = act.total_bytes(act.layer_activations(arch, setup, dense=True))
    sparse = act.total_bytes(act.layer_activations(arch, setup))
    layers = [dense] * arch.dense_layers + [sparse] * (arch.num_hidden_layers - arch.dense_layers)
    return predicted_parts(arch, setup, layers)


def published_counts() -> dict[str, tuple[int, int]]:
    """DeepSeek-V2-Lite's and DeepSeek-V2's parameters as DeepseekV2ForCausalLM counts them on the meta device, and
    trainmem's count for the same config.json."""
    counts = {}
    for name, config in (("DeepSeek-V2-Lite", DEEPSEEK_V2_LITE), ("DeepSeek-V2", DEEPSEEK_V2)):
        fields = {key: value for key, value in config.items() if key != "model_type"}
        with torch.device("meta"):
            model = DeepseekV2ForCausalLM(DeepseekV2Config(**fields))
        counts[name] = (sum(p.numel() for p in model.parameters()),
                        core.param_count(core.architecture_from_hf_config(config)))
    return counts


def peak_cases() -> tuple:
    """The timeline harness's DeepSeek-V2 families (validation/models.py): the first layer dense as in both published
    models, group-limited routing with a low-rank query, and greedy routing with a plain q_proj (V2-Lite's)."""
    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=4, intermediate=512, vocab=2048, head_dim=64)
    return tuple(tl.TimelineCase(family, precision=precision, seq=seq, batch=2, size=size, attention=attention)
                 for family in ("deepseek_v2", "deepseek_v2-lite")
                 for precision, seq, attention in (("bf16", 256, "sdpa"), ("fp32", 128, "eager")))


def section(rows: list[tuple[Case, dict, dict]], peaks: list, counts: dict[str, tuple[int, int]]) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's DeepseekV2ForCausalLM on CPU (`python -m validation.deepseek_v2`), three layers: the "
             "first dense, the others mixtures of experts with shared experts. Multi-head latent attention keeps what "
             "DeepSeek-V3's does (\"Multi-head latent attention\" above), except for the rotary embedding: the "
             "frequencies are one 1 × s × d_r/2 complex64 tensor (torch.polar), which every layer's complex multiply "
             "keeps, in place of cos and sin; the fp32 views of Q's and K's rotary parts keep nothing more. The router "
             "keeps its fp32 input and softmax probabilities (in a bf16 model also the fp32 cast of its weight) and "
             "the int64 indices of the top-k; with "
             "group_limited_greedy also the index of each group's best expert, the chosen groups' indices and the "
             "bool mask of the other groups' experts. The k weights are not renormalised (the class does not read "
             "norm_topk_prob). Compared to the byte with the parameter count and each layer's, the embedding's and "
             f"the head's saved tensors. **{exact} of {len(rows)} cases exact.**", "",
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
    lines += ["", "DeepSeek-V2-Lite and DeepSeek-V2 from their config.json numbers "
              "(https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json, "
              "https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json), DeepseekV2ForCausalLM on the "
              "meta device against trainmem:", "",
              "| model | transformers | trainmem | active per token (trainmem) | |",
              "| --- | ---: | ---: | ---: | --- |"]
    for name, (measured, predicted) in counts.items():
        config = DEEPSEEK_V2_LITE if name == "DeepSeek-V2-Lite" else DEEPSEEK_V2
        active = active_param_count(core.architecture_from_hf_config(config))
        lines.append(f"| {name} | {measured:,} | {predicted:,} | {active:,} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    lines += ["", "DeepSeek publishes 236B total and 21B activated per token for DeepSeek-V2, 15.7B and 2.4B for "
              "DeepSeek-V2-Lite (arXiv:2405.04434); trainmem counts the embedding as used by every token. "
              "`routed_scaling_factor`, the rotary scaling (YaRN) and `rope_theta` change no tensor kept. Not "
              "measured: CUDA's memory-efficient kernel, which sdpa picks for MLA there (modelled as for "
              "DeepSeek-V3). Refused rather than guessed, as for DeepSeek-V3: tensor parallelism for MLA, "
              "Megatron-LM, Liger, autocast and fine-tuning; and `mlp_bias`, which gives the dense and shared MLPs "
              "biases.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict,
                      lambda rows, counts: section(rows, run_peaks(peak_cases()), counts), counts=published_counts)


if __name__ == "__main__":
    sys.exit(main())
