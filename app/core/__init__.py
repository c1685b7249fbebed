"""trainmem's memory model: pure Python, standard library only.

Nothing here knows about HTTP, HTML or pydantic, so the API, the page, the command line and a
validation script on a bare PyTorch machine all import the same numbers.
"""

from app.core.activations import ActivationSetup, SavedTensor
from app.core.architecture import Architecture, ParamTensor, param_count, parameter_tensors
from app.core.errors import DomainError
from app.core.memory import (
    CATEGORIES,
    DEFAULT_FRAMEWORK_OVERHEAD_BYTES,
    Breakdown,
    Estimate,
    Parallelism,
    Term,
    Training,
    activation_setup,
    estimate,
)
from app.core.gpus import Gpu, GpuFit, get_gpu, gpu_catalogue
from app.core.hf_config import SUPPORTED_MODEL_TYPES, architecture_from_hf_config
from app.core.optimizers import OPTIMIZER_INFO, OPTIMIZERS
from app.core.precision import PRECISION_PRESETS, Precision, precision_preset
from app.core.presets import ModelPreset, get_preset, model_presets

__all__ = [
    "CATEGORIES", "DEFAULT_FRAMEWORK_OVERHEAD_BYTES", "OPTIMIZERS", "OPTIMIZER_INFO", "PRECISION_PRESETS",
    "SUPPORTED_MODEL_TYPES", "ActivationSetup", "Architecture", "Breakdown", "DomainError", "Estimate", "Gpu",
    "GpuFit", "ModelPreset", "ParamTensor", "Parallelism", "Precision", "SavedTensor", "Term", "Training",
    "activation_setup", "architecture_from_hf_config", "estimate", "get_gpu", "get_preset", "gpu_catalogue",
    "model_presets", "param_count", "parameter_tensors", "precision_preset",
]
