"""Op-level selective activation checkpointing ("op" SAC) on transformers decoder layers: what it keeps.

The policy is torchtitan's ``selective_ac_option = "op"`` (the one its llama3_8b.toml uses), as
released in 2025: pytorch/torchtitan@81c1243395b46ce693a0681cfe1bb20e9b9433fb,
torchtitan/models/llama3/infra/parallelize.py, ``_save_list`` and ``_apply_ac_to_transformer_block``.
Each decoder layer runs under ``torch.utils.checkpoint`` (non-reentrant, ``preserve_rng_state=False``)
with ``create_selective_checkpoint_contexts(policy)``; the policy returns MUST_SAVE for the ops of
the save list (aten.mm, the efficient and flash sdpa kernels, reduce_scatter_tensor, aten.max)
except every second aten.mm of the layer's forward (a counter per layer call: the 2nd, 4th, ... mm
are recomputed) and PREFER_RECOMPUTE for everything else. On CPU, sdpa runs
``aten._scaled_dot_product_flash_attention_for_cpu``; it is added to the save list so that the CPU
run keeps what CUDA's flash kernel would (its output and its fp32 logsumexp).

transformers 5.x checkpoints each decoder layer (a ``GradientCheckpointingLayer``) through
``activation_checkpointing_enable(activation_checkpointing_kwargs=...)``, which passes the kwargs to
``torch.utils.checkpoint.checkpoint`` with ``functools.partial``; ``context_fn`` goes through there.

Bytes are counted by `validation.timeline.StorageTracker` (every storage an ATen op returns, freed
through weakrefs), not by saved-tensor hooks: the SAC cache holds its tensors outside autograd's
saved tensors. Per case, one forward and backward (bf16 parameters, sdpa, the loss only kept):

* kept/layer: the live bytes a decoder layer's forward adds (the event "forward: layer i" minus the
  previous event), i.e. its output (the next layer's checkpointed input, or the final norm's) plus
  what the layer's checkpoint keeps; layers 2..L-1 are printed (all equal);
* the storages behind those bytes for layer 2 (op, shape, dtype), with the module whose output
  shares each storage;
* the step's peak beyond weights, buffers, gradients and token ids, and its event, for "op" SAC,
  no recomputation ("none") and full recomputation ("full", checkpoint without a policy).

Run ``python -m validation.op_sac`` (tiny models, CPU, a few seconds per case).
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from dataclasses import dataclass, replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # noqa: E402

from validation.models import Size, decoder_layers  # noqa: E402
from validation.timeline import (  # noqa: E402
    BUFFERS,
    GRADIENTS,
    INPUTS,
    WEIGHTS,
    StorageTracker,
    Timeline,
    TimelineCase,
    build_model,
)

aten = torch.ops.aten

# torchtitan's save list (the commit above), and the CPU flash kernel in its place for this run.
SAVE_LIST = {
    aten.mm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    aten.max.default,
}
CPU_SAVE_LIST = SAVE_LIST | {aten._scaled_dot_product_flash_attention_for_cpu.default}

NOT_ACTIVATIONS = (WEIGHTS, BUFFERS, GRADIENTS, INPUTS)


class OpPolicy:
    """torchtitan's "op" policy, with a record of the ops it sees in each layer call's forward."""

    def __init__(self, save_list=CPU_SAVE_LIST) -> None:
        self.save_list = save_list
        self.calls: list[list[tuple[str, str]]] = []  # per layer call: (op, decision) in forward order

    def context_fn(self):
        meta: dict[str, int] = defaultdict(int)
        seen: list[tuple[str, str]] = []
        self.calls.append(seen)

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            key = f"{mode}_mm_count"
            if func == aten.mm.default:
                meta[key] += 1
            save = func in self.save_list and not (func == aten.mm.default and meta[key] % 2 == 0)
            if not ctx.is_recompute:
                seen.append((str(func), "SAVE" if save else "recompute"))
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)


@dataclass
class Result:
    label: str
    kept_per_layer: list[int]
    kept_storages: list[dict]  # layer 2's kept storages
    peak: int  # beyond weights, buffers, gradients and token ids
    peak_event: str
    peak_total: int
    rise: int  # layer 2's backward: its interval peak beyond the bytes alive when it began (both beyond weights+grads)
    ops: list[tuple[str, str]]


def run_case(case: TimelineCase, mode: str) -> Result:
    model, _ = build_model(case)
    policy = OpPolicy()
    if mode != "none":
        kwargs = {"use_reentrant": False, "preserve_rng_state": False}
        if mode == "op":
            kwargs["context_fn"] = policy.context_fn
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # never stepped: the timeline reads its (empty) state
    tracker = StorageTracker()
    timeline = Timeline(tracker, model, optimizer, accumulation=1)
    layers = list(decoder_layers(model))
    # The module whose output shares a storage, for layer 2 (index 1).
    output_of: dict[int, str] = {}

    def note(name):
        def hook(_module, _args, output):
            if timeline.phase == "forward":
                for tensor in output if isinstance(output, tuple) else (output,):
                    if isinstance(tensor, torch.Tensor):
                        uid = tracker.uid(tensor)
                        if uid is not None:
                            output_of.setdefault(uid, name)
        return hook

    handles = [m.register_forward_hook(note(n)) for n, m in layers[1].named_modules() if n]
    with tracker:
        for parameter in model.parameters():
            tracker.track(parameter, op="parameter", role=WEIGHTS)
        for buffer in model.buffers():
            tracker.track(buffer, op="buffer", role=BUFFERS)
        tracker.reset_interval()
        with timeline.hooks():
            timeline.begin_step(1)
            ids = torch.randint(0, model.config.vocab_size, (case.batch, case.seq), generator=torch.Generator().manual_seed(1))
            tracker.set_role(ids, INPUTS)
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            timeline.end_micro_batch()
            del loss
    for handle in handles:
        handle.remove()
    timeline.finish()
    points = timeline.points
    names = [p.event for p in points]
    kept, storages = [], []
    for i in range(1, len(layers) + 1):
        at = names.index(f"forward: layer {i}")
        kept.append(points[at].live - points[at - 1].live)
        if i == 2:
            new = tracker.live_uids(points[at].live_index) - tracker.live_uids(points[at - 1].live_index)
            for uid in sorted(new):
                info = tracker.infos[uid]
                storages.append({"op": info.op.removeprefix("aten."), "shape": tuple(info.shape), "dtype": info.dtype,
                                 "bytes": info.nbytes, "module": output_of.get(uid, "")})
    best = None
    for point in points:
        over = sum(v for k, v in point.peak_breakdown.items() if k not in NOT_ACTIVATIONS)
        if best is None or over > best[0]:
            best = (over, point.event, point.peak)
    at = names.index("backward: layer 2")

    def beyond(breakdown):
        return sum(v for k, v in breakdown.items() if k not in NOT_ACTIVATIONS)

    rise = beyond(points[at].peak_breakdown) - beyond(points[at - 1].live_breakdown)
    ops = policy.calls[1] if len(policy.calls) > 1 else []
    return Result(case.label, kept, storages, best[0], best[1], best[2], rise, ops)


def cases(families=("llama", "qwen2", "mistral")) -> list[TimelineCase]:
    size = Size(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=704, vocab=300, positions=1024)
    base = TimelineCase(family="llama", precision="bf16", attention="sdpa", size=size)
    return [replace(base, family=f, batch=b, seq=s) for f in families for b in (1, 2) for s in (64, 256)]


def formula(case: TimelineCase) -> int:
    """The inferred "op" SAC bytes a layer keeps (see op_sac.md), with the layer's output."""
    size, b, s = case.size, case.batch, case.seq
    h, kv, inter, a = size.hidden, size.kv_heads * (size.hidden // size.heads), size.intermediate, size.heads
    if case.family == "qwen2":  # q, k, v are addmm (bias): the mm count starts at o_proj
        mm_saved = h + inter  # o_proj (1st mm), up_proj (3rd mm)
    else:
        mm_saved = h + kv + inter + h  # q (1st), v (3rd), gate (5th), down (7th)
    return 2 * b * s * (h + mm_saved + h) + 4 * b * a * s  # input, saved mm, sdpa output, fp32 logsumexp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", help="llama, qwen2, mistral (default: all three)")
    parser.add_argument("--no-early-stop", action="store_true",
                        help="recompute whole layers (torch.utils.checkpoint.set_checkpoint_early_stop(False))")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    if args.no_early_stop:
        with torch.utils.checkpoint.set_checkpoint_early_stop(False):
            return _run(args)
    return _run(args)


def _run(args) -> int:
    shown_ops: set[str] = set()
    for case in cases(tuple(args.family or ("llama", "qwen2", "mistral"))):
        results = {mode: run_case(case, mode) for mode in ("none", "op", "full")}
        op = results["op"]
        mid = op.kept_per_layer[1:-1]
        label = f"{case.family} {case.size.label()} b{case.batch} s{case.seq} {case.precision} {case.attention}"
        print(f"{label}: op kept/layer {mid[0]} B (formula {formula(case)}; layers {op.kept_per_layer})"
              f" | none kept/layer {results['none'].kept_per_layer[1]} B | full kept/layer {results['full'].kept_per_layer[1]} B"
              f" | peak beyond weights+grads: op {op.peak} B @ {op.peak_event!r},"
              f" none {results['none'].peak} B @ {results['none'].peak_event!r},"
              f" full {results['full'].peak} B @ {results['full'].peak_event!r}"
              f" | layer-2 backward rise: op {op.rise} none {results['none'].rise} full {results['full'].rise} B", flush=True)
        if case.family not in shown_ops:
            shown_ops.add(case.family)
            print(f"  ops the policy saw in layer 2's forward ({case.family}):")
            print("    " + ", ".join(f"{o.removeprefix('aten.')}{'*' if d == 'SAVE' else ''}" for o, d in op.ops))
            print("    (* = MUST_SAVE)")
            print(f"  layer 2's kept storages ({case.family} b{case.batch} s{case.seq}):")
            for st in op.kept_storages:
                print(f"    {st['op']:<48} {str(st['shape']):<18} {st['dtype']:<9} {st['bytes']:>8} B  {st['module']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
