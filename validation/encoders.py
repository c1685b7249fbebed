"""Encoders measured: transformers' BertForSequenceClassification and RobertaForSequenceClassification on CPU.

Small models built from a config (no download), two layers each, from the builders in validation/models.py; each
case compares, to the byte, the parameter count the model class has, and the tensors autograd keeps in each layer,
the embedding and the head (validation/measure.py's recorder) for one forward with one label per sequence, in bf16,
fp32 and fp32 under bf16 autocast, under sdpa and eager attention. The peak of two training steps is measured by the
timeline harness (`peak_cases`) as for the decoders.

    python -m validation.encoders           # prints one line per case
    python -m validation.encoders --write   # and publishes them in docs/VALIDATION.md ("Encoders")
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Final

import torch
from transformers import AutoModelForSequenceClassification, PretrainedConfig

from app import core
from app.core import activations as act
from validation.measure import measured_parts, predicted_parts
from validation.models import FAMILIES, Size, decoder_layers
from validation.sections import peak_table, run_module, run_peaks

DTYPES: Final = {"bf16": torch.bfloat16, "fp32": torch.float32, "autocast-bf16": torch.float32}
SECTION: Final = "## Encoders"
VOCAB: Final = 300
LAYOUTS: Final = {
    "bert": "BERT (BertForSequenceClassification, BertConfig's defaults): word, token-type and position embeddings "
            "summed, a LayerNorm and dropout; layers with biases everywhere, bidirectional attention with no mask, "
            "a LayerNorm after each residual add, an MLP without a gate (exact gelu), dropout 0.1 on the embeddings, "
            "the attention probabilities and both residual branches; the pooler's dense over the first token (a "
            "view, so it keeps the whole last hidden state), tanh, dropout and a classifier over two labels",
    "roberta": "RoBERTa (RobertaForSequenceClassification, FacebookAI/roberta-base's choices): BERT's layers, one "
               "token type, positions numbered from the token ids, and a head that drops the first token's state "
               "before its dense (keeping a b × h copy, not the whole sequence)",
}
VARIANTS: Final = ("bert-no-dropout", "roberta-no-dropout", "bert-three-labels")
PRECISIONS: Final = ("bf16", "fp32", "autocast-bf16")


@dataclass(frozen=True)
class Case:
    family: str  # a key of LAYOUTS or VARIANTS, and of validation.models.FAMILIES
    precision: str
    attention: str
    batch: int
    seq: int

    @property
    def label(self) -> str:
        return f"{self.family} {self.precision} {self.attention} b{self.batch} s{self.seq}"

    def config(self) -> PretrainedConfig:
        config = FAMILIES[self.family](Size(hidden=64, layers=2, heads=4, intermediate=96, vocab=VOCAB, positions=256))
        config._attn_implementation = self.attention
        return config


CASES: Final = (
    *(Case(family, precision, attention, batch, seq) for family in LAYOUTS for precision in PRECISIONS
      for attention in ("sdpa", "eager") for batch, seq in ((2, 32), (1, 48), (3, 16))),
    *(Case(family, precision, attention, 2, 32) for family in VARIANTS for precision in ("bf16", "fp32")
      for attention in ("sdpa", "eager")),
)


def measure(case: Case) -> dict[str, object]:
    config = case.config()
    autocast = case.precision.startswith("autocast")
    return measured_parts(
        lambda: AutoModelForSequenceClassification.from_config(config, attn_implementation=case.attention),
        dtype=DTYPES[case.precision], vocab=VOCAB, batch=case.batch, seq=case.seq, autocast=autocast,
        layers_of=decoder_layers, labels_of=lambda ids: torch.randint(0, config.num_labels, (ids.shape[0],)))


def predict(case: Case) -> dict[str, object]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention=case.attention, device="cpu",
                                precision=core.precision_preset(case.precision))
    layer = act.total_bytes(act.layer_activations(arch, setup))
    copies = None
    if setup.autocast:  # the half casts of each layer's four and the head's two weight matrices
        half = setup.half_bytes
        h, inter = arch.hidden_size, arch.ffn_size
        copies = {"layers": [(4 * h * h + 2 * h * inter) * half] * arch.num_hidden_layers,
                  "head": (h * h + 2 * h) * half}
    return predicted_parts(arch, setup, [layer] * arch.num_hidden_layers, weight_copies=copies)


# The peak harness's models: BERT-base's proportions (I = 4h, head size 64), small enough for a CPU.
PEAK_SIZE: Final = Size(hidden=256, layers=4, heads=4, intermediate=1024, vocab=2048, positions=512)


def peak_cases() -> tuple:
    """Held to the 2% target: no recomputation, a sequence where the optimizer step or the top layer's backward with
    its saved tensors decides the peak."""
    from validation import timeline as tl

    return tuple(case for family in LAYOUTS for case in (
        tl.TimelineCase(family, precision="bf16", seq=256, batch=2, size=PEAK_SIZE),
        tl.TimelineCase(family, precision="fp32", seq=128, batch=2, size=PEAK_SIZE, attention="eager"),
        tl.TimelineCase(family, precision="autocast-bf16", seq=256, batch=2, size=PEAK_SIZE),
    ))


def unmodelled_cases() -> tuple:
    """Where a layer's backward working set decides the peak (under recomputation, or with the loop keeping only the
    loss and a long sequence): with dropout it is not modelled, and the estimate says so; published, not held to 2%."""
    from validation import timeline as tl

    return tuple(case for family in LAYOUTS for case in (
        tl.TimelineCase(family, precision="bf16", seq=512, batch=4, size=PEAK_SIZE, loop="hf-trainer"),
        tl.TimelineCase(family, precision="bf16", seq=512, batch=2, size=PEAK_SIZE, checkpointing="full"),
        tl.TimelineCase(family, precision="fp32", seq=512, batch=1, size=PEAK_SIZE, checkpointing="full"),
    ))


def section(rows: list[tuple[Case, dict, dict]], peaks: list, unmodelled: list) -> list[str]:
    exact = sum(measured == predicted for _, measured, predicted in rows)
    lines = [SECTION, "",
             "transformers 5.24's " + "; ".join(LAYOUTS.values()) + ". On CPU (`python -m validation.encoders`), two "
             "layers each, compared to the byte with the parameter count and each layer's, the embedding's and the "
             "head's saved tensors, for one forward over token ids with one label per sequence (no attention mask: "
             "sequences without padding). The bert-no-dropout and roberta-no-dropout rows set hidden_dropout_prob and "
             "attention_probs_dropout_prob to 0 (the classifier's dropout with them), bert-three-labels num_labels to "
             f"3. **{exact} of {len(rows)} cases exact.**", "",
             "| case | params | layer B (each) | embedding B | head B | |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for case, measured, predicted in rows:
        layers = measured["layers"]
        lines.append(f"| {case.label} | {measured['params']:,} | {layers[0]:,} | {measured['embedding']:,} | "
                     f"{measured['head']:,} | {'exact' if measured == predicted else 'differs'} |")
    lines += ["", f"The peak of two training steps (the timeline harness, {PEAK_SIZE.label()}):", "",
              *peak_table(peaks), "",
              "Under autocast the peak comes out within 1%, but in the top layer's backward where the measurement has "
              "it in that layer's forward: event by event the forward events are up to 3.3% low and the lowest layer's "
              "backward 3.7% high (a layer's backward working set is not modelled under autocast).", "",
              "Where a layer's backward decides the peak its working set beyond the saved tensors is not modelled with "
              "dropout (the estimate warns), and on CPU sdpa with dropout runs torch's math path in fp32, whose "
              "backward holds fp32 gradients of the b·a·s² scores: under recomputation, or with the loop keeping only "
              "the loss at 512 tokens (`unmodelled_cases`):", "",
              *peak_table(unmodelled), "",
              "Where CPU and CUDA differ, the estimate follows torch's CUDA code for a GPU, not measured here: sdpa "
              "with attention dropout takes the math path on CPU (fp32 scores, probabilities, mask and dropped "
              "probabilities), but on CUDA the flash kernel in fp16 and bf16 and the memory-efficient kernel in fp32 "
              "(sdp_utils.cpp, select_sdp_backend; both take dropout and keep no b·a·s² tensor); dropout keeps a "
              "one-byte mask on CUDA (native_dropout) and a mask as wide as its input on CPU; LayerNorm keeps its "
              "mean and reciprocal standard deviation in fp32 on CUDA and in the input's dtype on CPU; eager "
              "attention's softmax, given no dtype, runs in fp32 under CUDA autocast and in bf16 under CPU autocast.",
              ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_module(argv, CASES, measure, predict,
                      lambda rows, _: section(rows, run_peaks(peak_cases()), run_peaks(unmodelled_cases())))


if __name__ == "__main__":
    sys.exit(main())
