"""Run the audit where the lines are: DuckDB here (default), Spark, BigQuery or Athena.

The rules and the report pipeline are DuckDB SQL, translated per engine (``portable``); the engine
runs rules, attribution and aggregation in one query (``pipeline``) and only the aggregates come back
into the local store (``engine_runs``/``engine_results``), where the report layer reads them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from billing_audit.config import Config
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule
from billing_audit.store import PERIOD, Store

ENGINES = ("duckdb", "spark", "bigquery", "athena")


@dataclass
class EngineOptions:
    """Where and how each engine runs (the command line's --spark-*, --bq-* and --athena-* options)."""

    spark_master: str = "local[*]"
    spark_lines: str | None = None
    bq_table: str | None = None  # project.dataset.table of the GCP billing export
    bq_project: str | None = None  # the project that runs (and pays for) the query; default the table's
    bq_endpoint: str | None = None
    max_bytes_billed: int | None = None
    athena_table: str | None = None  # database.table of the CUR 2.0 or FOCUS Glue table
    athena_kind: str = "cur2"
    athena_workgroup: str = "primary"
    athena_output: str | None = None  # s3:// result location (default: the workgroup's)
    aws_profile: str | None = None
    aws_region: str | None = None
    aws_endpoint: str | None = None
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


def expected_source(store: Store, engine: str, opts: EngineOptions) -> str | None:
    """What a run of `engine` with these options reads (stored with the run, matched when reusing one)."""
    if engine == "duckdb":
        return str(store.path)
    if engine == "spark":
        return opts.spark_lines or str(store.path) + ".lines"
    return opts.bq_table if engine == "bigquery" else opts.athena_table


def run_engine(store: Store, engine: str, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
               params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None,
               spark_master: str = "local[*]", spark_lines: str | None = None,
               options: EngineOptions | None = None) -> int:
    """Run the audit on `engine`, store the aggregates it returns, and return the engine run id."""
    from billing_audit.engines import pipeline

    opts = options or EngineOptions(spark_master=spark_master, spark_lines=spark_lines)
    key = pipeline.config_key(cfg, rules, params)
    scanned: int | None = None
    if engine == "duckdb":  # the same one-query path, on the store itself (what other engines are tested against)
        sql = pipeline.engine_sql("duckdb", rules, cfg, period, basis, params, checkpoint)
        rows = store.con.execute(sql).fetchall()
        source = str(store.path)
    elif engine == "spark":
        from billing_audit import registry

        spark = registry.part("spark", "engine")

        steps = pipeline.engine_steps("spark", rules, cfg, period, basis, params, checkpoint)
        lines = opts.spark_lines
        if lines is None:
            folder = Path(str(expected_source(store, "spark", opts)))
            write_lines(store, folder, period)
            lines = str(folder)
        rule_sql = pipeline.check_rules(rules, "spark", params)
        rows = spark.run(steps, lines, opts.spark_master, rule_sql, {r.id: str(r.path) for r in rules})
        sql = ";\n".join(f"-- {n}\n{s}" for n, s in steps)
        source = lines
    elif engine == "bigquery":
        from billing_audit import registry

        bigquery = registry.part("gcp", "bigquery")

        if not opts.bq_table or not period:
            raise BillingAuditError("--engine bigquery needs --bq-table PROJECT.DATASET.TABLE and --period YYYY-MM")
        sql = pipeline.engine_sql("bigquery", rules, cfg, period, basis, params, checkpoint)
        project = opts.bq_project or opts.bq_table.split(".")[0]
        client = bigquery.make_client(project, api_endpoint=opts.bq_endpoint)
        rows, scanned = bigquery.run(client, opts.bq_table, sql, period, opts.max_bytes_billed)
        source = opts.bq_table
    elif engine == "athena":
        from billing_audit import registry

        athena = registry.part("aws", "athena")
        if not opts.athena_table or not period or "." not in opts.athena_table:
            raise BillingAuditError("--engine athena needs --athena-table DATABASE.TABLE and --period YYYY-MM")
        database, table = opts.athena_table.split(".", 1)
        client = athena.make_client(opts.aws_profile, opts.aws_region, opts.aws_endpoint)
        res = athena.run(client, database, table, opts.athena_kind, period, opts.athena_workgroup,
                         opts.athena_output or "", rules=rules, cfg=cfg, basis=basis, params=params,
                         checkpoint=checkpoint)
        rows, sql, scanned, source = res.rows, res.sql, res.data_scanned_bytes, opts.athena_table
    else:
        raise BillingAuditError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    run = pipeline.EngineRun(engine=engine, source=source, period=period, basis=basis, sql=sql, config_key=key,
                             bytes_processed=scanned)
    return pipeline.store_results(store.con, run, rows)
