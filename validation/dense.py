"""The newer dense layouts measured: transformers' Gemma 3 (text) and OLMo 2 on CPU.

Small models built from a config (no download); each case compares, to the byte, the parameter count the
model class has, and the tensors autograd keeps in each layer, the embedding and the head
(validation/measure.py's recorder). Gemma 3's layers alternate between sliding-window and full attention,
two of each, so that each kind's rotary cos and sin are shared (model-level, as trainmem counts them); the
sequences longer than the window show what sdpa keeps for a sliding-window layer
(`app.core.activations.sliding_window_layer`). The peak of two training steps is measured by the
timeline harness (`peak_cases`) as for the other families.

    python -m validation.dense           # prints one line per case
    python -m validation.dense --write   # and publishes them in docs/VALIDATION.md ("Gemma 3 and OLMo 2")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, Olmo2Config, Olmo2ForCausalLM, PretrainedConfig

from app import core
from app.core import activations as act
from validation.measure import measured_parts, predicted_parts
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32}
SECTION: Final = "## Gemma 3 and OLMo 2"
MODELS: Final = {"gemma3": Gemma3ForCausalLM, "olmo2": Olmo2ForCausalLM}
LAYER_TYPES: Final = ("sliding_attention", "full_attention", "sliding_attention", "full_attention")
VOCAB: Final = 300


@dataclass(frozen=True)
class Case:
    family: str  # a key of MODELS
    precision: str
    attention: str
    batch: int
    seq: int
    kv_heads: int = 2
    window: int = 4096  # Gemma 3's sliding window
    softcap: float | None = None  # Gemma 3's final_logit_softcapping

    @property
    def label(self) -> str:
        window = f" window {self.window}" if self.family == "gemma3" and self.window < self.seq else ""
        softcap = f" softcap {self.softcap:g}" if self.softcap else ""
        return (f"{self.family} kv{self.kv_heads}{window}{softcap} {self.precision} {self.attention} "
                f"b{self.batch} s{self.seq}")

    def config(self) -> PretrainedConfig:
        shape = dict(hidden_size=64, num_hidden_layers=len(LAYER_TYPES), num_attention_heads=4,
                     num_key_value_heads=self.kv_heads, intermediate_size=96, vocab_size=VOCAB,
                     max_position_embeddings=256, attn_implementation=self.attention)
        if self.family == "gemma3":
            return Gemma3TextConfig(head_dim=32, sliding_window=self.window, layer_types=list(LAYER_TYPES),
                                    final_logit_softcapping=self.softcap, **shape)
        return Olmo2Config(eos_token_id=1, **shape)  # Olmo2Config's 50279 lies outside this vocabulary


CASES: Final = (
    *(Case("gemma3", precision, attention, batch, seq, kv)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for batch, seq, kv in ((2, 32, 2), (1, 48, 4), (3, 16, 1))),
    *(Case("gemma3", precision, attention, 2, 32, kv, window=16)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager") for kv in (1, 2, 4)),
    Case("gemma3", "bf16", "sdpa", 2, 32, softcap=30.0),
    *(Case("olmo2", precision, attention, batch, seq, kv)
      for precision in ("bf16", "fp32") for attention in ("sdpa", "eager")
      for batch, seq, kv in ((2, 32, 2), (1, 48, 4), (3, 16, 1))),
)


def measure(case: Case) -> dict[str, object]:
    return measured_parts(lambda: MODELS[case.family](case.config()), dtype=DTYPES[case.precision], vocab=VOCAB, batch=case.batch,
                          seq=case.seq)


def predict(case: Case) -> dict[str, object]:
    config = case.config().to_dict()
    arch = core.architecture_from_hf_config(config)
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    layer = act.total_bytes(act.layer_activations(arch, setup))
    sliding = act.total_bytes(act.sliding_window_layer(arch, setup))
    kinds = config.get("layer_types") or ["full_attention"] * arch.num_hidden_layers
    return predicted_parts(arch, setup, [sliding if kind == "sliding_attention" else layer for kind in kinds])


def peak_cases() -> tuple:
    from validation import timeline as tl
    from validation.models import Size

    size = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=2048, head_dim=64)
    return (tl.TimelineCase("gemma3", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("gemma3", precision="fp32", seq=128, batch=2, size=size, attention="eager"),
            tl.TimelineCase("olmo2", precision="bf16", seq=256, batch=2, size=size),
            tl.TimelineCase("olmo2", precision="fp32", seq=128, batch=2, size=size, attention="eager",
                            implementation="for-loop", loop="hf-trainer"),
            # Trained in full at long sequences with a small vocabulary, where a layer's backward decides the peak:
            # the MLP's working set, the fp32 norm after the MLP before it, and once without recomputation.
            tl.TimelineCase("olmo2", precision="bf16", seq=1024, batch=1, size=_long(1536), checkpointing="full"),
            tl.TimelineCase("gemma3", precision="fp32", seq=1024, batch=1, size=_long(512), checkpointing="full"),
            tl.TimelineCase("gemma3", precision="fp32", seq=1024, batch=1, size=_long(1536)),
            # GPT-2's MLP, without a gate: trained in full, no dropout.
            tl.TimelineCase("gpt2-no-dropout", precision="bf16", seq=1024, batch=1, size=_long(1024),
                            checkpointing="full"),
            # Two micro-batches a step: from the second on every gradient exists, none is left to write.
            tl.TimelineCase("llama", precision="bf16", seq=1024, batch=1, size=_long(1536), checkpointing="full",
                            accumulation=2),
            tl.TimelineCase("olmo2", precision="bf16", seq=1024, batch=1, size=_long(1024), checkpointing="full",
                            accumulation=2))


def unmodelled_cases() -> tuple:
    """Where a layer's backward decides the peak but its working set is not modelled (dropout): published with the estimate's warning, not held to 2%."""
    from validation import timeline as tl

    size = _long(1024)
    return (tl.TimelineCase("gpt2", precision="bf16", seq=1024, batch=1, size=size, checkpointing="full"),
            tl.TimelineCase("llama-attn-dropout", precision="bf16", seq=1024, batch=1, size=size,
                            checkpointing="full"))


def _long(intermediate: int):
    from validation.models import Size

    return Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=intermediate, vocab=512, head_dim=64)


def section(rows: list[tuple[Case, dict, dict]], peaks: list, unmodelled: list | None = None) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's Gemma 3 (Gemma3ForCausalLM) and OLMo 2 on CPU (`python -m validation.dense`), four "
             "layers each, Gemma 3's alternating sliding-window and full attention. Gemma 3: four RMSNorms a layer "
             "and one over each head of Q and K, each computing in fp32 and keeping its fp32 normalised tensor and "
             "(1 + weight); a pair of rotary cos and sin for each kind of layer. OLMo 2: no norm before attention "
             "or the MLP but one after each (its fp32 input, reciprocal RMS and fp32 normalised tensor), Q and K "
             "normalised over the whole projection (one reciprocal RMS per token), cos and sin kept in fp32. "
             f"Compared to the byte with the parameter count and each layer's, the embedding's and the head's saved "
             f"tensors. **{exact} of {len(rows)} cases exact.**", "",
             "| case | params | layer B (each) | embedding B | head B | |",
             "| --- | ---: | --- | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        layers = measured["layers"]
        shown = f"{layers[0]:,}" if len(set(layers)) == 1 else " / ".join(f"{value:,}" for value in layers)
        lines.append(f"| {case.label} | {measured['params']:,} | {shown} | {measured['embedding']:,} | "
                     f"{measured['head']:,} | {'exact' if measured == predicted else 'differs'} |")
    lines += ["", "The peak of two training steps (the timeline harness):", "",
              *peak_table(peaks)]
    lines += ["", "Trained in full with a small vocabulary and 1,024 tokens (the last six rows), a layer's backward "
              "decides the peak. With a norm after the MLP, the layer's backward has two moments: first that norm's, "
              "in fp32, before any of the layer's gradients exists (four fp32 n × h tensors), then the MLP's, once "
              "the down projection's weight gradient is written (the gradients of two n × I tensors, less two fp32 "
              "n × h freed by then); without recomputation the layer's output gradient is beside both, and Gemma 3 "
              "holds 2 n·h bytes more in fp32 (3 n·h in bf16, and no output gradient) at both (the `mlp.backward` "
              "line). Fitted on 24 setups (both families, bf16 and fp32, with and without recomputation, I/h 2, 4 "
              "and 6, h 256, 1,024 tokens): OLMo 2 within 0.01% at the layers' backward, Gemma 3 over by up to 1.5%: its "
              "lowest layer holds half an n × h tensor less, and on CPU its tied embedding's gradient is not yet "
              "held while the layers' backward runs (on the H200 it is, below). Checked on 8 others (h 384 and 512, I/h 3 to "
              "9.3, 384 to 1,024 tokens): the 6 with recomputation within 0.1%; the 2 without, where a layer's "
              "weight gradients outweigh its activations (h 512 at 512 tokens), over by 0.8% and 1.5%, as the "
              "estimate holds a layer's gradients and all its activations at once at its backward. Before this line, "
              "these setups were predicted 2.6% to 8.1% low. GPT-2's MLP, without a gate (the last row, no dropout), holds "
              "the gradients of two n × I tensors once c_proj's weight gradient is written, and no output gradient "
              "under recomputation (measured in bf16 and fp32, I/h 2 to 6, h 256 to 512, 512 to 1,024 tokens: "
              "before this, 5% to 8% low; now up to 1.6% high, the learned positions' gradient being counted with "
              "the tied embedding's from the output layer on, where it comes with the embedding's backward). With two "
              "micro-batches a step (the last two rows), every gradient exists from a step's second micro-batch on "
              "and none is left to write, so the layer's backward holds its whole working set there "
              "(`mlp.backward.accumulating`): these were 9% low before, and are now exact to 0.01%.", "",
              "A tied output layer's gradient waits in autograd's buffer from the output layer's backward until the "
              "embedding's own is added to it: the embedding's gradient is held from the output layer on. Before "
              "this every tied model's later backward events were V·h·w bytes low, which the H200's Gemma 3 1B run "
              "shows: 602,500,608 B short at its layers' backward, and now within 1.5 MB (\"On a GPU\")."]
    if unmodelled:
        lines += ["", "Not modelled yet: the same working set with dropout (GPT-2's defaults, Llama with "
                  "attention dropout) and other MLPs without a gate. Where such "
                  "a layer's backward decides the peak the estimate comes out low, and says so in a warning "
                  "(`unmodelled_cases`):", "", *peak_table(unmodelled)]
    lines += ["",
              "A sliding-window layer keeps what a full-attention layer keeps under eager attention (the mask is "
              "added to the scores, and an add keeps nothing) and under sdpa while the sequence fits in the window. "
              "Past the window, sdpa is given the window as a mask: each sliding-window layer then keeps the mask "
              "converted to the activations' dtype (b·s² elements) and K and V repeated to all heads (with one K/V "
              "head the repeat is a view of it, and nothing more is kept), the rows with \"window\" above "
              "(`sliding_window_layer`, which the estimate counts for the stage's sliding-window layers). "
              "For a `gemma3` config.json (the multimodal checkpoints) the language model is counted, as "
              "Gemma3ForCausalLM counts it: the SigLIP vision tower and the projector are not (419,816,304 "
              "parameters for gemma-3-4b, 423,060,336 for gemma-3-27b, measured on the meta device), nor are image "
              "tokens.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict,
                      lambda rows, _: section(rows, run_peaks(peak_cases()), run_peaks(unmodelled_cases())))


if __name__ == "__main__":
    sys.exit(main())
