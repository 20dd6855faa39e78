# Two entry points (README): `make quickstart` and `make test`. Each creates .venv on first use.
# The quickstart needs only the simulator (no torch); the tests also install the engine extra
# (torch, triton) and transformers, used to check the engine against a reference model.
VENV ?= .venv
PYTHON ?= python3

$(VENV)/bin/pip:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip

$(VENV)/.installed-core: pyproject.toml | $(VENV)/bin/pip
	$(VENV)/bin/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/pip
	$(VENV)/bin/pip install --quiet -e '.[test,engine]'
	touch $@

.PHONY: quickstart test
quickstart: $(VENV)/.installed-core
	$(VENV)/bin/sarathi-sim sweep experiments/configs/quickstart.yaml --out runs/quickstart

test: $(VENV)/.installed-test
	$(VENV)/bin/pytest -q
