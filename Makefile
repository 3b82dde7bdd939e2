# Three commands set everything up on a fresh machine:
#   make demo   creates .venv, installs notifyonce and runs the demo
#   make test   creates .venv, installs the dev tools, starts the local databases the
#               machine has, and runs the whole test suite but the storms, on every
#               database, in parallel (12 minutes on an idle 2-core machine)
#   make ci     all of it: the whole suite with the storms, the test matrix (the core
#               suites on every claimed Python with the lowest declared dependencies),
#               the static checks and the docs build; .ci/run calls it
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: demo test ci pytest matrix lint docs bench bench-campaign bench-plots mutants clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/trial_reminders/bot.py --simulate

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet 'uv>=0.5'

# The suite runs in TEST_WORKERS processes (pytest-xdist): most of a test's time is spent
# waiting on a database, a lease or a local server (with 3 workers on 2 cores the suite's
# processes used 0.8 of a core on average), so three workers a core pay off. Every
# test has its own tables, Redis keys, ports and tmux server, so they run side by side.
TEST_WORKERS ?= 6
# worksteal: a worker that runs dry takes tests still queued on another, so a run does not
# end on one worker's queue of long tests (the last 4% of a -n 6 run took 7 of its 16.5
# minutes with xdist's default scheduling).
XDIST = -n $(TEST_WORKERS) --dist worksteal
test: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python -m pytest $(XDIST) -m "not storm" $(PYTEST_ARGS)

# CI's log lists the slowest tests, so the next slow one is seen where it lands. Then the
# matrix, the static checks and the docs build run side by side (each target's output
# printed whole when it ends): the legs mostly wait on their tests' databases. What they
# install into .venv is installed first, one after the other.
ci: $(STAMP) $(BIN)/uv $(DOCS_STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python -m pytest $(XDIST) --durations=25 $(PYTEST_ARGS)
	$(MAKE) -j3 --output-sync=target matrix lint docs

# The whole suite (the storms too) in one process, for a run to read from top to bottom.
pytest: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python -m pytest $(PYTEST_ARGS)

# The core suites on every Python the classifiers claim, with the lowest version of every
# dependency and extra that pyproject.toml declares and with the newest (except on this
# venv's Python, which the whole suite covers); one venv per leg in .matrix/. A Python
# the machine lacks is skipped, or fails the run under CI=true. Three legs run side by
# side, the one that runs every core test first (each prints its output when it ends).
# Pick legs with MATRIX_ARGS="--leg 3.12-lowest"; MATRIX_ARGS=--list shows them.
MATRIX_ARGS ?= --jobs 3
matrix: $(STAMP) $(BIN)/uv
	eval "$$(scripts/services.sh)" && $(BIN)/python scripts/matrix.py $(MATRIX_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/actionlint .github/workflows/ci.yml .github/workflows/release.yml

# The benchmarks, one after the other (PostgreSQL for the ledger and Notifier ones; a few
# minutes in all). They print their figures; docs/benchmarks.md says how to read them. The
# claims and the sender's also write them to bench/results/ for `make bench-plots`.
bench: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_claims.py --json bench/results/claims.json
	$(BIN)/python bench/bench_telegram.py --json bench/results/telegram.json
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_notifier.py
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_shared_limit.py --rounds 1

# One campaign of a million notifications on PostgreSQL, MariaDB and SQLite (about half an
# hour): the rate of each 100,000 against the first, and the raw driver's in the same run.
bench-campaign: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python bench/bench_campaign.py --json bench/results/campaign.json

# The plots of docs/benchmarks.md, from what the benchmarks wrote to bench/results/
# (matplotlib, from bench/requirements.txt, is installed for this only).
bench-plots: $(STAMP)
	$(BIN)/python -m pip install --quiet -r bench/requirements.txt
	$(BIN)/python bench/plot_benchmarks.py

# Break each guarantee on purpose and check the tests notice (a few minutes; not in CI).
# docs/mutants.md explains the output; the table there is rewritten by this run.
mutants: $(STAMP)
	eval "$$(scripts/services.sh)" && $(BIN)/python scripts/mutants.py --write-docs

# The docs site, with only docs/requirements.txt installed (not the dev extra): mkdocs
# reads the API reference from src/ without importing notifyonce.
$(DOCS_STAMP): docs/requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r docs/requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) .matrix build dist site .pytest_cache .mypy_cache .ruff_cache .hypothesis
