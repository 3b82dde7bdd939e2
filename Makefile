# Two commands set everything up on a fresh machine:
#   make demo   creates .venv, installs notifyonce and runs the demo
#   make test   creates .venv, installs the dev tools, starts the local databases the
#               machine has, and runs the whole test suite plus the static checks
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test pytest lint docs bench mutants clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/trial_reminders/bot.py --simulate

test: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python -m pytest $(PYTEST_ARGS)
	$(MAKE) lint docs

pytest: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy

# The benchmarks, one after the other (PostgreSQL for the ledger and Notifier ones; a few
# minutes in all). They print their figures; docs/benchmarks.md says how to read them.
bench: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_claims.py
	$(BIN)/python bench/bench_telegram.py
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_notifier.py

# Break each guarantee on purpose and check the tests notice (a few minutes; not in CI).
# docs/mutants.md explains the output; the table there is rewritten by this run.
mutants: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python scripts/mutants.py --write-docs

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache .hypothesis
