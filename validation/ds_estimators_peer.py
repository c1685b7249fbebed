"""DeepSpeed's own model-state estimators, called in an environment that has DeepSpeed (never the project's).

Reads a JSON list of cases on stdin, each ``{"stage", "total_params", "largest_layer_params", "num_gpus_per_node",
"num_nodes", "cpu_offload", "cpu_offload_params"}``, and prints one JSON object: DeepSpeed's version and, per case,
``[cpu_mem, gpu_mem]`` as ``estimate_zero2_model_states_mem_needs`` (deepspeed/runtime/zero/stage_1_and_2.py) and
``estimate_zero3_model_states_mem_needs`` (stage3.py) return them: the functions behind the
``estimate_zero*_model_states_mem_needs_all_cold`` tables, with their defaults (zero_init, additional buffer 1.5).
Standard library and DeepSpeed only; run by ``python -m validation.ds_estimators``.
"""

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs  # noqa: E402
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs  # noqa: E402


def main() -> int:
    cases = json.load(sys.stdin)
    out = []
    for case in cases:
        if case["stage"] == 3:
            cpu_mem, gpu_mem, _ = estimate_zero3_model_states_mem_needs(
                case["total_params"], case["largest_layer_params"], num_gpus_per_node=case["num_gpus_per_node"],
                num_nodes=case["num_nodes"], cpu_offload=case["cpu_offload"],
                cpu_offload_params=case["cpu_offload_params"])
        else:
            cpu_mem, gpu_mem = estimate_zero2_model_states_mem_needs(
                case["total_params"], num_gpus_per_node=case["num_gpus_per_node"], num_nodes=case["num_nodes"],
                cpu_offload=case["cpu_offload"])
        out.append([int(cpu_mem), int(gpu_mem)])
    print(json.dumps({"deepspeed": deepspeed.__version__, "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
