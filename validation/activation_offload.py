"""Activation offloading, counted on CPU: what torchtune's pack hook and transformers' offloaded checkpoints move.

torchtune's `OffloadActivations` (pytorch/torchtune at bd2a0fc, torchtune/training/_activation_offloading.py) moves
each tensor its pack hook receives that lies on the accelerator, holds at least `min_offload_size` bytes (1,024) and
is not a parameter. Its copies need CUDA, but which tensors reach the hook does not: this harness installs a pack
hook with the same test (all but the device) around a tiny Hugging Face model whose layers recompute in full
(non-reentrant `torch.utils.checkpoint`, as torchtune and axolotl wrap them), runs forward and backward, and records
the bytes of what the hook would move, split into those packed while the decoder layers run and the rest (the
embedding's token ids, the final norm's tensors; the output layer torchtune leaves out with its `NoOpManager`, and
the loss runs after the hooks as in its recipes).
trainmem's host line is compared with the first: each moved tensor in a pinned block of the next power of two.

transformers 5.24's `activation_checkpointing_enable(offload=True)` is run as it is, with torch's `save_on_cpu` (which
needs an accelerator to pin) swapped for hooks that copy the same way into ordinary memory and record: each tensor
moved, how many layer inputs are still referenced once forward is done (none should be: what stays on the GPU), and
the most copies brought back that are alive at once in backward.

    python -m validation.activation_offload     # count, compare, print a line per case
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Final

import torch
import transformers
import transformers.modeling_utils
from torch.autograd.graph import saved_tensors_hooks

from app import core
from app.core.activation_offload import ACTIVATION_OFFLOADS, pinned_bytes

MIN_BYTES: Final = ACTIVATION_OFFLOADS["torchtune"].min_offload_bytes


@dataclass(frozen=True)
class Case:
    hidden_size: int
    layers: int
    micro_batch_size: int
    seq_len: int


CASES: Final = (Case(256, 4, 2, 64), Case(192, 3, 1, 96), Case(64, 2, 1, 4))  # the last's inputs are below 1,024 B


@dataclass(frozen=True)
class Counted:
    in_layers: tuple[int, ...]  # bytes of each tensor the hook would move while the decoder layers run
    elsewhere: tuple[int, ...]  # the same outside them (embedding, final norm), the output layer left out


def config(case: Case) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(hidden_size=case.hidden_size, intermediate_size=2 * case.hidden_size,
                                    num_hidden_layers=case.layers, num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=512, max_position_embeddings=4 * case.seq_len, attn_implementation="sdpa")


def count(case: Case) -> Counted:
    """One training step of the case in bf16 with every layer recomputed, the pack hook recording what it moves."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config(case)).to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    where = {"region": "elsewhere", "head": False}
    moved: dict[str, list[int]] = {"in_layers": [], "elsewhere": []}
    inner = model.model
    inner.embed_tokens.register_forward_hook(lambda *_: where.update(region="in_layers"))
    inner.norm.register_forward_pre_hook(lambda *_: where.update(region="elsewhere"))
    model.lm_head.register_forward_pre_hook(lambda *_: where.update(head=True))
    model.lm_head.register_forward_hook(lambda *_: where.update(head=False))

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        size = tensor.element_size() * tensor.nelement()
        if size >= MIN_BYTES and not isinstance(tensor, torch.nn.Parameter) and not where["head"]:
            moved[where["region"]].append(size)
        return tensor

    ids = torch.randint(0, 512, (case.micro_batch_size, case.seq_len))
    with saved_tensors_hooks(pack, lambda tensor: tensor):  # the model under the hooks, the loss after (torchtune)
        logits = model(input_ids=ids).logits
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    return Counted(tuple(moved["in_layers"]), tuple(moved["elsewhere"]))


@dataclass(frozen=True)
class Checkpoints:
    moved: tuple[int, ...]  # bytes of each tensor save_on_cpu copies to the host
    inputs_alive: int  # layer inputs still referenced after forward (on a GPU: the ones left there)
    fetched_alive: int  # the most tensors copied back for recomputation alive at once in backward


def count_checkpoints(case: Case, *, reentrant: bool = False, offload: bool = True) -> Checkpoints:
    """One bf16 training step of the case with transformers' offloaded checkpoints, save_on_cpu recorded."""
    torch.manual_seed(0)
    moved: list[int] = []
    fetched: list[weakref.ref[torch.Tensor]] = []
    most = [0]

    class Recorded(saved_tensors_hooks):  # save_on_cpu(pin_memory=True) less the pinning, which needs CUDA
        def __init__(self, pin_memory: bool, device_type: str) -> None:
            def pack(tensor: torch.Tensor) -> tuple[torch.device, torch.Tensor]:
                copy = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout)
                copy.copy_(tensor)
                moved.append(copy.nbytes)
                return tensor.device, copy

            def unpack(packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
                back = packed[1].to(packed[0], copy=True)
                fetched.append(weakref.ref(back))
                most[0] = max(most[0], sum(ref() is not None for ref in fetched))
                return back

            super().__init__(pack, unpack)

    model = transformers.LlamaForCausalLM(config(case)).to(torch.bfloat16)
    model.activation_checkpointing_enable({"use_reentrant": reentrant}, offload=offload)
    model.train()
    inputs: list[weakref.ref[torch.Tensor]] = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda _, args: inputs.append(weakref.ref(args[0])))
    ids = torch.randint(0, 512, (case.micro_batch_size, case.seq_len))
    original, transformers.modeling_utils.save_on_cpu = transformers.modeling_utils.save_on_cpu, Recorded
    try:  # each checkpoint call looks save_on_cpu up in transformers' module
        logits = model(input_ids=ids).logits
        alive = sum(ref() is not None for ref in inputs)
        torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    finally:
        transformers.modeling_utils.save_on_cpu = original
    return Checkpoints(tuple(moved), alive, most[0])


def predicted(case: Case, offload: str = "torchtune") -> int:
    """trainmem's host bytes for the case (0 without a host section)."""
    arch = core.architecture_from_hf_config(config(case).to_dict())
    training = core.Training(micro_batch_size=case.micro_batch_size, seq_len=case.seq_len,
                             precision=core.precision_preset("bf16"),
                             activation_checkpointing="full", activation_offload=offload)
    result = core.estimate(architecture=arch, training=training, device="cpu", reserve=False)
    return result.host.per_gpu.total_bytes if result.host else 0


def main() -> None:
    for case in CASES:
        counted = count(case)
        measured = sum(pinned_bytes(size) for size in counted.in_layers)
        print(f"h={case.hidden_size} L={case.layers} b={case.micro_batch_size} s={case.seq_len}: "
              f"{len(counted.in_layers)} tensors moved in the layers ({sum(counted.in_layers):,} B, pinned "
              f"{measured:,} B), trainmem {predicted(case):,} B; elsewhere {len(counted.elsewhere)} tensors "
              f"({sum(counted.elsewhere):,} B)")
        for reentrant in (False, True):
            checkpoints = count_checkpoints(case, reentrant=reentrant)
            print(f"  checkpoints to host{' (reentrant)' * reentrant}: {len(checkpoints.moved)} tensors moved "
                  f"({sum(checkpoints.moved):,} B, pinned {sum(pinned_bytes(size) for size in checkpoints.moved):,} "
                  f"B), trainmem {predicted(case, 'checkpoints-to-host'):,} B; layer inputs left after forward "
                  f"{checkpoints.inputs_alive}, copies back alive at once {checkpoints.fetched_alive}")


if __name__ == "__main__":
    main()
