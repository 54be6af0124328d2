# One task runner for people and CI. `make test` installs everything and runs every check.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: install run demo test test-fast lint typecheck contracts pytest bench clean

$(BIN)/omnipost: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e . --group dev
	@touch $@

install: $(BIN)/omnipost

# The console on the embedded SQLite store (it offers the demo on an empty store).
run: install
	$(BIN)/omnipost console

# Without a screen: demo tenants and a live burst on the command line.
demo: install
	$(BIN)/omnipost demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# bench/ is checked too, so its peers, plotting and templating (the bench group) are installed.
typecheck: install
	$(BIN)/pip install --quiet --group bench -e .
	$(BIN)/mypy

contracts: install
	$(BIN)/lint-imports

pytest: install
	$(BIN)/pytest

test: lint typecheck contracts pytest

# The unit tier while working on a room, under 3 minutes: every test outside tests/e2e that takes
# under a second (not marked slow), on SQLite and the local limiter (not Postgres, not Redis),
# stopping at the first failure. `make test` is still what CI and a change's last run use.
test-fast: install
	$(BIN)/pytest -m "not slow and not postgres and not redis" -x -q --ignore=tests/e2e

# Needs Postgres on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (skipped where absent).
# Writes docs/benchmarks.md and docs/bench/*.{json,png}; about 20 minutes on 2 cores.
# bench/http_api.py drives the API with hey, a load generator from the system's packages.
bench: install
	$(BIN)/pip install --quiet --group bench -e .
	command -v hey >/dev/null || $(SUDO) apt-get install -y hey || \
		{ echo "bench/http_api.py needs hey: install it (apt-get install hey, brew install hey)"; exit 1; }
	$(BIN)/python bench/report.py

# The packaged app (docs/packaging.md): dist/omnipost/, one folder whose `omnipost` is the CLI
# and the console. dist-test builds it, runs its self-test and tests/e2e/test_frozen.py against it.
.PHONY: dist dist-test
dist: install
	$(BIN)/pip install --quiet --group dist
	$(BIN)/pyinstaller --noconfirm --log-level WARN omnipost.spec

dist-test: dist
	dist/omnipost/omnipost self-test --screenshot build/self-test.png
	OMNIPOST_REQUIRE_FROZEN=1 $(BIN)/pytest tests/e2e/test_frozen.py

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
