"""The inputs bitsandbytes' 4-bit matmul kept for backward before 0.43.2 (app.core.finetuning, keeps_4bit_inputs).

MatMul4Bit stores its input on ``ctx`` as a plain attribute (``ctx.tensors = (A, B)``), not through
``save_for_backward``, whenever A needs a gradient (B, the frozen 4-bit weight, never does): bitsandbytes 0.43.1,
bitsandbytes/autograd/_functions.py lines 514-518. Two things follow from that:

* the input stays alive until the autograd graph itself is freed, after the whole backward, not when the layer's
  backward has run (autograd releases saved variables after a node runs, never a Function's ``ctx`` attributes);
* torch.utils.checkpoint's non-reentrant mode, which transformers 5.24 uses by default
  (modeling_utils.py, ``_activation_checkpointing_enable``: ``{"use_reentrant": False}``), drops only what passes
  through its saved-tensor hooks, so recomputation does not drop these inputs either.

Linear layers that read one tensor share it (q, k and v read the attention norm's output; gate and up the MLP
norm's): it is kept once. A tensor the layer keeps anyway adds nothing while the layer's own saved tensors live: the
fused attention kernels' output, which is the output projection's input unless the attention copies it
(`attention.output_copied`); ReLU's output, the down projection's; an input the adapters keep as it is (an fp32 base
without LoRA dropout, `_hf_adapters`).
"""

from __future__ import annotations

from typing import Final

from app.core.architecture import Architecture
from app.core.finetuning import Role, linear_modules, targeted
from app.core.saved.attention import attention_kernel, output_copied
from app.core.saved.common import FP32_BYTES, ActivationSetup, SavedTensor, Split, _Saved

# Which input each 4-bit linear layer reads: one tensor per group.
_GROUPS: Final = {
    "attn.q": "attn.input", "attn.k": "attn.input", "attn.v": "attn.input", "attn.qkv": "attn.input",
    "attn.o": "attn.out_proj_input",
    "mlp.gate": "mlp.input", "mlp.up": "mlp.input", "mlp.gate_up": "mlp.input",
    "moe.shared.gate": "mlp.input", "moe.shared.up": "mlp.input", "moe.shared_gate": "mlp.input",
    "mlp.down": "mlp.down_input", "moe.shared.down": "moe.shared.down_input",
}
_WIDE: Final = ("attn.input", "mlp.input")  # the residual stream's width and dtype, split only under SP


def kept_4bit_inputs(arch: Architecture, setup: ActivationSetup, role: Role, *,
                     recomputed: bool = False) -> list[SavedTensor]:
    """What one layer's 4-bit linear layers keep beyond the layer's own saved tensors, for a layer of this `role`
    (finetuning.layer_role); `recomputed`: the layer's saved tensors are dropped (full recomputation), so none of
    its tensors is kept anyway."""
    ft = setup.finetuning
    saved = _Saved(setup)
    if not ft.keeps_4bit_inputs or role == "off":
        return saved.items
    adapted = {tensor.name.removesuffix(".weight") for tensor in targeted(arch, ft)}
    groups_adapted = {_GROUPS.get(name) for name in adapted}
    input_grad = role in ("full", "through")
    attention = input_grad or "attn.input" in groups_adapted
    mlp = attention or "attn.out_proj_input" in groups_adapted
    down = mlp or "mlp.input" in groups_adapted
    needs_grad = {"attn.input": input_grad, "attn.out_proj_input": attention, "mlp.input": mlp,
                  "mlp.down_input": down, "moe.shared.down_input": down}
    seen: set[str] = set()
    for tensor in linear_modules(arch):
        group = _GROUPS.get(tensor.name.removesuffix(".weight"))
        if group is None or group in seen or not needs_grad[group]:
            continue
        seen.add(group)
        wide = group in _WIDE
        element_bytes = setup.stream_bytes if wide else setup.half_bytes
        if not recomputed and _kept_anyway(group, element_bytes, group in groups_adapted, arch, setup):
            continue
        split: Split = "sequence" if wide else "tensor"
        saved.add(group, setup.tokens * tensor.shape[1], element_bytes, split)
    return saved.items


def _kept_anyway(group: str, element_bytes: int, adapted: bool, arch: Architecture, setup: ActivationSetup) -> bool:
    """Whether the layer's own saved tensors already hold this input (module docstring)."""
    if adapted and setup.finetuning.dropout == 0 and element_bytes == FP32_BYTES:
        return True
    if group == "attn.out_proj_input":  # the fused kernel's output, unless the attention copies it
        return attention_kernel(arch, setup) not in ("eager", "math") and not output_copied(arch, setup)
    if group == "mlp.down_input":
        return not arch.is_gated and arch.mlp == "relu"
    return False
