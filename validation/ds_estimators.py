"""trainmem's `framework: deepspeed` convention against DeepSpeed 0.19.8's own estimators, run.

DeepSpeed runs in an environment of its own (`make validate` builds .venv-deepspeed from
validation/deepspeed-peer.txt, with PyTorch's CPU build); validation/ds_estimators_peer.py calls
``estimate_zero2_model_states_mem_needs`` and ``estimate_zero3_model_states_mem_needs`` there, the functions whose
figures ``estimate_zero*_model_states_mem_needs_all_cold`` prints, for the same parameter counts. Compared per GPU:
the model states trainmem's ledger holds under DeepSpeed's convention, without the gradient bucket (which the
estimators leave out); and the host memory per node, which the estimators multiply by additional_buffer_factor 1.5.

    python -m validation.ds_estimators           # prints one line per case
    python -m validation.ds_estimators --write   # and publishes them in docs/VALIDATION.md ("DeepSpeed's estimators")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app import core
from app.core import states
from app.core.categories import MODEL_STATE_CATEGORIES
from validation.sections import write_section

ROOT: Final = Path(__file__).resolve().parent.parent
SECTION: Final = "## DeepSpeed's estimators"
PEER: Final = Path(__file__).resolve().parent / "ds_estimators_peer.py"
BUFFER_FACTOR: Final = 1.5  # additional_buffer_factor's default in both estimators
MODELS: Final = ("llama-3-8b", "llama-2-7b", "gpt2")
GPUS: Final = ((1, 1), (8, 1), (8, 8))  # (GPUs per node, nodes)
LAYOUTS: Final = ((2, "none"), (2, "optimizer"), (3, "none"), (3, "optimizer"), (3, "optimizer+parameters"))


@dataclass(frozen=True)
class Row:
    preset: str
    gpus_per_node: int
    nodes: int
    stage: int
    offload: str
    trainmem_gpu: int
    deepspeed_gpu: int
    trainmem_host: int | None  # per node, times the estimators' buffer factor
    deepspeed_cpu: int

    @property
    def gpu_note(self) -> str:
        if self.trainmem_gpu == self.deepspeed_gpu:
            return "equal"
        params = core.param_count(core.get_preset(self.preset).architecture)
        n = self.gpus_per_node * self.nodes
        if self.stage == 3 and self.offload == "none" and self.trainmem_gpu - self.deepspeed_gpu == 2 * params // n:
            return "+2P/N: the 16-bit gradient partition (stage3.py:791), which stage3.py:4046 leaves out"
        return "differs"

    @property
    def host_note(self) -> str:
        if self.trainmem_host is None:
            return "no offload: host memory not modelled"
        if self.trainmem_host == self.deepspeed_cpu:
            return "equal"
        if self.stage == 2 and self.gpus_per_node * self.nodes > 4:
            return "stage_1_and_2.py:4027 charges max(4 × GPUs, 16) B per parameter: a full fp32 model per process"
        return "differs"


def cases() -> list[tuple[str, int, int, int, str]]:
    return [(preset, g, n, stage, offload) for preset in MODELS for g, n in GPUS for stage, offload in LAYOUTS]


def trainmem(preset: str, gpus_per_node: int, nodes: int, stage: int, offload: str) -> tuple[int, int | None]:
    training = core.Training(framework="deepspeed", framework_overhead_bytes=0)
    parallelism = core.Parallelism(data=gpus_per_node * nodes, zero_stage=stage, offload=offload,
                                   gpus_per_node=gpus_per_node)
    result = core.estimate(architecture=core.get_preset(preset).architecture, training=training,
                           parallelism=parallelism)
    bucket = sum(buffer.bytes for buffer in result.ledger if buffer.key == "deepspeed.reduce_bucket")
    model_states = sum(result.per_gpu[category] or 0 for category in MODEL_STATE_CATEGORIES)
    host = None if result.host is None else int(result.host.per_node_bytes * BUFFER_FACTOR)
    return model_states - bucket, host


def peer_python() -> Path:
    return Path(os.environ.get("DEEPSPEED_PYTHON", ROOT / ".venv-deepspeed" / "bin" / "python"))


def deepspeed_figures(inputs: list[dict]) -> tuple[str, list[list[int]]]:
    done = subprocess.run([str(peer_python()), str(PEER)], input=json.dumps(inputs), capture_output=True, text=True,
                          timeout=300, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["deepspeed"], answer["results"]


def run() -> tuple[str, list[Row]]:
    inputs, ours = [], []
    for preset, g, n, stage, offload in cases():
        arch = core.get_preset(preset).architecture
        inputs.append({"stage": stage, "total_params": core.param_count(arch),
                       "largest_layer_params": states.largest_module(arch, 1, first=True, last=True),
                       "num_gpus_per_node": g, "num_nodes": n, "cpu_offload": offload != "none",
                       "cpu_offload_params": offload == "optimizer+parameters"})
        ours.append(trainmem(preset, g, n, stage, offload))
    version, theirs = deepspeed_figures(inputs)
    rows = [Row(preset, g, n, stage, offload, gpu, ds[1], host, ds[0])
            for (preset, g, n, stage, offload), (gpu, host), ds in zip(cases(), ours, theirs, strict=True)]
    return version, rows


def section(version: str, rows: list[Row]) -> list[str]:
    equal = sum(row.gpu_note == "equal" for row in rows)
    explained = sum(row.gpu_note.startswith("+2P/N") for row in rows)
    lines = [SECTION, "",
             f"DeepSpeed {version}'s `estimate_zero2_model_states_mem_needs` and `estimate_zero3_model_states_mem_needs` "
             "(the figures `estimate_zero*_model_states_mem_needs_all_cold` prints), run in DeepSpeed's own environment "
             "on PyTorch's CPU build (`python -m validation.ds_estimators`), against trainmem's per-GPU model states under "
             "`framework: deepspeed` for the same parameter counts. The gradient bucket (reduce_bucket_size) is left "
             "out of trainmem's side here, as the estimators leave it out. "
             f"**GPU: {equal} of {len(rows)} equal to the byte, {explained} above by the 16-bit gradient partition the "
             "ZeRO-3 estimator leaves out.**", "",
             "| model | GPUs (per node × nodes) | ZeRO | offload | trainmem GPU B | DeepSpeed gpu_mem B | | trainmem host "
             "× 1.5 B | DeepSpeed cpu_mem B | |",
             "| --- | --- | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    for row in rows:
        host = "" if row.trainmem_host is None else f"{row.trainmem_host:,}"
        lines.append(f"| {row.preset} | {row.gpus_per_node} × {row.nodes} | {row.stage} | {row.offload} | "
                     f"{row.trainmem_gpu:,} | {row.deepspeed_gpu:,} | {row.gpu_note} | {host} | {row.deepspeed_cpu:,} | "
                     f"{row.host_note} |")
    lines += ["", "Host memory without offload is what the estimators charge for loading the model (a CPU copy per "
              "process, zero_init), which is no buffer of the training step: trainmem does not count it.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not peer_python().exists():
        print(f"DeepSpeed's environment is missing ({peer_python()}): `make validate` builds it")
        return 1
    version, rows = run()
    for row in rows:
        print(f"{row.preset} {row.gpus_per_node}x{row.nodes} ZeRO-{row.stage} {row.offload}: GPU {row.trainmem_gpu:,} / "
              f"{row.deepspeed_gpu:,} ({row.gpu_note}); host {row.trainmem_host} / {row.deepspeed_cpu:,} ({row.host_note})")
    if "--write" in argv:
        write_section(section(version, rows))
    return 0 if all(row.gpu_note != "differs" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
