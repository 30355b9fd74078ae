"""Run the audit where the lines are: DuckDB here (default), Spark, BigQuery or Athena.

The rules and the report pipeline are DuckDB SQL, translated per engine (``portable``); the engine
runs rules, attribution and aggregation in one query (``pipeline``) and only the aggregates come back
into the local store (``engine_runs``/``engine_results``), where the report layer reads them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from billing_audit.config import Config
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule
from billing_audit.store import PERIOD, Store

ENGINES = ("duckdb", "spark")
LINES_MARKER = ".billing-audit-lines"


def write_lines(store: Store, folder: Path, period: str | None = None) -> int:
    """The store's canonical line items as parquet partitioned by provider and billing period
    (``x_Provider=aws/billing_period=2026-11/*.parquet``), for Spark or any parquet reader.  A folder
    this wrote before is replaced whole; any other non-empty folder is refused.  Returns the lines written."""
    from billing_audit.rollup import period_filter

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not (folder / LINES_MARKER).exists():
        raise BillingAuditError(f"{folder}: not empty and not written by billing-audit; choose another folder")
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    where = period_filter(period, "BillingPeriodStart")
    row = store.con.execute(f"SELECT count(*) FROM line_items WHERE {where}").fetchone()
    n = int(row[0]) if row else 0
    store.con.execute(
        f"COPY (SELECT *, strftime({PERIOD}, '%Y-%m') AS billing_period FROM line_items WHERE {where}) "
        f"TO '{str(tmp).replace(chr(39), chr(39) * 2)}' (FORMAT parquet, PARTITION_BY (x_Provider, billing_period))"
    )
    (tmp / LINES_MARKER).write_text(f"{n} canonical line items\n", encoding="utf-8")
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)
    return n


def run_engine(store: Store, engine: str, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
               params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None,
               spark_master: str = "local[*]", spark_lines: str | None = None) -> int:
    """Run the audit on `engine`, store the aggregates it returns, and return the engine run id."""
    from billing_audit.engines import pipeline

    key = pipeline.config_key(cfg, rules, params)
    if engine == "duckdb":  # the same one-query path, on the store itself (what other engines are tested against)
        sql = pipeline.engine_sql("duckdb", rules, cfg, period, basis, params, checkpoint)
        rows = store.con.execute(sql).fetchall()
        source = str(store.path)
    elif engine == "spark":
        from billing_audit.engines import spark

        steps = pipeline.engine_steps("spark", rules, cfg, period, basis, params, checkpoint)
        if spark_lines is None:
            folder = Path(str(store.path) + ".lines")
            write_lines(store, folder, period)
            spark_lines = str(folder)
        rule_sql = pipeline.check_rules(rules, "spark", params)
        rows = spark.run(steps, spark_lines, spark_master, rule_sql, {r.id: str(r.path) for r in rules})
        sql = ";\n".join(f"-- {n}\n{s}" for n, s in steps)
        source = spark_lines
    else:
        raise BillingAuditError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    run = pipeline.EngineRun(engine=engine, source=source, period=period, basis=basis, sql=sql, config_key=key)
    return pipeline.store_results(store.con, run, rows)
