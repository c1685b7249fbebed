"""Facts from one or more files into one estimate body, with what was understood, ignored and assumed.

Several files describe one run: a launcher's config (accelerate), the script's arguments (the Trainer's,
axolotl's) and the engine's config (DeepSpeed). They merge in that order, later ones winning where two say
different things, as the frameworks resolve them:

1. accelerate's launch config is the floor: the script's arguments override it (TrainingArguments sets
   accelerate's mixed precision when bf16 or fp16 is true, and leaves accelerate's otherwise).
2. The Trainer's or axolotl's arguments fill DeepSpeed's "auto" values. Where DeepSpeed states a value the
   Trainer also has (micro-batch, accumulation, bf16/fp16), the two must agree: transformers refuses a
   mismatch (HfTrainerDeepSpeedConfig.trainer_config_process, fill_match), and so does the import, naming
   both keys.
3. DeepSpeed's config decides its own settings (ZeRO stage, optimizer when it names one).

A torchtitan or Megatron-LM config describes a whole run and stands alone.

The framework that runs the model brings its own memory convention (training.framework: DeepSpeed's estimator,
FSDP2's, Megatron-LM's distributed optimizer). Where the core does not model that convention with the rest of the
setup (fine-tuning under FSDP2, Megatron-LM's FSDP under its distributed optimizer's convention), the body keeps the
pytorch convention and says why, in the core's own words.
"""

from __future__ import annotations

from typing import Any, Final

from app import core, wire
from app.configs.common import DEFAULT_MODEL_PRESET, Fact, Reading, json_safe, reason
from app.configs.merge_precision import (
    MASTER_COPY,
    bf16_master,
    fsdp_precision,
    loaded_precision,
    megatron_precision,
)
from app.core import DomainError
from app.core.rules import validate_setup

RANK: Final = {"accelerate": 0, "training-arguments": 1, "axolotl": 1, "deepspeed": 2, "torchtitan": 1, "megatron": 1}
ARGUMENTS: Final = ("training-arguments", "axolotl")
MUST_MATCH: Final = ("training.micro_batch_size", "training.gradient_accumulation_steps")
TRAINING_FIELDS: Final = ("micro_batch_size", "seq_len", "precision", "optimizer", "optimizer_implementation",
                          "adafactor_momentum", "activation_checkpointing", "attention", "implementation", "loop",
                          "gradient_accumulation_steps", "loss", "framework", "fp8", "recompute_every",
                          "recompute_first_layers", "use_reentrant", "compile", "activation_offload",
                          "activation_offload_layers")
# Fields that mean something only where a file states them (which layers recomputation applies to, and how; a
# compiled step; activation offloading): in the request then, left out (the API's default) otherwise.
STATED_ONLY: Final = ("training.recompute_every", "training.recompute_first_layers", "training.use_reentrant",
                      "training.compile", "training.activation_offload", "training.activation_offload_layers")
PARALLELISM_FIELDS: Final = ("data", "tensor", "pipeline", "sequence_parallel", "zero_stage", "offload", "gpus_per_node",
                              "context", "virtual_stages", "reduce_bucket_size", "expert", "expert_tensor", "expert_load",
                              "first_stage_layers", "last_stage_layers")
FINETUNING_FIELDS: Final = ("method", "rank", "target_modules", "dropout", "modules_to_save", "quantization")
MAX_ENTRIES: Final = 2000  # per list: a pathological file of thousands of keys is summarised past this
DEFAULT_WHY: Final = "not in the config: trainmem's default"
# The preset for the mixed precision asked for ("no" for none) under autocast (merge_precision has the engines' own).
AUTOCAST: Final = {"bf16": "autocast-bf16", "fp16": "autocast-fp16", "no": "fp32"}  # autocast over fp32 weights


def defaults() -> dict[str, Any]:
    training, parallelism = core.Training(), core.Parallelism()
    values = {f"training.{name}": getattr(training, name) for name in TRAINING_FIELDS}
    values["training.precision"] = "bf16-fp32-master"
    values.update({f"parallelism.{name}": getattr(parallelism, name) for name in PARALLELISM_FIELDS})
    return values


class _Merge:
    def __init__(self, readings: list[Reading]) -> None:
        self.readings = [r for top in readings for r in _flatten(top)]
        self.several = len(readings) > 1
        self.where = {r.file: r.where for r in readings}
        self.facts: dict[str, list[tuple[int, Fact, Reading]]] = {}
        for reading in self.readings:
            for fact in reading.facts:
                self.facts.setdefault(fact.name, []).append((RANK[reading.kind], fact, reading))
        self.understood: list[dict[str, Any]] = []
        self.ignored: list[dict[str, Any]] = [entry for r in self.readings for entry in r.ignored]
        self.assumed: list[dict[str, Any]] = [entry for r in self.readings for entry in r.assumed]
        self.values: dict[str, Any] = {}
        self.sources: dict[str, tuple[int, str]] = {}  # field -> (file, key) it came from

    # --- facts ------------------------------------------------------------------------------------------

    def source(self, fact: Fact) -> str:
        return f"files[{fact.file}] {fact.key}" if self.several else fact.key

    def error_at(self, fact: Fact, message: str) -> DomainError:
        key = fact.key
        return DomainError(f"{self.where[fact.file]}.{key}" if key else self.where[fact.file], message)

    def pick(self, name: str) -> Fact | None:
        """The fact that decides `name`: the last said in the highest-ranked file, else the highest default."""
        group = self.facts.get(name, [])
        said = [(rank, fact) for rank, fact, _ in group if fact.origin == "said"]
        pool = said or [(rank, fact) for rank, fact, _ in group]
        if not pool:
            return None
        top = max(rank for rank, _ in pool)
        return [fact for rank, fact in pool if rank == top][-1]

    def settle(self, name: str, winner: Fact | None) -> None:
        """Record the winner as understood (said) or assumed (default), the agreeing as understood, and the
        overridden as ignored."""
        if winner is None:
            return
        for _, fact, _ in self.facts.get(name, []):
            if fact.origin != "said":
                continue
            if fact is winner or fact.value == winner.value:
                self.understand(fact)
            else:
                self.ignored.append({"key": fact.key, "file": fact.file,
                                     "why": f"overridden by {self.source(winner)} ({_show(winner.raw)})"})
        if winner.origin != "said" and winner.field:
            self.assumed.append({"field": winner.field, "value": json_safe(_shown_value(winner)), "why": winner.why,
                                 "file": winner.file})

    def understand(self, fact: Fact) -> None:
        if fact.field:
            self.understood.append({"key": fact.key, "value": json_safe(fact.raw), "field": fact.field,
                                    "file": fact.file, "note": fact.note or None})
            self.sources.setdefault(fact.field, (fact.file, fact.key))

    def must_match(self, name: str) -> None:
        """DeepSpeed's value against the Trainer's (or axolotl's), which transformers requires to agree."""
        group = self.facts.get(name, [])
        ds = [fact for rank, fact, r in group if r.kind == "deepspeed" and fact.origin == "said"]
        args = [(fact, r) for rank, fact, r in group if r.kind in ("training-arguments", "axolotl")]
        if not ds or not args:
            return
        theirs, reading = args[-1]
        mine = ds[-1]
        if mine.value != theirs.value:
            raise self.mismatch(mine, theirs, reading)

    def mismatch(self, mine: Fact, theirs: Fact, reading: Reading) -> DomainError:
        default = " (its default)" if theirs.origin == "default" else ""
        who = "axolotl" if reading.kind == "axolotl" else "the Trainer"
        return self.error_at(mine, f"is {_show(mine.raw)} but {self.source(theirs)} is {_show(theirs.value)}"
                                   f"{default}: {who} refuses a DeepSpeed config that disagrees with its arguments "
                                   "(transformers' HfTrainerDeepSpeedConfig: 'mismatch')")

    # --- the body -----------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.check_engines()
        for name in MUST_MATCH:
            self.must_match(name)
        plain = [f"training.{n}" for n in TRAINING_FIELDS if n != "precision"] + \
                [f"parallelism.{n}" for n in PARALLELISM_FIELDS]
        for name in plain:
            winner = self.pick(name)
            self.fill_auto(name, winner)
            self.settle(name, winner)
            if winner is not None:
                self.values[name] = winner.value
        self.batch_and_data()
        self.precision()
        model = self.model()
        self.fill_defaults()
        self.gather_understood()
        request = {"model": model, "training": self.section("training", TRAINING_FIELDS),
                   "parallelism": self.section("parallelism", PARALLELISM_FIELDS)}
        finetuning = self.finetuning()
        if finetuning:
            request["finetuning"] = finetuning
        self.fit_framework(request)
        return request

    def section(self, name: str, fields: tuple[str, ...]) -> dict[str, Any]:
        """The request's `name` section: each of its fields that has a value."""
        return {field: self.values[f"{name}.{field}"] for field in fields if f"{name}.{field}" in self.values}

    def fill_defaults(self) -> None:
        """trainmem's default for each field no file decides, assumed once with its reason."""
        explained = {entry["field"] for entry in self.assumed}
        for field, value in defaults().items():
            if field in self.values or field in STATED_ONLY:
                continue
            self.values[field] = value
            if field == "training.adafactor_momentum" and self.values.get("training.optimizer") != "adafactor":
                continue  # it means nothing for another optimizer
            if field in explained:
                continue  # already said why (an "auto" left to the Trainer): once is enough
            self.assumed.append({"field": field, "value": json_safe(value), "why": DEFAULT_WHY, "file": None})

    def gather_understood(self) -> None:
        """The keys each reading read beside its facts, with the field each one feeds."""
        for reading in self.readings:
            self.understood.extend(reading.understood)
            for entry in reading.understood:
                if entry["field"]:
                    self.sources.setdefault(entry["field"], (entry["file"], entry["key"]))

    def fit_framework(self, request: dict[str, Any]) -> None:
        """The framework's convention, its FP8 recipe and torchtitan's op-level recomputation where the core models
        them with the rest of the setup, else the plain choice (the pytorch convention, no FP8, selective
        recomputation) with the core's reason: what a file implies about them never makes the import refuse it."""
        self._fit(request, "framework", "pytorch", "convention", "counted with the pytorch convention")
        self._fit(request, "fp8", "none", "FP8 recipe", "counted without FP8")
        if request["training"].get("compile", "none") != "none":
            self._fit(request, "compile", "none", "compiler", "counted as eager, which keeps more: an upper bound")
        if request["training"]["activation_checkpointing"] == "op":
            self._fit(request, "activation_checkpointing", "selective", "recomputation",
                      "counted as selective recomputation of the attention core, which keeps more: an upper bound")

    def _fit(self, request: dict[str, Any], name: str, plain_value: str, what: str, instead: str) -> None:
        chosen = request["training"][name]
        refusal = None if chosen == plain_value else _refusal(request)
        if refusal is None:
            return
        plain = _refusal(request | {"training": request["training"] | {name: plain_value}})
        if plain is not None and (plain.field, plain.message) == (refusal.field, refusal.message):
            return  # not the choice's doing: the import reports it at the key it came from
        field = f"training.{name}"
        request["training"][name] = self.values[field] = plain_value
        why = f"the {chosen} {what} does not apply to this setup: {refusal.message}"
        if refusal.field != field:
            why += f" ({refusal.field})"
        self.unsay(field, plain_value, why if "pytorch convention" in why else f"{why}: {instead}", why)

    def unsay(self, field: str, value: Any, assumed_why: str, ignored_why: str) -> None:
        """`field` set to `value` instead of what the files said: their keys ignored, the value assumed."""
        for entry in self.understood:
            if entry["field"] == field:
                self.ignored.append({"key": entry["key"], "file": entry["file"], "why": ignored_why})
        self.understood = [entry for entry in self.understood if entry["field"] != field]
        source = self.sources.pop(field, None)
        self.assumed = [entry for entry in self.assumed if entry["field"] != field]
        self.assumed.append({"field": field, "value": value, "file": source[0] if source else None,
                             "why": assumed_why})

    def finetuning(self) -> dict[str, Any] | None:
        """LoRA or QLoRA adapters when a file asks for them (the body's finetuning section); None for full."""
        values = {}
        for name in FINETUNING_FIELDS:
            winner = self.pick(f"finetuning.{name}")
            self.settle(f"finetuning.{name}", winner)
            if winner is not None:
                values[name] = winner.value
        if values.get("method", "full") == "full":
            return None
        if values["method"] != "qlora":
            values.pop("quantization", None)
        return values

    def check_engines(self) -> None:
        engines = [fact for _, fact, _ in self.facts.get("engine", [])]
        kinds = {fact.value for fact in engines}
        if len(kinds) > 1:
            later = engines[-1]
            first = next(fact for fact in engines if fact.value != later.value)
            raise self.error_at(later, f"says {later.value} but {self.source(first)} says {first.value}: only one "
                                       "of DeepSpeed, FSDP and Megatron-LM can run the model")

    def fill_auto(self, name: str, winner: Fact | None) -> None:
        """DeepSpeed's "auto": filled from another file's value (the Trainer's), else left to the default."""
        for reading in self.readings:
            key = reading.autos.get(name)
            if key is None:
                continue
            if winner is not None:
                self.understood.append({"key": key, "value": "auto", "field": winner.field or name,
                                        "file": reading.file, "note": f"filled from {self.source(winner)}"})
            else:
                self.understood.append({"key": key, "value": "auto", "field": name, "file": reading.file,
                                        "note": "nothing here fills it: trainmem's default (see assumed)"})
                self.assumed.append({"field": name, "value": json_safe(defaults().get(name)), "file": reading.file,
                                     "why": f"{key} is \"auto\", which the Trainer or accelerate fills from its own "
                                            "arguments; none given, so trainmem's default"})

    def value_of(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def batch_and_data(self) -> None:
        """The data-parallel degree from a launcher's process count, or from DeepSpeed's train_batch_size =
        micro-batch × accumulation × data-parallel GPUs (DeepSpeedConfig._batch_assertion)."""
        world = self.pick("world_size")
        if world is not None:
            self.data_from_world(world)
        batch = self.pick("train_batch_size")
        auto = next((r.autos["train_batch_size"] for r in self.readings if "train_batch_size" in r.autos), None)
        if auto is not None and batch is None:
            self.understood.append({"key": auto, "value": "auto", "field": "parallelism.data",
                                    "file": next(r.file for r in self.readings if "train_batch_size" in r.autos),
                                    "note": "the Trainer sets it to world size × micro-batch × accumulation"})
        if batch is None:
            return
        self.settle("train_batch_size", batch)
        self.batch_from_total(batch, world)

    def data_from_world(self, world: Fact) -> None:
        """A launcher's processes ÷ (tensor × pipeline × context): the data-parallel degree, unless a file says it."""
        tensor = self.value_of("parallelism.tensor", 1)
        pipeline = self.value_of("parallelism.pipeline", 1)
        context = self.value_of("parallelism.context", 1)
        self.settle("world_size", world)
        parallel = tensor * pipeline * context
        groups = "tensor × pipeline" + (" × context" if context > 1 else "")
        if world.value % parallel:
            raise self.error_at(world, f"{world.value} processes do not split into {groups} groups of {parallel}")
        data = world.value // parallel
        stated = self.pick("parallelism.data")
        if stated is not None and stated.origin == "said" and stated.value != data:
            raise self.error_at(stated, f"is {stated.value} but {self.source(world)} gives {world.value} "
                                        f"processes, {data} data-parallel groups of {groups} = {parallel}")
        if stated is None or stated.origin != "said":
            self.values["parallelism.data"] = data
            self.sources["parallelism.data"] = (world.file, world.key)
            self.assumed.append({"field": "parallelism.data", "value": data, "file": world.file,
                                 "why": f"{self.source(world)} {world.value} ÷ (tensor {tensor} × pipeline "
                                        f"{pipeline}" + (f" × context {context}" if context > 1 else "") + ")"})

    def batch_from_total(self, batch: Fact, world: Fact | None) -> None:
        """train_batch_size checked against the factors the files know; a factor they do not, derived from it."""
        micro_f = self.pick("training.micro_batch_size")
        accum_f = self.pick("training.gradient_accumulation_steps")
        data = self.stated_data(world)
        # The Trainer holds its defaults as values, and checks train_batch_size against them (fill_match).
        known_micro, known_accum = _known(micro_f), _known(accum_f)
        micro = micro_f.value if micro_f else 1
        accum = accum_f.value if accum_f else 1
        if known_micro and known_accum:
            self.data_from_total(batch, micro, accum, data)
            return
        if data is None:
            self.set_derived("parallelism.data", 1, batch, "train_batch_size without both the micro-batch and the "
                             "accumulation steps: one data-parallel GPU assumed")
        self.derive_batch(batch, micro if known_micro else None, accum if known_accum else None,
                          1 if data is None else data)

    def stated_data(self, world: Fact | None) -> int | None:
        """The data-parallel degree when a launcher's process count or a file states it, else None."""
        data_f = None if world is not None else self.pick("parallelism.data")
        if world is not None or (data_f is not None and data_f.origin == "said"):
            return self.values["parallelism.data"]
        return None

    def data_from_total(self, batch: Fact, micro: int, accum: int, data: int | None) -> None:
        """DeepSpeed's rule with micro-batch and accumulation known: the data-parallel degree checked (when known)
        or derived."""
        total = batch.value
        if total % (micro * accum):
            raise self.batch_error(batch, f"{total} is not a multiple of micro-batch × accumulation = {micro} × "
                                          f"{accum}")
        derived = total // (micro * accum)
        if data is not None and derived != data:
            raise self.batch_error(batch, f"{total} is not {micro} × {accum} × {data}")
        if data is None:
            self.set_derived("parallelism.data", derived, batch, f"train_batch_size {total} ÷ (micro-batch {micro} "
                             f"× accumulation {accum}): the data-parallel degree")

    def derive_batch(self, batch: Fact, micro: int | None, accum: int | None, data: int) -> None:
        """DeepSpeed's rule with one of micro-batch and accumulation known (or neither): the other derived."""
        total = batch.value
        if micro is not None:
            if total % (micro * data):
                raise self.batch_error(batch, f"{total} is not a multiple of micro-batch × data-parallel = {micro} × "
                                              f"{data}")
            self.set_derived("training.gradient_accumulation_steps", total // (micro * data), batch,
                             f"DeepSpeed derives it: train_batch_size {total} ÷ (micro-batch {micro} × {data} GPU"
                             f"{'s' if data > 1 else ''})")
        elif accum is not None:
            if total % (accum * data):
                raise self.batch_error(batch, f"{total} is not a multiple of accumulation × data-parallel = {accum} × "
                                              f"{data}")
            self.set_derived("training.micro_batch_size", total // (accum * data), batch,
                             f"DeepSpeed derives it: train_batch_size {total} ÷ (accumulation {accum} × {data} GPU"
                             f"{'s' if data > 1 else ''})")
        else:
            if total % data:
                raise self.batch_error(batch, f"{total} is not a multiple of the {data} data-parallel GPUs")
            self.set_derived("training.gradient_accumulation_steps", 1, batch, "DeepSpeed's rule with only "
                             "train_batch_size: one micro-batch a step")
            self.set_derived("training.micro_batch_size", total // data, batch, f"DeepSpeed derives it: "
                             f"train_batch_size {total} ÷ {data} GPU{'s' if data > 1 else ''}")

    def batch_error(self, batch: Fact, message: str) -> DomainError:
        return self.error_at(batch, f"{message} (DeepSpeed requires train_batch_size = "
                                    "train_micro_batch_size_per_gpu × gradient_accumulation_steps × GPUs)")

    def set_derived(self, field: str, value: int, source: Fact, why: str) -> None:
        self.values[field] = value
        self.sources[field] = (source.file, source.key)
        self.assumed.append({"field": field, "value": value, "why": why, "file": source.file})

    def precision(self) -> None:
        """The precision from the mixed precision asked for and the engine that runs the model: DeepSpeed keeps
        an fp32 master copy, FSDP keeps fp32 shards, autocast alone keeps fp32 weights; weights loaded in half
        precision with neither keep no fp32 copy at all."""
        explicit = self.pick("training.precision")
        if explicit is not None:
            self.settle("training.precision", explicit)
            self.values["training.precision"] = explicit.value
            return
        reasons: list[str] = []
        engine_f = self.pick("engine")
        engine = engine_f.value if engine_f else None
        amp = self.pick_amp(reasons)
        load = self.pick("load_dtype")
        value = self.precision_under(engine, amp, load if load is not None and load.value != "fp32" else None, reasons)
        if value is None:
            return
        self.values["training.precision"] = value
        reasons = [reason for reason in reasons if reason]
        if reasons:
            self.assumed.append({"field": "training.precision", "value": json_safe(value), "why": "; ".join(reasons),
                                 "file": amp.file if amp else None})

    def precision_under(self, engine: str | None, amp: Fact | None, half_load: Fact | None,
                        reasons: list[str]) -> Any:
        """The precision `engine` keeps for the mixed precision asked for and the weights' half-precision loading
        (`half_load`, when they are loaded in bf16 or fp16); None when nothing says."""
        mode = amp.value if amp else "no"
        if engine == "deepspeed":
            return self.deepspeed_precision(amp, reasons)
        if engine == "megatron":
            return megatron_precision(mode, reasons)
        if engine == "fsdp" and not (half_load is not None and mode == "no"):
            return fsdp_precision(mode, reasons)
        if half_load is not None:
            return loaded_precision(half_load, reasons)
        return AUTOCAST[amp.value] if amp is not None else None

    def pick_amp(self, reasons: list[str]) -> Fact | None:
        """The mixed precision asked for: a Trainer or axolotl that turns bf16/fp16 on wins; one that leaves them
        off leaves accelerate's (TrainingArguments: mixed_precision from ACCELERATE_MIXED_PRECISION unless
        fp16 or bf16 is true)."""
        group = self.facts.get("amp", [])
        if not group:
            return None
        said = [(rank, f) for rank, f, _ in group if f.origin == "said"] or [(rank, f) for rank, f, _ in group]
        winner = max(said, key=lambda item: (item[1].value != "no", item[0]))[1]
        self.settle_amp(group, winner)
        if winner.origin != "said":
            reasons.append(winner.why)
        return winner

    def settle_amp(self, group: list[tuple[int, Fact, Reading]], winner: Fact) -> None:
        """As settle, with a file that leaves mixed precision off yielding to one that turns it on."""
        for _, fact, _ in group:
            if fact.origin != "said":
                continue
            if fact is winner or fact.value == winner.value:
                self.understand(fact)
            elif fact.value == "no":
                self.ignored.append({"key": fact.key, "file": fact.file,
                                     "why": f"off here, so {self.source(winner)} ({_show(winner.raw)}) applies"})
            else:
                self.ignored.append({"key": fact.key, "file": fact.file,
                                     "why": f"overridden by {self.source(winner)} ({_show(winner.raw)})"})

    def deepspeed_precision(self, amp: Fact | None, reasons: list[str]) -> Any:
        readings = [r for r in self.readings if r.kind == "deepspeed"]
        ds = self.pick("ds_precision")
        mode = amp.value if amp else None
        self.check_trainer_switches()
        auto_key = next((r.autos["ds_precision"] for r in readings if "ds_precision" in r.autos), None)
        if ds is not None and ds.origin == "said":
            self.settle("ds_precision", ds)
            return ds.value
        if auto_key is not None:
            return self.deepspeed_auto(amp, auto_key, readings, reasons)
        return self.deepspeed_unsaid(mode, ds, readings, reasons)

    def deepspeed_unsaid(self, mode: str | None, ds: Fact | None, readings: list[Reading], reasons: list[str]) -> Any:
        """No bf16/fp16 section stated nor "auto": the mixed precision asked for, else DeepSpeed's default."""
        if mode in ("bf16", "fp16"):
            # accelerate adds {"enabled": true} for a missing section (DeepSpeedPlugin.set_mixed_precision).
            reasons.append(f"{mode} with DeepSpeed" + (", whose file is not read" if not readings else "") +
                           ": bf16/fp16 weights and gradients with an fp32 master copy")
            return MASTER_COPY[mode]
        if ds is not None:
            self.settle("ds_precision", ds)
            return ds.value
        if not readings:
            reasons.append("DeepSpeed with neither bf16 nor fp16 asked for: fp32")
        return "fp32"

    def check_trainer_switches(self) -> None:
        """The Trainer (or axolotl) must agree with an explicit bf16/fp16 switch (fill_match)."""
        trainer_amp = [f for _, f, r in self.facts.get("amp", []) if r.kind in ARGUMENTS]
        if not trainer_amp:
            return
        theirs = trainer_amp[-1]
        for flag, half in (("ds_bf16", "bf16"), ("ds_fp16", "fp16")):
            for _, fact, _ in self.facts.get(flag, []):
                wants = theirs.value == half
                if fact.value != "auto" and fact.value != wants:
                    default = " (its default)" if theirs.origin == "default" else ""
                    raise self.error_at(fact, f"is {_show(fact.value)} but {self.source(theirs)} makes "
                                              f"{half} {_show(wants)}{default}: the Trainer refuses a DeepSpeed "
                                              "config that disagrees with its arguments (fill_match)")

    def deepspeed_auto(self, amp: Fact | None, auto_key: str, readings: list[Reading], reasons: list[str]) -> Any:
        """DeepSpeed's bf16/fp16 "auto", filled from the mixed precision asked for, else from a switch assumed
        passed."""
        if amp is not None and amp.value is not None:
            if amp.origin != "said":
                reasons.append(f"DeepSpeed's bf16/fp16 \"auto\" filled from {self.source(amp)}")
            return bf16_master(readings) if amp.value == "bf16" else MASTER_COPY[amp.value]
        # A file with "auto" runs only under the Trainer (or accelerate), which fills it from its --bf16 or
        # --fp16 (HfTrainerDeepSpeedConfig.trainer_config_process: fill_match("bf16.enabled", args.bf16)); they
        # are off unless passed, but a half-precision switch left to the command line is one meant to be passed.
        half = "fp16" if auto_key.endswith("fp16.enabled") else "bf16"
        reasons.append(f"{auto_key} is \"auto\": the Trainer fills it from its --{half}, not given here, so "
                       f"assumed passed; without it the Trainer trains in fp32: set the precision to fp32 if so")
        return bf16_master(readings) if half == "bf16" else MASTER_COPY["fp16"]

    def model(self) -> dict[str, Any]:
        winner = self.pick("model")
        if winner is None:
            self.assumed.append({"field": "model.preset", "value": DEFAULT_MODEL_PRESET, "file": None,
                                 "why": "the config names no model trainmem knows: the default preset; set the model "
                                        "to yours"})
            return {"preset": DEFAULT_MODEL_PRESET}
        self.settle("model", winner)
        if "preset" in winner.value:
            self.sources["model.preset"] = (winner.file, winner.key)
        for field in winner.value:
            self.sources.setdefault(f"model.{field}", (winner.file, winner.key))
        return dict(winner.value)


def _known(fact: Fact | None) -> bool:
    """Whether a batch factor counts as known: said, or a Trainer's default (which it checks against)."""
    return fact is not None and (fact.origin == "said" or fact.kind in ARGUMENTS)


def _refusal(request: dict[str, Any]) -> DomainError | None:
    """What the core refuses in a body's setup (its cross-field rules), or None."""
    try:
        job = wire.job_from(request)
        validate_setup(job.training, job.parallelism, job.architecture)
    except DomainError as error:
        return error
    return None


def _flatten(reading: Reading) -> list[Reading]:
    out = [reading]
    for child in reading.children:
        out.extend(_flatten(child))
    return out


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _shown_value(fact: Fact) -> Any:
    if fact.name == "model":
        return fact.value.get("preset", fact.value) if isinstance(fact.value, dict) else fact.value
    return fact.value


def merge(readings: list[Reading]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, tuple[int, str]]]:
    """The estimate body the readings describe; the understood, ignored and assumed lists; each body field's
    source (file, key)."""
    run = _Merge(readings)
    request = run.run()
    ignored = _cap(run.ignored, "ignored")
    for entry in ignored:
        if entry["why"] is None:
            entry["why"] = reason(entry["key"])
    lists = {"understood": _cap(run.understood, "understood"), "ignored": ignored,
             "assumed": _cap(_unique(run.assumed), "assumed")}
    return request, lists, run.sources


def _unique(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for entry in entries:
        marker = (entry["field"], repr(entry["value"]), entry["why"])
        if marker not in seen:
            seen.add(marker)
            out.append(entry)
    return out


def _cap(entries: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    if len(entries) <= MAX_ENTRIES:
        return entries
    rest = len(entries) - MAX_ENTRIES + 1
    summary: dict[str, Any]
    if name == "ignored":
        summary = {"key": "...", "why": f"and {rest:,} more keys, not listed: a config this large is summarised",
                   "file": None}
    elif name == "understood":
        summary = {"key": "...", "value": None, "field": "", "file": None, "note": f"and {rest:,} more, not listed"}
    else:
        summary = {"field": "...", "value": None, "why": f"and {rest:,} more, not listed", "file": None}
    return entries[: MAX_ENTRIES - 1] + [summary]
