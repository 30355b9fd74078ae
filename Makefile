# The two front-door commands: `make demo` and `make test`.  Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

.PHONY: demo test lint clean
demo: $(VENV)/.installed
	rm -f demo.duckdb
	$(BIN)/billing-audit audit fixtures/ --db demo.duckdb --out demo-report

test: $(VENV)/.installed
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check billing_audit connectors tests
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) demo.duckdb demo-report
