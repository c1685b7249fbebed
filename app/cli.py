"""`trainmem` on the command line: the JSON API's questions without a server.

    trainmem estimate --model llama-3-8b --seq-len 4096 --gpu h100-80gb
    trainmem estimate --config path/to/config.json --micro-batch-size 2 --tensor 2 --zero-stage 1
    trainmem solve --model llama-3-8b --gpu a100-80gb --target micro_batch_size
    trainmem sweep --model llama-3-8b --gpu h100-80gb --vary seq_len --values 1024,2048,4096
    trainmem serve --port 8000

`estimate` exits 1 when the job runs out of memory on the GPU given (0 when it fits), so a script can test it;
a usage error is 2.

Every field of the API's request is a flag, its name with dashes (`--seq-len` for training.seq_len,
`--tensor` for parallelism.tensor); the model is `--model ID` (a preset, or a Hugging Face Hub id such as
Qwen/Qwen2.5-7B-Instruct, whose config.json is fetched as `app.hub` says), `--config PATH` (a Hugging Face
config.json), `--num-params N` or the architecture flags. The flags come from the core's own lists: the
Training and Parallelism dataclasses, the API's architecture fields, and the kinds, ranges and choices
of `app.core.job.JOB_FIELDS`. `--json` prints exactly what the API answers for the same request. A command's
`--help` shows the common flags under a few headings, `--help-all` every flag (both built in `app.cli_args`);
the tables and sentences are in GiB (`app.cli_tables`).

The older form still works: a request body as the only argument, or on stdin, prints the estimate's JSON.

    trainmem '{"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}'
    echo '{"model": {"num_params": 7000000000}}' | trainmem

Only the standard library, the core and `app.wire` are imported (neither the web framework nor
pydantic), so the command starts quickly; `serve` alone loads the web application.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from app import configs, core, hub, wire
from app.cli_args import FLAGS, PROG, REVISION, SOURCE_OPTIONS, build_parser, domain_error_text, is_hub_id
from app.cli_tables import TEXT, import_text
from app.configs.export import export_config
from app.core.job import JOB_FIELDS, check_value
from app.core.series import series
from app.core.solver import solve


class UsageError(Exception):
    """A flag the request cannot use: names the flag and what is wrong."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")


def sweep_values(path: str, text: str) -> list[int | bool | str]:
    """--values as the API's vary.values: ints for integer fields, true/false for switches, ids for choices,
    release strings for versions."""
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
    hub_id = is_hub_id(given.get("model.preset", ""))
    sources = _model_sources(given, base, hub_id=hub_id)
    body: dict[str, Any] = {"model": {}}
    if base is not None:
        body = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
        if sources:
            body["model"] = {}  # the flag's model replaces the file's
    _set_fields(body, given, hub_id=hub_id)
    _command_fields(args, body)
    return body


def _set_fields(body: dict[str, Any], given: Mapping[str, Any], *, hub_id: bool) -> None:
    """Each flag's value at its body path (--model's at model.hub when it names a Hub model)."""
    for path, value in given.items():
        if path == "model.preset" and hub_id:
            path = hub.FIELD
        section, _, name = path.partition(".")
        if name:
            body.setdefault(section, {})[name] = value
        else:
            body[section] = value


def _model_sources(given: Mapping[str, Any], base: Mapping[str, Any] | None, *, hub_id: bool) -> list[str]:
    """The model flags given (--model, --config, --num-params), checked: at most one, architecture flags only
    beside a preset's --model, some model unless a file gives one, and --revision only with a Hub id."""
    sources = [FLAGS[path].option for path in SOURCE_OPTIONS if path in given]
    architecture = [FLAGS[path].option for path in given
                    if path.startswith("model.") and path not in SOURCE_OPTIONS and path != REVISION]
    _check_model_flags(sources, architecture, base, hub_id=hub_id)
    if REVISION in given and not hub_id:
        raise UsageError("--revision", "is a revision of a Hub model: give --model org/name with it")
    return sources


def _check_model_flags(sources: list[str], architecture: list[str], base: Mapping[str, Any] | None, *,
                       hub_id: bool) -> None:
    if len(sources) > 1:
        raise UsageError(sources[1], f"give only one of --model, --config and --num-params (got {', '.join(sources)})")
    if not sources and not architecture and base is None:
        raise UsageError("--model", "no model given: use --model ID (a preset), --config PATH, --num-params N, or "
                                    "the architecture flags (--num-hidden-layers, --hidden-size, ...), or --from FILE")
    if architecture and sources and (sources[0] != "--model" or hub_id):
        raise UsageError(architecture[0], f"cannot be combined with {sources[0]}")


def _command_fields(args: argparse.Namespace, body: dict[str, Any]) -> None:
    """The fields a command adds to the body: solve's target, export's kind, sweep's vary."""
    if args.command == "solve":
        body["target"] = args.target
    elif args.command == "export":
        body["kind"] = args.kind_out
    elif args.command == "sweep":
        body["vary"] = {"field": args.vary, "values": sweep_values(args.vary, args.values)}


# --- answers ----------------------------------------------------------------------------------------------


def answer(body: Mapping[str, Any], command: str) -> dict[str, Any]:
    """What POST /api/v1/<command> answers for `body`, as the API's JSON."""
    if command == "export":
        return export_config({key: value for key, value in body.items() if key != "kind"}, body["kind"])
    job = wire.job_from(body, fetch=hub.fetch)  # the person's own machine: a Hub id is fetched
    if command == "solve":
        return wire.solution_json(solve(job, body["target"]))
    if command == "sweep":
        field = body["vary"]["field"]
        return wire.series_json(field, series(job, field, body["vary"]["values"]))
    return wire.estimate_json(job.estimate())


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
    "model": (*wire.MODEL_SOURCES, "revision", *wire.ARCHITECTURE_FIELDS),
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
        _check_fields(section, names, fields)


def _check_fields(section: str, names: tuple[str, ...], fields: dict[str, object]) -> None:
    """A section's fields: each one the schema knows, with a value of its kind."""
    for name, value in fields.items():
        path = f"{section}.{name}" if section else name
        if name not in names:
            raise core.DomainError(path, "extra inputs are not permitted")
        _check_field(path, value)


def _check_field(path: str, value: object) -> None:
    """A field's value kind, as its flag declares it (the precision's dtypes and choices are the core's to check)."""
    flag = FLAGS.get(path)
    if value is None or flag is None or (path == "training.precision" and isinstance(value, dict)):
        return
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
            return _run_stdin(parser)
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


def _run_stdin(parser: argparse.ArgumentParser) -> int:
    """No arguments: a request body on standard input, else the help."""
    text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    if not text.strip():
        parser.print_help(sys.stderr)
        return 2
    return run_body(text)


if __name__ == "__main__":
    raise SystemExit(main())
