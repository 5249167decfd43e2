# The README names two targets: `make demo` (run the product locally) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck unit clean

$(STAMP): requirements.txt requirements-dev.txt package.json package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	# npm ci trips over optional platform-only packages missing from the lock (npm bug);
	# npm install honours the lock for everything it records.
	npm install --no-audit --no-fund --loglevel=error
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	./scripts/demo.sh

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy

test: setup lint typecheck
	$(PY) -m pytest

clean:
	rm -rf $(VENV) node_modules .data
