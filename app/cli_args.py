"""The command line's flags and parser: one flag per field of the API's request, derived from the core's lists.

`COMMAND --help` shows the flags a newcomer reaches for, under a few headings; `--help-all` shows every flag.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from app import configs, core, hub, wire
from app.core.job import JOB_FIELDS, Job, JobField, field_value
from app.core.lora_targets import targets_from_text
from app.core.solver import TARGETS
from app.web.parse import FormError, parse_gpu_capacity

PROG: Final = "trainmem"

# --- the flags: one per request field ------------------------------------------------------------------

# The model's sources have flags of their own names; every other field's flag is its name with dashes.
SOURCE_OPTIONS: Final = {"model.preset": "--model", "model.hf_config": "--config", "model.num_params": "--num-params"}
# Flags whose plain name another field already takes.
RENAMED_OPTIONS: Final = {"finetuning.dropout": "--lora-dropout"}
# A Hub model's revision: a flag of the model's, but no source of its own (--model names the Hub id).
REVISION: Final = hub.REVISION_FIELD
LIST_FIELDS: Final = ("finetuning.modules_to_save",)
TARGETS_FIELD: Final = "finetuning.target_modules"
VERSION_FIELDS: Final = ("finetuning.bitsandbytes_version",)
_ARCHITECTURE_TYPES: Final = {f.name: str(f.type) for f in dataclasses.fields(core.Architecture)}


@dataclass(frozen=True)
class Flag:
    """One request field as a command-line flag."""

    path: str  # the field's path in the API's request, e.g. "training.seq_len"
    option: str  # "--seq-len"
    kind: str  # "int", "float", "bool", "choice", "list", "targets", "version" or "config" (a config.json file)
    field: JobField | None  # its range or choices, where the core lists them


def _request_paths() -> list[str]:
    return [*SOURCE_OPTIONS, REVISION, *(f"model.{name}" for name in wire.ARCHITECTURE_FIELDS),
            *(f"training.{name}" for name in wire.TRAINING_FIELDS),
            *(f"parallelism.{name}" for name in wire.PARALLELISM_FIELDS),
            *(f"finetuning.{name}" for name in wire.FINETUNING_FIELDS), "gpu"]


def _option(path: str) -> str:
    """A request field's flag: its source's or renamed option, else its name with dashes."""
    return SOURCE_OPTIONS.get(path) or RENAMED_OPTIONS.get(path) or "--" + path.rpartition(".")[2].replace("_", "-")


def _flag(path: str) -> Flag:
    option = _option(path)
    if path == "model.hf_config":
        return Flag(path, option, "config", None)
    if path == REVISION:
        return Flag(path, option, "revision", None)
    if path in LIST_FIELDS:
        return Flag(path, option, "list", None)
    if path == TARGETS_FIELD:
        return Flag(path, option, "targets", None)
    if path in VERSION_FIELDS:
        return Flag(path, option, "version", None)
    if path in ("finetuning.dropout", "parallelism.expert_load"):
        return Flag(path, option, "float", None)
    if path in JOB_FIELDS:
        return Flag(path, option, JOB_FIELDS[path].kind, JOB_FIELDS[path])
    # The fields a question cannot vary (the dropout probabilities) are floats of the Architecture.
    section, _, name = path.partition(".")
    if section == "model" and _ARCHITECTURE_TYPES.get(name, "").startswith("float"):
        return Flag(path, option, "float", None)
    raise RuntimeError(f"no command-line kind for the request field {path!r}")


FLAGS: Final[dict[str, Flag]] = {path: _flag(path) for path in _request_paths()}
OTHER_OPTIONS: Final = {"target": "--target", "vary.field": "--vary", "vary.values": "--values"}


def option_for(field: str) -> str:
    """The flag that sets a request field (a DomainError's `field`), e.g. parallelism.tensor -> --tensor."""
    if field in FLAGS:
        return FLAGS[field].option
    if field in OTHER_OPTIONS:
        return OTHER_OPTIONS[field]
    if field.startswith("model.hf_config"):
        return "--config"
    if field == hub.FIELD:
        return "--model"
    if field.startswith("vary.values."):
        return "--values"
    if field == "model":
        return "--model/--config/--num-params"
    for path, flag in FLAGS.items():  # a part of a field, such as training.precision.weights
        if field.startswith(path + "."):
            return flag.option
    return field


def domain_error_text(error: core.DomainError) -> str:
    """The core's rejection in one line, naming the flag: `--tensor: num_attention_heads (32) must be ...`."""
    message = " ".join(error.message.split())
    if error.field.startswith("vary.values."):
        message = f"value {int(error.field.rpartition('.')[2]) + 1}: {message}"
    return f"{option_for(error.field)}: {message}"


# --- parsing ----------------------------------------------------------------------------------------------


class Formatter(argparse.HelpFormatter):
    """argparse's help formatter, sized as argparse sizes it but without importing shutil for that (argparse
    makes a formatter for every flag it adds, and shutil's imports are a few ms of every start-up)."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        kwargs.setdefault("width", terminal_columns() - 2)
        super().__init__(prog, **kwargs)


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns: $COLUMNS, else the terminal's width, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.brief: dict[str, dict[str, str | None]] = {}  # what --help shows: heading -> flag -> its line

    def format_brief(self) -> str:
        """The flags of `brief` under its headings, one short line each, and how many more --help-all shows."""
        shown = self._brief_actions()
        required = [f"{action.option_strings[0]} {action.metavar}" for listed in shown.values() for action in listed
                    if action.required]
        formatter = Formatter(self.prog, max_help_position=BRIEF_HELP_POSITION)
        formatter.add_usage(" ".join(["%(prog)s", *required, "[options]"]), [], [])
        formatter.add_text(self.description)
        for heading, listed in shown.items():
            if listed:
                formatter.start_section(heading)
                formatter.add_arguments(listed)
                formatter.end_section()
        hidden = len({action.dest for action in self._actions} - _dests(shown))
        formatter.add_text(f"--help-all shows {hidden} more flags: the architecture's fields, fine-tuning, "
                           "kernels, the framework, the allocator and others.")
        formatter.add_text(self.epilog)
        return formatter.format_help()

    def _brief_actions(self) -> dict[str, list[argparse.Action]]:
        """The actions `brief` names, as the short help shows them, under its headings."""
        actions = {option: action for action in self._actions for option in action.option_strings}
        defaults = Job()
        return {heading: [_brief_action(actions[option], line, defaults) for option, line in flags.items()
                          if option in actions] for heading, flags in self.brief.items()}

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        if message.startswith("unrecognized arguments: "):
            unknown = [word for word in message.partition(": ")[2].split() if word.startswith("--")]
            near = [match for word in unknown[:1]
                    for match in difflib.get_close_matches(word.partition("=")[0], self._options(), n=2)]
            if near:
                message += f"; did you mean {' or '.join(near)}?"
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _options(self) -> list[str]:
        """Every long option of this parser and of its commands'."""
        found = []
        for action in self._actions:
            found += [option for option in action.option_strings if option.startswith("--")]
            if isinstance(action.choices, dict):  # the commands: name -> parser
                for parser in action.choices.values():
                    found += parser._options() if isinstance(parser, Parser) else []
        return sorted(set(found))


def _dests(shown: dict[str, list[argparse.Action]]) -> set[str]:
    return {action.dest for listed in shown.values() for action in listed}


class BriefHelp(argparse.Action):
    """-h/--help: the common flags under headings (Parser.format_brief)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(parser.format_brief() if isinstance(parser, Parser) else parser.format_help(), end="")
        parser.exit()


# What `COMMAND --help` shows, by heading: each flag and its line (None: its own help). A request flag's line
# gets its choices (up to BRIEF_CHOICES of them) and its default from the core; --help-all shows every flag.
BRIEF: Final[dict[str, dict[str, str | None]]] = {
    "Model": {"--model": "a model preset, or a Hub id (org/name)", "--config": "a Hugging Face config.json",
              "--num-params": "a parameter count alone (no activations)",
              "--from": "a training config to start from"},
    "Training": {"--gpu": "the GPU to fit on, or its capacity (24GiB)", "--seq-len": "tokens per sequence",
                 "--micro-batch-size": "sequences per GPU per micro-step", "--precision": "precision preset",
                 "--optimizer": "optimizer", "--activation-checkpointing": "recomputation"},
    "Parallelism": {"--data": "data-parallel degree", "--tensor": "tensor-parallel degree",
                    "--pipeline": "pipeline stages", "--context": "context-parallel degree",
                    "--expert": "expert-parallel degree", "--zero-stage": "ZeRO stage, 0 to 3",
                    "--offload": "ZeRO-Offload to the CPU"},
    "Output": {"--json": "the API's JSON (bytes) instead of tables", "-h": None, "--help-all": None},
}
BRIEF_CHOICES: Final = 4
BRIEF_HELP_POSITION: Final = 33  # the longest brief flag, "  --activation-checkpointing ID", and a gap


def _brief_action(action: argparse.Action, line: str | None, defaults: Job) -> argparse.Action:
    """A copy of `action` for the short help: its short line, its choices named and its default from the core."""
    brief = copy.copy(action)
    text = line or action.help or ""
    flag = FLAGS.get(action.dest)
    default = _default(flag, defaults) if flag else None
    choices = _choices(action, flag)
    if choices:
        brief.metavar = action.metavar or "ID"
        text += _choices_text(choices, default)
    brief.help = text if default is None else f"{text} (default: {default})"
    return brief


def _choices(action: argparse.Action, flag: Flag | None) -> tuple[str, ...]:
    """A flag's choices: argparse's, else its core field's."""
    return tuple(action.choices or ()) or (flag.field.choices if flag and flag.field else ())


def _choices_text(choices: Sequence[str], default: object) -> str:
    """A few choices listed; of many, one named when no default shows."""
    if len(choices) <= BRIEF_CHOICES:
        return ": " + ", ".join(choices)
    return f", e.g. {choices[0]}" if default is None else ""


def _int(flag: Flag, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    item = flag.field
    if item is not None and item.high and not item.low <= value <= item.high:
        raise argparse.ArgumentTypeError(f"must be between {item.low:,} and {item.high:,}, got {value:,}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _choice(flag: Flag, text: str) -> str | dict[str, int]:
    choices = flag.field.choices if flag.field else ()
    if flag.path == "model.preset" and is_hub_id(text):
        try:
            hub.check_id(text)
        except core.DomainError as error:
            raise argparse.ArgumentTypeError(error.message) from None
        return text
    if text not in choices:
        if flag.path == "gpu":
            try:  # a GPU the catalogue lacks, by its capacity, read as the page reads it
                return {"capacity_bytes": parse_gpu_capacity("gpu", text)}
            except FormError as error:
                why = error.message.rstrip(".") if text.strip()[:1].isdigit() else f"unknown GPU {text!r}"
            raise argparse.ArgumentTypeError(f"{why}; choose from {', '.join(choices)}, or give a capacity such as "
                                             "24GiB or 96GB for a GPU not listed")
        noun = flag.path.rpartition(".")[2].replace("_", " ")
        hub_id = ", or a Hugging Face Hub id such as Qwen/Qwen2.5-7B-Instruct" if flag.path == "model.preset" else ""
        raise argparse.ArgumentTypeError(f"unknown {noun} {text!r}; choose from {', '.join(choices)}{hub_id}")
    return text


def _config(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise argparse.ArgumentTypeError(f"cannot read {path}: {reason}") from None
    try:
        config = wire.loads_bounded(text, "model.hf_config")  # within the API's bounds on a request body
    except core.DomainError as error:
        raise argparse.ArgumentTypeError(f"{path} {error.message}") from None
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError(f"{path} must hold a JSON object (a config.json)")
    return config


def _converter(flag: Flag) -> Any:
    if flag.kind == "int":
        return functools.partial(_int, flag)
    if flag.kind == "choice":
        return functools.partial(_choice, flag)
    if flag.kind == "list":
        return _names
    if flag.kind == "targets":
        return _targets
    if flag.kind == "revision":
        return _revision
    if flag.kind == "version":
        return str
    return _float if flag.kind == "float" else _config


def is_hub_id(text: str) -> bool:
    """Whether --model names a Hub model (org/name) rather than a preset."""
    return "/" in text


def _revision(text: str) -> str:
    try:
        hub.check_id("org/name", text)
    except core.DomainError as error:
        raise argparse.ArgumentTypeError(error.message) from None
    return text


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more names, separated by commas")
    return names


def _targets(text: str) -> str | list[str]:
    if not text.strip():
        raise argparse.ArgumentTypeError("give module names separated by commas, all-linear or a regular expression")
    return targets_from_text(text)


def _help(flag: Flag, defaults: Job) -> str:
    if flag.kind == "version":
        return (f"{flag.path}: a version such as 0.41.1 (QLoRA before 0.43.2 keeps each 4-bit layer's input, "
                "before 0.43.0 dequantizes through fp16; default: 0.43.2 or later)")
    text = _kind_text(flag)
    if flag.path == "model.preset":
        text = ("a Hugging Face Hub id such as Qwen/Qwen2.5-7B-Instruct (its config.json fetched, or read from "
                "huggingface_hub's cache with HF_HUB_OFFLINE=1; HF_TOKEN for gated models), or a model preset, " + text)
    default = _default(flag, defaults)
    return f"{flag.path}: {text}" + (f" (default: {default})" if default is not None else "")


def _kind_text(flag: Flag) -> str:
    """What a flag takes, in words: its kind, with its choices or range from the core where it has them."""
    item = flag.field
    if flag.kind == "config":
        text = f"a Hugging Face config.json (model types: {', '.join(core.SUPPORTED_MODEL_TYPES)})"
    elif flag.kind == "revision":
        text = "a branch, tag or commit of the --model Hub id (default: main)"
    elif flag.kind == "choice" and item is not None:
        text = "one of " + ", ".join(item.choices)
    elif flag.kind == "int" and item is not None and item.high:
        text = f"an integer from {item.low:,} to {item.high:,}"
    else:
        text = {"int": "an integer", "float": "a number", "bool": "on or off",
                "list": "names separated by commas",
                "targets": "names separated by commas, all-linear, or a regular expression matched as peft matches "
                           "it against each module's qualified name (model.layers.0.self_attn.q_proj)"}[flag.kind]
    return text


def _default(flag: Flag, defaults: Job) -> str | None:
    """The field's default as the help shows it; None for the model's fields and the GPU, which have none."""
    if flag.path.startswith("model.") or flag.path == "gpu":
        return None
    return _shown(field_value(defaults, flag.path))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


SECTIONS: Final = {"model": "model (give one of --model, --config, --num-params, or the architecture flags)",
                   "training": "training", "parallelism": "parallelism",
                   "finetuning": "fine-tuning (full, LoRA or QLoRA)"}


def _add_request_flags(parser: argparse.ArgumentParser) -> None:
    defaults = Job()
    groups = {section: parser.add_argument_group(title) for section, title in SECTIONS.items()}
    for flag in FLAGS.values():
        group = groups.get(flag.path.partition(".")[0], parser)
        metavar = {"config": "PATH", "float": "P", "list": "NAMES", "targets": "TARGETS", "revision": "REV", "version": "VERSION"}.get(
            flag.kind, "ID" if flag.kind == "choice" else "N")
        if flag.kind == "bool":
            group.add_argument(flag.option, dest=flag.path, action=argparse.BooleanOptionalAction, default=None,
                               help=_help(flag, defaults))
        else:
            group.add_argument(flag.option, dest=flag.path, type=_converter(flag), default=None, metavar=metavar,
                               help=_help(flag, defaults))
    parser.add_argument("--json", action="store_true", help="print the JSON the API answers instead of a table")


def build_parser(command: str | None = None) -> Parser:
    """The parser; with `command`, only that subcommand gets the request flags (they take a few ms to add)."""
    parser = Parser(prog=PROG,
                    description="How much GPU memory a training job takes, where it goes, and whether it fits. "
                    "Memory in the tables is in GiB (2^30 bytes); --json prints bytes, as the API does.",
                    epilog=f"See `{PROG} COMMAND --help` for the common flags, `{PROG} COMMAND --help-all` for every "
                    "flag. A JSON request body as the only argument, or on stdin, prints the estimate's JSON.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    estimate = _command(commands, "estimate", help="memory at the peak, by category, and the fit",
                        description="Memory for two training steps: the peak, where it is, what it holds.",
                        epilog="Exit status: 0 when the job fits (or no --gpu is given), 1 when it does not fit "
                        "the GPU, 2 for a usage error.")

    solver = _command(commands, "solve", help="the largest micro-batch or sequence, or the fewest GPUs, that fits",
                      description="The largest micro-batch or sequence, or the fewest data-parallel GPUs, whose peak "
                      "fits --gpu; for a job that does not fit, the single changes that make it fit, cheapest "
                      "first.")
    solver.add_argument("--target", required=True, choices=tuple(TARGETS), help="the field to solve for")

    sweep = _command(commands, "sweep", help="the peak as one field takes several values",
                     description="The peak, its event and the fit as one field takes each value.")
    sweep.add_argument("--vary", required=True, metavar="FIELD", type=_vary,
                       help="the field to vary, as the API's vary.field: " + ", ".join(JOB_FIELDS))
    sweep.add_argument("--values", required=True, metavar="V1,V2,...",
                       help="comma-separated values: integers for integer fields, ids for choices, true/false "
                       "for switches, release strings for versions")

    exporter = _command(commands, "export",
                        help="write the setup as a DeepSpeed, Trainer, accelerate or axolotl config",
                        description="The setup as a config file for a framework (POST /api/v1/export): the file's "
                        "text on stdout, what it cannot carry on stderr.")
    exporter.add_argument("--kind", "--as", dest="kind_out", required=True, choices=configs.EXPORT_KINDS,
                          help="the framework to write for")

    serve = commands.add_parser("serve", help="serve the page and the JSON API",
                                description="Serve the page and the JSON API (app.main:app) as `make run` does "
                                "(app.serve: uvicorn with its timeouts and settings from the environment).")
    serve.add_argument("--host", help="address to listen on (default: $TRAINMEM_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: $PORT, else 8000)")
    own: dict[str, dict[str, str | None]] = {"estimate": {}, "solve": {"--target": None}, "export": {"--kind": None},
                                            "sweep": {"--vary": "the field, e.g. seq_len or training.optimizer",
                                                      "--values": "comma-separated, e.g. 1024,2048,4096"}}
    for name, subparser in {"estimate": estimate, "solve": solver, "sweep": sweep, "export": exporter}.items():
        subparser.brief = {name.capitalize(): own[name], **BRIEF}
        if command in (None, name):
            _add_request_flags(subparser)
            subparser.add_argument("--from", dest="from_files", action="append", metavar="FILE",
                                   help="a training config to start from (DeepSpeed JSON, TrainingArguments JSON, "
                                   "accelerate or axolotl YAML, torchtitan TOML, Megatron flags; repeat to combine "
                                   "files); the other flags override what it says")
            # (export's own --kind names the file to write, so there the --from files' kind is --from-kind)
            subparser.add_argument("--from-kind" if name == "export" else "--kind", dest="kind",
                                   choices=configs.IMPORT_KINDS, default=None,
                                   help="the --from files' kind (default: detected from the text)")
    return parser


def _command(commands: Any, name: str, **kwargs: Any) -> Parser:
    """A command whose -h/--help lists the common flags and --help-all every flag."""
    parser: Parser = commands.add_parser(name, add_help=False, **kwargs)
    parser.add_argument("-h", "--help", action=BriefHelp, help="show the common flags and exit")
    parser.add_argument("--help-all", action="help", help="show every flag and exit")
    return parser


def _vary(text: str) -> str:
    """A field to vary, by its request path (training.seq_len) or, where that is unambiguous, its last part
    (seq_len); a name it does not know gets the nearest ones as suggestions."""
    if text in JOB_FIELDS:
        return text
    by_name = [path for path in JOB_FIELDS if path.rpartition(".")[2] == text]
    if len(by_name) == 1:
        return by_name[0]
    names = sorted({path.rpartition(".")[2] for path in JOB_FIELDS} | set(JOB_FIELDS))
    near = difflib.get_close_matches(text, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(near)}?" if near else " (see --help-all for the fields)"
    raise argparse.ArgumentTypeError(f"cannot vary {text!r}{hint}")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65,535, got {port:,}")
    return port

