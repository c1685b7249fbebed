"""app.hub and the command line: `--model org/name` fetched through the stand-in Hub (tests/conftest.py) as the API
fetches it, HF_HUB_OFFLINE honoured, failures named on one line at --model, and huggingface_hub left unloaded until a
Hub id is asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli, core, hub
from tests.api.test_hub import PARAMS, SMALL, WEIGHTS_BYTES, client
from tests.hub_stand_in import StandInHub

ROOT = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_line_answers_a_hub_id_as_the_api_does(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str]):
    stand_in_hub.add("org/small", SMALL, total_size=WEIGHTS_BYTES)
    status, out, err = run(capsys, "estimate", "--model", "org/small", "--gpu", "h100-80gb", "--json")
    assert (status, err) == (0, "")
    answer = client.post("/api/v1/estimate", json={"model": {"hub": "org/small"}, "gpu": "h100-80gb"}).json()
    assert json.loads(out) == answer
    status, out, _ = run(capsys, "estimate", "--model", "org/small")
    assert status == 0 and f"{PARAMS:,}" in out


def test_the_command_line_reads_huggingface_hubs_settings_from_its_environment(stand_in_hub: StandInHub,
                                                                                tmp_path: Path):
    """As a person runs it: a process of its own, whose huggingface_hub reads HF_ENDPOINT and HF_HOME at import."""
    stand_in_hub.add("org/small", SMALL)
    home = tmp_path / "own-home"
    env = {**os.environ, "HF_ENDPOINT": stand_in_hub.url, "HF_HOME": str(home), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "estimate", "--model", "org/small", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["param_count"] == PARAMS
    assert list((home / "hub").glob("models--org--small/snapshots/*/config.json"))  # huggingface_hub's own cache


def test_the_command_line_fetches_without_the_servers_setting(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/small", SMALL)
    monkeypatch.delenv("TRAINMEM_HUB")
    repo = stand_in_hub.repos["org/small"]
    status, out, err = run(capsys, "estimate", "--model", "org/small", "--revision", repo.commit, "--json")
    assert status == 0, err
    assert json.loads(out)["param_count"] == PARAMS


def test_the_command_line_honours_hf_hub_offline(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch):
    stand_in_hub.add("org/small", SMALL)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, _, err = run(capsys, "estimate", "--model", "org/small")
    assert status == 2
    assert err.startswith("trainmem estimate: error: --model: HF_HUB_OFFLINE is set") and err.count("\n") == 1
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert run(capsys, "estimate", "--model", "org/small")[0] == 0
    asked = len(stand_in_hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run(capsys, "estimate", "--model", "org/small")[0] == 0
    assert len(stand_in_hub.requests) == asked


def test_the_command_line_names_each_failure_at_its_flag(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str]):
    stand_in_hub.add("org/gated", SMALL, gated=True)
    stand_in_hub.add("org/small", SMALL)
    for args, says in ((["--model", "org/missing"], "--model: no model org/missing"),
                       (["--model", "org/gated"], "--model: org/gated is gated"),
                       (["--model", "org/small", "--revision", "v9"], "--revision: org/small has no revision 'v9'"),
                       (["--model", "gpt2", "--revision", "main"], "--revision: is a revision of a Hub model"),
                       (["--model", "org/small", "--hidden-size", "64"], "--hidden-size: cannot be combined")):
        status, _, err = run(capsys, "estimate", *args)
        assert status == 2 and says in err, err


def test_a_request_body_takes_a_hub_id(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str]):
    stand_in_hub.add("org/small", SMALL)
    status, out, _ = run(capsys, json.dumps({"model": {"hub": "org/small", "revision": "main"}}))
    assert status == 0 and json.loads(out)["param_count"] == PARAMS


@pytest.mark.parametrize("model", [{"hub": "org/small", "preset": "gpt2"}, {"hub": "org/small", "hidden_size": 64}])
def test_a_body_that_is_refused_anyway_fetches_nothing(stand_in_hub: StandInHub, capsys: pytest.CaptureFixture[str],
                                                       model: dict):
    stand_in_hub.add("org/small", SMALL)
    status, _, err = run(capsys, json.dumps({"model": model}))
    assert status == 2 and '"model"' in err
    assert stand_in_hub.requests == []


def test_a_malformed_hub_id_is_refused_before_any_request():
    with pytest.raises(core.DomainError) as refused:
        hub.fetch("org/../x")
    assert refused.value.field == "model.hub" and refused.value.kind == "hub_invalid_id"
    with pytest.raises(core.DomainError) as refused:
        hub.fetch("org/x", "a revision")
    assert refused.value.field == "model.revision"


def test_the_weights_cross_check_allows_for_the_dtype():
    # 1,000 parameters in float32 are 4,000 bytes; in bfloat16 2,000.
    fetched = hub.HubModel("org/x", None, None, "{}", weights_bytes=4_000)
    assert hub.weights_warning(fetched, {"torch_dtype": "float32"}, 1_000) is None
    assert hub.weights_warning(fetched, {"dtype": "float32"}, 1_030) is None  # within 3%
    assert "2,000 parameters in bfloat16, 100% more" in (hub.weights_warning(fetched, {"dtype": "bfloat16"}, 1_000) or "")
    assert hub.weights_warning(fetched, {}, 1_000) is None  # no dtype: nothing to compare at


def test_the_servers_time_limit_stays_under_its_answer_deadline(monkeypatch: pytest.MonkeyPatch):
    from app.middleware import REQUEST_DEADLINE_S

    assert hub.SERVER_TIMEOUT_S <= hub.MAX_SERVER_TIMEOUT_S < REQUEST_DEADLINE_S
    for setting, seconds in (("2.5", 2.5), ("600", hub.MAX_SERVER_TIMEOUT_S), ("0", hub.SERVER_TIMEOUT_S),
                             ("soon", hub.SERVER_TIMEOUT_S)):
        monkeypatch.setenv("TRAINMEM_HUB_TIMEOUT_S", setting)
        assert hub.server_timeout_s() == seconds


@pytest.mark.parametrize("module", ["app.cli", "app.main"])
def test_huggingface_hub_loads_only_when_a_hub_id_is_asked(module: str):
    done = subprocess.run([sys.executable, "-c", f"import sys, {module}; print('huggingface_hub' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
