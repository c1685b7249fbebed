"""LoRA targets as one string, against peft 0.21 on small real models on CPU.

Each case builds a family's model from a small config (no download), hands peft's `LoraConfig` the case's
target_modules (a regular expression or all-linear, as a string) and counts the trainable parameters
(`get_nb_trainable_parameters`), or records peft's refusal; trainmem's estimate of the same config and targets
gives its trainable count, or its refusal. An expression trainmem accepts must give peft's count exactly; one it
refuses (adapters on some layers only, a container, the output layer) is shown with what peft did.

    python -m validation.lora_targets          # one line per case; exit 1 on a mismatch
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Final

from app import core
from app.core.finetuning import Finetuning

LAYERS: Final = 12  # two-digit layer indices, so that "1" and "11" differ
_SIZES: Final = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "num_hidden_layers": LAYERS, "vocab_size": 128, "max_position_embeddings": 64, "pad_token_id": 0}
# Each family's config.json fields, as transformers 5.24 reads them.
CONFIGS: Final[dict[str, dict[str, Any]]] = {
    "llama": {"model_type": "llama", **_SIZES},
    "qwen2": {"model_type": "qwen2", **_SIZES},
    "glm4": {"model_type": "glm4", **_SIZES},
    "starcoder2": {"model_type": "starcoder2", **_SIZES},
    "phi": {"model_type": "phi", **_SIZES},
    "gpt_neox": {"model_type": "gpt_neox", **_SIZES, "num_key_value_heads": 4},
    "falcon": {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": LAYERS,
               "vocab_size": 128, "multi_query": True, "new_decoder_architecture": False},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": LAYERS, "vocab_size": 128,
             "n_positions": 64},
}


@dataclass(frozen=True)
class Case:
    family: str
    targets: str
    rank: int = 8

    @property
    def label(self) -> str:
        return f"{self.family} r={self.rank} {self.targets}"


CASES: Final = (
    *(Case(family, targets) for family in ("llama", "qwen2") for targets in (
        r".*\.(q_proj|v_proj)", r".*self_attn\.[qkvo]_proj", r"model\.layers\.\d+\.mlp\..*", "all-linear",
        r"(?!.*mlp).*_proj", r".*layers\.(0|1|2)\..*q_proj", r".*layers\.1\d?\.self_attn\.q_proj", r".*",
        r".*self_attn", r"lm_head|.*q_proj", r"q_proj", r".*(q_proj|norm)")),
    Case("glm4", r".*\.(gate_up_proj|o_proj)"),
    Case("starcoder2", r".*mlp\.c_.*"),
    Case("phi", r".*\.(dense|fc1)", rank=4),
    Case("gpt_neox", r".*attention\.(query_key_value|dense)"),
    Case("gpt_neox", r".*dense.*"),
    Case("falcon", r".*self_attention\.query_key_value"),
    Case("gpt2", r".*\.c_proj"),
    Case("gpt2", r".*attn\.c_proj"),
    Case("gpt2", r"transformer\.h\.\d+\.mlp\.c_(fc|proj)"),
    Case("gpt2", r".*\.h\.[0-5]\.attn\.c_attn"),
    # What all-linear adapts in each family: every linear module of the layers, not the output layer.
    *(Case(family, "all-linear") for family in ("glm4", "starcoder2", "phi", "gpt_neox", "falcon", "gpt2")),
)


def measure(case: Case) -> int | str:
    """peft's trainable parameters, or its refusal."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**CONFIGS[case.family])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    try:
        peft_model = get_peft_model(model, LoraConfig(r=case.rank, lora_alpha=2 * case.rank,
                                                      target_modules=case.targets))
    except ValueError as error:
        return f"refused: {str(error).splitlines()[0][:90]}"
    return int(peft_model.get_nb_trainable_parameters()[0])


def predict(case: Case) -> int | str:
    """trainmem's trainable parameters, or its refusal."""
    arch = core.architecture_from_hf_config(CONFIGS[case.family])
    training = core.Training(micro_batch_size=1, seq_len=16, precision=core.precision_preset("fp32"),
                             finetuning=Finetuning(method="lora", rank=case.rank, target_modules=case.targets))
    try:
        return core.estimate(architecture=arch, training=training, device="cpu").trainable_param_count
    except core.DomainError as error:
        return f"refused: {error.message[:90]}"


def agrees(measured: int | str, predicted: int | str) -> bool:
    """An accepted expression gives peft's count; a refusal is always allowed (it is shown)."""
    return isinstance(predicted, str) or measured == predicted


def main() -> int:
    failed = 0
    for case in CASES:
        measured, predicted = measure(case), predict(case)
        failed += not agrees(measured, predicted)
        mark = "ok " if agrees(measured, predicted) else "BAD"
        print(f"{mark} {case.label:55s} peft: {measured}\n    {'':55s} trainmem: {predicted}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
