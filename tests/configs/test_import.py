"""What holds for every kind: auto detection, nothing dropped silently, the merge of several files, bounds."""

from __future__ import annotations

import json

import pytest

from app import configs, wire
from app.configs import megatron
from app.configs import yaml as reader
from app.configs.torchtitan import loads as toml_loads
from app.core import DomainError
from tests.configs.helpers import SAMPLES, accounted, imported, leaves, merged, refused, sample

KIND_OF = {"ds_": "deepspeed", "training_args": "training-arguments", "accelerate_": "accelerate",
           "axolotl_": "axolotl", "torchtitan_": "torchtitan", "megatron_": "megatron"}
FILES = sorted(SAMPLES.iterdir())


def kind_of(name: str) -> str:
    return next(kind for prefix, kind in KIND_OF.items() if name.startswith(prefix))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_auto_detects_each_sample(path):
    answer = imported("auto", path.read_text())
    assert answer["kind"] == kind_of(path.name)
    assert answer == imported(kind_of(path.name), path.read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_key_is_understood_or_ignored(path):
    """Never dropped silently: each key of the file shows in understood or ignored, itself or by its section."""
    kind, text = kind_of(path.name), path.read_text()
    answer = imported(kind, text)
    if kind == "megatron":
        keys = [f"--{name.replace('_', '-') if name.replace('_', '-') in megatron.TORCHRUN else name}"
                for name, _ in megatron.flags(megatron.words(text, "text")[0])]
    else:
        data = (wire.loads_bounded(text, "text") if path.suffix == ".json" else
                toml_loads(text, "text") if path.suffix == ".toml" else reader.loads(text))
        keys = leaves(data)
    missing = [key for key in keys if not accounted(answer, key)]
    assert missing == []
    for entry in answer["ignored"]:
        assert entry["why"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_request_is_one_the_estimate_takes(path):
    request = imported("auto", path.read_text())["request"]
    assert wire.job_from(request).estimate().peak.bytes > 0
    assert set(request) <= {"model", "training", "parallelism", "finetuning"}


@pytest.mark.parametrize("text, words", [
    ('{"epochs_to_run": 1}', "could not tell"),
    ("just: some\nyaml: here\n", "could not tell"),
    ("[server]\nport = 80\n", "not a torchtitan job config"),
])
def test_auto_that_cannot_tell_asks_for_the_kind(text, words):
    error = refused("auto", text)
    assert error.field == "kind" and words in error.message


def test_detection_is_by_keys_not_by_guessing_at_syntax_errors():
    error = refused("auto", '{"zero_optimization": ')
    assert error.field == "text" and "not valid JSON" in error.message


def test_text_is_bounded():
    error = refused("deepspeed", " " * (configs.MAX_TEXT_BYTES + 1))
    assert error.field == "text" and "larger than" in error.message
    error = refused("deepspeed", "[" * 100 + "]" * 100)
    assert "nests deeper" in error.message
    error = refused("torchtitan", "a = " + "[" * 50 + "]" * 50)
    assert "nests deeper" in error.message
    error = refused("axolotl", "a: b\x00")
    assert "NUL" in error.message


def test_the_wrong_kind_is_refused():
    with pytest.raises(DomainError) as error:
        configs.import_config("ini", "a=1")
    assert error.value.field == "kind"
    with pytest.raises(DomainError) as error:
        configs.import_files([{"kind": "yaml", "text": "a: 1"}])
    assert error.value.field == "files.0.kind"


def test_merge_rules():
    ds = json.loads(sample("ds_config_zero3.json"))
    # Two files of a kind, a standalone kind combined, the Trainer's and axolotl's arguments together: refused.
    assert refused("", "", files=[("deepspeed", ds), ("deepspeed", ds)]).field == "files.1.kind"
    assert refused("", "", files=[("deepspeed", ds), ("megatron", "--num-layers 2")]).field == "files.1.kind"
    assert refused("", "", files=[("training-arguments", {"bf16": True}),
                                  ("axolotl", "base_model: x\n")]).field == "files.1.kind"
    # The Trainer's inline DeepSpeed dict and a DeepSpeed file: one of the two.
    assert refused("", "", files=[("training-arguments", {"deepspeed": ds}), ("deepspeed", ds)]).field == "files.1.kind"
    # FSDP from accelerate, DeepSpeed from the Trainer: cannot both run the model.
    error = refused("", "", files=[("accelerate", sample("accelerate_fsdp2.yaml")),
                                   ("training-arguments", {"deepspeed": "ds.json"})])
    assert error.field == "files.1.text.deepspeed" and "only one" in error.message


def test_a_later_file_wins_and_the_loser_is_reported():
    accelerate = sample("accelerate_deepspeed.yaml")  # zero_stage 2, gradient_accumulation_steps 4
    ds = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    answer = merged(("accelerate", accelerate), ("deepspeed", ds))
    assert answer["request"]["parallelism"]["zero_stage"] == 3
    reasons = {(e["file"], e["key"]): e["why"] for e in answer["ignored"]}
    assert reasons[(0, "deepspeed_config.zero_stage")] == "overridden by files[1] zero_optimization.stage (3)"
    assert answer["request"]["parallelism"]["data"] == 8  # accelerate's process count


def test_a_core_refusal_points_at_the_config_key():
    error = refused("deepspeed", {"train_micro_batch_size_per_gpu": 1, "tensor_parallel": {"autotp_size": 3}})
    assert error.field == "text.tensor_parallel.autotp_size"
    assert "divisible" in error.message


def test_nothing_is_fetched_or_run():
    # A model id, a path and a shell command in a config are text: reported, not acted on.
    answer = imported("megatron", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                                  "--data-path $(curl http://example.invalid) --load /etc/passwd")
    assert {"--data-path", "--load"} <= {e["key"] for e in answer["ignored"]}


def test_the_package_needs_neither_pydantic_nor_the_web_framework():
    """The command line can read configs without loading the API: app.configs imports the standard library, PyYAML
    (a runtime dependency, for accelerate's and axolotl's files), the core and the plain-Python wire format only."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    package = Path(configs.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                assert (name.split(".")[0] in sys.stdlib_module_names or name in ("app", "yaml") or
                        name.startswith(("app.core", "app.configs")) or name == "app.wire" or
                        (name == "app.api" and isinstance(node, ast.ImportFrom) and all(a.name == "wire" for a in node.names))), (path.name, name)
    code = ("import sys, app.configs, app.configs.export; "
            "print(sorted(m for m in ('pydantic', 'fastapi', 'starlette') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_very_large_config_is_answered_with_its_lists_summarised():
    from app.configs.merge import MAX_ENTRIES

    text = "base_model: meta-llama/Meta-Llama-3-8B\n" + "".join(f"setting_{i}: {i}\n" for i in range(3 * MAX_ENTRIES))
    answer = imported("axolotl", text)
    assert len(answer["ignored"]) == MAX_ENTRIES
    assert answer["ignored"][-1]["key"] == "..." and "more keys" in answer["ignored"][-1]["why"]
    assert answer["request"]["model"] == {"preset": "llama-3-8b"}
