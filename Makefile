# Set-up and entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11 and pip (package registries only, no model hub).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch 2.13.0: a CPU build lies on disk here; pinning it keeps pip from
# resolving a multi-GB CUDA build.
TORCH ?= torch==2.13.0

# `make gpu` (a CUDA machine): the same venv with a CUDA torch build, the `gpu` extra (flash-linear-attention)
# and causal-conv1d built against the local CUDA toolkit (nvcc; skipped with a message where it is missing).
# On Linux x86_64 the PyPI torch wheel is a CUDA build; TORCH_GPU picks another (e.g. a cu12x wheel file).
TORCH_GPU ?= torch==2.13.0
CAUSAL_CONV1D ?= causal-conv1d==1.7.0

.PHONY: install gpu demo test test-deps figures-deps notebooks clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)"
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)" -e ".[dev]"
	touch $@

install: $(VENV)/.installed

gpu: install
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH_GPU)" -e ".[dev,gpu]"
	$(PY) -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'make gpu: torch ' + torch.__version__ + ' is not a CUDA build; set TORCH_GPU to a CUDA wheel')"
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation "$(CAUSAL_CONV1D)" || \
		echo "make gpu: $(CAUSAL_CONV1D) was not built (needs nvcc); conv layers use torch's F.conv1d"
	$(VENV)/bin/interp models

# Debian's chromium makes kaleido's offline PNG export work (best effort: the
# figure step says exactly what is missing when it is absent).
figures-deps:
	@command -v chromium >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "figures-deps: chromium not installed; PNG export will be skipped with a message")

demo: install figures-deps
	$(VENV)/bin/interp demo

# Re-execute every notebook with the model it defaults to (SmolLM2) and commit-size its outputs.
notebooks: install figures-deps
	$(PY) notebooks/refresh.py

# The labelling page's browser tests drive Debian's chromium through its chromedriver (selenium, never a
# downloaded browser); where neither is installed nor apt-get exists they skip, saying so.
test-deps:
	@(command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1) || \
		(command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || \
		echo "test-deps: chromium/chromium-driver not installed; the browser tests will be skipped")

# The type checker first (config: [tool.mypy] in pyproject.toml), then the suite.
test: install test-deps
	$(PY) -m mypy
	$(PY) -m pytest -n 2 -q -ra tests

clean:
	rm -rf $(VENV) results .pytest_cache
