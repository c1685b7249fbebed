"""The Trainer's optimizer names (TrainingArguments.optim, axolotl's optimizer) as trainmem's optimizers.

Names and what each builds come from transformers' OptimizerNames (training_args.py) and its handlers
(trainer_optimizer.py, _OPTIMIZER_HANDLERS): adamw_torch is torch.optim.AdamW (foreach on CUDA),
adamw_torch_fused the same with fused=True, adafactor transformers' own Adafactor (one tensor at a time, no
first moment: beta1 is not passed), sgd torch.optim.SGD with optim_args such as "momentum=0.9", the bitsandbytes
names bitsandbytes' AdamW and Lion with 8- or 32-bit state.
"""

from __future__ import annotations

from typing import Any, Final

from app.configs.common import Reading

SAID, ASSUMED, IGNORED = "said", "assumed", "ignored"

# name -> (how sure, optimizer, implementation, the note)
TRAINER_OPTIMIZERS: Final[dict[str, tuple[str, str | None, str | None, str]]] = {
    "adamw_torch": (SAID, "adamw", "foreach", "torch.optim.AdamW, foreach by default on CUDA"),
    "adamw_torch_fused": (SAID, "adamw", "fused", "torch.optim.AdamW(fused=True)"),
    "adamw_hf": (SAID, "adamw", "for-loop", "transformers' own AdamW, one tensor at a time"),
    "adamw_apex_fused": (SAID, "adamw", "fused", "Apex's FusedAdam"),
    "adamw_torch_xla": (ASSUMED, "adamw", "foreach", "torch_xla's syncfree AdamW (TPU) counted as torch's AdamW"),
    "adamw_torch_npu_fused": (ASSUMED, "adamw", "fused", "torch_npu's fused AdamW (Ascend NPU) counted as torch's "
                                                         "fused AdamW"),
    "adamw_anyprecision": (ASSUMED, "adamw", "for-loop", "torchdistx's AnyPrecisionAdamW with its default fp32 "
                                                         "moments; dtypes set in optim_args are not read"),
    "adamw_torch_8bit": (ASSUMED, "adamw-8bit", "fused", "torchao's 8-bit AdamW keeps block-wise quantised moments "
                                                         "as bitsandbytes' does"),
    "adamw_bnb_8bit": (SAID, "adamw-8bit", "fused", "bitsandbytes' 8-bit AdamW"),
    "adamw_8bit": (SAID, "adamw-8bit", "fused", "bitsandbytes' 8-bit AdamW (an alias of adamw_bnb_8bit)"),
    "paged_adamw_8bit": (SAID, "paged-adamw-8bit", "fused", "bitsandbytes' paged 8-bit AdamW: the moments of "
                                                           "large tensors in unified memory, paged to the host "
                                                           "under pressure"),
    "paged_adamw_32bit": (SAID, "paged-adamw-32bit", "fused", "bitsandbytes' paged 32-bit AdamW: fp32 moments, "
                                                             "those of large tensors paged to the host under "
                                                             "pressure"),
    "lion_32bit": (SAID, "lion", "fused", "bitsandbytes' 32-bit Lion"),
    "paged_lion_32bit": (ASSUMED, "lion", "fused", "bitsandbytes' paged 32-bit Lion; paging is not modelled"),
    "lion_8bit": (ASSUMED, "lion", "fused", "bitsandbytes' 8-bit Lion: its 8-bit state is counted in the "
                                            "precision's optimizer-state dtype"),
    "paged_lion_8bit": (ASSUMED, "lion", "fused", "bitsandbytes' paged 8-bit Lion: its 8-bit state is counted in "
                                                  "the precision's optimizer-state dtype"),
    "adafactor": (SAID, "adafactor", "for-loop", "transformers' Adafactor: one tensor at a time, no first moment"),
    "sgd": (SAID, "sgd", "foreach", "torch.optim.SGD"),
    "adagrad": (ASSUMED, "sgd-momentum", "foreach", "torch.optim.Adagrad keeps one sum per parameter, as SGD's "
                                                    "momentum buffer"),
    "rmsprop": (ASSUMED, "sgd-momentum", "foreach", "torch.optim.RMSprop keeps one square average per parameter, "
                                                    "as SGD's momentum buffer (momentum or centred add more)"),
    "rmsprop_bnb": (ASSUMED, "sgd-momentum", "fused", "bitsandbytes' RMSprop: one buffer per parameter"),
    "rmsprop_bnb_32bit": (ASSUMED, "sgd-momentum", "fused", "bitsandbytes' 32-bit RMSprop: one buffer per parameter"),
    "schedule_free_adamw": (ASSUMED, "adamw", "foreach", "schedule-free AdamW keeps two buffers per parameter (z and "
                                                         "the second moment), as AdamW"),
    "schedule_free_radam": (ASSUMED, "adamw", "foreach", "schedule-free RAdam keeps two buffers per parameter"),
    "schedule_free_sgd": (ASSUMED, "sgd-momentum", "foreach", "schedule-free SGD keeps one buffer per parameter (z)"),
    "stable_adamw": (ASSUMED, "adamw", "foreach", "torch-optimi's StableAdamW keeps Adam's two moments"),
    # axolotl's own names (axolotl/utils/schemas/enums.py, CustomSupportedOptimizers)
    "optimi_adamw": (ASSUMED, "adamw", "foreach", "torch-optimi's AdamW keeps Adam's two moments"),
    "ao_adamw_8bit": (ASSUMED, "adamw-8bit", "fused", "torchao's 8-bit AdamW keeps block-wise quantised moments"),
    "adopt_adamw": (ASSUMED, "adamw", "for-loop", "ADOPT keeps Adam's two moments"),
}
NOT_MODELLED: Final = {
    "adamw_torch_4bit": "4-bit optimizer state", "ao_adamw_4bit": "4-bit optimizer state",
    "ao_adamw_fp8": "fp8 optimizer state", "ademamix": "AdEMAMix's three moments",
    "ademamix_8bit": "AdEMAMix's three moments", "paged_ademamix_32bit": "AdEMAMix's three moments",
    "paged_ademamix_8bit": "AdEMAMix's three moments", "rmsprop_bnb_8bit": "8-bit RMSprop state",
    "galore_adamw": "GaLore's low-rank projections", "galore_adamw_8bit": "GaLore's low-rank projections",
    "galore_adafactor": "GaLore's low-rank projections", "galore_adamw_layerwise": "GaLore's low-rank projections",
    "galore_adamw_8bit_layerwise": "GaLore's low-rank projections",
    "galore_adafactor_layerwise": "GaLore's low-rank projections", "q_galore_adamw8bit": "GaLore's projections",
    "apollo_adamw": "APOLLO's low-rank projections", "apollo_adamw_layerwise": "APOLLO's low-rank projections",
    "lomo": "LOMO's fused update in backward", "adalomo": "LOMO's fused update in backward",
    "grokadamw": "GrokAdamW's extra buffers", "came_pytorch": "CAME's confidence buffers", "muon": "Muon",
    "dion": "Dion", "sinkgd": "SinkGD", "flash_adamw": "FlashOptim's compressed state",
    "flash_adam": "FlashOptim's compressed state", "flash_sgd": "FlashOptim's compressed state",
    "flash_sgdw": "FlashOptim's compressed state", "flash_lion": "FlashOptim's compressed state",
}


def parse_optim_args(r: Reading, key: str, value: Any) -> dict[str, str]:
    """TrainingArguments.optim_args: "momentum=0.9,nesterov=True" (transformers' _parse_optim_args); axolotl also
    takes a mapping."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    text = r.string(key, value)
    args = {}
    for item in text.replace(" ", "").split(","):
        if not item:
            continue
        if item.count("=") != 1:
            raise r.error(key, f"must be comma-separated key=value pairs, got {item!r}")
        name, _, arg = item.partition("=")
        args[name] = arg
    return args


def read_trainer_optimizer(r: Reading, key: str, value: Any, optim_args: dict[str, str], args_key: str) -> None:
    name = r.string(key, value)
    lookup = name.lower()
    if lookup in NOT_MODELLED or lookup not in TRAINER_OPTIMIZERS:
        _not_modelled(r, key, name)
        return
    sure, optimizer, implementation, note = TRAINER_OPTIMIZERS[lookup]
    if lookup == "sgd" and _sgd_momentum(r, optim_args, args_key):
        optimizer = "sgd-momentum"
    if lookup == "rmsprop" and (optim_args.get("momentum") not in (None, "0", "0.0") or
                                optim_args.get("centered", "").lower() in ("true", "1", "yes")):
        r.ignore(key, "RMSprop with momentum or centred keeps two or three buffers per parameter: not modelled")
        r.default("training.optimizer", "adamw", key, "the config's optimizer is not modelled: AdamW assumed")
        return
    if sure == ASSUMED:
        r.assume("training.optimizer", optimizer, f"{name}: {note}")
    r.said("training.optimizer", optimizer, key, name, note=note)
    r.said("training.optimizer_implementation", implementation, key, name, note=note)
    if optimizer == "adafactor":
        r.said("training.adafactor_momentum", False, key, name, note="transformers' Adafactor gets no beta1")


def _not_modelled(r: Reading, key: str, name: str) -> None:
    """An optimizer trainmem does not count, or does not know: AdamW assumed in its place."""
    what = NOT_MODELLED.get(name.lower())
    r.ignore(key, f"not modelled: {what}" if what else f"{name!r} is not an optimizer trainmem knows")
    r.default("training.optimizer", "adamw", key, f"the config's optimizer ({name}) is not modelled: AdamW, "
                                                  "the Trainer's usual one, assumed")
    r.default("training.optimizer_implementation", "foreach", key, "with AdamW assumed: torch's default")


def _sgd_momentum(r: Reading, optim_args: dict[str, str], args_key: str) -> bool:
    """Whether optim_args give SGD a momentum (a number not zero), read along when they do."""
    if optim_args.get("momentum") in (None, "0", "0.0"):
        return False
    try:
        momentum = float(optim_args["momentum"])
    except ValueError:
        raise r.error(args_key, f"momentum must be a number, got {optim_args['momentum']!r}") from None
    if momentum:
        r.also(args_key, f"momentum={optim_args['momentum']}", "training.optimizer")
    return bool(momentum)
