"""trainmem's memory model: pure Python, standard library only.

Nothing here knows about HTTP, HTML or pydantic, so the API, the page, the command line and a
validation script on a bare PyTorch machine all import the same numbers.

Rooms, by noun: `setup` (the inputs and their limits), `states` (model states and ZeRO sharding),
`stages` (pipeline stages by kind), `ledger` (every buffer with its lifetime), `timeline` (events
and the peak), `estimate` (the whole answer), `warnings`; `activations`, `architecture`,
`optimizers` and `precision` hold the formulas and registries they draw on.
"""

from app.core.activations import (
    ATTENTION_CHOICES,
    CHECKPOINTING_CHOICES,
    COMPILE_CHOICES,
    IMPLEMENTATION_CHOICES,
    KERNELS,
    ActivationSetup,
    SavedTensor,
)
from app.core.architecture import Architecture, param_count, parameter_tensors
from app.core.categories import CATEGORIES, CATEGORY_TABLE, Breakdown
from app.core.errors import DomainError
from app.core.estimate import Estimate, estimate
from app.core.gpus import Gpu, GpuFit, custom_gpu, get_gpu, gpu_catalogue
from app.core.hf_config import SUPPORTED_MODEL_TYPES, architecture_from_hf_config
from app.core.ledger import Buffer
from app.core.optimizers import OPTIMIZER_IMPLEMENTATIONS, OPTIMIZER_INFO, OPTIMIZERS
from app.core.param_tensors import ParamTensor
from app.core.precision import PRECISION_PRESETS, Precision, precision_preset
from app.core.presets import ModelPreset, PublishedCount, get_preset, hub_preset, model_presets, preset_aliases
from app.core.setup import (
    DEEPSPEED_REDUCE_BUCKET_SIZE,
    DEFAULT_FRAMEWORK_OVERHEAD_BYTES,
    FP8_RECIPES,
    FRAMEWORKS,
    LOOPS,
    Parallelism,
    Training,
    activation_setup,
    data_step,
)
from app.core.timeline import Peak, Point

__all__ = [
    "ATTENTION_CHOICES", "CATEGORIES", "CATEGORY_TABLE", "CHECKPOINTING_CHOICES", "COMPILE_CHOICES", "DEEPSPEED_REDUCE_BUCKET_SIZE",
    "DEFAULT_FRAMEWORK_OVERHEAD_BYTES", "FP8_RECIPES",
    "FRAMEWORKS", "IMPLEMENTATION_CHOICES", "KERNELS", "LOOPS", "OPTIMIZERS", "OPTIMIZER_IMPLEMENTATIONS", "OPTIMIZER_INFO",
    "PRECISION_PRESETS", "SUPPORTED_MODEL_TYPES", "ActivationSetup", "Architecture", "Breakdown", "Buffer",
    "DomainError", "Estimate", "Gpu", "GpuFit", "ModelPreset", "ParamTensor", "Parallelism", "Peak", "Point",
    "Precision", "PublishedCount", "SavedTensor", "Training", "activation_setup", "architecture_from_hf_config", "data_step", "estimate",
    "custom_gpu", "get_gpu", "get_preset", "gpu_catalogue", "hub_preset", "model_presets", "preset_aliases",
    "param_count", "parameter_tensors", "precision_preset",
]
