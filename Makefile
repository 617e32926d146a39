# The two commands of the README. Each sets up what it needs: a virtual environment in .venv with the
# package installed in editable mode with its dev extra (re-done when pyproject.toml or this file changes); the
# tests and benchmarks also install the spark extra (pyspark, pandas, pyarrow, protobuf; Java 17+ comes from the OS),
# the postgres extra (psycopg; the PostgreSQL server binaries come from the OS), the prometheus extra and the service
# extra (FastAPI and uvicorn, for the example service).
#
# Editable installs use setuptools' compat mode: a .pth file naming the source directory. The default mode
# installs an import hook instead, which Python runs but type checkers (mypy, pyright) cannot see, so a project
# of yours type-checked against this venv would find no reaqtive.
EDITABLE := --config-settings editable_mode=compat

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
PEERS_STAMP := $(VENV)/.installed-peers
EXAMPLES_STAMP := $(VENV)/.installed-examples
# Spark's Python workers must run the interpreter that has reaqtive installed.
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: demo test check lint typecheck docs bench clean check-postgres collect-tests

VENV_MADE := $(VENV)/.made

$(VENV_MADE):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "reaqtive needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@touch $(VENV_MADE)

$(STAMP): pyproject.toml Makefile | $(VENV_MADE)
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[dev]'
	@touch $(STAMP)

# Everything the tests use, the dev extra included, in one pip run: a fresh clone's make test resolves and builds
# the editable install once (a second run for the extras cost about 20 s). It stands for the dev stamp too.
$(SPARK_STAMP): pyproject.toml Makefile | $(VENV_MADE)
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[dev,spark,postgres,prometheus,service]'
	@touch $(STAMP) $(SPARK_STAMP)

# The example operator package (a user's own package of operators, found through its entry point): its tests
# run with the suite.
$(EXAMPLES_STAMP): $(STAMP) examples/reaqtive-signals/pyproject.toml
	$(BIN)/python -m pip install --quiet --no-deps $(EDITABLE) -e examples/reaqtive-signals
	@touch $(EXAMPLES_STAMP)

demo: $(STAMP)
	$(BIN)/reaqtive demo

lint: $(STAMP)
	$(BIN)/ruff check reaqtive tests bench examples docs

typecheck: $(SPARK_STAMP) $(EXAMPLES_STAMP)
	$(BIN)/mypy --strict reaqtive examples/reaqtive-signals/reaqtive_signals

# The documentation site (mkdocs.yml): the guides in docs/ and the API reference generated from the docstrings, into
# build/site; a broken link, a page left out of the navigation or a docstring mkdocstrings cannot read fails it.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

# The PostgreSQL tests start a throwaway server from the OS's binaries (initdb, pg_ctl): without them the tests
# fail at once with the instruction, rather than skipping.
check-postgres: $(STAMP)
	@$(BIN)/python -m reaqtive.testing.postgres --check

# The suite runs on pytest-xdist workers: more workers than cores, since many tests wait on subprocesses, fsync
# and servers (4 on a busy 2-core machine: 11 min against 29 in one process; 2 and 3 not measured).
# tests/conftest.py keeps the tests that share the Spark session in one worker (the cluster's and the
# driver scripts' apart) and hands out the slow tests first. PYTEST_WORKERS=0 runs
# the tests in pytest's own process (for --pdb). The tests that bound wall-clock latency run alone afterwards:
# other workers beside them would make their timers late.
PYTEST_WORKERS ?= 4
# The tests write bytecode (into __pycache__, which git ignores) even where the environment sets
# PYTHONDONTWRITEBYTECODE: they start hundreds of Python processes (crash workers, CLI runs, example scripts),
# and each would otherwise compile the package from source again (0.27 s of CPU per start, measured), and each
# pytest worker would rewrite every test module's asserts again.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

# The checks before the tests run side by side (mypy, the docs build and the tests' collection each keep one core
# busy), with each one's output kept together.
test: $(SPARK_STAMP) $(EXAMPLES_STAMP)
	@$(MAKE) --no-print-directory --output-sync=target -j 4 lint typecheck docs check-postgres collect-tests
	$(PYTEST) -n $(PYTEST_WORKERS) -m "not wall_clock"
	$(PYTEST) -m wall_clock

# Collecting the tests once writes their assert-rewritten bytecode, which each xdist worker then reads instead of
# rewriting every test module again (a cold collection cost 15 s of CPU per worker, a warm one 6 s, measured).
collect-tests: $(SPARK_STAMP) $(EXAMPLES_STAMP)
	@$(PYTEST) --collect-only -q -p no:xdist > $(VENV)/collect.log 2>&1 || (cat $(VENV)/collect.log; exit 1)

# The edit-test loop: ruff, mypy (incremental) and the fast tier of the tests, those not marked slow (no Spark,
# no PostgreSQL, no crash or benchmark processes: tests/conftest.py); make test runs everything.
check: lint typecheck $(EXAMPLES_STAMP)
	$(PYTEST) -n $(PYTEST_WORKERS) -m "not slow"

# The peers (Bytewax, RxPY) are only for the benchmarks, never a dependency: bench/peers.py runs them when present.
$(PEERS_STAMP): $(SPARK_STAMP)
	$(BIN)/python -m pip install --quiet $(EDITABLE) -e '.[dev,spark,postgres,prometheus,service,peers]' || echo "the peers extra could not be installed: benchmarks run without Bytewax/RxPY"
	@touch $(PEERS_STAMP)

bench: $(PEERS_STAMP)
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build *.egg-info
