# One task runner for people and CI. `make test` installs everything and runs every check.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export QT_QPA_PLATFORM ?= offscreen

.PHONY: install run demo test lint typecheck contracts pytest bench clean

$(BIN)/omnipost: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . --group dev
	@touch $@

install: $(BIN)/omnipost

run demo: install
	$(BIN)/omnipost demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

pytest: install
	$(BIN)/pytest

test: lint typecheck contracts pytest

bench: install
	$(BIN)/python bench/bucket.py
	$(BIN)/python bench/drain.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
