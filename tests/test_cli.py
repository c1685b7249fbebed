"""The `trainmem` command, run as `python -m app.cli` runs it: every request field is a flag, --json answers exactly
as the API does, bad flags are one line naming the flag, and the web framework stays unloaded."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import unittest.mock
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from app import cli, cli_args
from app.api.schemas import (
    EstimateRequest,
    FinetuningIn,
    ModelIn,
    ParallelismIn,
    SolveRequest,
    SweepRequest,
    TrainingIn,
    VaryIn,
)
from app.main import app

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = Path(sys.executable).with_name("trainmem")
WEB_MODULES = ("fastapi", "starlette", "pydantic", "uvicorn")
client = TestClient(app)

SMALL_LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
               "num_hidden_layers": 8, "num_key_value_heads": 4, "vocab_size": 32000,
               "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False}


def trainmem(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """This checkout's command line, run in this process as `python -m app.cli` runs it: its arguments, standard
    input (empty unless given), standard output and error, and its exit status, argparse's exits included. The
    tests that need a process of their own (the console script, the web framework left unloaded, serving) start
    one."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            unittest.mock.patch.object(sys, "stdin", io.StringIO(stdin or "")):
        try:
            status = cli.main(list(args))
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(list(args), status, out.getvalue(), err.getvalue())


def trainmem_process(*args: str) -> subprocess.CompletedProcess[str]:
    """This checkout's command line in a process of its own, as `python -m app.cli`."""
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)


def json_of(*args: str) -> dict:
    done = trainmem(*args, "--json")
    answer = json.loads(done.stdout)
    over = args[0] == "estimate" and answer.get("gpu") is not None and not answer["gpu"]["fits"]
    assert done.returncode == (1 if over else 0), done.stderr  # an estimate's status is its verdict
    assert done.stderr == ""
    return answer


def api(path: str, body: dict) -> dict:
    response = client.post(f"/api/v1/{path}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


# --- flags: one per request field -------------------------------------------------------------------------


def _subcommand(command: str) -> argparse.ArgumentParser:
    parser = cli_args.build_parser(command)
    subparsers = next(action for action in parser._actions if action.dest == "command")
    assert isinstance(subparsers, argparse._SubParsersAction)
    return subparsers.choices[command]


def _dests(command: str) -> set[str]:
    return {action.dest for action in _subcommand(command)._actions}


def _options(command: str) -> dict[str, str]:
    return {option: action.dest for action in _subcommand(command)._actions for option in action.option_strings}


def test_every_request_field_has_a_flag():
    sections: dict[str, type[BaseModel]] = {"model": ModelIn, "training": TrainingIn, "parallelism": ParallelismIn,
                                            "finetuning": FinetuningIn}
    paths = []
    for name in EstimateRequest.model_fields:
        if name in sections:
            paths += [f"{name}.{field}" for field in sections[name].model_fields]
        else:
            paths.append(name)
    assert len(paths) > 30
    shared = {"model.hub": "model.preset"}  # --model takes a preset or a Hub id (org/name)
    for command in ("estimate", "solve", "sweep"):
        dests, options = _dests(command), _options(command)
        missing = [path for path in paths if shared.get(path, path) not in dests]
        assert missing == [], f"{command}: request fields without a flag: {missing}"
        for path in paths:  # the flag a DomainError names is the one that sets the field
            assert options[cli_args.option_for(path)] == shared.get(path, path)
    assert set(SolveRequest.model_fields) - set(EstimateRequest.model_fields) == {"target"}
    assert "target" in _dests("solve")
    assert set(SweepRequest.model_fields) - set(EstimateRequest.model_fields) == {"vary"}
    assert set(VaryIn.model_fields) == {"field", "values"}
    assert {"vary", "values"} <= _dests("sweep")


def test_flags_are_the_field_names_with_dashes():
    options = _options("estimate")
    for option in ("--model", "--config", "--num-params", "--hidden-size", "--num-hidden-layers", "--seq-len",
                   "--micro-batch-size", "--optimizer-implementation", "--precision", "--adafactor-momentum",
                   "--no-adafactor-momentum", "--gradient-accumulation-steps", "--framework-overhead-bytes",
                   "--data", "--tensor", "--pipeline", "--zero-stage", "--sequence-parallel",
                   "--no-sequence-parallel", "--gpu", "--json"):
        assert option in options


# --- --json answers exactly as the API ----------------------------------------------------------------------


ESTIMATES = [
    (["--model", "llama-3-8b", "--seq-len", "4096", "--gpu", "h100-80gb"],
     {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}),
    (["--num-params", "7000000000", "--gpu", "a100-80gb", "--zero-stage", "3", "--data", "8"],
     {"model": {"num_params": 7000000000}, "parallelism": {"zero_stage": 3, "data": 8}, "gpu": "a100-80gb"}),
    (["--model", "llama-3-70b", "--data", "8", "--tensor", "8", "--pipeline", "2", "--zero-stage", "1",
      "--sequence-parallel", "--micro-batch-size", "2", "--gradient-accumulation-steps", "4",
      "--activation-checkpointing", "selective", "--attention", "flash", "--implementation", "megatron",
      "--gpu", "h100-80gb"],
     {"model": {"preset": "llama-3-70b"},
      "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "activation_checkpointing": "selective",
                   "attention": "flash", "implementation": "megatron"},
      "parallelism": {"data": 8, "tensor": 8, "pipeline": 2, "zero_stage": 1, "sequence_parallel": True},
      "gpu": "h100-80gb"}),
    (["--model", "gpt2", "--num-hidden-layers", "6", "--no-tie-word-embeddings", "--dropout", "0.1",
      "--precision", "fp16-fp32-master", "--optimizer", "adafactor", "--adafactor-momentum",
      "--optimizer-implementation", "for-loop", "--loop", "hf-trainer", "--framework-overhead-bytes", "0"],
     {"model": {"preset": "gpt2", "num_hidden_layers": 6, "tie_word_embeddings": False, "dropout": 0.1},
      "training": {"precision": "fp16-fp32-master", "optimizer": "adafactor", "adafactor_momentum": True,
                   "optimizer_implementation": "for-loop", "loop": "hf-trainer", "framework_overhead_bytes": 0}}),
    (["--num-hidden-layers", "4", "--hidden-size", "512", "--num-attention-heads", "8", "--vocab-size", "1000",
      "--mlp", "swiglu", "--norm", "rmsnorm", "--position-embedding", "rope", "--tensor", "2"],
     {"model": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1000,
                "mlp": "swiglu", "norm": "rmsnorm", "position_embedding": "rope"}, "parallelism": {"tensor": 2}}),
    # --target-modules: names separated by commas are a list, anything else a regular expression, as peft takes it.
    (["--model", "llama-3-8b", "--method", "lora", "--target-modules", "q_proj,v_proj", "--gpu", "h100-80gb"],
     {"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "lora", "target_modules": ["q_proj", "v_proj"]},
      "gpu": "h100-80gb"}),
    (["--model", "llama-3-8b", "--method", "lora", "--target-modules", r".*\.(q_proj|v_proj)", "--gpu", "h100-80gb"],
     {"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "lora", "target_modules": r".*\.(q_proj|v_proj)"},
      "gpu": "h100-80gb"}),
]


@pytest.mark.parametrize(("args", "body"), ESTIMATES)
def test_estimate_json_is_the_apis_answer(args, body):
    assert json_of("estimate", *args) == api("estimate", body)


def test_config_file_json_is_the_apis_answer(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL_LLAMA), encoding="utf-8")
    body = {"model": {"hf_config": SMALL_LLAMA}, "training": {"seq_len": 1024},
            "parallelism": {"tensor": 2, "zero_stage": 1}, "gpu": "l4-24gb"}
    got = json_of("estimate", "--config", str(config), "--seq-len", "1024", "--tensor", "2", "--zero-stage", "1",
                  "--gpu", "l4-24gb")
    assert got == api("estimate", body)


@pytest.mark.parametrize(("args", "body"), [
    (["--model", "llama-3-8b", "--seq-len", "4096", "--data", "8", "--zero-stage", "2", "--gpu", "a100-80gb",
      "--target", "micro_batch_size"],
     {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "parallelism": {"data": 8, "zero_stage": 2},
      "gpu": "a100-80gb", "target": "micro_batch_size"}),
    (["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "a100-40gb", "--target", "seq_len"],
     {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 8192}, "gpu": "a100-40gb", "target": "seq_len"}),
    (["--num-params", "70000000000", "--zero-stage", "3", "--gpu", "h100-80gb", "--target", "data"],
     {"model": {"num_params": 70000000000}, "parallelism": {"zero_stage": 3}, "gpu": "h100-80gb", "target": "data"}),
])
def test_solve_json_is_the_apis_answer(args, body):
    assert json_of("solve", *args) == api("solve", body)


@pytest.mark.parametrize(("args", "body"), [
    (["--model", "llama-3-8b", "--gpu", "h100-80gb", "--vary", "training.seq_len", "--values", "1024,2048,4096"],
     {"model": {"preset": "llama-3-8b"}, "gpu": "h100-80gb",
      "vary": {"field": "training.seq_len", "values": [1024, 2048, 4096]}}),
    (["--model", "gpt2", "--vary", "training.optimizer", "--values", "adamw,sgd,lion"],
     {"model": {"preset": "gpt2"}, "vary": {"field": "training.optimizer", "values": ["adamw", "sgd", "lion"]}}),
    (["--model", "llama-3-8b", "--tensor", "4", "--gpu", "a100-80gb", "--vary", "parallelism.sequence_parallel",
      "--values", "false,true"],
     {"model": {"preset": "llama-3-8b"}, "parallelism": {"tensor": 4}, "gpu": "a100-80gb",
      "vary": {"field": "parallelism.sequence_parallel", "values": [False, True]}}),
])
def test_sweep_json_is_the_apis_answer(args, body):
    assert json_of("sweep", *args) == api("sweep", body)


def test_a_json_body_as_argument_or_on_stdin_prints_the_estimate():
    body = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}
    expected = api("estimate", body)
    for done in (trainmem(json.dumps(body)), trainmem(stdin=json.dumps(body))):
        assert done.returncode == 1, done.stderr  # it does not fit the H100
        assert json.loads(done.stdout) == expected


@pytest.mark.parametrize(("body", "loc"), [
    ({"model": {"preset": "nope"}}, ["body", "model", "preset"]),
    ({"model": {"preset": "llama-3-8b"}, "parallelism": {"tensor": 3}}, ["body", "parallelism", "tensor"]),
    ({"model": {"preset": "gpt2"}, "training": {"seq_len": "long"}}, ["body", "training", "seq_len"]),
    ({"model": {"preset": "gpt2"}, "extra": 1}, ["body", "extra"]),
    ({"training": {}}, ["body", "model"]),
    ("{not json", ["body"]),
    ('{"model": {"num_params": NaN}}', ["body"]),
])
def test_a_bad_json_body_is_answered_with_the_apis_error_detail(body, loc):
    text = body if isinstance(body, str) else json.dumps(body)
    done = trainmem(text)
    assert done.returncode == 2 and done.stdout == ""
    assert json.loads(done.stderr)["detail"][0]["loc"] == loc
    response = client.post("/api/v1/estimate", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:len(loc)] == loc


# --- tables ---------------------------------------------------------------------------------------------------


def test_estimate_table():
    done = trainmem("estimate", "--model", "llama-3-8b", "--seq-len", "4096", "--gpu", "h100-80gb")
    assert done.returncode == 1, done.stderr  # it does not fit: a script can test the verdict
    result = api("estimate", {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"})
    out = done.stdout
    assert "Does not fit on NVIDIA H100" in out and "GiB short" in out
    peak = result["peak"]
    assert f"{peak['bytes'] / 2**30:,.2f} GiB at '{peak['event']}' (step {peak['step']})" in out
    assert "At the peak (GiB)" in out and "Per-GPU sum (GiB)" in out
    total = next(line for line in out.splitlines() if line.startswith("Total"))
    assert total.split()[1:] == [f"{peak['bytes'] / 2**30:,.2f}", f"{result['per_gpu']['total'] / 2**30:,.2f}"]
    fits = trainmem("estimate", "--model", "gpt2", "--gpu", "h100-80gb")
    assert fits.returncode == 0 and "Fits on" in fits.stdout and "GiB headroom" in fits.stdout


def test_the_exit_status_is_the_verdict_in_json_and_for_a_body_too():
    over = ["estimate", "--model", "llama-3-8b", "--seq-len", "4096", "--gpu", "h100-80gb", "--json"]
    assert cli.main(over) == 1
    assert cli.main(over[:-3] + ["--json"]) == 0  # no GPU, no verdict
    body = json.dumps({"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"})
    assert cli.main([body]) == 1
    assert cli.main(["solve", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--target", "seq_len", "--json"]) == 0


def test_vary_takes_a_fields_last_part_and_suggests_near_names():
    assert cli.main(["sweep", "--model", "gpt2", "--vary", "seq_len", "--values", "512,1024", "--json"]) == 0
    done = trainmem("sweep", "--model", "gpt2", "--vary", "seqlen", "--values", "512")
    assert done.returncode == 2 and "did you mean seq_len?" in done.stderr
    assert len(done.stderr) < 200  # a suggestion, not the list of every field


def test_estimate_table_without_an_architecture():
    out = trainmem("estimate", "--num-params", "7000000000").stdout
    activations = next(line for line in out.splitlines() if line.startswith("Activations"))
    assert activations.split()[-1] == "-"
    assert "fit" not in out.split("\n\n")[0]


def test_solve_table():
    done = trainmem("solve", "--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "a100-40gb",
                    "--target", "micro_batch_size")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "micro_batch_size: none fits"
    assert "Fixes, cheapest first:" in lines
    assert any("Tensor parallelism" in line and "GPUs" in line for line in lines)
    found = trainmem("solve", "--model", "gpt2", "--gpu", "h100-80gb", "--target", "micro_batch_size").stdout
    value = api("solve", {"model": {"preset": "gpt2"}, "gpu": "h100-80gb", "target": "micro_batch_size"})["value"]
    assert found.splitlines()[0] == f"micro_batch_size: {value:,}"
    assert "Fixes" not in found


def test_solve_says_memory_in_gib_throughout():
    # The solver's note gives its figures in bytes (exact, in --json); the text beside the GiB tables says GiB.
    for args in (["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "a100-40gb", "--target", "micro_batch_size"],
                 ["--model", "llama-3-70b", "--gpu", "t4-16gb", "--zero-stage", "3", "--target", "data"]):
        done = trainmem("solve", *args)
        assert done.returncode == 0, done.stderr
        note = json_of("solve", *args)["note"]
        figures = [int(figure.replace(",", "")) for figure in re.findall(r"([\d,]+) B\b", note)]
        assert figures  # the API's note keeps its exact bytes
        assert re.search(r"\d B\b", done.stdout) is None, done.stdout
        for figure in figures:
            assert f"{figure / 2**30:,.2f} GiB" in done.stdout


def test_sweep_table():
    done = trainmem("sweep", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--zero-stage", "3", "--data", "8",
                    "--vary", "training.seq_len", "--values", "1024,4096,65536")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["training.seq_len", "Peak", "(GiB)", "Event", "Fits"]
    assert [row.split()[0] for row in rows] == ["1,024", "4,096", "65,536"]
    assert [row.split()[-1] for row in rows] == ["yes", "yes", "no"]


# --- errors: one line naming the flag, exit status 2 ------------------------------------------------------------


@pytest.mark.parametrize(("args", "names"), [
    (["estimate", "--model", "nope"], ["--model", "'nope'"]),
    (["estimate", "--model", "gpt2", "--optimizer", "sgdd"], ["--optimizer", "'sgdd'"]),
    (["estimate", "--model", "gpt2", "--gpu", "h100"], ["--gpu", "'h100'"]),
    (["estimate", "--model", "gpt2", "--precision", "fp64"], ["--precision", "'fp64'"]),
    (["estimate", "--model", "gpt2", "--seq-len", "0"], ["--seq-len", "between 1 and"]),
    (["estimate", "--model", "gpt2", "--seq-len", "long"], ["--seq-len", "integer"]),
    (["estimate", "--model", "gpt2", "--zero-stage", "4"], ["--zero-stage", "between 0 and 3"]),
    (["estimate", "--model", "gpt2", "--dropout", "x"], ["--dropout", "number"]),
    (["estimate", "--model", "gpt2", "--dropout", "1.5"], ["--dropout", "probability"]),
    (["estimate", "--model", "gpt2", "--hidden-size", "0"], ["--hidden-size", "between 1 and"]),
    (["estimate", "--model", "llama-3-8b", "--tensor", "3"], ["--tensor", "divisible"]),
    (["estimate", "--model", "gpt2", "--pipeline", "5"], ["--pipeline", "divisible"]),
    (["estimate", "--model", "gpt2", "--num-params", "10"], ["--num-params", "only one of"]),
    (["estimate", "--num-params", "10", "--hidden-size", "64"], ["--hidden-size", "--num-params"]),
    (["estimate"], ["--model", "no model"]),
    (["estimate", "--config", "/no/such/config.json"], ["--config", "cannot read"]),
    (["estimate", "--model", "gpt2", "--bogus"], ["unrecognized arguments", "--bogus"]),
    (["solve", "--model", "gpt2", "--gpu", "h100-80gb"], ["--target"]),
    (["solve", "--model", "gpt2", "--target", "batch"], ["--target", "'batch'"]),
    (["solve", "--model", "gpt2", "--target", "seq_len"], ["--gpu", "needs a GPU"]),
    (["sweep", "--model", "gpt2", "--vary", "training.nope", "--values", "1"], ["--vary", "training.nope"]),
    (["sweep", "--model", "gpt2", "--vary", "training.seq_len", "--values", "1024,x"], ["--values", "'x'"]),
    (["sweep", "--model", "gpt2", "--vary", "training.seq_len", "--values", "1024,0"], ["--values", "value 2"]),
    (["sweep", "--model", "gpt2", "--vary", "parallelism.tensor", "--values", "1,5"], ["--values", "divisible"]),
    (["sweep", "--model", "gpt2", "--vary", "training.loop", "--values", "plain,eager"], ["--values", "'eager'"]),
    (["sweep", "--model", "gpt2", "--vary", "parallelism.sequence_parallel", "--values", "yes"], ["--values", "true"]),
    (["serve", "--port", "70000"], ["--port"]),
    (["train"], ["'train'"]),
])
def test_a_bad_flag_is_one_line_naming_it(args, names):
    done = trainmem(*args)
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("trainmem")
    for name in names:
        assert name in done.stderr


@pytest.mark.parametrize(("text", "name"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"model_type": "distilbert", "hidden_size": 768}), "model_type"),
    (json.dumps({"model_type": "llama", "hidden_size": 64}), "num_attention_heads"),
])
def test_a_bad_config_file_is_one_line(tmp_path, text, name):
    config = tmp_path / "config.json"
    config.write_text(text, encoding="utf-8")
    done = trainmem("estimate", "--config", str(config))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "--config" in done.stderr and name in done.stderr


def test_no_command_prints_the_help_and_exits_2():
    done = trainmem()
    assert done.returncode == 2
    assert "usage: trainmem" in done.stderr
    for command in ("estimate", "solve", "sweep", "serve"):
        assert command in done.stderr


def test_help_lists_the_flags():
    done = trainmem("estimate", "--help")
    assert done.returncode == 0
    assert "--seq-len" in done.stdout and "--help-all" in done.stdout
    every = trainmem("estimate", "--help-all")
    assert every.returncode == 0
    assert "--seq-len" in every.stdout and "--no-sequence-parallel" in every.stdout


# --- start-up: no web framework -------------------------------------------------------------------------------


def test_the_command_line_loads_no_web_framework():
    loaded = f"sorted(m for m in sys.modules if m.split('.')[0] in {WEB_MODULES!r})"
    done = subprocess.run([sys.executable, "-c", f"import app.cli, sys; print({loaded})"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    run_all = ("import contextlib, io, sys, app.cli as cli\n"
               "with contextlib.redirect_stdout(io.StringIO()):\n"
               "    cli.main(['estimate', '--model', 'gpt2', '--gpu', 'h100-80gb'])\n"
               "    cli.main(['solve', '--model', 'gpt2', '--gpu', 't4-16gb', '--target', 'seq_len', '--json'])\n"
               "    cli.main(['sweep', '--model', 'gpt2', '--vary', 'gpu', '--values', 't4-16gb,l4-24gb'])\n"
               "    cli.main(['{\"model\": {\"preset\": \"gpt2\"}}'])\n"
               f"print({loaded})\n")
    done = subprocess.run([sys.executable, "-c", run_all], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not INSTALLED.exists(), reason="the console script is not installed (pip install -e .)")
def test_the_installed_console_script():
    done = subprocess.run([str(INSTALLED), "estimate", "--model", "gpt2", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == api("estimate", {"model": {"preset": "gpt2"}})


def test_serve_refuses_a_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = trainmem_process("serve", "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1 and "already in use" in done.stderr


def test_serve_runs_the_web_application():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/gpus", timeout=5) as response:
                    gpus = json.loads(response.read())
                break
            except OSError:
                assert server.poll() is None, "the server exited"
                assert time.monotonic() < deadline, "the server did not answer within 30 s"
                time.sleep(0.2)
        assert any(gpu["id"] == "h100-80gb" for gpu in gpus)
    finally:
        server.terminate()
        server.wait(timeout=30)


DEEPSPEED = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "train_batch_size": 64,
             "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


def test_from_a_config_file_then_flags_override(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(DEEPSPEED))
    imported = api("import", {"kind": "auto", "text": path.read_text()})
    body = imported["request"]
    body["model"] = {"preset": "llama-3-8b"}
    body["training"] = body.get("training", {}) | {"seq_len": 4096}
    assert json_of("estimate", "--from", str(path), "--model", "llama-3-8b", "--seq-len", "4096") == \
        api("estimate", body)
    table = trainmem("estimate", "--from", str(path), "--gpu", "a100-80gb")
    assert table.returncode == 0 and "Read deepspeed:" in table.stdout


def test_export_writes_the_file_the_api_writes(tmp_path):
    done = trainmem("export", "--kind", "deepspeed", "--model", "llama-3-8b", "--data", "8", "--zero-stage", "3")
    assert done.returncode == 0
    expected = api("export", {"model": {"preset": "llama-3-8b"}, "parallelism": {"data": 8, "zero_stage": 3},
                                      "kind": "deepspeed"})
    assert done.stdout.strip() == expected["text"].strip()
    assert json.loads(done.stdout)["zero_optimization"]["stage"] == 3
    assert json_of("export", "--as", "axolotl", "--model", "llama-3-8b") == api(
        "export", {"model": {"preset": "llama-3-8b"}, "kind": "axolotl"})


@pytest.mark.parametrize("args, flag", [
    (("estimate", "--from", "/no/such/file.json"), "--from"),
    (("export", "--model", "gpt2"), "--kind"),
])
def test_config_flags_fail_in_one_line(args, flag):
    done = trainmem(*args)
    assert done.returncode == 2 and flag in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_what_the_flags_set_is_not_reported_as_assumed():
    # With --from, the flags override the file: the model and the sequence length they set are not assumptions,
    # and a field is reported once.
    done = trainmem("estimate", "--from", str(ROOT / "tests/configs/samples/ds_config_zero3.json"),
                    "--model", "llama-3-8b", "--seq-len", "4096", "--gpu", "a100-80gb")
    assumed = [line.split("=")[0].split()[-1] for line in done.stdout.splitlines() if line.startswith("  assumed ")]
    assert "model.preset" not in assumed and "training.seq_len" not in assumed
    assert "training.precision" in assumed and len(assumed) == len(set(assumed))


def test_a_mistyped_flag_gets_the_nearest_one():
    done = trainmem("estimate", "--model", "gpt2", "--seqlen", "4096")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "did you mean --seq-len?" in done.stderr


def test_what_an_export_cannot_carry_is_said_in_words():
    done = trainmem("export", "--kind", "deepspeed", "--model", "llama-3-8b", "--data", "8", "--zero-stage", "3")
    assert done.returncode == 0
    carried = [line for line in done.stderr.splitlines() if "not carried:" in line]
    assert carried and all("{" not in line and "'field'" not in line for line in carried)
    assert any("training.framework = pytorch: " in line for line in carried)
