# The two front-door commands: `make demo` and `make test`.  Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(VENV)/.installed: pyproject.toml constraints/ci.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' -c constraints/ci.txt
	touch $@

.PHONY: demo test lint clean bench bench-spark
demo: $(VENV)/.installed
	rm -f demo.duckdb
	$(BIN)/billing-audit audit fixtures/ --db demo.duckdb --out demo-report

test: $(VENV)/.installed
	bash .ci/peers
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check billing_audit connectors tests fixtures bench
	$(BIN)/lint-imports
	$(BIN)/mypy

clean:
	rm -rf $(VENV) demo.duckdb demo-report

bench: $(VENV)/.installed
	$(BIN)/python bench/run.py --rows 1000000 10000000 --refresh-lines 1000000 --refresh-months 12 --repeat 3 \
		--out bench/results.json

# local DuckDB audit vs Spark local[2] over the raw exports, each a whole process (one heavy run at a time: an hour+)
bench-spark: $(VENV)/.installed
	$(BIN)/python bench/spark_sizing.py --rows 1000000 --provider aws --provider azure --provider gcp --out bench/spark-results.json
