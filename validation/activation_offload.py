"""Activation offloading, counted on CPU: the tensors torchtune's pack hook moves under full recomputation.

torchtune's `OffloadActivations` (pytorch/torchtune at bd2a0fc, torchtune/training/_activation_offloading.py) moves
each tensor its pack hook receives that lies on the accelerator, holds at least `min_offload_size` bytes (1,024) and
is not a parameter. Its copies need CUDA, but which tensors reach the hook does not: this harness installs a pack
hook with the same test (all but the device) around a tiny Hugging Face model whose layers recompute in full
(non-reentrant `torch.utils.checkpoint`, as torchtune and axolotl wrap them), runs forward and backward, and records
the bytes of what the hook would move, split into those packed while the decoder layers run and the rest (the
embedding's token ids, the final norm's tensors; the output layer torchtune leaves out with its `NoOpManager`, and
the loss runs after the hooks as in its recipes).
trainmem's host line is compared with the first: each moved tensor in a pinned block of the next power of two.

    python -m validation.activation_offload     # count, compare, print a line per case
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import torch
import transformers
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


def predicted(case: Case) -> int:
    """trainmem's host bytes for the case (0 without a host section)."""
    arch = core.architecture_from_hf_config(config(case).to_dict())
    training = core.Training(micro_batch_size=case.micro_batch_size, seq_len=case.seq_len,
                             precision=core.precision_preset("bf16"),
                             activation_checkpointing="full", activation_offload="torchtune")
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


if __name__ == "__main__":
    main()
