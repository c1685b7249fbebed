"""A search for slow inputs: Hypothesis steers toward the requests that cost the most server CPU (`target()` on
`time.process_time`), over POST /api/v1/estimate, /solve, /import and /sweep, with bodies under the body limit.

No such request may cost more than 100 ms of CPU (estimate, solve, import), or 1.5 s for a sweep of up to 1,000
points. Bodies are drawn from shapes that once cost seconds (layer counts, layer lists, dotted TOML keys, long
Megatron tokens and expansions, deep nesting, YAML anchors), each with a size that the search can push up.
SLOW_INPUT_EXAMPLES sets the examples per endpoint (default 25); `make fuzz` runs it with more.

Costs known to be over their limits (measured on a 2-core machine, by the reproducers below):
- /solve for a config of thousands of layers (OLMo 2 with 3,810): 0.22-0.37 s, a dozen replays of the allocator at
  about 12,000 tensors each (9.6 s when each replay walked every layer, 0.5-0.95 s when each value near the GPU's
  capacity was replayed twice).
Its reproducer is an expected failure, not strict: a cost is scaled to the idle machine (`tests.cpu`), and on a
loaded one the scaled cost of an input just over its limit can dip under it; the same input holds to today's
ceiling (TODAY_S), so that a regression still fails. Until then the searches over /solve and /sweep are expected
failures run by `make fuzz` only (they find those inputs, and shrinking them would take minutes).
Under their limits now: /solve for the largest sequence of a small model on a 40 GB GPU, 80-97 ms (200-390 ms when
each value near the capacity was replayed twice); an import of 1 MB of "[", 20 ms (135-245 ms, most of it in the
scan of the body's nesting); a body whose string never closes (the scan started again at each escaped quote: 16 KB
cost 1.3 s).

A sweep of many values of another field replays the allocator for at most `series.MAX_REPLAYED` of them (it cost
about 11 ms a point when each was replayed: 1,000 values of parallelism.data took 5-10 s for 1B-parameter models,
42 s for Llama-3.1-405B), and so does a sweep of a field whose memory is a polynomial only piecewise (1,000 sequence
lengths of Gemma 3: 8.6 s, now 0.4 s). An estimate replays at most about `reserve.MAX_REPLAYED_TENSORS` tensors,
several layers at a time beyond that (10,000 layers: 40-60 ms).

Each cost is the least of up to three tries (`tests.cpu`): the process's CPU time counts its other threads too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from app import core
from app.core import lora_targets
from app.core.hf_config import SUPPORTED_MODEL_TYPES
from app.core.solver import TARGETS
from app.main import app
from app.wire import MAX_BODY_BYTES
from tests.cpu import least_cpu_s
from validation.lora_targets import CONFIGS as LORA_CONFIGS

CPU_LIMIT_S = 0.1
SWEEP_CPU_LIMIT_S = 1.5
# Today's ceilings where the limit is not met yet (the docstring's figures, with room for a busy machine).
TODAY_S = {"/api/v1/solve": 0.6}
EXAMPLES = int(os.environ.get("SLOW_INPUT_EXAMPLES", "25"))
# Large enough to reach every limit the parsers set (64 KB of TOML, 1 MiB of text), small enough to stay a body.
MAX_REPEATS = MAX_BODY_BYTES // 16

client = TestClient(app)
KNOWN_SLOW = "over its limit today: see the module's docstring"
# A search that finds an input over its limit then shrinks it, each step a request that costs seconds: the searches
# known to find one run under `make fuzz` (which sets SLOW_INPUT_EXAMPLES), not in the suite, until they are fixed.
KNOWN_FAILING_SEARCH = pytest.mark.skipif("SLOW_INPUT_EXAMPLES" not in os.environ,
                                          reason="finds inputs over its limit today: run by make fuzz")
SLOWEST: dict[str, tuple[float, str]] = {}
# The searches, and the known-slow inputs they found (expected failures): make test-fast leaves them out.
SEARCH = pytest.mark.search


def _settings(examples: int = EXAMPLES):
    return settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))


def _costs(path: str, body: dict[str, Any] | bytes, limit_s: float = CPU_LIMIT_S,
           forget: Callable[[], object] = lambda: None) -> None:
    """`forget` runs before each try: what an earlier try left in a cache is not this one's to reuse."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    if len(content) > MAX_BODY_BYTES:
        return  # refused unread (413): not what this searches for
    cpu_s, response = least_cpu_s(
        lambda: (forget(), client.post(path, content=content, headers={"content-type": "application/json"}))[1],
        limit_s)
    if currently_in_test_context():
        target(cpu_s, label=path)
    if cpu_s > SLOWEST.get(path, (0.0, ""))[0]:
        SLOWEST[path] = (cpu_s, content[:300].decode(errors="replace"))
    assert response.status_code < 500, (path, response.status_code, response.text[:300])
    assert cpu_s < limit_s, f"{path} cost {cpu_s * 1000:.0f} ms of CPU for {content[:300]!r}"


sizes = st.one_of(st.integers(0, 64), st.integers(0, 100_000), st.integers(0, 2**63 - 1))
repeats = st.integers(1, MAX_REPEATS)


@st.composite
def hf_configs(draw: st.DrawFn) -> dict[str, Any]:
    layers = draw(sizes)
    config: dict[str, Any] = {"model_type": draw(st.sampled_from(SUPPORTED_MODEL_TYPES)), "num_hidden_layers": layers}
    for name in draw(st.sets(st.sampled_from(["hidden_size", "num_attention_heads", "num_key_value_heads",
                                              "intermediate_size", "vocab_size", "num_experts", "num_local_experts",
                                              "n_routed_experts", "sliding_window", "head_dim",
                                              "moe_intermediate_size", "first_k_dense_replace"]))):
        config[name] = draw(sizes)
    listed = min(draw(repeats), 50_000)
    for name in draw(st.sets(st.sampled_from(["mlp_only_layers", "layer_types", "no_rope_layers"]))):
        config[name] = (["sliding_attention"] * listed if name == "layer_types" else list(range(listed)))
    return config


@st.composite
def models(draw: st.DrawFn) -> dict[str, Any]:
    return draw(st.one_of(
        st.builds(lambda preset: {"preset": preset}, st.sampled_from(sorted(core.model_presets()))),
        st.builds(lambda config: {"hf_config": config}, hf_configs()),
        st.builds(lambda config: {"hf_config": json.dumps(config)}, hf_configs()),
    ))


@st.composite
def estimate_bodies(draw: st.DrawFn) -> dict[str, Any]:
    training = {name: draw(sizes) for name in draw(st.sets(st.sampled_from(
        ["micro_batch_size", "seq_len", "gradient_accumulation_steps"])))}
    parallelism = {name: draw(sizes) for name in draw(st.sets(st.sampled_from(
        ["data", "tensor", "pipeline", "expert", "context"])))}
    return {"model": draw(models()), "training": training, "parallelism": parallelism,
            "gpu": draw(st.sampled_from(sorted(core.gpu_catalogue())))}


def _repeated(unit: str) -> Callable[[int], str]:
    return lambda n: unit * n


# Text shapes that once cost seconds, each with a size the search can grow.
config_texts = st.one_of(
    st.builds(lambda n: "[job]\n" + "a." * n + "a = 1\n", repeats),  # dotted TOML keys
    st.builds(lambda n: "".join(f"[t{i}]\nx = 1\n" for i in range(n)), st.integers(1, 5_000)),  # many tables
    st.builds(lambda n: "--num-layers " + "a" * n, repeats),  # one long Megatron token
    st.builds(lambda n: "A=xxxxxxxx\n" + "A=$A$A$A$A\n" * n + "--num-layers $A", st.integers(1, 200)),  # expansions
    st.builds(lambda n: "--num-layers 2 " * n, st.integers(1, 50_000)),  # many flags
    st.builds(lambda n: '{"zero_optimization": ' * n + "1" + "}" * n, st.integers(1, 100_000)),  # deep JSON
    st.builds(lambda n: "a: &a [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1 if i else ''}, *a{i - 1 if i else ''}]\n"
                                                for i in range(n)), st.integers(1, 40)),  # YAML aliases doubling
    st.builds(lambda n: "distributed_type: DEEPSPEED\n" + "  " * n + "x: 1\n", repeats),  # deep indentation
    st.builds(_repeated("[" * 1), repeats), st.builds(_repeated("'"), repeats), st.builds(_repeated('"\\'), repeats),
    st.text(max_size=200),
)
import_bodies = st.one_of(
    st.builds(lambda kind, text: {"kind": kind, "text": text}, st.sampled_from(["auto", "deepspeed",
              "training-arguments", "accelerate", "axolotl", "torchtitan", "megatron"]), config_texts),
    st.builds(lambda texts: {"files": [{"kind": "auto", "text": text} for text in texts]},
              st.lists(config_texts, min_size=1, max_size=8)),
)


@SEARCH
@given(body=estimate_bodies())
@_settings()
def test_no_estimate_costs_more_than_100_ms(body):
    _costs("/api/v1/estimate", body)


# LoRA targets as a regular expression: pieces that make a backtracking matcher slow (nested, adjacent and
# alternated repeats, back-references, look-arounds), and text.
_PATTERN_PIECES = st.sampled_from([".*", ".+", "\\w*", "[a-z_.]*", "(.|.)", "(a+)+", "(?:q|v)*", "(\\w)\\1", "(?!.*x)",
                                   ".?", "{0,255}", "layers\\.", "\\d+", "q_proj", "(", ")", "|", "Z"])
target_patterns = st.one_of(st.lists(_PATTERN_PIECES, max_size=64).map("".join), st.text(max_size=300))


@SEARCH
@given(pattern=target_patterns, layers=st.sampled_from([2, 32, 126, 400, 10_000]),
       family=st.sampled_from(sorted(LORA_CONFIGS)))
@_settings()
def test_no_target_expression_costs_more_than_100_ms(pattern, layers, family):
    config = {**LORA_CONFIGS[family], "n_layer" if family == "gpt2" else "num_hidden_layers": layers}
    _costs("/api/v1/estimate", {"model": {"hf_config": config}, "training": {"precision": "bf16"},
                                "finetuning": {"method": "lora", "target_modules": pattern}, "gpu": "h100-80gb"},
           forget=lora_targets._selection.cache_clear)


@pytest.mark.parametrize("model_type", ["gpt_oss", "gemma3_text", "qwen2_moe", "deepseek_v3", "olmo2"])
def test_an_estimate_of_the_most_layers_allowed(model_type):
    # 10,000 layers: replayed layer by layer, a step's tensors cost 2.2 s of CPU for 2,000 Qwen2-MoE layers; the
    # replay moves several layers at a time beyond reserve.MAX_REPLAYED_TENSORS tensors.
    _costs("/api/v1/estimate", {"model": {"hf_config": {"model_type": model_type, "num_hidden_layers": 10_000}},
                                "gpu": "a100-40gb"})


def test_solving_for_the_longest_sequence_of_a_small_model():
    _costs("/api/v1/solve", {"model": {"preset": "gemma-3-1b"}, "gpu": "a100-40gb", "target": "seq_len"})


def test_a_sweep_of_data_parallel_degrees():
    values = list(range(1, 301))  # 300 points: about 3 s of CPU when each was replayed, twice the limit for 1,000
    _costs("/api/v1/sweep", {"model": {"preset": "gemma-3-1b"}, "gpu": "a100-40gb",
                             "vary": {"field": "parallelism.data", "values": values}}, SWEEP_CPU_LIMIT_S)


@SEARCH
@pytest.mark.xfail(strict=False, reason=KNOWN_SLOW)
def test_solving_for_a_config_of_thousands_of_layers():
    config = {"model_type": "olmo2", "num_hidden_layers": 3810, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 1000}
    _costs("/api/v1/solve", {"model": {"hf_config": config}, "gpu": "a100-40gb", "target": "seq_len"})


def test_solving_for_a_config_of_thousands_of_layers_within_todays_ceiling():
    config = {"model_type": "olmo2", "num_hidden_layers": 3810, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 1000}
    _costs("/api/v1/solve", {"model": {"hf_config": config}, "gpu": "a100-40gb", "target": "seq_len"},
           TODAY_S["/api/v1/solve"])


def test_a_sweep_of_sequence_lengths_with_sliding_windows():
    _costs("/api/v1/sweep", {"model": {"hf_config": {"model_type": "gemma3", "num_hidden_layers": 0}},
                             "gpu": "a100-40gb",
                             "vary": {"field": "training.seq_len", "values": [1 + 64 * i for i in range(1000)]}},
           SWEEP_CPU_LIMIT_S)


@SEARCH
@KNOWN_FAILING_SEARCH
@pytest.mark.xfail(strict=False, reason=KNOWN_SLOW)
@given(body=estimate_bodies(), goal=st.sampled_from(sorted(TARGETS)))
@_settings()
def test_no_solve_costs_more_than_todays_ceiling(body, goal):
    _costs("/api/v1/solve", body | {"target": goal}, TODAY_S["/api/v1/solve"])


def test_an_import_of_a_megabyte_the_yaml_reader_works_through():
    _costs("/api/v1/import", {"kind": "auto", "text": "[" * (MAX_BODY_BYTES - 100)})


def test_a_body_whose_string_never_closes():
    # Nested past the limit, then escaped quotes to the body limit in a string that breaks off at a line end.
    _costs("/api/v1/estimate", b"[" * 40 + b'"' + b'\\"' * (MAX_BODY_BYTES // 2 - 40) + b"\\\n")


@SEARCH
@given(body=import_bodies)
@_settings()
def test_no_import_costs_more_than_100_ms(body):
    _costs("/api/v1/import", body)


SWEPT = {"training.seq_len": lambda i: 1 + 64 * i, "training.micro_batch_size": lambda i: 1 + i,
         "parallelism.data": lambda i: 1 + i, "training.gradient_accumulation_steps": lambda i: 1 + i}


@SEARCH
@KNOWN_FAILING_SEARCH
@pytest.mark.xfail(strict=False, reason=KNOWN_SLOW)
@given(body=estimate_bodies(), field=st.sampled_from(sorted(SWEPT)), points=st.integers(1, 1_000))
@_settings(max(EXAMPLES // 5, 5))
def test_no_sweep_of_1000_points_costs_more_than_1_5_s(body, field, points):
    values = [SWEPT[field](i) for i in range(points)]
    _costs("/api/v1/sweep", body | {"vary": {"field": field, "values": values}}, SWEEP_CPU_LIMIT_S)


@SEARCH
def test_the_slowest_inputs_found():
    if not SLOWEST:
        pytest.skip("runs after the searches (the whole module)")
    for path, (cpu_s, body) in sorted(SLOWEST.items()):
        print(f"{path}: slowest {cpu_s * 1000:.0f} ms of CPU: {body[:120]}")
