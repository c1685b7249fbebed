"""The page's name for each control, in its own words: what its label says, and what its messages call it. A run's
declared inputs carry their labels (app/core/inputs.py); the page's own controls and the model's fields are named
here."""

from __future__ import annotations

from typing import Final

from app.core.finetuning import Finetuning
from app.core.inputs import declarations
from app.core.setup import Parallelism, Training

# Controls named apart from their field: fine-tuning's dropout would clash with the architecture's.
CONTROL_NAMES: Final = {"finetuning.dropout": "lora_dropout"}
SECTIONS: Final = {"training": Training, "parallelism": Parallelism, "finetuning": Finetuning}
DECLARED_CONTROLS: Final = {CONTROL_NAMES.get(f"{section}.{name}", name): (section, name, spec)
                            for section, cls in SECTIONS.items() for name, spec in declarations(cls).items()}

_OWN: Final[dict[str, str]] = {
    "source": "Describe the model by",
    "preset": "Model",
    "num_params": "Parameter count",
    "hf_config": "config.json",
    "hub": "Hub id",
    "precision": "Precision",
    "gpu": "GPU",
    "gpu_capacity": "GPU memory",
    "gpu_like": "Context and interconnect as on",
    "unit": "Sizes in",
    "weights": "Weights",
    "gradients": "Gradients",
    "master_weights": "Master weights",
    "optimizer_states": "Optimizer state",
    "activations": "Activations",
    "num_hidden_layers": "Layers",
    "hidden_size": "Hidden size",
    "num_attention_heads": "Attention heads",
    "num_key_value_heads": "Key/value heads",
    "head_dim": "Head size",
    "intermediate_size": "MLP inner size",
    "vocab_size": "Vocabulary size",
    "max_position_embeddings": "Max positions",
    "tie_word_embeddings": "Tied input and output embeddings",
    "attention_bias": "Attention biases",
    "qkv_bias": "Q, K, V biases",
    "mlp_bias": "MLP biases",
    "mlp": "MLP",
    "norm": "Norm",
    "norms_per_layer": "Norms per layer",
    "position_embedding": "Positions",
    "dropout": "Dropout",
    "attention_dropout": "Attention dropout",
    "num_local_experts": "Experts per layer",
    "num_experts_per_tok": "Experts per token",
    "moe_intermediate_size": "Expert MLP inner size",
    "norm_topk_prob": "Renormalise routing weights",
    "qk_norm": "Query/key norms",
    "host_ram": "Host RAM per node",
    "target_modules": "Target modules",
    "save_embed_tokens": "Train the embeddings in full (embed_tokens)",
    "save_lm_head": "Train the output layer in full (lm_head)",
    "bitsandbytes_version": "bitsandbytes version",
}
LABELS: Final = {**_OWN, **{control: spec.label for control, (_, _, spec) in DECLARED_CONTROLS.items()}}
