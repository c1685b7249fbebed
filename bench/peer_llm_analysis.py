"""Time llm-analysis's training analysis on the setups the main bench times trainmem on; print JSON.

Runs inside the peers' virtual environment (`make bench` creates it from bench/peers.txt), never the
project's: `.venv-peers/bin/python bench/peer_llm_analysis.py [--runs N]`.

One call is what trainmem's `core.estimate` does for the same question: build the analysis from model,
GPU, dtype and parallelism configs, and run `LLMAnalysis.training` for one micro-batch. The model configs
are built here (llm-analysis would otherwise look the names up on the Hugging Face Hub):

- bf16 weights, activations and embedding (dtype `w16a16e16`), fp32 master weights, Adam's two fp32
  states (`other_op_bytes=None`), fp32 norm inputs;
- micro-batch 1, gradient accumulation 1, sequence 4,096, no recomputation, no ZeRO, flash attention,
  gated (SwiGLU) MLP activations;
- one H100 SXM 80GB (`h100-sxm-80gb`).

What llm-analysis cannot express: it counts two MLP matrices where SwiGLU has three, and ties the output
layer to the embedding, so its parameter count for Llama-3-8B is 5.63 B, not 8.03 B. Neither changes how
much work one call does.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import RUNS, median_p95, samples_s  # noqa: E402  (stdlib only, shared with the main bench)

# Llama 3 architectures, from their Hugging Face config.json files.
MODELS = {
    "llama-3-8b": dict(num_layers=32, hidden_dim=4096, n_head=32, num_key_value_heads=8, ffn_embed_dim=14336,
                       vocab_size=128256, max_seq_len=8192),
    "llama-3.1-405b": dict(num_layers=126, hidden_dim=16384, n_head=128, num_key_value_heads=8,
                           ffn_embed_dim=53248, vocab_size=128256, max_seq_len=131072),
}
# (case id, model, pipeline degree); the main bench reads the results by these ids.
CASES = [("llama-3-8b/pp1", "llama-3-8b", 1), ("llama-3.1-405b/pp1", "llama-3.1-405b", 1),
         ("llama-3.1-405b/pp63", "llama-3.1-405b", 63)]
SEQ_LEN = 4096


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()

    from importlib.metadata import version

    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name
    from llm_analysis.logger import logger

    # Its logger formats its messages anyway; only their printing is switched off.
    logger.setLevel(logging.CRITICAL)
    gpu = get_gpu_config_by_name("h100-sxm-80gb")
    dtype = get_dtype_config_by_name("w16a16e16")

    def analysis(model: ModelConfig, pipeline: int) -> dict:
        return LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=1, pp_size=pipeline, dp_size=1)).training(
            # All three given, so that a setup that does not fit (Llama-3-8B without ZeRO does not) is still
            # analysed rather than rejected by its batch-size search.
            batch_size_per_gpu=1, gradient_accumulation_steps=1, global_batch_size=1,
            seq_len=SEQ_LEN,
            activation_recomputation=ActivationRecomputation.NONE,
            ds_zero=DSZeRO.NONE,
            master_weights_dtype_bytes=4,
            other_op_bytes=None,
            flash_attn=True,
            mlp_gated_linear_units=True,
        )

    results = {}
    for case, name, pipeline in CASES:
        fields = MODELS[name]
        # expansion_ratio given explicitly: 14336 / 4096 is not a whole number, which it would otherwise assert.
        model = ModelConfig(name=name, model_type="llama", expansion_ratio=fields["ffn_embed_dim"] / fields["hidden_dim"],
                            **fields)
        summary = analysis(model, pipeline)
        median, p95 = median_p95(samples_s(lambda m=model, p=pipeline: analysis(m, p), args.runs))
        results[case] = {"median_us": median * 1e6, "p95_us": p95 * 1e6,
                         "params": summary["num_params_total"],
                         "per_gpu_bytes": summary["(weight+op_state+grad+act)_memory_per_gpu"]}
    json.dump({"peer": "llm-analysis", "version": version("llm-analysis"), "runs": args.runs, "cases": results},
              sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
