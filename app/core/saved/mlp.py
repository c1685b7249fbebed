"""The dense MLP of a Hugging Face layer (or the mixture's block in its place) and the layer's fine-tuning
traits."""

from __future__ import annotations

from collections.abc import Mapping

from app.core.architecture import Architecture
from app.core.finetuning import Role, module_names, targeted
from app.core.saved.common import ActivationSetup, _Adapters, _Saved
from app.core.saved.experts import _hf_moe, _hf_wrapped_experts


def _hf_mlp(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, down_input: bool = True,
            dense: bool = False, wrapped: bool = False, shared_adapters: tuple[_Adapters, _Adapters] = ((), ())) -> None:
    if arch.is_moe and not dense:
        if wrapped:
            _hf_wrapped_experts(saved, arch, setup)
        _hf_moe(saved, arch, setup, weights=down_input or wrapped, shared_weights=down_input,
                shared_adapters=shared_adapters)
        return
    n, inter = setup.tokens, arch.ffn_size
    wa = setup.half_bytes
    if arch.is_gated and setup.implementation == "liger":
        # LigerSiLUMulFunction (GeGLU likewise) computes act(gate) * up in one kernel and keeps only gate and up
        # (liger_kernel/ops/swiglu.py, line 272; geglu.py, line 138); down_proj keeps the product.
        saved.add("mlp.gate", n * inter, wa, "tensor")
        saved.add("mlp.up", n * inter, wa, "tensor")
        if down_input:
            saved.add("mlp.product", n * inter, wa, "tensor")
    elif arch.is_gated:
        # act_fn(gate_proj(x)) * up_proj(x): the activation keeps the gate output, the product keeps
        # the activation's output and the up output, and down_proj keeps the product.
        saved.add("mlp.gate", n * inter, wa, "tensor")
        saved.add("mlp.act_output", n * inter, wa, "tensor")
        saved.add("mlp.up", n * inter, wa, "tensor")
        if down_input:
            saved.add("mlp.product", n * inter, wa, "tensor")
    else:
        if arch.hidden_act == "gelu_new":
            # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))): pow keeps x, tanh its
            # output, and the final product both 0.5*x and (1 + tanh(...)).
            saved.add("mlp.fc_output", n * inter, wa, "tensor")
            saved.add("mlp.gelu_tanh", n * inter, wa, "tensor")
            saved.add("mlp.gelu_half_x", n * inter, wa, "tensor")
            saved.add("mlp.gelu_one_plus_tanh", n * inter, wa, "tensor")
        elif arch.mlp != "relu":
            saved.add("mlp.act_input", n * inter, wa, "tensor")  # ReLU keeps only its output
        if down_input or arch.mlp == "relu":  # the down projection's input; ReLU's backward needs its output
            saved.add("mlp.act_output", n * inter, wa, "tensor")
    if arch.dropout > 0:
        saved.mask("mlp.residual_dropout_mask", n * arch.hidden_size, wa, "sequence")


def _layer_tuning(arch: Architecture, setup: ActivationSetup,
                  role: Role) -> tuple[bool, bool, Mapping[str, str], dict[str, tuple[int, ...]]]:
    """How a layer of this `role` (finetuning.layer_role) trains: whether its weights do, whether its input needs a
    gradient, the family's module names, and the adapted weights (internal name -> shape)."""
    ft = setup.finetuning
    adapted = {tensor.name.removesuffix(".weight"): tensor.shape for tensor in targeted(arch, ft)}
    return ft.method == "full" and role in ("full", "bottom"), role in ("full", "through"), module_names(arch), adapted
