# The two commands of the README. Each sets up what it needs: a virtual environment in .venv with the
# package installed in editable mode with its dev extra (re-done when pyproject.toml changes).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "reaqtive needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/reaqtive demo

lint: $(STAMP)
	$(BIN)/ruff check reaqtive tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict reaqtive

test: lint typecheck
	$(BIN)/pytest

bench: $(STAMP)
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build *.egg-info
