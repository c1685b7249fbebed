"""`trainmem` on the command line: the JSON API's questions without a server.

    trainmem estimate --model llama-3-8b --seq-len 4096 --gpu h100-80gb
    trainmem estimate --config path/to/config.json --micro-batch-size 2 --tensor 2 --zero-stage 1
    trainmem solve --model llama-3-8b --gpu a100-80gb --target micro_batch_size
    trainmem sweep --model llama-3-8b --gpu h100-80gb --vary seq_len --values 1024,2048,4096
    trainmem serve --port 8000

`estimate` exits 1 when the job runs out of memory on the GPU given (0 when it fits), so a script can test it;
a usage error is 2.

Every field of the API's request is a flag, its name with dashes (`--seq-len` for training.seq_len,
`--tensor` for parallelism.tensor); the model is `--model ID` (a preset), `--config PATH` (a Hugging Face
config.json), `--num-params N` or the architecture flags. The flags come from the core's own lists: the
Training and Parallelism dataclasses, the API's architecture fields, and the kinds, ranges and choices
of `app.core.job.JOB_FIELDS`. `--json` prints exactly what the API answers for the same request.

The older form still works: a request body as the only argument, or on stdin, prints the estimate's JSON.

    trainmem '{"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}'
    echo '{"model": {"num_params": 7000000000}}' | trainmem

Only the standard library, the core and `app.wire` are imported (neither the web framework nor
pydantic), so the command starts quickly; `serve` alone loads the web application.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from app import configs, core, wire
from app.configs.export import export_config
from app.core.job import JOB_FIELDS, Job, JobField, check_value, field_value
from app.core.series import series
from app.core.solver import TARGETS, solve

GIB: Final = 1 << 30
PROG: Final = "trainmem"

# --- the flags: one per request field ------------------------------------------------------------------

# The model's sources have flags of their own names; every other field's flag is its name with dashes.
SOURCE_OPTIONS: Final = {"model.preset": "--model", "model.hf_config": "--config", "model.num_params": "--num-params"}
# Flags whose plain name another field already takes.
RENAMED_OPTIONS: Final = {"finetuning.dropout": "--lora-dropout"}
LIST_FIELDS: Final = ("finetuning.target_modules", "finetuning.modules_to_save")
_ARCHITECTURE_TYPES: Final = {f.name: str(f.type) for f in dataclasses.fields(core.Architecture)}


@dataclass(frozen=True)
class Flag:
    """One request field as a command-line flag."""

    path: str  # the field's path in the API's request, e.g. "training.seq_len"
    option: str  # "--seq-len"
    kind: str  # "int", "float", "bool", "choice" or "config" (a config.json file)
    field: JobField | None  # its range or choices, where the core lists them


def _request_paths() -> list[str]:
    return [*SOURCE_OPTIONS, *(f"model.{name}" for name in wire.ARCHITECTURE_FIELDS),
            *(f"training.{name}" for name in wire.TRAINING_FIELDS),
            *(f"parallelism.{name}" for name in wire.PARALLELISM_FIELDS),
            *(f"finetuning.{name}" for name in wire.FINETUNING_FIELDS), "gpu"]


def _flag(path: str) -> Flag:
    option = SOURCE_OPTIONS.get(path) or RENAMED_OPTIONS.get(path) or "--" + path.rpartition(".")[2].replace("_", "-")
    if path == "model.hf_config":
        return Flag(path, option, "config", None)
    if path in LIST_FIELDS:
        return Flag(path, option, "list", None)
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


def _choice(flag: Flag, text: str) -> str:
    choices = flag.field.choices if flag.field else ()
    if text not in choices:
        noun = "GPU" if flag.path == "gpu" else flag.path.rpartition(".")[2].replace("_", " ")
        raise argparse.ArgumentTypeError(f"unknown {noun} {text!r}; choose from {', '.join(choices)}")
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
    return _float if flag.kind == "float" else _config


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give one or more names, separated by commas")
    return names


def _help(flag: Flag, defaults: Job) -> str:
    item = flag.field
    if flag.kind == "config":
        text = f"a Hugging Face config.json (model types: {', '.join(core.SUPPORTED_MODEL_TYPES)})"
    elif flag.kind == "choice" and item is not None:
        text = "one of " + ", ".join(item.choices)
    elif flag.kind == "int" and item is not None and item.high:
        text = f"an integer from {item.low:,} to {item.high:,}"
    else:
        text = {"int": "an integer", "float": "a number", "bool": "on or off",
                "list": "names separated by commas"}[flag.kind]
    if flag.path == "model.preset":
        text = "a model preset, " + text
    if not flag.path.startswith("model.") and flag.path != "gpu":
        text += f" (default: {_shown(field_value(defaults, flag.path))})"
    return f"{flag.path}: {text}"


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
        metavar = {"config": "PATH", "float": "P", "list": "NAMES"}.get(flag.kind, "ID" if flag.kind == "choice" else "N")
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
                    epilog=f"See `{PROG} COMMAND --help` for the flags. A JSON request body as the only argument, "
                    "or on stdin, prints the estimate's JSON.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    estimate = commands.add_parser("estimate", help="memory at the peak, by category, and the fit",
                                   description="Memory for two training steps: the peak, where it is, what it holds.")

    solver = commands.add_parser("solve",
                                 help="the largest micro-batch or sequence, or the fewest GPUs, that fits",
                                 description="The largest micro-batch or sequence, or the fewest data-parallel "
                                 "GPUs, whose peak fits --gpu; for a job that does not fit, the single changes "
                                 "that make it fit, cheapest first.")
    solver.add_argument("--target", required=True, choices=tuple(TARGETS), help="the field to solve for")

    sweep = commands.add_parser("sweep", help="the peak as one field takes several values",
                                description="The peak, its event and the fit as one field takes each value.")
    sweep.add_argument("--vary", required=True, metavar="FIELD", type=_vary,
                       help="the field to vary, as the API's vary.field: " + ", ".join(JOB_FIELDS))
    sweep.add_argument("--values", required=True, metavar="V1,V2,...",
                       help="comma-separated values: integers for integer fields, ids for choices, true/false "
                       "for switches")

    exporter = commands.add_parser("export", help="write the setup as a DeepSpeed, Trainer, accelerate or axolotl config",
                                   description="The setup as a config file for a framework (POST /api/v1/export): the "
                                   "file's text on stdout, what it cannot carry on stderr.")
    exporter.add_argument("--kind", "--as", dest="kind_out", required=True, choices=configs.EXPORT_KINDS,
                          help="the framework to write for")

    serve = commands.add_parser("serve", help="serve the page and the JSON API",
                                description="Serve the page and the JSON API (app.main:app) as `make run` does "
                                "(app.serve: uvicorn with its timeouts and settings from the environment).")
    serve.add_argument("--host", help="address to listen on (default: $TRAINMEM_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: $PORT, else 8000)")
    for name, subparser in {"estimate": estimate, "solve": solver, "sweep": sweep, "export": exporter}.items():
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
    hint = f"; did you mean {' or '.join(near)}?" if near else " (see --help for the fields)"
    raise argparse.ArgumentTypeError(f"cannot vary {text!r}{hint}")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65,535, got {port:,}")
    return port


class UsageError(Exception):
    """A flag the request cannot use: names the flag and what is wrong."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")


def sweep_values(path: str, text: str) -> list[int | bool | str]:
    """--values as the API's vary.values: ints for integer fields, true/false for switches, ids for choices."""
    kind = JOB_FIELDS[path].kind
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise UsageError("--values", f"expected comma-separated values, got {text!r}")
    values: list[int | bool | str] = []
    for index, item in enumerate(items, start=1):
        if kind == "int":
            try:
                values.append(int(item))
            except ValueError:
                raise UsageError("--values", f"value {index} ({item!r}) is not an integer, which {path} takes") from None
        elif kind == "bool":
            if item.lower() not in ("true", "false"):
                raise UsageError("--values", f"value {index} ({item!r}) is not true or false, which {path} takes")
            values.append(item.lower() == "true")
        else:
            values.append(item)
    return values


def imported(args: argparse.Namespace) -> dict[str, Any] | None:
    """What `--from` files say, read as POST /api/v1/import reads them (app.configs), or None without them."""
    paths = getattr(args, "from_files", None) or []
    if not paths:
        return None
    files = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(configs.MAX_TEXT_BYTES + 1)
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError("--from", f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
        files.append((args.kind or "auto", text))
    try:
        return configs.import_files(files)
    except core.DomainError as error:
        raise UsageError("--from", f"{error.field}: {' '.join(error.message.split())}") from None


def request_body(args: argparse.Namespace, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The API's request body for parsed flags: only the flags given, so the API's defaults apply to the rest.
    With `base` (an imported config's body), the flags given override it field by field."""
    given = {path: value for path, value in vars(args).items() if path in FLAGS and value is not None}
    sources = [FLAGS[path].option for path in SOURCE_OPTIONS if path in given]
    architecture = [FLAGS[path].option for path in given
                    if path.startswith("model.") and path not in SOURCE_OPTIONS]
    if len(sources) > 1:
        raise UsageError(sources[1], f"give only one of --model, --config and --num-params (got {', '.join(sources)})")
    if not sources and not architecture and base is None:
        raise UsageError("--model", "no model given: use --model ID (a preset), --config PATH, --num-params N, or "
                                    "the architecture flags (--num-hidden-layers, --hidden-size, ...), or --from FILE")
    if architecture and sources and sources[0] != "--model":
        raise UsageError(architecture[0], f"cannot be combined with {sources[0]}")
    body: dict[str, Any] = {"model": {}}
    if base is not None:
        body = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
        if sources:
            body["model"] = {}  # the flag's model replaces the file's
    for path, value in given.items():
        section, _, name = path.partition(".")
        if name:
            body.setdefault(section, {})[name] = value
        else:
            body[section] = value
    if args.command == "solve":
        body["target"] = args.target
    elif args.command == "export":
        body["kind"] = args.kind_out
    elif args.command == "sweep":
        body["vary"] = {"field": args.vary, "values": sweep_values(args.vary, args.values)}
    return body


# --- answers ----------------------------------------------------------------------------------------------


def answer(body: Mapping[str, Any], command: str) -> dict[str, Any]:
    """What POST /api/v1/<command> answers for `body`, as the API's JSON."""
    if command == "export":
        return export_config({key: value for key, value in body.items() if key != "kind"}, body["kind"])
    job = wire.job_from(body)
    if command == "solve":
        return wire.solution_json(solve(job, body["target"]))
    if command == "sweep":
        field = body["vary"]["field"]
        return wire.series_json(field, series(job, field, body["vary"]["values"]))
    return wire.estimate_json(job.estimate())


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:,.2f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[bool]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [cell.rjust(width) if r else cell.ljust(width) for cell, width, r in zip(row, widths, right, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


def verdict(gpu: Mapping[str, Any] | None) -> str | None:
    if gpu is None:
        return None
    where = f"{gpu['name']} ({gib(gpu['capacity'])} GiB)"
    if gpu["fits"]:
        return f"Fits on {where}: {gib(gpu['headroom'])} GiB headroom"
    return f"Does not fit on {where}: {gib(-gpu['headroom'])} GiB short"


def peak_text(peak: Mapping[str, Any]) -> str:
    return f"{gib(peak['bytes'])} GiB at '{peak['event']}' (step {peak['step']})"


def estimate_text(result: Mapping[str, Any]) -> list[str]:
    lines = [f"Parameters: {result['param_count']:,}"]
    if result["trainable_param_count"] != result["param_count"]:
        lines[0] += f" ({result['trainable_param_count']:,} trainable)"
    fit = verdict(result["gpu"])
    if fit:
        lines.append(fit)
    lines.append(f"Peak on the most-loaded GPU: {peak_text(result['peak'])}")
    lines.append(f"Reserved by the caching allocator at its worst: {gib(result['peak']['reserved_bytes'])} GiB")
    if result["gpu"]:
        lines.append(f"Outside the allocator (CUDA context, NCCL, your extra): {gib(result['gpu']['outside_allocator_bytes'])} GiB")
        for group in result["gpu"]["communicators"]:
            lines.append(f"  NCCL, {group['group']} group of {group['ranks']}: {gib(group['bytes'])} GiB ({group['formula']})")
    lines.append("")
    at_peak, per_gpu = result["peak"]["breakdown"], result["per_gpu"]
    rows = [[category.label, gib(at_peak.get(category.id)), gib(per_gpu[category.id])]
            for category in core.CATEGORY_TABLE.values()]
    rows.append(["Total", gib(result["peak"]["bytes"]), gib(per_gpu["total"])])
    lines += table(["Category", "At the peak (GiB)", "Per-GPU sum (GiB)"], rows, right=[False, True, True])
    host = result.get("host")
    if host:
        lines += ["", f"Host memory (offloaded): {gib(host['per_gpu']['total'])} GiB per GPU, "
                      f"{gib(host['per_node_bytes'])} GiB per node of {host['gpus_per_node']} GPUs"]
    if result["warnings"]:
        lines += ["", "Warnings:", *(f"- {warning}" for warning in result["warnings"])]
    return lines


def solution_text(solution: Mapping[str, Any]) -> list[str]:
    target, value = solution["target"], solution["value"]
    lines = [f"{target}: {value:,}" if value is not None else f"{target}: none fits"]
    if solution["note"]:
        lines.append(solution["note"])
    at = f"At {target} = {value:,}" if value is not None else "As given"
    result = solution["estimate"]
    lines.append(f"{at}, the peak is {peak_text(result['peak'])}")
    fit = verdict(result["gpu"])
    if fit:
        lines.append(fit)
    if solution["fixes"]:
        rows = [[fix["summary"], gib(fix["peak"]["bytes"]), fix["cost"]["text"]] for fix in solution["fixes"]]
        fixes = table(["Change", "Peak (GiB)", "Cost"], rows, right=[False, True, False])
        lines += ["", "Fixes, cheapest first:", *(f"  {line}" for line in fixes)]
    return lines


def series_text(result: Mapping[str, Any]) -> list[str]:
    def shown(value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return f"{value:,}" if isinstance(value, int) else str(value)

    fits = {True: "yes", False: "no", None: "-"}
    points = result["points"]
    rows = [[shown(point["value"]), gib(point["peak"]["bytes"]), point["peak"]["event"], fits[point["fits"]]]
            for point in points]
    numbers = all(isinstance(point["value"], int) and not isinstance(point["value"], bool) for point in points)
    return table([result["field"], "Peak (GiB)", "Event", "Fits"], rows, right=[numbers, True, False, False])




# --- entry points -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return serve(args)
    prog = f"{PROG} {args.command}"
    read = None
    try:
        read = imported(args)
        result = answer(request_body(args, read["request"] if read else None), args.command)
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except core.DomainError as error:
        print(f"{prog}: error: {domain_error_text(error)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return exit_status(result, args.command)
    if read is not None:
        assumed = {item["field"]: item for item in reversed(read["assumed"]) if not _set_by_flag(args, item["field"])}
        read = dict(read, assumed=list(reversed(assumed.values())))  # each field once, its first reason
        print("\n".join(import_text(read)), end="\n\n", file=sys.stderr if args.command == "export" else sys.stdout)
    print("\n".join(TEXT[args.command](result)))
    return exit_status(result, args.command)


def exit_status(result: Mapping[str, Any], command: str) -> int:
    """An estimate's exit status says the verdict, for scripts: 0 when it fits (or no GPU was given), 1 when it
    runs out of memory on the GPU given; 2 is a usage error. The other commands answer 0."""
    if command != "estimate":
        return 0
    gpu = result.get("gpu")
    return 1 if gpu is not None and not gpu["fits"] else 0


def _set_by_flag(args: argparse.Namespace, field: str) -> bool:
    """Whether a flag set `field` (a request path), which then is not an assumption: the model by any of the
    model's flags."""
    given = {path for path, value in vars(args).items() if path in FLAGS and value is not None}
    if field.startswith("model."):
        return any(path.startswith("model.") for path in given)
    return field in given


def import_text(read: Mapping[str, Any]) -> list[str]:
    """What the imported files said, in a few lines: what was read, what was left aside and why."""
    lines = [f"Read {', '.join(read['kinds'])}: {len(read['understood'])} keys understood, "
             f"{len(read['ignored'])} ignored, {len(read['assumed'])} assumed"]
    lines += [f"  ignored {item['key']}: {item['why']}" for item in read["ignored"]]
    lines += [f"  assumed {item['field']} = {item['value']}: {item['why']}" for item in read["assumed"]]
    return lines


def _unexpressed(item: Any) -> str:
    """What an exported file cannot carry, in words: ``training.framework = pytorch: why``."""
    if isinstance(item, Mapping) and "field" in item:
        value = item.get("value")
        shown = json.dumps(value) if not isinstance(value, str) else value
        return f"{item['field']} = {shown}" + (f": {item['why']}" if item.get("why") else "")
    return str(item)


def export_text(result: Mapping[str, Any]) -> list[str]:
    """The exported file's text; what it cannot carry goes to stderr, so the output is the file itself."""
    notes = [*result.get("notes", []), *(f"not carried: {_unexpressed(item)}" for item in result.get("unexpressed", []))]
    for note in notes:
        print(f"{PROG} export: {note}", file=sys.stderr)
    return [result["text"].rstrip()]


TEXT: Final = {"estimate": estimate_text, "solve": solution_text, "sweep": series_text, "export": export_text}


def serve(args: argparse.Namespace) -> int:
    """`make run`'s server (app.serve: uvicorn with its timeouts, settings from the environment) with --host and
    --port over $TRAINMEM_HOST and $PORT."""
    # The web application and uvicorn load for `serve` alone.
    from app import serve as server

    try:
        settings = server.settings_from(os.environ)
    except server.SettingsError as error:
        print(f"{PROG} serve: error: {error}", file=sys.stderr)
        return 2
    settings = dataclasses.replace(settings, host=args.host or settings.host, port=args.port or settings.port)
    if server.port_taken(settings.host, settings.port):
        print(f"{PROG} serve: error: --port: {settings.port} on {settings.host} is already in use; choose another, "
              f"e.g. --port {settings.port + 1}", file=sys.stderr)
        return 1
    server.serve(settings)
    return 0


# The request body's fields, for the JSON form (the API's schema forbids any others too).
BODY_FIELDS: Final = {
    "": ("model", "training", "parallelism", "finetuning", "gpu"),
    "model": ("preset", "num_params", "hf_config", *wire.ARCHITECTURE_FIELDS),
    "training": wire.TRAINING_FIELDS,
    "parallelism": wire.PARALLELISM_FIELDS,
    "finetuning": wire.FINETUNING_FIELDS,
}


def check_body(body: object) -> None:
    """The shape checks of the API's schema that the core does not make: objects, known fields, value kinds."""
    if not isinstance(body, dict):
        raise core.DomainError("", "must be a JSON object")
    if "model" not in body:
        raise core.DomainError("model", "field required")
    for section, names in BODY_FIELDS.items():
        fields = body if not section else body.get(section)
        if fields is None and section in ("training", "parallelism", "finetuning"):
            continue
        if not isinstance(fields, dict):
            raise core.DomainError(section, "must be a JSON object")
        for name, value in fields.items():
            path = f"{section}.{name}" if section else name
            if name not in names:
                raise core.DomainError(path, "extra inputs are not permitted")
            flag = FLAGS.get(path)
            if value is None or flag is None or (path == "training.precision" and isinstance(value, dict)):
                continue
            if flag.kind == "float" and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise core.DomainError(path, f"must be a number, got {value!r}")
            if flag.kind in ("int", "bool") and flag.field is not None:  # the core names bad choices itself
                check_value(flag.field, value, where=path)


def error_detail(field: str, message: str, kind: str = "value_error") -> dict[str, list[dict[str, object]]]:
    """An error in the API's shape: loc is the body path of the field at fault."""
    return {"detail": [{"loc": ["body", *field.split(".")] if field else ["body"], "msg": message, "type": kind}]}


def run_body(text: str) -> int:
    """The older form: a request body in, the estimate's JSON out; errors as the API's 422 detail."""
    try:
        body = wire.loads_bounded(text, "")
        check_body(body)
        result = answer(body, "estimate")
    except core.DomainError as error:
        print(json.dumps(error_detail(error.field, error.message), indent=2), file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return exit_status(result, "estimate")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args[0] if args else None)
    try:
        if not args:
            text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
            if not text.strip():
                parser.print_help(sys.stderr)
                return 2
            return run_body(text)
        if args[0].lstrip()[:1] in ("{", "["):
            if len(args) > 1:
                parser.error(f"a JSON request body is the only argument; got {len(args) - 1} more")
            return run_body(args[0])
        namespace = parser.parse_args(args)
        if namespace.command is None:
            parser.print_help(sys.stderr)
            return 2
        return run(namespace)
    except BrokenPipeError:  # piped into `head`, say: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
