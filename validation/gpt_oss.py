"""gpt-oss measured: transformers' GptOssForCausalLM on CPU, counts and saved tensors to the byte.

Small models built from a GptOssConfig (no download): every layer a mixture of experts with biases and a clamped
SwiGLU, a router with a bias, attention with biases and a learned sink logit per head, sliding-window and
full-attention layers as ``layer_types`` says. Each case compares, to the byte, the parameter count the model class
has, and the tensors autograd keeps in each layer, the embedding and the head (validation/measure.py's recorder).
Under autocast (fp32 weights, the forward in ``torch.autocast("cpu", dtype=torch.bfloat16)``) each case also
compares the bytes of autocast's parameter casts that autograd keeps, per layer and for the head (`weight_copies`).
transformers runs gpt-oss with eager attention only on CPU (it has no sdpa path for the sinks; its flash path needs
CUDA kernels from the Hub), so every case is eager. The peak of two training steps is measured by the timeline
harness where it builds the model (`peak_cases`). gpt-oss-20b's and gpt-oss-120b's own counts are measured on the
meta device from their config.json numbers (`published_counts`).

    python -m validation.gpt_oss           # prints one line per case
    python -m validation.gpt_oss --write   # and publishes them in docs/VALIDATION.md ("gpt-oss")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import GptOssConfig, GptOssForCausalLM

from app import core
from app.core import activations as act
from app.core.architecture import Architecture, active_param_count, layer_tensors
from validation.measure import measured_parts, predicted_parts
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32, "autocast-bf16": torch.float32}
SECTION: Final = "## gpt-oss"
VOCAB: Final = 300
SLIDING, FULL = "sliding_attention", "full_attention"

# gpt-oss-20b's config.json (https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json), the fields
# GptOssForCausalLM reads; gpt-oss-120b's (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json) differs in
# num_hidden_layers (36, layer_types alternating likewise) and num_local_experts (128) only.
GPT_OSS_20B: Final = {
    "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False, "vocab_size": 201088,
    "layer_types": [SLIDING if index % 2 == 0 else FULL for index in range(24)],
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "rms_norm_eps": 1e-05, "router_aux_loss_coef": 0.9,
}
GPT_OSS_120B: Final = {**GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
                       "layer_types": [SLIDING if index % 2 == 0 else FULL for index in range(36)]}


@dataclass(frozen=True)
class Case:
    precision: str
    batch: int
    seq: int
    window: int = 16  # sliding_window; shorter than seq makes the sliding layers' mask differ
    layer_types: tuple[str, ...] = (SLIDING, FULL)
    experts: tuple[int, int] = (4, 2)  # num_local_experts, num_experts_per_tok
    kv_heads: int = 2
    bias: bool = True  # attention_bias
    attention_dropout: float = 0.0

    @property
    def label(self) -> str:
        kinds = "/".join("S" if kind == SLIDING else "F" for kind in self.layer_types)
        extra = ("" if self.bias else " no attention_bias") + (f" attention_dropout {self.attention_dropout}"
                                                                  if self.attention_dropout else "")
        return (f"E{self.experts[0]} k{self.experts[1]} a4/kv{self.kv_heads} layers {kinds} window {self.window}"
                f"{extra} {self.precision} eager b{self.batch} s{self.seq}")

    def config(self) -> GptOssConfig:
        return GptOssConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=len(self.layer_types),
            num_attention_heads=4, num_key_value_heads=self.kv_heads, head_dim=16, num_local_experts=self.experts[0],
            num_experts_per_tok=self.experts[1], sliding_window=self.window, layer_types=list(self.layer_types),
            attention_bias=self.bias, attention_dropout=self.attention_dropout, max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "rope_theta": 150000.0}, attn_implementation="eager")

    @property
    def autocast(self) -> bool:
        return self.precision.startswith("autocast")


CASES: Final = (
    *(Case(precision, batch, seq, window)
      for precision in ("bf16", "fp32")
      for batch, seq, window in ((2, 32, 16), (1, 48, 16), (3, 16, 64))),
    Case("bf16", 2, 24, 8, layer_types=(FULL, SLIDING, SLIDING), experts=(6, 3)),
    Case("fp32", 2, 32, 16, kv_heads=4, bias=False),
    Case("bf16", 1, 40, 16, kv_heads=1),
    Case("fp32", 2, 24, 16, attention_dropout=0.1),
    # Under autocast: fp32 weights, the forward in torch.autocast("cpu", dtype=torch.bfloat16).
    *(Case("autocast-bf16", batch, seq, window) for batch, seq, window in ((2, 32, 16), (1, 48, 16), (3, 16, 64))),
    Case("autocast-bf16", 2, 24, 8, layer_types=(FULL, SLIDING, SLIDING), experts=(6, 3)),
    Case("autocast-bf16", 2, 32, 16, kv_heads=4, bias=False),
    Case("autocast-bf16", 1, 40, 16, kv_heads=1),
    Case("autocast-bf16", 2, 24, 16, attention_dropout=0.1),
)


def weight_copies(arch: Architecture) -> dict[str, object]:
    """Autocast's bf16 casts of parameters that autograd keeps, by hand from torch's rules (as validation/moe.py's
    `weight_copies`): a layer keeps one cast of each 2-D weight its F.linear calls read, the attention's four
    projections and the router's (E × h); the biases' casts (attention, router) are addmm's first operand, which
    addmm does not keep; the sinks join the scores through torch.cat uncast; the experts' stacked weights and their
    biases reach torch._grouped_mm and an index uncast. The head keeps the output layer's cast (V × h). Two bytes
    an element."""
    cast = sum(x.elements for x in layer_tensors(arch) if len(x.shape) == 2 and not x.name.startswith("moe.experts."))
    return {"layers": [2 * cast] * arch.num_hidden_layers, "head": 2 * arch.vocab_size * arch.hidden_size}


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: GptOssForCausalLM(case.config()), dtype=DTYPES[case.precision], vocab=VOCAB,
                          batch=case.batch, seq=case.seq, autocast=case.autocast)


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention="eager", device="cpu",
                                precision=core.precision_preset(case.precision))
    layer = act.total_bytes(act.layer_activations(arch, setup))
    window = act.total_bytes(act.sliding_window_layer(arch, setup))
    return predicted_parts(arch, setup, [window if kind == SLIDING else layer for kind in case.layer_types],
                           weight_copies=weight_copies(arch) if case.autocast else None)


def published_counts() -> dict[str, tuple[int, int]]:
    """gpt-oss-20b's and gpt-oss-120b's parameters as GptOssForCausalLM counts them on the meta device, and
    trainmem's count for the same config.json."""
    counts = {}
    for name, config in (("gpt-oss-20b", GPT_OSS_20B), ("gpt-oss-120b", GPT_OSS_120B)):
        fields = {key: value for key, value in config.items() if key != "model_type"}
        with torch.device("meta"):
            model = GptOssForCausalLM(GptOssConfig(**fields))
        counts[name] = (sum(p.numel() for p in model.parameters()),
                        core.param_count(core.architecture_from_hf_config(config)))
    return counts


def peak_cases() -> tuple:
    """The timeline harness's gpt-oss family (validation/models.py): sliding-window and full layers alternating, the
    window shorter than the sequence."""
    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=256, vocab=2048, head_dim=64)
    return (tl.TimelineCase("gpt_oss", precision="bf16", seq=256, batch=2, size=size, attention="eager"),
            tl.TimelineCase("gpt_oss", precision="fp32", seq=128, batch=2, size=size, attention="eager"),
            # Under autocast (fp32 weights, bf16 activations).
            tl.TimelineCase("gpt_oss", precision="autocast-bf16", seq=256, batch=2, size=size, attention="eager"),
            tl.TimelineCase("gpt_oss", precision="autocast-bf16", seq=128, batch=2, size=size, attention="eager",
                            implementation="for-loop", loop="hf-trainer"),
            # Under full recomputation (a layer's backward, `ledger._Stage._gpt_oss_backward`).
            tl.TimelineCase("gpt_oss", precision="bf16", seq=256, batch=2, size=size, attention="eager",
                            checkpointing="full"))


def backward_cases() -> tuple:
    """A layer's backward (`ledger._Stage._gpt_oss_backward`): k from 1 to 4, I/h 0.5 to 4, 4 to 8 experts, 256 to
    1,024 tokens, with and without full recomputation; each layer event is compared with the most its interval held.
    The first case under recomputation is also in `peak_cases`."""
    from validation import timeline as tl
    from validation.models import Size

    def size(inter: int) -> Size:
        return Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=inter, vocab=2048, head_dim=64)

    shapes = (("gpt_oss", 256, 256), ("gpt_oss-top1", 256, 256), ("gpt_oss-e8-top4", 256, 256),
              ("gpt_oss", 512, 256), ("gpt_oss", 1024, 256), ("gpt_oss-top1", 1024, 256), ("gpt_oss", 256, 128),
              ("gpt_oss", 128, 512))
    return tuple(tl.TimelineCase(family, precision="bf16", seq=seq, batch=2, size=size(inter), attention="eager",
                                 checkpointing=checkpointing)
                 for checkpointing in ("full", "none") for family, inter, seq in shapes)


BACKWARD_TARGET_PCT: Final = 0.5


def backward_rows(cases: tuple) -> list[tuple[str, list[tuple[str, int, int, float]]]]:
    """Per case: each listed layer-backward event of step 2 as (event, predicted, measured peak, error %)."""
    from validation import peak

    out = []
    for case in cases:
        row = peak.run(case)
        events = [(e.event, e.predicted, e.measured_peak, 100.0 * (e.predicted - e.measured_peak) / e.measured_peak)
                  for e in row.events if e.step == 2 and e.event.startswith("backward: layer") and e.predicted]
        out.append((row.label, events))
    return out


def section(rows: list[tuple[Case, dict, dict]], peaks: list, counts: dict[str, tuple[int, int]],
            backward: list | None = None) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's GptOssForCausalLM on CPU (`python -m validation.gpt_oss`), eager attention (transformers "
             "has no sdpa path for gpt-oss, whose sinks sdpa cannot take; trainmem models sdpa as that eager default). "
             "Attention with sinks keeps Q and the repeated K and V, the int64 index of each row's maximum and the "
             "softmax over s + 1 columns (the sink's) in the activations' dtype, whose view without the sink column "
             "the product with V keeps too. The router keeps its input, its top-k indices and the softmax over the k "
             "logits; the experts' biases add the sorted expert ids their gather keeps; the clamped SwiGLU keeps five "
             "n·k·I tensors (clamped gate, sigmoid, up + 1, their gated product and the down projection's input) "
             "where Mixtral's keeps two. RMSNorm keeps its normalised tensor in fp32 (the weight multiplies it "
             "before the cast), and the rotary cos and sin are d/2 wide. Sliding-window layers keep what full ones "
             "do under eager attention (the mask is added, not kept). Compared to the byte with the parameter count "
             "and each layer's, the embedding's and the head's saved tensors, and under autocast the bf16 weight "
             f"copies autograd keeps. **{exact} of {len(rows)} cases exact.**", "",
             "| case | params | active params | layer B (each) | embedding B | head B | weight copies B (layer / head) "
             "| |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        arch = core.architecture_from_hf_config(case.config().to_dict())
        layers = " / ".join(f"{value:,}" for value in measured["layers"])  # type: ignore[attr-defined]
        copies = measured.get("weight_copies")
        copies_text = f"{copies['layers'][0]:,} / {copies['head']:,}" if isinstance(copies, dict) else "–"
        lines.append(f"| {case.label} | {measured['params']:,} | {active_param_count(arch):,} | {layers} | "
                     f"{measured['embedding']:,} | {measured['head']:,} | {copies_text} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    lines += ["", "Under autocast (`autocast-bf16`: fp32 weights, the forward in "
              "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`) the sinks are fp32 parameters, and torch.cat (on "
              "autocast's promote list) joins the bf16 scores to them in fp32: the softmax over s + 1 columns is fp32, "
              "and on CPU so is the dropout's mask. The probabilities' cast to V's dtype (bf16, v_proj's output) is a "
              "copy the product with V keeps beside it. Q and K come out of the rotary multiply in fp32 (cos and sin "
              "follow the fp32 residual stream) and the first matmul keeps its own bf16 casts of them, as many bytes "
              "as a bf16 model keeps. The router keeps its own bf16 cast of the fp32 norm output and returns bf16 "
              "logits, so its top-k softmax and the routing weights are bf16; the experts run the grouped_mm path in "
              "fp32 (as Mixtral's do, \"Mixture of experts\"), all their n·k-row tensors fp32. The weight copies are "
              "one bf16 cast of each 2-D weight an F.linear reads (the attention's four projections and the router's); "
              "the biases' casts are not kept (addmm keeps no bias), and the sinks and the experts' weights are not "
              "cast."]
    if peaks:
        lines += ["", "The peak of two training steps (the timeline harness):", "",
                  *peak_table(peaks)]
    if backward:
        worst = max(abs(error) for _, events in backward for *_, error in events)
        lines += ["", "A layer's backward (`backward_cases`, bf16, trained in full): the largest of its moments, beyond "
                  "the layer's kept (or rebuilt) tensors and the gradients of the layers whose backward has ended "
                  "(`_gpt_oss_backward`): the routed tokens' gradients; inside the experts' MLP backward (under "
                  "recomputation also before the down projections' gradient is written); the post-attention norm's "
                  "fp32 backward once the experts' tensors are freed, which decides at k = 1; the softmax backward, "
                  "and under recomputation the rebuilt attention's softmax with the scores, the scores with the sinks' "
                  "column and less their maximum at once, which decide for long sequences. Under recomputation "
                  "transformers' two eager masks (sliding-window and full-attention, b × 1 × s × s each) are kept to "
                  "the layers' backward. Each listed event of step 2 against the most its interval held; target "
                  f"{BACKWARD_TARGET_PCT}%, worst **{worst:+.3f}%** in absolute value:", "",
                  "| case | event | predicted B | measured B | error |", "| --- | --- | ---: | ---: | ---: |"]
        for label, events in backward:
            for event, predicted, measured, error in events:
                lines.append(f"| {label} | {event} | {predicted:,} | {measured:,} | {error:+.3f}% |")
        lines += ["", "Before this count the layer events were 3.5 to 20 n·h·w bytes high (the fp32 gradient of "
                  "the probabilities other eager attention makes, and every gradient of the layer, counted at once "
                  "with all its tensors), and under recomputation the peak 2.1% high. Not counted: the forward's own "
                  "transient in the attention (the same three s × (s + 1) tensors, beside the layers' kept tensors): "
                  "without recomputation at 2,048 positions it holds the peak, 4.1% above the estimate (the H200's "
                  "gpt-oss-20b, with LoRA at 4,096 positions, peaks at the loss's backward: \"On a GPU\"). With 1,024 "
                  "positions and more under recomputation, the second layer's backward (a full-attention layer's, "
                  "not listed) holds the peak, the full-attention mask still kept: the first layer's event stands for "
                  "it (the mask less one layer's gradients, where more), within 0.9% of it at 1,024 positions. fp32, "
                  "autocast, LoRA and accumulated micro-batches keep the earlier, higher count."]
    lines += ["", "gpt-oss-20b and gpt-oss-120b from their config.json numbers "
              "(https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json, "
              "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json), GptOssForCausalLM on the meta device "
              "against trainmem:", "",
              "| model | transformers | trainmem | active per token (trainmem) | |",
              "| --- | ---: | ---: | ---: | --- |"]
    for name, (measured, predicted) in counts.items():
        config = GPT_OSS_20B if name == "gpt-oss-20b" else GPT_OSS_120B
        active = active_param_count(core.architecture_from_hf_config(config))
        lines.append(f"| {name} | {measured:,} | {predicted:,} | {active:,} | "
                     f"{'exact' if measured == predicted else 'differs'} |")
    lines += ["", "OpenAI publishes 20.91B and 116.83B total, 3.61B and 5.13B active (arXiv:2508.10925); the active "
              "figures leave out the embedding (201,088 × 2,880 = 579,133,440), which trainmem counts as used by every "
              "token. The checkpoints store the experts' matrices in MXFP4 (`quantization_config`); training loads them "
              "dequantized (transformers' `Mxfp4Config(dequantize=True)`) to the training dtype, so the count and the "
              "bytes follow the estimate's precision, not the checkpoint's format. The rotary scaling (YaRN) and "
              "`rope_theta` change no tensor kept. Not measured: the flash path (kernels from the Hub, CUDA only), "
              "modelled as a fused kernel's Q, K, V, output and log-sum-exp. LoRA on its attention, the router and "
              "the experts frozen, is measured in \"Fine-tuning\". gpt-oss is refused under Megatron-LM and Liger.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict,
                      lambda rows, counts: section(rows, run_peaks(peak_cases()), counts, backward_rows(backward_cases())),
                      counts=published_counts)


if __name__ == "__main__":
    sys.exit(main())
