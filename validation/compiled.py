"""Compiled steps: what a decoder layer keeps for backward when torch.compile (inductor) runs it, measured on CPU.

Each decoder layer's forward is compiled on its own, as torchtune's ``training.compile_model`` compiles each
TransformerSelfAttentionLayer (``torch.compile(backend="inductor")``, static shapes); the embedding, the final norm,
the output layer and the loss run eagerly. Under compile the layer's saved tensors are the outputs of the forward
graph that AOTAutograd's default partitioner (``min_cut_rematerialization_partition``) chose to save: the compiled
autograd.Function keeps them with ``ctx.save_for_backward``, which saved-tensor hooks see, so validation/measure.py's
recorder counts them as it counts eager's. Under full recomputation the checkpoint (transformers', non-reentrant) runs
the compiled forward, as torchtune's activation-checkpointing wrapper runs its compiled layers: the checkpoint keeps
the layer's input and its closure, and the layer's backward reruns the same compiled forward. Each case starts from a
fresh Dynamo cache and records that its layer ran as one graph without graph breaks.

Small models built from a config (no download), two layers each; per case the parameter count and the bytes saved in
each layer, the embedding and the head, against trainmem's prediction with ``compile="inductor"`` and, for the
comparison, its eager prediction.

    python -m validation.compiled --measure   # compiles and measures every case (minutes each), writes docs/compiled.json
    python -m validation.compiled             # compares docs/compiled.json's measurements with trainmem now
    python -m validation.compiled --write     # and publishes them in docs/VALIDATION.md ("Compiled steps")
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from app import core  # noqa: E402
from app.core import activations as act  # noqa: E402

SECTION: Final = "## Compiled steps (torch.compile)"
RESULTS: Final = Path(__file__).resolve().parent.parent / "docs" / "compiled.json"
VOCAB: Final = 300
FAMILIES: Final = ("llama", "mistral", "qwen2", "gemma")
TARGET_PCT: Final = 5.0  # the activation target of docs/VALIDATION.md: within 5% per layer and for the whole model


@dataclass(frozen=True)
class Case:
    family: str  # a key of validation.models.FAMILIES
    precision: str  # bf16 or fp32 parameters and activations
    batch: int
    seq: int
    kv_heads: int = 2
    checkpointing: str = "none"  # or "full": transformers' gradient checkpointing around each compiled layer

    @property
    def label(self) -> str:
        ckpt = " full recomputation" if self.checkpointing == "full" else ""
        return f"{self.family} kv{self.kv_heads} {self.precision} sdpa b{self.batch} s{self.seq}{ckpt}"

    def config(self) -> Any:
        """The transformers config (validation/models.py's builder; Qwen2Config takes no head_dim: h / a)."""
        from validation.models import FAMILIES as BUILDERS
        from validation.models import Size

        size = Size(hidden=64, layers=2, heads=4, kv_heads=self.kv_heads, intermediate=96, vocab=VOCAB, positions=256,
                    head_dim=32)
        config = BUILDERS[self.family](size)
        config._attn_implementation = "sdpa"
        config.use_cache = False
        return config


_SHAPES: Final = ((2, 32, 2),)
CASES: Final = tuple(
    Case(family, precision, batch, seq, kv, checkpointing)
    for family in FAMILIES for precision in ("bf16", "fp32") for batch, seq, kv in _SHAPES
    for checkpointing in ("none", "full")
) + tuple(Case("llama", "bf16", batch, seq, kv, checkpointing)
          for batch, seq, kv in ((1, 48, 4), (3, 16, 1)) for checkpointing in ("none", "full"))


def measure(case: Case) -> dict[str, Any]:
    """The measured parts (validation/measure.py's `measured_parts`) with each compiled layer, and layer 0's saved
    storages (shape, dtype, bytes) as the partitioner left them."""
    import torch
    from transformers import AutoModelForCausalLM

    from validation.measure import ACTIVATION, SavedTensorRecorder
    from validation.models import decoder_layers

    torch._dynamo.reset()  # a fresh cache per case: every family's layer shares one code object (the recompile limit)
    counters = torch._dynamo.utils.counters
    counters.clear()
    config = case.config()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[case.precision]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(dtype)
    model.train()
    layers = decoder_layers(model)
    if case.checkpointing == "full":
        # torchtune's order: the checkpoint outside, the layer's forward compiled inside it (transformers checkpoints
        # inside the layer's forward, handing the checkpoint function the forward to run)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for layer in layers:
            layer._gradient_checkpointing_func = _compiled_inside(layer._gradient_checkpointing_func)
    else:
        for layer in layers:  # the forward compiled, the module's hooks (the recorder's regions) left eager around it
            layer.forward = _compile(layer.forward)
    recorder = SavedTensorRecorder(model, layers)
    ids = torch.randint(0, VOCAB, (case.batch, case.seq))
    with recorder.recording():
        out = model(input_ids=ids, labels=ids)
    saved = recorder.measurement()
    out.loss.backward()
    storages = [{"shape": list(item.shape), "dtype": item.dtype, "bytes": item.nbytes, "by": item.saved_by}
                for item in saved.storages if item.region == "layer0" and item.kind == ACTIVATION]
    graphs = counters["stats"]["unique_graphs"]
    return {"params": sum(p.numel() for p in model.parameters()), "layers": list(saved.layers),
            "embedding": saved.embedding, "head": saved.head, "compiled_graphs": graphs,
            "graph_breaks": sum(counters["graph_break"].values()), "layer0_storages": storages}


# The Trainer's torch_compile (and axolotl's) compiles the whole model: measured for its total, which the estimate
# counts as the layers compiled and the embedding, head and loss eager.
WHOLE_MODEL: Final = (Case("llama", "bf16", 2, 32), Case("qwen2", "bf16", 2, 32))


def measure_whole(case: Case) -> dict[str, Any]:
    """The bytes saved for backward by the whole model compiled as one (the recorder's total: its hooks run inside
    the graph, so the regions are not told apart), and the saved storages."""
    import torch
    from transformers import AutoModelForCausalLM

    from validation.measure import ACTIVATION, SavedTensorRecorder
    from validation.models import decoder_layers

    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(case.config(), attn_implementation="sdpa").to(
        {"bf16": torch.bfloat16, "fp32": torch.float32}[case.precision])
    model.train()
    recorder = SavedTensorRecorder(model, decoder_layers(model))
    ids = torch.randint(0, VOCAB, (case.batch, case.seq))
    with recorder.recording():
        out = _compile(model)(input_ids=ids, labels=ids)
    saved = recorder.measurement()
    out.loss.backward()
    storages = [{"shape": list(item.shape), "dtype": item.dtype, "bytes": item.nbytes}
                for item in saved.storages if item.kind == ACTIVATION]
    return {"total": saved.total, "compiled_graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()), "storages": storages}


def _compile(function: Any) -> Any:
    import torch

    return torch.compile(function, backend="inductor", dynamic=False)


def _compiled_inside(checkpoint: Any) -> Any:
    """A checkpoint function that runs the function it checkpoints compiled."""

    def run(function: Any, *args: Any) -> Any:
        return checkpoint(_compile(function), *args)

    return run


def _setup(case: Case, compiled: str) -> tuple[Any, act.ActivationSetup]:
    arch = core.architecture_from_hf_config(case.config().to_dict())
    setup = act.ActivationSetup(micro_batch_size=case.batch, seq_len=case.seq, attention="sdpa", device="cpu",
                                precision=core.precision_preset(case.precision), compile=compiled)
    return arch, setup


def predict(case: Case, compiled: str = "inductor") -> dict[str, Any]:
    """trainmem's parts for the case: the count, each layer's kept bytes, the embedding's and the head's."""
    arch, setup = _setup(case, compiled)
    full = act.layer_activations(arch, setup)
    kept = act.checkpointed_layer_activations(arch, setup, case.checkpointing, full=full)  # type: ignore[arg-type]
    embedding = act.embedding_activations(arch, setup) + act.checkpoint_held_activations(
        arch, setup, case.checkpointing)  # type: ignore[arg-type]
    return {"params": core.param_count(arch), "layers": [act.total_bytes(kept)] * arch.num_hidden_layers,
            "embedding": act.total_bytes(embedding), "head": act.total_bytes(act.head_activations(arch, setup)),
            "rebuilt": act.total_bytes(act.recompute_workspace(arch, setup, case.checkpointing, full=full))}  # type: ignore[arg-type]


PARTS: Final = ("params", "layers", "embedding", "head")


@dataclass(frozen=True)
class Row:
    label: str
    measured_layer: int
    predicted_layer: int
    eager_layer: int
    measured_total: int
    predicted_total: int
    eager_total: int
    exact: bool

    @property
    def layer_error_pct(self) -> float:
        return 100.0 * (self.predicted_layer - self.measured_layer) / self.measured_layer

    @property
    def total_error_pct(self) -> float:
        return 100.0 * (self.predicted_total - self.measured_total) / self.measured_total


def _total(parts: dict[str, Any]) -> int:
    return int(parts["embedding"]) + sum(parts["layers"]) + int(parts["head"])


def compare(result: dict[str, Any]) -> Row:
    case = Case(**result["case"])
    measured = result["measured"]
    predicted, eager = predict(case), predict(case, "none")
    return Row(case.label, measured["layers"][0], predicted["layers"][0], eager["layers"][0], _total(measured),
               _total(predicted), _total(eager), all(measured[key] == predicted[key] for key in PARTS))


def section(rows: list[Row], results: list[dict[str, Any]], whole: list[tuple[str, int, int, int]]) -> list[str]:
    exact = sum(row.exact for row in rows)
    versions = results[0]["versions"] if results else {}
    worst = max((abs(pct) for row in rows for pct in (row.layer_error_pct, row.total_error_pct)), default=0.0)
    lines = [SECTION, "",
             f"torch {versions.get('torch', '?')} (inductor, the system C++ compiler) and transformers "
             f"{versions.get('transformers', '?')} on CPU (`python -m validation.compiled --measure`, then `--write`; "
             "the measurements in [compiled.json](compiled.json)). Each decoder layer's forward compiled on its own, "
             "as torchtune's `compile_model` does, two layers, sdpa; the embedding and the head run eagerly. The "
             "saved tensors of a compiled layer are what AOTAutograd's min-cut partitioner keeps; the recorder sees "
             "them through saved-tensor hooks (`ctx.save_for_backward`). Compared with trainmem's "
             "`training.compile: inductor` (`app/core/saved/compiled.py`) to the byte, and beside its eager figure. "
             f"**{exact} of {len(rows)} cases exact; worst error {worst:.2f}% (target {TARGET_PCT:g}%).**", "",
             "| case | layer B measured | predicted | eager predicted | model B measured | predicted | eager "
             "predicted | |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        lines.append(f"| {row.label} | {row.measured_layer:,} | {row.predicted_layer:,} | {row.eager_layer:,} | "
                     f"{row.measured_total:,} | {row.predicted_total:,} | {row.eager_total:,} | "
                     f"{'exact' if row.exact else f'{row.total_error_pct:+.2f}%'} |")
    lines.append("")
    for note in NOTES:
        lines += [note, ""]
    lines += [WHOLE_MODEL_NOTE, "", "| case | model B measured | predicted | eager predicted | error |",
              "| --- | ---: | ---: | ---: | ---: |",
              *(f"| {label} whole model | {measured:,} | {predicted:,} | {eager:,} | "
                f"{100.0 * (predicted - measured) / measured:+.2f}% |" for label, measured, predicted, eager in whole), ""]
    return lines


WHOLE_MODEL_NOTE: Final = (
    "A whole model compiled as one graph (the Trainer's and axolotl's `torch_compile`; `WHOLE_MODEL`, its saved "
    "tensors counted together, as the recorder's region hooks run inside the graph) is counted by the estimate as its "
    "layers compiled and its embedding, head and loss eager; the totals below, against it. What differs, not modelled: "
    "the final norm keeps what a compiled layer's norms keep, the rotary cos and sin are recomputed from the inverse "
    "frequencies, the loss keeps the half-precision logits and two fp32 numbers per token instead of eager's fp32 "
    "log-probabilities (all smaller than counted); and "
    "transformers builds the causal mask as a tensor while traced, so sdpa is handed a mask, which rules out its "
    "grouped-query path: each layer keeps K and V repeated to all heads, and the mask (b × 1 × s × s) is kept once "
    "(larger than counted). The estimate is high by the errors below here; the loss's part of it, n·V·2 bytes, grows "
    "with the vocabulary.")


NOTES: Final = [
    "What the partitioner keeps of a layer, as measured (layer 0's storages in compiled.json): for each RMSNorm its "
    "input in the residual stream's dtype (not eager's fp32 upcast), the fp32 reciprocal RMS per token and the "
    "weighted output the projections read (eager also keeps the normalised tensor before the weight, and Gemma's "
    "fp32 1 + weight); Q and K after the rotary embedding, V, the attention kernel's output and its fp32 "
    "log-sum-exp, as eager sdpa keeps them; the gate and up projections' outputs and their product, the down "
    "projection's input (eager also keeps the activation's output). The rotary multiply, the casts, SiLU or GELU "
    "and the residual adds are recomputed in the backward's kernels. Under full recomputation each layer keeps its "
    "input, as in eager; its backward reruns the compiled forward, so the layer it rebuilds is the compiled one, "
    "which trainmem counts (not measured apart: the checkpoint's rebuilt tensors do not pass the recorder's hooks).",
    "CPU and CUDA: the partitioner decides by the class of each op (matmuls and the fused attention kernels are never "
    "recomputed, pointwise ops may be), not by the device, so the saved set carries to CUDA for the same graph. What "
    "can differ are device-specific decompositions and kernels: CPU sdpa runs "
    "`_scaled_dot_product_flash_attention_for_cpu`, CUDA the flash or memory-efficient kernel (the latter pads its "
    "log-sum-exp to 32 queries, as trainmem counts it); sdpa's math path and eager attention are decomposed into "
    "ordinary ops under compile and are not measured, so trainmem refuses them with `training.compile`. Not measured "
    "either, and refused by name: autocast, FP8, LoRA and QLoRA, frozen parts, mixtures of experts, tensor "
    "parallelism, selective and op-level recomputation, Liger's and Megatron's kernels, sliding windows shorter than "
    "the sequence, other families. The compiled kernels' working buffers "
    "in backward are not measured here (the timeline's dispatch mode does not see inductor's allocations); the "
    "estimate keeps eager's backward moments for them.",
]


def published(part: str = "cases") -> list[dict[str, Any]]:
    """The measurements kept in compiled.json: the layer cases ("cases") or the whole models ("whole_model")."""
    return json.loads(RESULTS.read_text(encoding="utf-8")).get(part, [])


def whole_model_rows() -> list[tuple[str, int, int, int]]:
    """(label, measured, predicted, eager predicted) total bytes of each whole model compiled."""
    rows = []
    for result in published("whole_model"):
        case = Case(**result["case"])
        rows.append((case.label, result["measured"]["total"], _total(predict(case)), _total(predict(case, "none"))))
    return rows


def _measure_whole_models() -> None:
    import torch
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    results = [{"case": asdict(case), "measured": measure_whole(case), "versions": versions} for case in WHOLE_MODEL]
    _write_results(published(), results)


def _measure_all(cases: tuple[Case, ...]) -> list[dict[str, Any]]:
    import warnings

    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    results = []
    for case in cases:
        started = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured = measure(case)
        results.append({"case": asdict(case), "measured": measured, "versions": versions})
        print(f"{case.label}: layers {measured['layers']} embedding {measured['embedding']} head {measured['head']} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
        _write_results(results, published("whole_model") if RESULTS.exists() else [])
    return results


def _write_results(results: list[dict[str, Any]], whole: list[dict[str, Any]], path: Path = RESULTS) -> None:
    def body(items: list[dict[str, Any]]) -> str:
        return ",\n".join("  " + json.dumps(item, separators=(",", ":")) for item in items)

    path.write_text('{\n "cases": [\n' + body(results) + '\n ],\n "whole_model": [\n' + body(whole) + "\n ]\n}\n",
                    encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="compile and measure every case; writes compiled.json")
    parser.add_argument("--family", action="append", help="with --measure: only these families")
    parser.add_argument("--write", action="store_true", help="publish the section in docs/VALIDATION.md")
    args = parser.parse_args(argv)
    if args.measure:
        chosen = tuple(case for case in CASES if not args.family or case.family in args.family)
        _measure_all(chosen)
        _measure_whole_models()
    results = published()
    rows = [compare(result) for result in results]
    for row in rows:
        print(f"{'ok  ' if row.exact else 'DIFF'} {row.label}: layer {row.measured_layer:,} / {row.predicted_layer:,} "
              f"(eager {row.eager_layer:,}), model {row.measured_total:,} / {row.predicted_total:,} "
              f"({row.total_error_pct:+.2f}%)")
    if args.write:
        from validation.sections import write_section

        write_section(section(rows, results, whole_model_rows()))
    return 0 if all(row.exact for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

