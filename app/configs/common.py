"""What every reader shares: the facts a file states, the lists of what was read, ignored and assumed, type checks
that name the key at fault, and the reasons a key is ignored.

A reader turns one parsed file into facts: a fact is a value for one setting (an estimate-body field such as
``training.micro_batch_size``, or a step towards one such as ``amp``, the mixed precision a launcher asks for),
with the key it came from. Facts from several files are merged in `app.configs.merge`, which also turns them into
the estimate body.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal

from app import core
from app.core import DomainError

DEFAULT_MODEL_PRESET: Final = "llama-3-8b"  # the page's default model

Origin = Literal["said", "default", "derived"]


@dataclass
class Fact:
    """One setting a file states (`said`), a framework default it falls back to (`default`), or a value worked
    out from others (`derived`). `key` is the key path in the file, `raw` the value as written there, `field`
    the estimate-body field it feeds (for the understood list), `why` the reason for a default."""

    name: str
    value: Any
    key: str
    file: int
    origin: Origin = "said"
    raw: Any = None
    field: str | None = None
    why: str = ""
    note: str = ""
    kind: str = ""  # the kind of file it came from


class Reading:
    """Everything read from one file: its facts, and the keys it ignores with the reason for each."""

    def __init__(self, kind: str, file: int, where: str) -> None:
        self.kind = kind
        self.file = file
        self.where = where  # the body path of the text, e.g. "text" or "files.1.text"
        self.facts: list[Fact] = []
        self.ignored: list[dict[str, Any]] = []
        self.assumed: list[dict[str, Any]] = []
        self.autos: dict[str, str] = {}  # fact name -> key of a DeepSpeed "auto" value waiting to be filled
        self.understood: list[dict[str, Any]] = []  # keys read alongside a fact (an optimizer's parameters)
        self.children: list[Reading] = []  # a config nested in this one (the Trainer's deepspeed dict)

    def child(self, kind: str) -> Reading:
        nested = Reading(kind, self.file, self.where)
        self.children.append(nested)
        return nested

    # --- recording ----------------------------------------------------------------------------------------

    def said(self, name: str, value: Any, key: str, raw: Any = None, *, field: str | None = None,
             note: str = "") -> None:
        """A fact the file states; `field` is the body field it shows under in the understood list ("" for none)."""
        self.facts.append(Fact(name, value, key, self.file, "said", value if raw is None else raw,
                               _field_of(name) if field is None else field, note=note, kind=self.kind))

    def also(self, key: str, raw: Any, field: str, note: str = "") -> None:
        """A key read to decide a fact recorded under another key (e.g. an optimizer's fused=True)."""
        self.understood.append({"key": key, "value": raw, "field": field, "file": self.file, "note": note or None})

    def default(self, name: str, value: Any, key: str, why: str) -> None:
        self.facts.append(Fact(name, value, key, self.file, "default", value, _field_of(name), why=why,
                               kind=self.kind))

    def ignore(self, key: str, why: str | None = None) -> None:
        """A key left aside; without a `why`, the reason from the key's name (worked out when the list is answered)."""
        self.ignored.append({"key": key, "why": why, "file": self.file})

    def assume(self, field: str, value: Any, why: str) -> None:
        self.assumed.append({"field": field, "value": value, "why": why, "file": self.file})

    def error(self, key: str, message: str) -> DomainError:
        return DomainError(f"{self.where}.{key}" if key else self.where, message)

    def ignore_all(self, data: Any, prefix: str, why: str | None = None) -> None:
        """Report every leaf under `data` (a dict or a value) as ignored, with `why` or each key's own reason."""
        if isinstance(data, dict) and data:
            for key, value in data.items():
                self.ignore_all(value, f"{prefix}.{key}" if prefix else str(key), why)
        else:
            self.ignore(prefix, why)

    # --- type checks ----------------------------------------------------------------------------------------

    def integer(self, key: str, value: Any, *, low: int = 1, high: int = 1 << 30) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and not math.isinf(value):
                value = int(value)  # DeepSpeed and the Trainer take 8.0 as 8
            else:
                raise self.error(key, f"must be an integer, got {describe(value)}")
        if not low <= value <= high:
            raise self.error(key, f"must be between {low:,} and {high:,}, got {value:,}")
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {describe(value)}")
        return value

    def string(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {describe(value)}")
        return value

    def mapping(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, f"must be a mapping of keys to values, got {describe(value)}")
        return value

    def choice(self, key: str, value: Any, choices: dict[str, Any] | tuple[str, ...], *,
               fold_case: bool = False) -> Any:
        text = self.string(key, value)
        lookup = text.lower() if fold_case else text
        options = {k.lower() if fold_case else k: k for k in choices}
        if lookup not in options:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {text!r}")
        original = options[lookup]
        return choices[original] if isinstance(choices, dict) else original


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return repr(value)


def json_safe(value: Any) -> Any:
    """A value that JSON can carry: non-finite floats become their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


_FIELD_OF_PSEUDO: Final = {
    "amp": "training.precision",
    "ds_precision": "training.precision",
    "load_dtype": "training.precision",
    "engine": "parallelism.zero_stage",
    "train_batch_size": "parallelism.data",
    "world_size": "parallelism.data",
    "global_batch_size": "training.gradient_accumulation_steps",
    "context_parallel": "parallelism.data",
    "finetuning": "finetuning.method",
}


def _field_of(name: str) -> str:
    return _FIELD_OF_PSEUDO.get(name, name)


# --- why a key is ignored ------------------------------------------------------------------------------------

LORA: Final = ("a LoRA setting that changes no count trainmem keeps (its scale, initialisation or variant); rank, "
                "targets, dropout and saved modules are read")
QUANTISED: Final = "quantised weights (4-bit, 8-bit) are not modelled yet: the estimate keeps the weights in the precision's dtype"
OFFLOAD: Final = ("this offload is not modelled (trainmem moves the optimizer state, or it and the parameters, to "
                   "host memory: parallelism.offload)")
OFFLOAD_ACTIVATIONS: Final = ("this activation offloading is not modelled (training.activation_offload models "
                               "torchtune's and transformers' offloaded checkpoints, with every layer recomputed): the "
                               "activations are counted on the GPU")
OFFLOAD_DETAIL: Final = "how offloaded buffers are pinned, paged or placed: no GPU memory of its own"
FP8: Final = ("this fp8 training is not modelled (training.fp8 models torchao's float8 and Transformer Engine's FP8 "
              "as Megatron-LM runs it): the estimate uses the precision's 16- or 32-bit dtypes")
NO_MEMORY: Final = "does not change how much memory a training step takes"
NOT_READ: Final = "not read by trainmem"
COMMS: Final = "communication buckets and overlap are not modelled: the estimate counts the tensors themselves"
PATH: Final = "a path or an address: reported, never opened or fetched"
MOE: Final = ("a mixture-of-experts setting trainmem does not read here (it models transformers' MoE layers from "
               "the model's own fields, not Megatron-LM's or torchtitan's)")
COMPILE: Final = ("this compilation is not modelled (training.compile models inductor over each decoder layer, as "
                  "torch_compile imports): the estimate follows PyTorch's eager kernels")

_REASONS: Final[tuple[tuple[str, str | None], ...]] = (
    (r"^(dataloader|trackio|eval|log|save|hub|report|wandb|mlflow|push)", None),  # NO_MEMORY, set below
    (r"lora|(^|_)adapter|peft|(^|_)dora", LORA),
    (r"load_in_(4|8)bit|bnb_|quant|gptq|awq|(^|_)4bit|(^|_)8bit", QUANTISED),
    (r"offload|nvme|pin_memory", OFFLOAD),
    (r"fp8|float8|mxfp|(^|_)mx(_|$)|transformer_engine", FP8),
    (r"expert|moe|num_experts|router", MOE),
    (r"compile|dynamo|inductor|cuda_graph", COMPILE),
    (r"bucket|overlap_comm|overlap_grad|overlap_param|allgather|reduce_scatter|contiguous_gradients|prefetch|"
     r"sub_group_size|max_live_parameters|max_reuse_distance|persistence_threshold|round_robin|comm_|nccl|"
     r"ddp_|backward_prefetch|forward_prefetch|limit_all_gathers|sync_module_states|use_orig_params|timeout",
     COMMS),
    (r"(^|_)lr($|_)|learning_rate|scheduler|warmup|decay|beta|eps(ilon)?$|momentum|max_grad_norm|clip|"
     r"gradient_clipping|max_norm|loss_scale|hysteresis|initial_scale|label_smoothing|dropout|seed|"
     r"neftune|weight_decay", NO_MEMORY),
    (r"(^|_)(path|dir|file|folder|url|uri|hub|repo|token|project|entity|wandb|mlflow|tensorboard|report_to|"
     r"run_name|output|logging|log_|save|checkpoint$|eval|metric|push|resume|dataset|data_|tokenizer|"
     r"chat_template|prompt|special_tokens|num_train_epochs|epochs|max_steps|steps$|profil|print|debug|"
     r"wall_clock|flops_profiler|tqdm)", NO_MEMORY),
)


_COMPILED: Final = tuple((re.compile(pattern), why) for pattern, why in _REASONS)


COMPILE_NOTE: Final = ("each decoder layer counted as compiled, as measured for torchtune's per-layer compile; the Trainer "
                       "compiles the whole model, whose embedding, head and loss are counted as eager: high by 6% to "
                       "13% in the small models measured (docs/VALIDATION.md, \"Compiled steps\")")


def read_torch_compile(data: dict[str, Any], r: Reading, *, on_values: tuple[Any, ...] = (True,)) -> tuple[str, ...]:
    """The Trainer's torch_compile (axolotl passes its own on): inductor, its default backend, to training.compile;
    another backend or the mode and options left aside. The keys read."""
    value = data.get("torch_compile")
    backend = data.get("torch_compile_backend") or "inductor"
    if value is not None:
        on = value in on_values
        if on and backend != "inductor":
            r.ignore("torch_compile", f"the {backend} backend is not modelled: the estimate follows eager kernels")
        else:
            r.said("training.compile", "inductor" if on else "none", "torch_compile", value,
                   note=COMPILE_NOTE if on else "")
    if data.get("torch_compile_backend") is not None:
        r.ignore("torch_compile_backend", "inductor is what training.compile models" if backend == "inductor"
                 else COMPILE)
    for key in ("torch_compile_mode", "torch_compile_options"):
        if data.get(key) is not None:
            r.ignore_all(data[key], key, "compile modes and options (CUDA graphs, autotuning) are not modelled")
    return "torch_compile", "torch_compile_backend", "torch_compile_mode", "torch_compile_options"


def reason(key: str) -> str:
    """Why trainmem leaves a key aside, from its name."""
    name = key.rsplit(".", 1)[-1].lower().lstrip("-").replace("-", "_")
    whole = key.lower().replace("-", "_")
    for pattern, why in _COMPILED:
        if pattern.search(name) or (why in (LORA, OFFLOAD, FP8, MOE) and pattern.search(whole)):
            return why or NO_MEMORY
    return NOT_READ


# --- model ids --------------------------------------------------------------------------------------------

_VARIANT_SUFFIXES: Final = ("-instruct", "-chat-hf", "-chat", "-hf", "-it", "-base")


@cache
def _preset_repos() -> dict[str, str]:
    """Each preset's Hugging Face repository id, lower-cased -> preset id."""
    return {preset.hub_id.lower(): preset.id for preset in core.model_presets().values() if preset.hub_id}


def preset_repo(preset_id: str) -> str | None:
    """The Hugging Face repository id a preset's numbers come from, e.g. 'meta-llama/Meta-Llama-3-8B'."""
    return core.get_preset(preset_id).hub_id


def preset_for_model_id(model_id: str) -> tuple[str | None, str]:
    """The preset a model id names, and how it matched: ('llama-3-8b', 'exact') for 'meta-llama/Meta-Llama-3-8B';
    a mirror ('NousResearch/Meta-Llama-3-8B') matches by its name, an instruction-tuned variant
    ('...-8B-Instruct') by its base's name (same architecture). (None, why) when nothing matches."""
    text = model_id.strip().rstrip("/").lower()
    repos = _preset_repos()
    if text in repos:
        return repos[text], "exact"
    if text in core.model_presets():
        return text, "exact"
    name = text.rsplit("/", 1)[-1]
    by_name = {repo.rsplit("/", 1)[-1]: preset for repo, preset in repos.items()}
    if name in by_name:
        return by_name[name], "name"
    for suffix in _VARIANT_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in by_name:
            return by_name[name[: -len(suffix)]], "variant"
    return None, "no preset has this name"


def model_from_id(reading: Reading, key: str, value: Any) -> None:
    """A model id or path (axolotl's base_model, a tokenizer's model): the preset it names, else ignored."""
    model_id = reading.string(key, value)
    preset, how = preset_for_model_id(model_id)
    if preset is None:
        reading.ignore(key, f"{model_id!r} is not a model trainmem has a preset for (GET /api/v1/presets lists "
                            f"{len(core.model_presets())}, with their Hub ids); the id is reported, never fetched: "
                            "give the architecture in the estimate's model")
        return
    note = {"exact": "", "name": f"matched by its name to the preset {preset}",
            "variant": f"a fine-tuned variant of the preset {preset}'s model: same architecture"}[how]
    reading.said("model", {"preset": preset}, key, model_id, field="model.preset", note=note)
