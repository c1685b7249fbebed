# Every target does its own set-up: a fresh clone needs nothing but python3 (3.11+).
PYTHON ?= python3
VENV   ?= .venv
PEERS  ?= .venv-peers
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test test-fast lint bench load wrk fuzz validate lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Runtime dependencies, installed from the hashed lock.
$(VENV)/.runtime: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# Test dependencies (a superset of the runtime lock).
$(VENV)/.test: requirements-test.lock $(VENV)/.runtime
	$(BIN)/pip install -q --require-hashes -r requirements-test.lock
	touch $@

# The validate extra from its hashed lock, and torch 2.13.0 (CPU build) by version: the fast
# validation subset runs in `make test`, the full sweep in `make validate`. peft and accelerate (for the
# fine-tuning measurements) come by version too, without their dependencies: they would pull a CUDA torch
# into the lock; what else they need (numpy, pyyaml, safetensors, huggingface-hub, tqdm) is in it already.
PEFT := "peft==0.21.2" "accelerate==1.15.0" "psutil==7.2.2"
$(VENV)/.validate: requirements-validate.lock Makefile $(VENV)/.test
	$(BIN)/pip install -q --require-hashes -r requirements-validate.lock
	$(BIN)/pip install -q --no-deps "torch==2.13.0"
	$(BIN)/pip install -q --no-deps $(PEFT)
	touch $@

# Serves on http://$(HOST):$(PORT); `make run PORT=8001` for another port (it says so when the port is taken).
run: $(VENV)/.runtime
	TRAINMEM_HOST=$(HOST) PORT=$(PORT) $(BIN)/python -m app.serve

# The tests run on WORKERS processes (pytest-xdist; `make test WORKERS=0` runs them in this one). --dist loadfile
# keeps each module on one worker: its module fixtures are built once, and a module's last test may read what the
# others counted (test_formulas.py).
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadfile
# Compiled bytecode is kept in .venv (not beside the sources), even where the environment turns writing it off:
# each worker would otherwise compile every module it imports anew, half of what collecting the tests costs.
PYTEST  := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache $(BIN)/python -m pytest

# Everything: the PyTorch measurements (validation) on the workers, then in one process the browser tests (one
# Chromium, one live server) and the long searches (schemathesis' tests share a node id per test function, which
# pytest-xdist cannot place; the last one counts the requests the others sent). Exit status 5 is PYTEST_ARGS
# choosing none of them.
test: $(VENV)/.test $(VENV)/.validate
	$(PYTEST) $(XDIST) -m "not browser and not search" $(PYTEST_ARGS)
	$(PYTEST) -m "browser or search" $(PYTEST_ARGS) || [ $$? -eq 5 ]

# Quick feedback while editing: everything but the browser tests, the tests that need the validate extra (PyTorch
# measurements, the GPU runs re-predicted, names checked against transformers) and the searches over generated
# inputs (schemathesis, the slow-input search, random queries and pastes), which `make test` runs; a quarter of each
# generated-input test's examples and of each fixed product of cases (tests/budget.py). About 81 s of CPU
# (user + sys) over the two workers: 42-48 s on a 2-core machine at a load average of 0.5-1.8.
test-fast: $(VENV)/.test
	$(PYTEST) $(XDIST) -m "not browser and not validation and not search" --examples-share=0.25 \
		$(PYTEST_ARGS)

# Lint and type check (settings in pyproject.toml). mypy checks app, bench and tests; the validation harness is
# read for the types the tests import from it but not itself checked: torch's and transformers' signatures make
# most of its lines errors that no annotation of ours could settle. The validate extra is installed because the
# tests import torch and transformers, whose types mypy reads.
lint: $(VENV)/.test $(VENV)/.validate
	$(BIN)/ruff check .
	$(BIN)/mypy

# Peer calculators that `make bench` times the core against (bench/peers.txt), in a virtual environment of
# their own so that they never enter the project's locks.
$(PEERS)/.installed: bench/peers.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q -r bench/peers.txt
	touch $@

# Without PyPI the peers cannot be installed: the bench then says so and skips their comparison.
bench: $(VENV)/.test
	@$(MAKE) --no-print-directory $(PEERS)/.installed || echo "bench: could not install bench/peers.txt into $(PEERS); the comparison with llm-analysis will be skipped"
	BENCH_PEERS=$(PEERS) $(BIN)/python -m bench

# The real server under load (bench/load.py): 20,000 requests at concurrency 32 on a free loopback port, the
# throughput against /healthz, latency per route and the server's RSS; fails on any error. LOAD_ARGS passes
# options, e.g. `make load LOAD_ARGS="--url http://127.0.0.1:8000 --pid 1234"`.
load: $(VENV)/.test
	$(BIN)/python -m bench.load $(LOAD_ARGS)

# The estimate's latency under wrk (bench/wrk.py): 64 connections for 30 s after a 10 s warm-up, each request a setup
# of 4,000 drawn from a seed, against issue 25's p99 target of 150 ms; fails on any error. Needs Debian's wrk.
wrk: $(VENV)/.test
	$(BIN)/python -m bench.wrk $(WRK_ARGS)

# Schemathesis with every phase over every operation, then the slow-input search (bench/fuzz.py): cases, 5xx, schema
# violations, the slowest case and the costliest input per endpoint. About 2 minutes; longer with
# `make fuzz FUZZ_SECONDS=1200`. Fails on any 5xx, schema violation or input over its CPU limit.
FUZZ_SECONDS ?= 120
fuzz: $(VENV)/.test
	$(BIN)/python -m bench.fuzz --seconds $(FUZZ_SECONDS)

# DeepSpeed in an environment of its own, for the cross-check with its estimators (validation/ds_estimators.py).
DEEPSPEED_ENV ?= .venv-deepspeed
$(DEEPSPEED_ENV)/.installed: validation/deepspeed-peer.txt
	$(PYTHON) -m venv $(DEEPSPEED_ENV)
	$(DEEPSPEED_ENV)/bin/pip install -q --no-deps -r validation/deepspeed-peer.txt
	touch $@

# The full measurement sweep against PyTorch (CPU build): live memory through two steps at real size
# (docs/timeline.json), then saved tensors on small models; writes docs/VALIDATION.md and docs/validation.json.
# The GPU section compares trainmem with the runs kept in validation/gpu-runs/ (made on a CUDA machine with
# `python -m validation.gpu run FILE`; see validation/gpu.py).
validate: $(VENV)/.validate $(DEEPSPEED_ENV)/.installed
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.timeline
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation --full
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.gpu write validation/gpu-runs/*.json
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.reserved --traces --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.finetuning --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.moe --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.fsdp2 --write
	DEEPSPEED_PYTHON=$(DEEPSPEED_ENV)/bin/python $(BIN)/python -m validation.ds_estimators --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.dense --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.mla --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.deepseek_v2 --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.gpt_oss --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.qwen2_moe --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.reentrant --write
	HF_HUB_OFFLINE=1 $(BIN)/python -m validation.compiled --measure --write

# Regenerate the hashed locks after editing requirements*.in.
lock: | $(BIN)/python
	$(BIN)/pip install -q uv
	$(BIN)/uv pip compile --python-version 3.11 --generate-hashes -q requirements.in -o requirements.lock
	$(BIN)/uv pip compile --python-version 3.11 --generate-hashes -q requirements-test.in -o requirements-test.lock
	$(BIN)/uv pip compile --python-version 3.11 --generate-hashes -q requirements-validate.in -o requirements-validate.lock

clean:
	rm -rf $(VENV) $(PEERS) $(DEEPSPEED_ENV) .pytest_cache test-artifacts
