"""Fine-tuning: what trains (LoRA adapters, saved modules, unfrozen layers) and how the frozen base is stored.

LoRA (Hu et al. 2021, arXiv:2106.09685) adds, beside each targeted linear layer W (out × in), two
trainable matrices A (r × in) and B (out × r); the base stays frozen. Counts follow peft 0.21:
`get_peft_model` adds A and B per targeted module (peft/tuners/lora/layer.py, `update_layer`),
`modules_to_save` wraps a module in a trainable copy beside the frozen original
(peft/utils/other.py, `ModulesToSaveWrapper`), and `all-linear` targets every linear layer of the
decoder layers but not the output layer (peft/tuners/tuners_utils.py,
`_maybe_include_all_linear_layers`). Llama-2-7B with r = 8 on q_proj and v_proj: 32 × 2 × 8 ×
(4,096 + 4,096) = 4,194,304 trainable of 6,738,415,616 + 4,194,304 = 6,742,609,920, as peft prints.

Dtypes: `get_peft_model(..., autocast_adapter_dtype=True)` (the default) keeps adapter weights in
fp32 when the base is fp16 or bf16 (peft/tuners/tuners_utils.py, `_cast_adapter_dtype`), so their
gradients and optimizer state are fp32 and need no master copy; a saved module's copy keeps the
module's dtype.

QLoRA (Dettmers et al. 2023, arXiv:2305.14314, section 3): the layers' linear weights in 4-bit
NormalFloat, two weights a byte, with one fp32 absmax per block of 64 (0.5 bit per parameter), or
double-quantized: the absmax in 8 bits with one fp32 constant per 256 of them (8/64 + 32/(64·256)
≈ 0.127 bit); bitsandbytes leaves embeddings, norms and the output layer in 16 bits
(bitsandbytes/functional.py `quantize_4bit`, blocksize 64; `compress_statistics` quantizes the
absmax with `quantize_blockwise(..., blocksize=256)`). transformers 5.24 swaps in bitsandbytes' layers for
`nn.Linear` modules only (integrations/bitsandbytes.py, `replace_with_bnb_linear`): a mixture's routed experts,
stacked parameters of one module, and its router stay in the dtype the model is loaded in. int8 (LLM.int8(),
Dettmers et al. 2022, arXiv:2208.07339): one byte per weight and an fp32 scale per output row (`Int8Params.SCB`).

bitsandbytes before 0.43.2: the 4-bit matmul kept its input for backward (MatMul4Bit.forward, ``ctx.tensors = (A,
B)`` whenever A or B needs a gradient; bitsandbytes 0.43.1, bitsandbytes/autograd/_functions.py line 516,
commit 4a6fb35) although backward uses only B (line 540: ``grad_A = torch.matmul(grad_output,
F.dequantize_4bit(B, ctx.state)...)``); commit 9e75374 (bitsandbytes-foundation/bitsandbytes#1270, 2024-07-16)
stores ``(None, B)`` instead, first released in 0.43.2 (commit ce53caf, same file, line 516).

bitsandbytes before 0.43.0 quantized every 4-bit weight from fp16 (``Params4bit.cuda``: ``self.data.contiguous()
.half()``, 0.42.0 bitsandbytes/nn/modules.py line 168), so the quantization state records fp16 and
``dequantize_4bit`` returns an fp16 weight (functional.py, ``torch.empty(shape, dtype=dtype)``) that MatMul4Bit then
casts to the input's dtype: a bf16 or fp32 matmul holds both copies for a moment. Commit dcfb6f81
(bitsandbytes-foundation/bitsandbytes#970, 2024-01-16, first released in 0.43.0) quantizes the weight in its own
dtype (``Params4bit._quantize``: ``self.data.contiguous().cuda(device)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from app.core.architecture import MAX_LAYERS, Architecture, layer_tensors
from app.core.errors import DomainError
from app.core.families import family_of
from app.core.inputs import check_declared, declarations, declared
from app.core.lora_targets import ALL_LINEAR, is_all_linear, pattern_shape, select
from app.core.param_tensors import ParamTensor
from app.core.units import ceil_div

METHODS: Final = ("full", "lora", "qlora")
QUANTIZATIONS: Final = ("nf4", "nf4-double", "int8")
SAVABLE_MODULES: Final = ("embed_tokens", "lm_head")
MAX_RANK: Final = 1 << 14
# The first bitsandbytes release whose 4-bit matmul no longer keeps its input (module docstring).
BNB_4BIT_INPUT_FIX: Final = (0, 43, 2)
# The first bitsandbytes release that quantizes a 4-bit weight in its own dtype rather than from fp16 (docstring).
BNB_4BIT_OWN_DTYPE: Final = (0, 43, 0)
# A PEP 440 version: release numbers, then an optional pre-release, post-release, development and local part.
VERSION_PATTERN: Final = (r"^\s*(?P<release>\d+(?:\.\d+){0,3})(?P<pre>[.-]?(?:a|b|rc)\d*)?(?P<post>[.-]?post\d*)?"
                          r"(?P<dev>[.-]?dev\d*)?(?:\+[A-Za-z0-9.]+)?\s*$")
MAX_VERSION_CHARS: Final = 40
# What stating the version changes, for the form, the API's schema and the command line (module docstring).
BNB_VERSION_HELP: Final = (
    "QLoRA: the bitsandbytes version the run uses, as pip shows it. Before 0.43.2 the 4-bit matmul keeps each 4-bit "
    "layer's input until the backward ends (fixed in bitsandbytes commit 9e75374), which recomputation does not drop; "
    "before 0.43.0 each weight is also dequantized to fp16 and then cast to the matmul's dtype (commit dcfb6f81).")

NF4_BLOCK: Final = 64
NF4_DOUBLE_BLOCK: Final = 256
FP32_BYTES: Final = 4

# Module names as each model family spells them (transformers' modeling_*.py), for the layers' linear weights.
_GPT2_NAMES: Final = {"attn.qkv": "c_attn", "attn.o": "c_proj", "mlp.up": "c_fc", "mlp.down": "c_proj"}
_PHI3_NAMES: Final = {"attn.qkv": "qkv_proj", "attn.o": "o_proj", "mlp.gate_up": "gate_up_proj", "mlp.down": "down_proj"}
_LLAMA_NAMES: Final = {"attn.q": "q_proj", "attn.k": "k_proj", "attn.v": "v_proj", "attn.o": "o_proj",
                       "mlp.gate": "gate_proj", "mlp.up": "up_proj", "mlp.down": "down_proj",
                       "mlp.gate_up": "gate_up_proj"}  # Glm4MLP's fused gate and up projections
# Starcoder2Attention's and Starcoder2MLP's (modeling_starcoder2.py).
_STARCODER2_NAMES: Final = {"attn.q": "q_proj", "attn.k": "k_proj", "attn.v": "v_proj", "attn.o": "o_proj",
                            "mlp.up": "c_fc", "mlp.down": "c_proj"}
# PhiAttention's and PhiMLP's (modeling_phi.py).
_PHI_NAMES: Final = {"attn.q": "q_proj", "attn.k": "k_proj", "attn.v": "v_proj", "attn.o": "dense", "mlp.up": "fc1",
                     "mlp.down": "fc2"}
# GPTNeoXAttention's and GPTNeoXMLP's (modeling_gpt_neox.py).
_GPT_NEOX_NAMES: Final = {"attn.qkv": "query_key_value", "attn.o": "dense", "mlp.up": "dense_h_to_4h",
                          "mlp.down": "dense_4h_to_h"}
# Multi-head latent attention (DeepseekV3Attention, DeepseekV2Attention): q_proj where q_lora_rank is None.
_MLA_NAMES: Final = {"attn.q": "q_proj", "attn.q_a": "q_a_proj", "attn.q_b": "q_b_proj",
                     "attn.kv_a": "kv_a_proj_with_mqa", "attn.kv_b": "kv_b_proj", "attn.o": "o_proj",
                     "mlp.gate": "gate_proj", "mlp.up": "up_proj", "mlp.down": "down_proj"}


@dataclass(frozen=True)
class Finetuning:
    """What trains. ``full`` trains everything except what is frozen (the embeddings, the first k layers);
    ``lora`` and ``qlora`` train adapters of rank `rank` on `target_modules` and the `modules_to_save`."""

    method: str = declared(
        "full", "choice", "Method",
        "full: every parameter trains; lora: rank-r adapters beside the frozen base (peft); qlora: the same beside a "
        "base quantized by bitsandbytes. Anything but the default fine-tuning needs an architecture (not num_params), "
        "the transformers, liger or litgpt implementation, no fp8, and outside the fsdp2 convention; adapters need a "
        "precision without autocast. Of mixtures of experts, which parts may be frozen or adapted depends on the "
        "family.",
        choices=METHODS)
    rank: int = declared(16, "int", "LoRA rank", "LoRA rank r.", low=1, high=MAX_RANK)
    # Module names as the family spells them (q_proj), or one string: all-linear, or a regular expression that peft
    # full-matches against each module's qualified name (app.core.lora_targets).
    target_modules: tuple[str, ...] | str = ("q_proj", "v_proj")
    dropout: float = declared(0.0, "float", "LoRA dropout", "LoRA dropout (lora_dropout); above 0 each adapter keeps "
                              "its own dropped copy of its input.", low=0, high=1, below_high=True)
    modules_to_save: tuple[str, ...] = ()
    quantization: str = declared(  # qlora only
        "nf4-double", "choice", "Base quantization",
        "QLoRA's base storage: nf4 (4 bits + an fp32 scale per 64), nf4-double (scales quantized again: ~4.127 "
        "bits), int8 (LLM.int8(): a byte and a scale per row).", choices=QUANTIZATIONS)
    freeze_embeddings: bool = declared(False, "bool", "Freeze the embeddings",  # full only
                                       "Full fine-tuning: keep the embeddings frozen.")
    frozen_layers: int = declared(  # full only: the first k decoder layers
        0, "int", "Frozen layers", "Full fine-tuning: keep the first k decoder layers frozen; fewer than "
        "num_hidden_layers, and with pipeline stages at most the first stage's layers.", low=0, high=MAX_LAYERS)
    bitsandbytes_version: str | None = None  # qlora only; None: a release from 0.43.2 on

    @property
    def adapters(self) -> bool:
        return self.method in ("lora", "qlora")

    @property
    def keeps_4bit_inputs(self) -> bool:
        """Whether every 4-bit linear layer keeps its input for backward: QLoRA in NF4 with bitsandbytes before
        0.43.2 (module docstring). LLM.int8()'s matmul is another function (MatMul8bitLt)."""
        return self._4bit_before(BNB_4BIT_INPUT_FIX)

    @property
    def dequantizes_from_fp16(self) -> bool:
        """Whether each 4-bit weight is dequantized to fp16 before its cast to the matmul's dtype: QLoRA in NF4 with
        bitsandbytes before 0.43.0 (module docstring)."""
        return self._4bit_before(BNB_4BIT_OWN_DTYPE)

    def _4bit_before(self, release: tuple[int, ...]) -> bool:
        """QLoRA in NF4 with a bitsandbytes version stated and older than `release`."""
        if self.method != "qlora" or self.quantization == "int8" or self.bitsandbytes_version is None:
            return False
        return version_before(self.bitsandbytes_version, release)


FINETUNING_INPUTS: Final = declarations(Finetuning)


def check_version(where: str, version: object) -> None:
    """Refuse anything but a PEP 440 version of at most MAX_VERSION_CHARS characters, naming `where`."""
    if not isinstance(version, str) or len(version) > MAX_VERSION_CHARS:
        raise DomainError(where, "must be a version such as 0.41.1")
    if re.match(VERSION_PATTERN, version) is None:
        raise DomainError(where, f"must be a version such as 0.41.1, got {version!r}")


def version_before(version: str, release: tuple[int, ...]) -> bool:
    """Whether a PEP 440 version (``0.41.1``, ``0.43.2.dev0``, ``0.42.0+cu118``) comes before `release`: its
    release numbers compared, a pre-release or development build of `release` itself counting as before it."""
    match = re.match(VERSION_PATTERN, version)
    if match is None:
        raise DomainError("finetuning.bitsandbytes_version", f"must be a version such as 0.41.1, got {version!r}")
    numbers = tuple(int(part) for part in match["release"].split("."))
    padded = numbers + (0,) * (len(release) - len(numbers))
    pre, post, dev = match["pre"], match["post"], match["dev"]
    return padded < release or (padded == release and bool(pre or (dev and not post)))


def module_names(arch: Architecture) -> dict[str, str]:
    """Internal linear-weight name (``attn.q``...) -> the family's module name (``q_proj``...)."""
    names = family_of(arch).linear_names
    if names == "gpt2":
        return _GPT2_NAMES
    if names == "phi3":
        return _PHI3_NAMES
    if names == "starcoder2":
        return _STARCODER2_NAMES
    if names == "phi":
        return _PHI_NAMES
    if names == "gpt_neox":
        return _GPT_NEOX_NAMES
    if arch.is_mla:
        return _MLA_NAMES
    return _LLAMA_NAMES


def linear_modules(arch: Architecture) -> tuple[ParamTensor, ...]:
    """The layers' linear weights (matmul weights), in order."""
    return tuple(tensor for tensor in layer_tensors(arch) if tensor.matmul and len(tensor.shape) == 2)


def _module_of(tensor: ParamTensor) -> str:
    return tensor.name.removesuffix(".weight")


def _validate_fields(f: Finetuning) -> None:
    """Each field in its range, and the fields that belong to one method only."""
    check_declared("finetuning", f, FINETUNING_INPUTS)
    if isinstance(f.target_modules, str) and not is_all_linear(f.target_modules):
        pattern_shape(f.target_modules)
    for name in f.modules_to_save:
        if name not in SAVABLE_MODULES:
            raise DomainError("finetuning.modules_to_save", f"must name {' or '.join(SAVABLE_MODULES)}, got {name!r}")
    if f.method != "full" and (f.freeze_embeddings or f.frozen_layers):
        raise DomainError("finetuning.frozen_layers" if f.frozen_layers else "finetuning.freeze_embeddings",
                          "freezing applies to full fine-tuning; with adapters the whole base is frozen")
    if f.bitsandbytes_version is not None:
        check_version("finetuning.bitsandbytes_version", f.bitsandbytes_version)
    if f.method == "full" and f.modules_to_save:
        raise DomainError("finetuning.modules_to_save", "applies to LoRA and QLoRA; full fine-tuning trains them")


def validate_finetuning(finetuning: Finetuning, arch: Architecture | None, *, autocast: bool = False) -> None:
    """Refuse what peft or the model cannot do, naming the field."""
    f = finetuning
    if f.method in ("lora", "qlora") and autocast:
        raise DomainError("training.precision", "adapters are modelled on a base loaded in its training dtype "
                                                "(precision bf16, fp16 or fp32, as LoRA runs usually load it), not "
                                                "under autocast")
    _validate_fields(f)
    if arch is None:
        if f.method != "full" or f.freeze_embeddings or f.frozen_layers:
            raise DomainError("finetuning.method", "needs the architecture (a preset, a config or its fields), "
                                                   "not num_params: adapters and freezing depend on the shapes")
        return
    if f.frozen_layers >= arch.num_hidden_layers:
        raise DomainError("finetuning.frozen_layers",
                          f"must leave at least one of the {arch.num_hidden_layers} layers training, got {f.frozen_layers}")
    if f.adapters:
        _validate_adapters(f, arch)


def _validate_adapters(f: Finetuning, arch: Architecture) -> None:
    """The adapters' targets: this model's linear modules, and what peft 0.21 does with all-linear on a mixture."""
    if not f.target_modules:
        raise DomainError("finetuning.target_modules", "name at least one module, or all-linear")
    # The model's own linear modules: a mixture's experts are not nn.Linear modules (transformers keeps them as
    # stacked parameters), so only the attention's projections are adapters' targets there.
    names = module_names(arch)
    known = {names[_module_of(x)] for x in linear_modules(arch) if _module_of(x) in names}
    if isinstance(f.target_modules, str) and not is_all_linear(f.target_modules):
        _pattern_keys(arch, f.target_modules)
    for name in () if isinstance(f.target_modules, str) else f.target_modules:
        if arch.has_shared_expert and name in ("gate_proj", "up_proj", "down_proj", "shared_expert_gate"):
            raise DomainError("finetuning.target_modules", f"{name!r} names the shared expert's modules, whose "
                                                           "adapters are not modelled (it is frozen): name the "
                                                           f"attention's modules ({', '.join(sorted(known))})")
        if name != ALL_LINEAR and name not in known:
            raise DomainError("finetuning.target_modules", f"{name!r} is not a linear module of this model; "
                                                           f"it has {', '.join(sorted(known))} (or all-linear)")
    if arch.is_moe and is_all_linear(f.target_modules) and not (experts_wrapped(arch, f)
                                                               or family_of(arch).peft_linear_only):
        # peft 0.21 wraps the stacked expert parameters (ParamWrapper, target_parameters) and, each forward,
        # folds the adapters into a new copy of the whole expert stack (torch.baddbmm in _LoraFactorsProxy),
        # which the experts' matmuls keep for backward: a second copy of every layer's experts in the weights'
        # dtype, and its gradient in backward (peft/tuners/lora/layer.py).
        experts = 3 * arch.num_local_experts * arch.expert_size * arch.hidden_size
        raise DomainError("finetuning.target_modules", "all-linear on a mixture of experts makes peft 0.21 adapt the "
                                                       "router and the experts' stacked parameters too, and fold "
                                                       "the adapters into a new copy of each layer's experts every "
                                                       f"forward ({experts:,} weights a layer), kept for backward: "
                                                       "not modelled yet; name the attention's modules "
                                                       f"({', '.join(sorted(known))})")
    if experts_wrapped(arch, f) and f.dropout > 0:
        raise DomainError("finetuning.dropout", "peft 0.21 takes no dropout for adapters on a mixture's stacked "
                                                "experts, which all-linear adapts (ParamWrapper); set it to 0")
    if not targeted(arch, f):
        raise DomainError("finetuning.target_modules", "no linear module of this model matches")
    if f.keeps_4bit_inputs and arch.is_mla:
        raise DomainError("finetuning.bitsandbytes_version", "the inputs bitsandbytes before 0.43.2 keeps are not "
                                                             "modelled for latent attention; state 0.43.2 or later")


# Which mixtures peft 0.21's all-linear adapts how is a family's trait (app.core.families): the router and stacked
# experts (ParamWrapper) on Mixtral, Qwen3-MoE and DeepSeek (a custom mixture is modelled as Mixtral), of which
# DeepSeek's leaves the shared experts and the dense layers' MLPs as they are (their gate_proj, up_proj and
# down_proj are names peft 0.21 maps to the routed experts' parameters); the nn.Linear modules alone on gpt-oss
# (its attention) and Qwen2-MoE (its attention, shared expert and shared expert gate).
_WRAPPED: Final = ("moe.router.weight", "moe.experts.gate_up", "moe.experts.down")


def experts_wrapped(arch: Architecture, finetuning: Finetuning) -> bool:
    """Whether adapters sit on a mixture's router and stacked experts: peft 0.21's all-linear on Mixtral, Qwen3-MoE or
    DeepSeek wraps the router's weight and the experts' gate_up_proj and down_proj parameters (ParamWrapper,
    peft/tuners/lora/layer.py), measured on CPU (docs/VALIDATION.md, "Fine-tuning")."""
    return (finetuning.adapters and is_all_linear(finetuning.target_modules) and arch.is_moe
            and family_of(arch).peft_wraps_experts
            # a custom mixture is modelled as Mixtral, which has no shared experts: with them, what peft adapts
            # depends on the model's class
            and not (family_of(arch).custom and arch.has_shared_expert))


def targets_mlp(arch: Architecture, finetuning: Finetuning) -> bool:
    """Whether an adapter sits on one of the MLP's linear layers, or on a mixture's router and experts."""
    return any(tensor.name.startswith(("mlp.", "moe.")) for tensor in targeted(arch, finetuning))


def targeted(arch: Architecture, finetuning: Finetuning) -> tuple[ParamTensor, ...]:
    """The layer weights that get an adapter (peft matches module names by suffix, so GPT-2's `c_proj`
    names both the attention output and the MLP output), and a mixture's router and stacked experts where
    `experts_wrapped`."""
    if not finetuning.adapters:
        return ()
    keys = _target_keys(arch, finetuning)
    linear = tuple(tensor for tensor in linear_modules(arch) if _module_of(tensor) in keys)
    if experts_wrapped(arch, finetuning):
        if family_of(arch).peft_leaves_shared:
            linear = tuple(tensor for tensor in linear if not tensor.name.startswith(("moe.shared.", "mlp.")))
        linear += tuple(tensor for tensor in layer_tensors(arch) if tensor.name in _WRAPPED)
    return linear


def _target_keys(arch: Architecture, finetuning: Finetuning) -> frozenset[str]:
    """The layer modules' internal keys (``attn.q``) that the targets name."""
    names = module_names(arch)
    every = frozenset(_module_of(tensor) for tensor in linear_modules(arch))
    targets = finetuning.target_modules
    if is_all_linear(targets):
        return every
    if isinstance(targets, str):
        return _pattern_keys(arch, targets)
    return frozenset(key for key in every if names.get(key) in targets)


def _pattern_keys(arch: Architecture, pattern: str) -> frozenset[str]:
    """What a regular expression selects in every layer, matched as peft does against the qualified names
    (``model.layers.3.self_attn.q_proj``); mixtures and families whose module tree is not known here are refused."""
    paths = family_of(arch).module_paths
    if arch.is_moe or paths is None:
        raise DomainError("finetuning.target_modules", "a regular expression is matched against the model's module "
                                                       "names, which are known here for dense decoders only: name "
                                                       "the modules as a list")
    names = module_names(arch)
    modules = tuple((key, f"{paths.attention if key.startswith('attn.') else 'mlp'}.{names[key]}")
                    for key in (_module_of(tensor) for tensor in linear_modules(arch)) if key in names)
    return select(pattern, paths, modules, arch.num_hidden_layers)


def adapter_tensors(arch: Architecture, finetuning: Finetuning) -> tuple[ParamTensor, ...]:
    """One layer's adapter matrices, split for tensor parallelism as their base weight is."""
    out: list[ParamTensor] = []
    r = finetuning.rank
    for tensor in targeted(arch, finetuning):
        module = _module_of(tensor)
        if tensor.name.startswith("moe.experts."):
            # ParamWrapper over E stacked experts (E x out x in): A is (E·r x in) and B (out x E·r), and gate_up_proj,
            # the gate and up projections fused, takes twice the rank (peft's rank_pattern for fused targets,
            # peft/utils/transformers_weight_conversion.py). Tensor parallelism is refused for it.
            experts, out_features, in_features = tensor.shape
            rank = r * (2 if module == "moe.experts.gate_up" else 1)
            out.append(ParamTensor(f"{module}.lora_A", (experts * rank, in_features), matmul=True))
            out.append(ParamTensor(f"{module}.lora_B", (out_features, experts * rank), matmul=True))
            continue
        out_features, in_features = tensor.shape
        # A column-parallel weight splits B's rows; a row-parallel one splits A's columns.
        a_split = ("row", 1) if tensor.split == "row" else ("replicated", 0)
        b_split = ("column", 0) if tensor.split == "column" else ("replicated", 0)
        out.append(ParamTensor(f"{module}.lora_A", (r, in_features), a_split[0], a_split[1], True))  # type: ignore[arg-type]
        out.append(ParamTensor(f"{module}.lora_B", (out_features, r), b_split[0], b_split[1], True))  # type: ignore[arg-type]
    return tuple(out)


def quantized_bytes(elements: int, quantization: str) -> int:
    """Bytes of a weight of `elements` stored by bitsandbytes (module docstring)."""
    if quantization == "int8":
        raise ValueError("int8 needs the weight's rows: use int8_bytes")
    packed = ceil_div(elements, 2)
    blocks = ceil_div(elements, NF4_BLOCK)
    if quantization == "nf4":
        return packed + FP32_BYTES * blocks
    return packed + blocks + FP32_BYTES * ceil_div(blocks, NF4_DOUBLE_BLOCK)


def int8_bytes(shape: tuple[int, ...]) -> int:
    """LLM.int8(): one byte per weight and an fp32 scale per output row."""
    out_features, in_features = shape
    return out_features * in_features + FP32_BYTES * out_features


def stored_weight_bytes(shape: tuple[int, ...], quantization: str) -> int:
    if quantization == "int8":
        return int8_bytes(shape)
    return quantized_bytes(shape[0] * shape[1], quantization)


def embeddings_train(finetuning: Finetuning) -> bool:
    if finetuning.method == "full":
        return not finetuning.freeze_embeddings
    return "embed_tokens" in finetuning.modules_to_save


def head_trains(arch: Architecture, finetuning: Finetuning) -> bool:
    """Whether the output layer's weight trains (tied to the embedding, it trains with it)."""
    if arch.tie_word_embeddings:
        return embeddings_train(finetuning)
    return finetuning.method == "full" or "lm_head" in finetuning.modules_to_save


Role = str  # "full", "bottom", "through", "off": see layer_role


def layer_role(finetuning: Finetuning, index: int) -> Role:
    """How decoder layer `index` (from 0) takes part in backward.

    * ``full``: its input needs a gradient (something below trains), so it keeps what that needs;
    * ``bottom``: the lowest layer that trains while nothing below does: its input needs no gradient;
    * ``through``: its weights are frozen but something below trains, so gradients pass through it;
    * ``off``: frozen with nothing trainable below: autograd records nothing in it.
    """
    below = embeddings_train(finetuning)
    if finetuning.adapters:
        return "full" if below or index > 0 else "bottom"
    frozen = index < finetuning.frozen_layers
    if below:
        return "through" if frozen else "full"
    if frozen:
        return "off"
    return "bottom" if index == finetuning.frozen_layers else "full"


def layer_roles(finetuning: Finetuning, first_index: int, count: int) -> dict[Role, int]:
    """How many of the layers first_index .. first_index + count - 1 take each role."""
    roles: dict[Role, int] = {}
    bottom = finetuning.frozen_layers + 1  # every layer from here up is "full"
    for index in range(first_index, min(first_index + count, bottom)):
        role = layer_role(finetuning, index)
        roles[role] = roles.get(role, 0) + 1
    rest = first_index + count - max(first_index, bottom)
    if rest > 0:
        roles["full"] = roles.get("full", 0) + rest
    return roles
