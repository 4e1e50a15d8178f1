# Set-up and entry points. `make demo` and `make test` work on a fresh machine
# with Python 3.11 and pip (package registries only, no model hub).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch 2.13.0: a CPU build lies on disk here; pinning it keeps pip from
# resolving a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: install demo test figures-deps notebooks clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)"
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH)" -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# Debian's chromium makes kaleido's offline PNG export work (best effort: the
# figure step says exactly what is missing when it is absent).
figures-deps:
	@command -v chromium >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
		echo "figures-deps: chromium not installed; PNG export will be skipped with a message")

demo: install figures-deps
	$(VENV)/bin/interp demo

# Re-execute every notebook (tiny-qwen3.5 unless INTERP_NB_MODEL is set) and commit-size its outputs.
notebooks: install figures-deps
	$(PY) notebooks/refresh.py

test: install
	$(PY) -m pytest -n 2 -q -ra tests

clean:
	rm -rf $(VENV) results .pytest_cache
