# Two entry points (README): `make quickstart` and `make test`. Each creates .venv on first use.
VENV ?= .venv
PYTHON ?= python3

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

.PHONY: quickstart test
quickstart: $(VENV)/.installed
	$(VENV)/bin/sarathi-sim sweep experiments/configs/quickstart.yaml --out runs/quickstart

test: $(VENV)/.installed
	$(VENV)/bin/pytest -q
