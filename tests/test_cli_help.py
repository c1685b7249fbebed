"""`trainmem COMMAND --help` fits a screen: the common flags under headings; `--help-all` lists every flag."""

from __future__ import annotations

import argparse
import re

import pytest

from app import cli, cli_args

COMMANDS = ("estimate", "solve", "sweep", "export")
SCREEN_LINES = 45
HEADINGS = ("Model:", "Training:", "Parallelism:", "Output:")
# The flags a newcomer reaches for: the model, the GPU, the shape of a step, the parallel degrees, the output.
COMMON = ("--model", "--config", "--num-params", "--from", "--gpu", "--seq-len", "--micro-batch-size", "--precision",
          "--optimizer", "--activation-checkpointing", "--data", "--tensor", "--pipeline", "--zero-stage",
          "--offload", "--json", "--help-all")


def help_text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(list(args))
    assert done.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def every_option(command: str) -> list[str]:
    parser = cli_args.build_parser(command)
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return [option for action in commands.choices[command]._actions for option in action.option_strings]


def listed(option: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


@pytest.fixture(autouse=True)
def _80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_one_screen_under_headings(capsys, command):
    text = help_text(capsys, command, "--help")
    assert len(text.splitlines()) < SCREEN_LINES, text
    lines = text.splitlines()
    assert [line for line in lines if line in HEADINGS] == list(HEADINGS)
    assert f"{command.capitalize()}:" in lines or command == "estimate"  # the command's own flags first
    assert [option for option in COMMON if not listed(option, text)] == []


@pytest.mark.parametrize("command", COMMANDS)
def test_help_all_lists_every_flag(capsys, command):
    text = help_text(capsys, command, "--help-all")
    options = every_option(command)
    assert len(options) > 60
    assert [option for option in options if not listed(option, text)] == []
    assert help_text(capsys, command, "-h") == help_text(capsys, command, "--help")


def test_estimate_help_says_its_exit_status(capsys):
    for flag in ("--help", "--help-all"):
        text = " ".join(help_text(capsys, "estimate", flag).split())
        assert "0 when the job fits" in text and "1 when it does not fit" in text
