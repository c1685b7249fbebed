"""Decoder-only transformer architectures and their exact parameter tensors.

Field names follow Hugging Face's `config.json` (``hidden_size``, ``num_key_value_heads``,
``intermediate_size``...), so an imported config maps onto them one to one. The parameter count is
not a formula in closed form but the sum over the model's actual tensors (`parameter_tensors`),
which is what optimizers see too: Adafactor factors each matrix by its own rows and columns, and
per-tensor optimizer counters scale with the number of tensors.

Layout of a layer (Vaswani et al. 2017; Radford et al. 2019 for GPT-2; Touvron et al. 2023 for
Llama's SwiGLU MLP and RMSNorm; Ainslie et al. 2023 for grouped-query attention):

* attention: query ``h x (a*d)``, key and value ``h x (g*d)`` each, output ``(a*d) x h``, where
  ``a`` is ``num_attention_heads``, ``g`` ``num_key_value_heads`` and ``d`` ``head_dim``;
* MLP: two matrices ``h x I`` and ``I x h`` (gelu, relu) or three (swiglu, geglu: gate, up, down);
* ``norms_per_layer`` norms of ``h`` weights each, plus ``h`` biases for LayerNorm.
* mixture of experts (Shazeer et al. 2017; Jiang et al. 2024 for Mixtral): in place of the MLP, a
  router ``E x h`` and ``num_local_experts`` (E) gated experts of width ``moe_intermediate_size``
  (defaults to ``intermediate_size``), each token sent to ``num_experts_per_tok`` (k) of them;
  DeepSeekMoE (Dai et al. 2024, arXiv:2401.06066) adds ``n_shared_experts`` that every token passes through
  (one gated MLP of ``n_shared_experts * moe_intermediate_size``) and keeps the first
  ``first_k_dense_replace`` layers dense (an MLP of ``intermediate_size``). Qwen2-MoE (Qwen Team 2024, "Qwen1.5-MoE",
  https://qwenlm.github.io/blog/qwen-moe/) gives its one shared expert a width of its own,
  ``shared_expert_intermediate_size``, and a sigmoid gate (``shared_expert_gate``, a ``1 x h`` linear) that
  scales its output per token. gpt-oss (OpenAI 2025, "gpt-oss-120b &
  gpt-oss-20b Model Card", arXiv:2508.10925) gives its experts biases (``mlp_bias``: ``E x 2I`` on
  the gate and up projections, ``E x h`` on the down projection) and its router one (``router_bias``: ``E``).
* attention sinks (gpt-oss, ``attention_sinks``): one learned logit per query head (``a``) that joins each
  row's softmax as an extra column and is dropped after it.
* multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section 2.1; DeepSeek-V3, arXiv:2412.19437,
  section 2.1.1), when ``kv_lora_rank`` is set: the query through a low-rank pair ``q_a_proj`` ``h x r_q``,
  ``q_a_layernorm`` (r_q) and ``q_b_proj`` ``r_q x a*(d_n + d_r)`` (or one ``q_proj`` ``h x a*(d_n + d_r)``
  when ``q_lora_rank`` is None), keys and values through ``kv_a_proj_with_mqa`` ``h x (r_kv + d_r)``,
  ``kv_a_layernorm`` (r_kv) and ``kv_b_proj`` ``r_kv x a*(d_n + d_v)``, and ``o_proj`` ``a*d_v x h``, where
  r_q, r_kv, d_n, d_r and d_v are ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``
  and ``v_head_dim``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from app.core.classifier_tensors import classifier_head_tensors, encoder_embedding_tensors
from app.core.errors import DomainError
from app.core.families import family_of
from app.core.param_tensors import ParamTensor

MlpKind = Literal["gelu", "relu", "swiglu", "geglu"]
NormKind = Literal["layernorm", "rmsnorm"]
PositionKind = Literal["learned", "rope"]
QkNormScope = Literal["head", "projection"]
NormPlacement = Literal["pre", "post"]

MLP_KINDS: Final = ("gelu", "relu", "swiglu", "geglu")
GATED_MLPS: Final = ("swiglu", "geglu")
NORM_KINDS: Final = ("layernorm", "rmsnorm")
POSITION_KINDS: Final = ("learned", "rope")
QK_NORM_SCOPES: Final = ("head", "projection")
TOPK_METHODS: Final = ("greedy", "group_limited_greedy")  # DeepseekV2TopkRouter's (modeling_deepseek_v2.py)
NORM_PLACEMENTS: Final = ("pre", "post")

# Bounds beyond which a value is a typo rather than a model: the largest published dense models
# have 126 layers (Llama 3.1 405B), hidden size 18,432 (Nemotron-4 340B) and vocabularies of
# about 256k (Gemma); the limits leave two orders of magnitude of room.
MAX_LAYERS: Final = 10_000
MAX_HIDDEN_SIZE: Final = 1_000_000
MAX_HEADS: Final = 100_000
MAX_VOCAB_SIZE: Final = 100_000_000
MAX_POSITIONS: Final = 1 << 30
MAX_EXPERTS: Final = 4096


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer, described with Hugging Face config names.

    Optional dimensions resolve to the usual defaults: ``num_key_value_heads`` to
    ``num_attention_heads`` (multi-head attention), ``head_dim`` to
    ``hidden_size // num_attention_heads`` and ``intermediate_size`` to ``4 * hidden_size``.
    ``qkv_bias`` overrides ``attention_bias`` for the query, key and value projections only (Qwen2
    has biases there and none on the output projection). ``fused_qkv`` and ``fused_gate_up``
    record that a checkpoint stores those projections as one matrix (GPT-2's ``c_attn``, Phi-3's
    ``qkv_proj`` and ``gate_up_proj``); it changes no count, only the shapes an optimizer factors.
    ``dropout`` is the residual/MLP dropout probability and ``attention_dropout`` the one applied
    to attention probabilities (defaults to ``dropout``); masks are stored only when they are > 0.
    ``qk_norm_over`` says what the query and key norms normalise: each head (``head``: Qwen3, Gemma 3,
    a weight of ``head_dim``) or the whole projection (``projection``: OLMo 2, a weight of
    ``num_attention_heads * head_dim`` for the query and ``num_key_value_heads * head_dim`` for the key).
    ``norm_placement`` is ``pre`` where the two norms of a layer normalise each block's input (Llama) and
    ``post`` where they normalise each block's output before the residual add (OLMo 2); Gemma 2 and 3
    have both, as ``norms_per_layer`` 4 (two pre, two post). ``sliding_window`` is the span of the local
    attention that ``sliding_window_layers`` of the layers use (Gemma 3; None: every layer attends to all
    earlier tokens); it changes no parameter, only what some attention kernels keep.
    ``kv_lora_rank`` (with ``qk_nope_head_dim``, ``qk_rope_head_dim`` and ``v_head_dim``) makes the attention
    multi-head latent attention (module docstring); its heads are ``num_attention_heads`` for queries, keys
    and values alike, and ``head_size`` is then the query and key head, ``d_n + d_r``. ``n_group`` and
    ``topk_group`` are DeepSeek-V3's group-limited routing: the experts fall into ``n_group`` groups and each
    token picks its k experts from its ``topk_group`` best groups; they change no parameter, only what the
    router keeps. The router's ``e_score_correction_bias`` is a buffer, not a parameter, and is not counted.
    ``topk_method`` is DeepSeek-V2's softmax routing: ``greedy`` (no groups: ``n_group`` and ``topk_group`` 1) or
    ``group_limited_greedy`` (each group scored by its best expert); it too changes only what the router keeps.
    ``mlp_bias`` on a mixture of experts gives every expert biases (gpt-oss); ``router_bias`` gives the router
    one, and ``attention_sinks`` each query head a learned sink logit (gpt-oss, module docstring).
    ``model_type`` and ``hidden_act`` are kept from an imported config so that the `transformers`
    activation accounting can follow the modules as Hugging Face wrote them.
    """

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qkv_bias: bool | None = None
    mlp_bias: bool = False
    max_position_embeddings: int = 4096
    mlp: MlpKind = "swiglu"
    norm: NormKind = "rmsnorm"
    norms_per_layer: int = 2
    position_embedding: PositionKind = "rope"
    dropout: float = 0.0
    attention_dropout: float | None = None
    fused_qkv: bool = False
    fused_gate_up: bool = False
    num_local_experts: int = 0  # 0: a dense MLP
    num_experts_per_tok: int = 2
    moe_intermediate_size: int | None = None
    norm_topk_prob: bool = True  # the k routing weights renormalised to sum to 1 (Mixtral; Qwen3-MoE's option)
    n_shared_experts: int = 0  # DeepSeekMoE's experts every token uses, one MLP of n_shared_experts * moe width
    first_k_dense_replace: int = 0  # the first k layers of a mixture of experts keep a dense MLP (DeepSeek)
    shared_expert_intermediate_size: int | None = None  # the shared expert's own width (Qwen2-MoE); None: n_shared × I
    shared_expert_gate: bool = False  # a sigmoid gate h -> 1 on the shared expert's output (Qwen2-MoE)
    n_group: int = 1  # DeepSeek-V3's expert groups; each token picks from its topk_group best groups
    topk_group: int = 1
    # DeepSeek-V2's softmax routing (DeepseekV2TopkRouter): "greedy" (top-k over all experts) or
    # "group_limited_greedy" (within the topk_group best of n_group groups); None for every other model.
    topk_method: str | None = None
    router_bias: bool = False  # a bias on the router's E logits (gpt-oss)
    attention_sinks: bool = False  # a learned sink logit per query head (gpt-oss)
    # The model returns every sparse layer's router logits and adds the load-balancing loss (transformers' Mixtral,
    # Qwen2-MoE, Qwen3-MoE and gpt-oss; `activations.router_aux_loss_activations`). Changes no parameter.
    output_router_logits: bool = False
    q_lora_rank: int | None = None  # multi-head latent attention (kv_lora_rank set): None, a plain q_proj
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    qk_norm: bool = False  # an RMSNorm over the query and the key (Qwen3, Gemma 3, OLMo 2)
    qk_norm_over: QkNormScope = "head"
    norm_placement: NormPlacement = "pre"
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    model_type: str | None = None
    hidden_act: str | None = None
    extras: tuple[tuple[str, float], ...] = field(default=())

    def __post_init__(self) -> None:
        validate_architecture(self)

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Each head's width; for multi-head latent attention, the query's and key's (d_n + d_r)."""
        if self.kv_lora_rank is not None:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def rope_size(self) -> int:
        """The width the rotary embedding turns: the whole head, or MLA's qk_rope_head_dim, or the first
        ``partial_rotary_factor`` of the head (rounded down, then up to even: cos and sin repeat d/2 frequencies)."""
        if self.is_mla:
            return self.qk_rope_head_dim or 0
        turned = int(self.head_size * self.extra("partial_rotary_factor", 1.0))
        return turned + turned % 2

    @property
    def shared_expert_size(self) -> int:
        """The width of the shared experts' one MLP: ``shared_expert_intermediate_size`` where given (Qwen2-MoE),
        else n_shared_experts times each expert's width (DeepSeekMoE)."""
        if self.shared_expert_intermediate_size is not None:
            return self.shared_expert_intermediate_size
        return self.n_shared_experts * self.expert_size

    @property
    def has_shared_expert(self) -> bool:
        return self.n_shared_experts > 0 or self.shared_expert_intermediate_size is not None

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP: all of a dense model, the first ``first_k_dense_replace`` of a mixture."""
        return min(self.first_k_dense_replace, self.num_hidden_layers) if self.is_moe else self.num_hidden_layers

    @property
    def ffn_size(self) -> int:
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def has_qkv_bias(self) -> bool:
        return self.attention_bias if self.qkv_bias is None else self.qkv_bias

    @property
    def has_norm_bias(self) -> bool:  # a LayerNorm's bias; CohereLayerNorm has a weight only
        return self.norm == "layernorm" and not family_of(self).fp32_layernorm

    @property
    def is_moe(self) -> bool:
        return self.num_local_experts > 0

    @property
    def expert_size(self) -> int:
        """Each expert's MLP width."""
        return self.moe_intermediate_size or self.ffn_size

    @property
    def is_gated(self) -> bool:
        return self.mlp in GATED_MLPS

    @property
    def attn_dropout(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    def extra(self, name: str, default: float = 0.0) -> float:
        """A model-specific number kept from an imported config (e.g. Gemma 2's soft-capping)."""
        return dict(self.extras).get(name, default)


def _require_range(field_name: str, value: int, *, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(f"model.{field_name}", f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise DomainError(f"model.{field_name}", f"must be between {low:,} and {high:,}, got {value:,}")


def validate_architecture(arch: Architecture) -> None:
    """Reject shapes no model has, naming the field: sizes out of range, heads that do not group."""
    _require_range("num_hidden_layers", arch.num_hidden_layers, low=1, high=MAX_LAYERS)
    _require_range("hidden_size", arch.hidden_size, low=1, high=MAX_HIDDEN_SIZE)
    _require_range("num_attention_heads", arch.num_attention_heads, low=1, high=MAX_HEADS)
    _require_range("vocab_size", arch.vocab_size, low=1, high=MAX_VOCAB_SIZE)
    _require_range("max_position_embeddings", arch.max_position_embeddings, low=1, high=MAX_POSITIONS)
    _require_range("norms_per_layer", arch.norms_per_layer, low=0, high=16)
    if arch.num_key_value_heads is not None:
        _require_range("num_key_value_heads", arch.num_key_value_heads, low=1, high=arch.num_attention_heads)
        if arch.num_attention_heads % arch.num_key_value_heads:
            raise DomainError(
                "model.num_key_value_heads",
                f"num_attention_heads ({arch.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({arch.num_key_value_heads}) for grouped-query attention",
            )
    if arch.head_dim is not None:
        _require_range("head_dim", arch.head_dim, low=1, high=MAX_HIDDEN_SIZE)
    elif arch.hidden_size % arch.num_attention_heads and not arch.is_mla:
        raise DomainError(
            "model.num_attention_heads",
            f"hidden_size ({arch.hidden_size}) is not divisible by num_attention_heads "
            f"({arch.num_attention_heads}); give head_dim explicitly",
        )
    if arch.intermediate_size is not None:
        _require_range("intermediate_size", arch.intermediate_size, low=1, high=64 * MAX_HIDDEN_SIZE)
    if arch.mlp not in MLP_KINDS:
        raise DomainError("model.mlp", f"must be one of {', '.join(MLP_KINDS)}, got {arch.mlp!r}")
    if arch.num_local_experts:
        _require_range("num_local_experts", arch.num_local_experts, low=1, high=MAX_EXPERTS)
        _require_range("num_experts_per_tok", arch.num_experts_per_tok, low=1, high=arch.num_local_experts)
        if arch.moe_intermediate_size is not None:
            _require_range("moe_intermediate_size", arch.moe_intermediate_size, low=1, high=64 * MAX_HIDDEN_SIZE)
        if arch.mlp not in GATED_MLPS or arch.fused_gate_up:
            raise DomainError("model.num_local_experts", "experts are modelled as gated MLPs with their gate and up "
                                                         "projections in one tensor (Mixtral's and gpt-oss's layout)")
        if arch.mlp_bias and (arch.has_shared_expert or arch.first_k_dense_replace):
            raise DomainError("model.mlp_bias", "experts with biases are modelled as gpt-oss lays them out: every "
                                                "layer sparse, no shared experts")
    elif arch.router_bias:
        raise DomainError("model.router_bias", "belongs to a mixture of experts: give num_local_experts too")
    _validate_deepseek(arch)
    if arch.qk_norm_over not in QK_NORM_SCOPES:
        raise DomainError("model.qk_norm_over", f"must be one of {', '.join(QK_NORM_SCOPES)}, got {arch.qk_norm_over!r}")
    if arch.norm_placement not in NORM_PLACEMENTS:
        raise DomainError("model.norm_placement",
                          f"must be one of {', '.join(NORM_PLACEMENTS)}, got {arch.norm_placement!r}")
    if arch.sliding_window is not None:
        _require_range("sliding_window", arch.sliding_window, low=1, high=MAX_POSITIONS)
    _require_range("sliding_window_layers", arch.sliding_window_layers, low=0, high=arch.num_hidden_layers)
    if arch.norm not in NORM_KINDS:
        raise DomainError("model.norm", f"must be one of {', '.join(NORM_KINDS)}, got {arch.norm!r}")
    if arch.position_embedding not in POSITION_KINDS:
        raise DomainError(
            "model.position_embedding",
            f"must be one of {', '.join(POSITION_KINDS)}, got {arch.position_embedding!r}",
        )
    for name, probability in (("dropout", arch.dropout), ("attention_dropout", arch.attention_dropout)):
        if probability is not None and not 0.0 <= probability < 1.0:
            raise DomainError(f"model.{name}", f"must be a probability in [0, 1), got {probability}")


def _validate_deepseek(arch: Architecture) -> None:
    """Multi-head latent attention's dimensions, shared experts, dense layers and expert groups (DeepSeek)."""
    _require_range("n_shared_experts", arch.n_shared_experts, low=0, high=MAX_EXPERTS)
    _require_range("first_k_dense_replace", arch.first_k_dense_replace, low=0, high=MAX_LAYERS)
    if arch.shared_expert_intermediate_size is not None:
        _require_range("shared_expert_intermediate_size", arch.shared_expert_intermediate_size, low=1,
                       high=64 * MAX_HIDDEN_SIZE)
        if arch.n_shared_experts:
            raise DomainError("model.shared_expert_intermediate_size", "gives the shared expert's width itself: "
                                                                      "leave n_shared_experts at 0")
    if (arch.shared_expert_gate or arch.shared_expert_intermediate_size is not None) and not arch.is_moe:
        name = "shared_expert_gate" if arch.shared_expert_gate else "shared_expert_intermediate_size"
        raise DomainError(f"model.{name}", "belongs to a mixture of experts: give num_local_experts too")
    if arch.shared_expert_gate and not arch.has_shared_expert:
        raise DomainError("model.shared_expert_gate", "gates a shared expert: give shared_expert_intermediate_size")
    if arch.output_router_logits and not arch.is_moe:
        raise DomainError("model.output_router_logits", "belongs to a mixture of experts: give num_local_experts too")
    _require_range("n_group", arch.n_group, low=1, high=MAX_EXPERTS)
    _require_range("topk_group", arch.topk_group, low=1, high=arch.n_group)
    if arch.topk_method is not None:
        if arch.topk_method not in TOPK_METHODS or not arch.is_moe:
            raise DomainError("model.topk_method", f"must be one of {', '.join(TOPK_METHODS)}, for a mixture of "
                                                   f"experts, got {arch.topk_method!r}")
        if arch.topk_method == "greedy" and arch.n_group > 1:
            raise DomainError("model.n_group", "greedy routing (topk_method) has no expert groups: leave n_group at 1")
    if arch.is_moe and arch.n_group > 1:
        # DeepseekV3TopkRouter scores each group by its two best experts (topk(2) over each group), DeepseekV2TopkRouter
        # by its best one (max over each group).
        least = 1 if arch.topk_method is not None else 2
        if arch.num_local_experts % arch.n_group or arch.num_local_experts // arch.n_group < least:
            raise DomainError("model.n_group", f"num_local_experts ({arch.num_local_experts}) must split into "
                                               f"n_group ({arch.n_group}) equal groups"
                                               + (" of at least two experts" if least == 2 else ""))
        if arch.num_experts_per_tok > arch.topk_group * arch.num_local_experts // arch.n_group:
            raise DomainError("model.topk_group", f"the {arch.topk_group} groups a token may use hold fewer than "
                                                  f"num_experts_per_tok ({arch.num_experts_per_tok}) experts")
    if arch.q_lora_rank is not None:
        _require_range("q_lora_rank", arch.q_lora_rank, low=1, high=MAX_HIDDEN_SIZE)
    if not arch.is_mla:
        for name in ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(arch, name) is not None:
                raise DomainError(f"model.{name}", "belongs to multi-head latent attention: give kv_lora_rank too")
        return
    _require_range("kv_lora_rank", arch.kv_lora_rank, low=1, high=MAX_HIDDEN_SIZE)  # type: ignore[arg-type]
    for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        value = getattr(arch, name)
        if value is None:
            raise DomainError(f"model.{name}", "multi-head latent attention (kv_lora_rank) needs it")
        _require_range(name, value, low=1, high=MAX_HIDDEN_SIZE)
    if arch.kv_heads != arch.num_attention_heads:
        raise DomainError("model.num_key_value_heads", "multi-head latent attention expands keys and values to every "
                                                       "query head: num_key_value_heads must equal num_attention_heads")
    if arch.qkv_bias is not None or arch.fused_qkv or arch.qk_norm or arch.sliding_window_layers or arch.attention_sinks:
        raise DomainError("model.kv_lora_rank", "multi-head latent attention is modelled as DeepSeek-V3 lays it out: "
                                                "no qkv_bias, fused_qkv, qk_norm, sliding window or attention sinks")
    if arch.position_embedding != "rope" or arch.norm != "rmsnorm":
        raise DomainError("model.kv_lora_rank", "multi-head latent attention is modelled with rotary positions and "
                                                "RMSNorm (DeepSeek-V3's layout)")


def layer_tensors(arch: Architecture, *, dense: bool = False) -> tuple[ParamTensor, ...]:
    """The parameter tensors of one decoder layer, with Megatron's tensor-parallel splits.

    For a mixture of experts, a sparse layer; ``dense`` asks for one of its first ``first_k_dense_replace``
    layers, whose MLP is dense (`dense_layers` of them). A dense model's layers are all alike.

    Column-parallel (split on output features): query, key, value, MLP up/gate, and their biases.
    Row-parallel (split on input features): attention output and MLP down; their biases are
    replicated. Norms are replicated. (Shoeybi et al. 2019, arXiv:1909.08053, §3.)
    """
    tensors = _mla_tensors(arch) if arch.is_mla else _attention_tensors(arch)
    tensors += _mlp_tensors(arch) if dense or not arch.is_moe else _moe_tensors(arch)

    for index in range(arch.norms_per_layer):
        tensors.append(ParamTensor(f"norm{index}.weight", (arch.hidden_size,)))
        if arch.has_norm_bias:
            tensors.append(ParamTensor(f"norm{index}.bias", (arch.hidden_size,)))
    return tuple(tensors)


def _attention_tensors(arch: Architecture) -> list[ParamTensor]:
    """Query, key, value and output projections (grouped-query attention), and the query and key norms."""
    h, d = arch.hidden_size, arch.head_size
    q_out, kv_out = arch.num_attention_heads * d, arch.kv_heads * d
    tensors: list[ParamTensor] = []
    if arch.fused_qkv:
        tensors.append(ParamTensor("attn.qkv.weight", (q_out + 2 * kv_out, h), "column", 0, True))
        if arch.has_qkv_bias:
            tensors.append(ParamTensor("attn.qkv.bias", (q_out + 2 * kv_out,), "column"))
    else:
        for name, out in (("q", q_out), ("k", kv_out), ("v", kv_out)):
            tensors.append(ParamTensor(f"attn.{name}.weight", (out, h), "column", 0, True))
            if arch.has_qkv_bias:
                tensors.append(ParamTensor(f"attn.{name}.bias", (out,), "column"))
    tensors.append(ParamTensor("attn.o.weight", (h, q_out), "row", 1, True))
    if arch.attention_bias:
        tensors.append(ParamTensor("attn.o.bias", (h,)))
    if arch.qk_norm and arch.qk_norm_over == "head":  # Qwen3Attention.q_norm and k_norm: a weight of d each
        tensors.append(ParamTensor("attn.q_norm.weight", (d,)))
        tensors.append(ParamTensor("attn.k_norm.weight", (d,)))
    elif arch.qk_norm:  # Olmo2Attention.q_norm over a*d and k_norm over g*d, split with their heads
        tensors.append(ParamTensor("attn.q_norm.weight", (q_out,), "column"))
        tensors.append(ParamTensor("attn.k_norm.weight", (kv_out,), "column"))
    if arch.attention_sinks:  # GptOssAttention.sinks: one logit per query head, split with the heads
        tensors.append(ParamTensor("attn.sinks", (arch.num_attention_heads,), "column"))
    return tensors


def _mla_tensors(arch: Architecture) -> list[ParamTensor]:
    """Multi-head latent attention as DeepseekV3Attention holds it (modeling_deepseek_v3.py, transformers 5.24).

    ``q_a_proj`` h -> r_q, ``q_a_layernorm`` (r_q), ``q_b_proj`` r_q -> a*(d_n + d_r), or a plain ``q_proj``
    h -> a*(d_n + d_r) without q_lora_rank; ``kv_a_proj_with_mqa`` h -> r_kv + d_r, ``kv_a_layernorm`` (r_kv),
    ``kv_b_proj`` r_kv -> a*(d_n + d_v); ``o_proj`` a*d_v -> h. ``attention_bias`` adds biases to q_a_proj,
    kv_a_proj_with_mqa and o_proj only (q_proj, q_b_proj and kv_b_proj have none). The down-projections and
    their norms are replicated under tensor parallelism, the up-projections split by heads (column) and
    o_proj by rows, as Megatron-Core's MLA splits them; trainmem refuses tensor parallelism for MLA for now.
    """
    h, a = arch.hidden_size, arch.num_attention_heads
    d_n, d_r, d_v = arch.qk_nope_head_dim or 0, arch.qk_rope_head_dim or 0, arch.v_head_dim or 0
    r_kv, bias = arch.kv_lora_rank or 0, arch.attention_bias
    tensors: list[ParamTensor] = []
    if arch.q_lora_rank is None:
        tensors.append(ParamTensor("attn.q.weight", (a * (d_n + d_r), h), "column", 0, True))
    else:
        r_q = arch.q_lora_rank
        tensors.append(ParamTensor("attn.q_a.weight", (r_q, h), matmul=True))
        if bias:
            tensors.append(ParamTensor("attn.q_a.bias", (r_q,)))
        tensors.append(ParamTensor("attn.q_a_norm.weight", (r_q,)))
        tensors.append(ParamTensor("attn.q_b.weight", (a * (d_n + d_r), r_q), "column", 0, True))
    tensors.append(ParamTensor("attn.kv_a.weight", (r_kv + d_r, h), matmul=True))
    if bias:
        tensors.append(ParamTensor("attn.kv_a.bias", (r_kv + d_r,)))
    tensors.append(ParamTensor("attn.kv_a_norm.weight", (r_kv,)))
    tensors.append(ParamTensor("attn.kv_b.weight", (a * (d_n + d_v), r_kv), "column", 0, True))
    tensors.append(ParamTensor("attn.o.weight", (h, a * d_v), "row", 1, True))
    if bias:
        tensors.append(ParamTensor("attn.o.bias", (h,)))
    return tensors


def _mlp_tensors(arch: Architecture) -> list[ParamTensor]:
    h, inter = arch.hidden_size, arch.ffn_size
    tensors: list[ParamTensor] = []
    if arch.fused_gate_up and arch.is_gated:
        tensors.append(ParamTensor("mlp.gate_up.weight", (2 * inter, h), "column", 0, True))
        if arch.mlp_bias:
            tensors.append(ParamTensor("mlp.gate_up.bias", (2 * inter,), "column"))
    else:
        for name in ("gate", "up") if arch.is_gated else ("up",):
            tensors.append(ParamTensor(f"mlp.{name}.weight", (inter, h), "column", 0, True))
            if arch.mlp_bias:
                tensors.append(ParamTensor(f"mlp.{name}.bias", (inter,), "column"))
    tensors.append(ParamTensor("mlp.down.weight", (h, inter), "row", 1, True))
    if arch.mlp_bias:
        tensors.append(ParamTensor("mlp.down.bias", (h,)))
    return tensors


def _moe_tensors(arch: Architecture) -> list[ParamTensor]:
    """The router and the experts. transformers' MixtralExperts keeps every expert's gate and up projections as
    one E x 2I x h tensor and the down projections as E x h x I (modeling_mixtral.py); tensor parallelism
    splits each expert's width as it splits a dense MLP's. GptOssExperts stores the same matrices transposed
    (E x h x 2I and E x I x h, modeling_gpt_oss.py), the same elements, with ``gate_up_proj_bias`` E x 2I (split
    with the width) and ``down_proj_bias`` E x h (replicated, as a row-parallel bias is), and GptOssTopKRouter
    a bias of E. Qwen2MoeSparseMoeBlock adds one shared expert of ``shared_expert_intermediate_size`` and its
    ``shared_expert_gate`` (1 x h, replicated: its one output row cannot be split) (modeling_qwen2_moe.py)."""
    h, e, width = arch.hidden_size, arch.num_local_experts, arch.expert_size
    tensors = [ParamTensor("moe.router.weight", (e, h))]
    if arch.router_bias:
        tensors.append(ParamTensor("moe.router.bias", (e,)))
    tensors += [
        ParamTensor("moe.experts.gate_up", (e, 2 * width, h), "column", 1, True),
        ParamTensor("moe.experts.down", (e, h, width), "row", 2, True),
    ]
    if arch.mlp_bias:  # named moe.experts.* so that expert parallelism splits them with their experts
        tensors += [ParamTensor("moe.experts.gate_up_bias", (e, 2 * width), "column", 1),
                    ParamTensor("moe.experts.down_bias", (e, h))]
    if arch.has_shared_expert:  # DeepseekV3MoE.shared_experts, Qwen2MoeSparseMoeBlock.shared_expert: one gated MLP
        shared = arch.shared_expert_size
        tensors += [ParamTensor("moe.shared.gate.weight", (shared, h), "column", 0, True),
                    ParamTensor("moe.shared.up.weight", (shared, h), "column", 0, True),
                    ParamTensor("moe.shared.down.weight", (h, shared), "row", 1, True)]
    if arch.shared_expert_gate:
        tensors.append(ParamTensor("moe.shared_gate.weight", (1, h), matmul=True))
    return tensors


def embedding_tensors(arch: Architecture) -> tuple[ParamTensor, ...]:
    """Tensors of the first pipeline stage outside the layers: token (and learned position) embeddings."""
    tensors = [ParamTensor("embed.tokens", (arch.vocab_size, arch.hidden_size), "vocab", 0)]
    if arch.position_embedding == "learned":
        tensors.append(ParamTensor("embed.positions", (arch.max_position_embeddings, arch.hidden_size)))
    if family_of(arch).classifier:  # token types and the embeddings' LayerNorm
        tensors += encoder_embedding_tensors(arch)
    return tuple(tensors)


def head_tensors(arch: Architecture) -> tuple[ParamTensor, ...]:
    """Tensors of the last pipeline stage outside the layers: the final norm and, if untied, the output layer (an
    encoder's classification head in their place)."""
    if family_of(arch).classifier:
        return classifier_head_tensors(arch)
    h = arch.hidden_size
    tensors = [ParamTensor("final_norm.weight", (h,))]
    if arch.has_norm_bias:
        tensors.append(ParamTensor("final_norm.bias", (h,)))
    if not arch.tie_word_embeddings:
        tensors.append(ParamTensor("lm_head.weight", (arch.vocab_size, h), "vocab", 0, True))
    if family_of(arch).lm_head_bias:
        tensors.append(ParamTensor("lm_head.bias", (arch.vocab_size,), "vocab", 0))
    return tuple(tensors)


def parameter_tensors(arch: Architecture) -> tuple[ParamTensor, ...]:
    """Every parameter tensor of the model, layers repeated, in checkpoint order (a mixture's dense layers first)."""
    if not arch.is_moe:
        return embedding_tensors(arch) + layer_tensors(arch) * arch.num_hidden_layers + head_tensors(arch)
    sparse = arch.num_hidden_layers - arch.dense_layers
    return (embedding_tensors(arch) + layer_tensors(arch, dense=True) * arch.dense_layers
            + layer_tensors(arch) * sparse + head_tensors(arch))


def sum_elements(tensors: tuple[ParamTensor, ...]) -> int:
    return sum(tensor.elements for tensor in tensors)


def active_param_count(arch: Architecture) -> int:
    """Parameters one token uses: all but the experts it is not routed to (E - k of them in every sparse layer).

    Each expert holds 3·h·I weights, and with ``mlp_bias`` 2I + h biases (gpt-oss). The embedding and the output
    layer count as used: OpenAI's 3.61B and 5.13B active for gpt-oss-20b and gpt-oss-120b (arXiv:2508.10925)
    leave the embedding out and are these counts less its V·h.
    """
    if not arch.is_moe:
        return param_count(arch)
    unused = arch.num_local_experts - arch.num_experts_per_tok
    sparse = arch.num_hidden_layers - arch.dense_layers
    h, width = arch.hidden_size, arch.expert_size
    per_expert = 3 * h * width + ((2 * width + h) if arch.mlp_bias else 0)
    return param_count(arch) - sparse * unused * per_expert


def param_count(arch: Architecture) -> int:
    """Exact number of parameters: the sum of every tensor's elements.

    For GPT-2 small this is 124,439,808 and for Llama-2-7B 6,738,415,616, the totals Hugging Face
    reports for those checkpoints (see ``data/models.json`` for each preset's source).
    """
    per_layer = sum_elements(layer_tensors(arch))
    dense = arch.dense_layers if arch.is_moe else 0  # a mixture's first dense layers, each its own size
    return (
        sum_elements(embedding_tensors(arch))
        + (arch.num_hidden_layers - dense) * per_layer
        + (dense * sum_elements(layer_tensors(arch, dense=True)) if dense else 0)
        + sum_elements(head_tensors(arch))
    )
