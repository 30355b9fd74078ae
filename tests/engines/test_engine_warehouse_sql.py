"""The warehouse queries executed: the BigQuery SQL (and, below, the Athena SQL) run over DuckDB tables shaped
like the warehouse's, transpiled back with sqlglot, must give the local ingest's lines and the local report.

The BigQuery tables are the fixtures themselves (they are BigQuery exports extracted as NDJSON / parquet),
loaded with their nested STRUCT / ARRAY columns as the export table has them and a ``_PARTITIONTIME``
(the day of ``export_time``, as the export's ingestion-time partitioning gives) the query prunes on.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

import billing_audit
from billing_audit.config import Config
from billing_audit.engines import pipeline
from billing_audit.engines.portable import to_engine
from billing_audit.report import build_report
from billing_audit.rules import load_rules
from connectors.aws import athena
from connectors.gcp import bigquery as ebq
from connectors.gcp import pull as gp
from peers_bigquery import STANDARD_SCHEMA
from support import FIXTURES, without_savings

MONTH, PERIOD = "202610", "2026-10"
RULES = load_rules().rules
BQ_TYPES = {"STRING": "VARCHAR", "FLOAT": "DOUBLE", "TIMESTAMP": "TIMESTAMPTZ", "INTEGER": "BIGINT",
            "BOOLEAN": "BOOLEAN", "NUMERIC": "DECIMAL(38,9)", "DATE": "DATE"}
TABLES = {  # kind -> (fixture, table)
    "standard": (FIXTURES / "gcp" / "standard-ndjson", "billing-proj.billing_export.gcp_billing_export_v1_01ABCD_23EF45_678901"),
    "resource": (FIXTURES / "gcp" / "resource-parquet",
                 "billing-proj.billing_export.gcp_billing_export_resource_v1_01ABCD_23EF45_678902"),
}


def _duck_type(f: dict[str, Any]) -> str:
    nested = ", ".join(f'"{g["name"]}" {_duck_type(g)}' for g in f.get("fields", []))
    t = f"STRUCT({nested})" if f["type"] in ("RECORD", "STRUCT") else BQ_TYPES[f["type"]]
    return t + "[]" if f.get("mode") == "REPEATED" else t


def _bq_table(con: duckdb.DuckDBPyConnection, kind: str) -> gp.TableInfo:
    """The export table as BigQuery holds it, as DuckDB table ``bq_export``; its TableInfo as tables.get says."""
    folder, full = TABLES[kind]
    if kind == "standard":
        files = sorted(str(p) for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz")))
        cols = "{" + ", ".join(f"'{f['name']}': '{_duck_type(f)}'" for f in STANDARD_SCHEMA) + "}"
        src = f"read_json({files}, format='newline_delimited', columns={cols})"
    else:
        src = f"read_parquet('{folder}/**/*.parquet', hive_partitioning = false)"
    con.execute(f"CREATE OR REPLACE TABLE bq_export AS SELECT *, date_trunc('day', export_time) AS _PARTITIONTIME FROM {src}")
    columns = {r[0]: ("RECORD" if r[1].startswith("STRUCT") or r[1].endswith("[]") else r[1])
               for r in con.execute("DESCRIBE bq_export").fetchall() if r[0] != "_PARTITIONTIME"}
    return gp.TableInfo(gp.parse_table(full), kind, columns, partition_column="_PARTITIONTIME")


def _as_duckdb(con: duckdb.DuckDBPyConnection, q: gp.Query) -> list[tuple[Any, ...]]:
    """Run BigQuery statement `q` on DuckDB: transpiled by sqlglot, the export table named ``bq_export``,
    the query parameters bound.  Shims, for what sqlglot does not transpile (the production SQL is valid
    BigQuery as it is):

    * ``SAFE.PARSE_DATETIME(fmt, x)``: sqlglot drops the SAFE prefix's meaning, so it is the DuckDB macro
      ``bq_safe_parse_datetime`` (``try_strptime``);
    * ``ARRAY_AGG(... ORDER BY ... LIMIT 1)``: DuckDB has no LIMIT inside an aggregate; the LIMIT is dropped
      (the query takes element 0 of the ordered array either way);
    * ``BIGNUMERIC``: sqlglot writes DuckDB ``DECIMAL(38, 5)``, which would round money to 5 places; BigQuery's
      has 38 (DuckDB's widest is DECIMAL(38, x)), so it is written as the canonical ``DECIMAL(38, 12)``;
    * the tag lookup ``(SELECT tg.value FROM UNNEST(Tags) AS tg WHERE tg.key = k LIMIT 1)``: DuckDB cannot GROUP BY
      a correlated subquery, so it is the macro ``bq_tag(Tags, k)`` (the same lookup with ``list_filter``).
    """
    con.execute("CREATE OR REPLACE MACRO bq_safe_parse_datetime(fmt, x) AS try_strptime(x, fmt)")
    con.execute("CREATE OR REPLACE MACRO bq_tag(tags, k) AS list_filter(tags, lambda tg: tg.key = k)[1].value")
    tree = sqlglot.parse_one(q.sql.replace("SAFE.PARSE_DATETIME(", "bq_safe_parse_datetime("), read="bigquery")
    for agg in list(tree.find_all(exp.ArrayAgg)):
        for lim in list(agg.find_all(exp.Limit)):
            lim.replace(lim.this)
    for sub in list(tree.find_all(exp.Subquery)):
        sel = sub.this
        src = sel.args.get("from_") if isinstance(sel, exp.Select) else None
        alias = src.this.args.get("alias") if src is not None and isinstance(src.this, exp.Unnest) else None
        if (alias is not None and "tg" in [alias.name, *(c.name for c in alias.columns)]
                and [e.sql("bigquery") for e in sel.expressions] == ["tg.value"]):
            assert src is not None
            cond = sel.args["where"].this
            assert isinstance(cond, exp.EQ) and cond.this.sql("bigquery") == "tg.key", cond
            sub.replace(exp.Anonymous(this="bq_tag", expressions=[src.this.expressions[0].copy(), cond.expression.copy()]))
    for dt in list(tree.find_all(exp.DataType)):
        if dt.this == exp.DataType.Type.BIGDECIMAL:
            dt.replace(exp.DataType.build("DECIMAL(38, 12)"))
    for table in tree.find_all(exp.Table):
        if table.catalog == "billing-proj":
            table.replace(exp.to_table("bq_export").as_(table.alias) if table.alias else exp.to_table("bq_export"))
    sql = tree.sql(dialect="duckdb")
    return [tuple(r) for r in con.execute(sql, {p.name: p.value for p in q.params}).fetchall()]


def _warehouse_con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each fixture ingested and tagged locally, one store each."""
    out = {}
    for kind, (folder, _) in TABLES.items():
        db = tmp_path_factory.mktemp(kind) / "store.duckdb"
        with billing_audit.open(db) as store:
            rep = store.ingest([str(folder)])
            assert not rep.errors, rep.errors
            store.tag()
        out[kind] = db
    return out


KEY = ["BillingAccountId", "BillingPeriodStart", "SubAccountId", "ChargePeriodStart", "ChargePeriodEnd", "BilledCost",
       "EffectiveCost", "ListCost", "BillingCurrency", "ChargeCategory", "ChargeClass", "ChargeDescription",
       "PricingCategory", "x_PricingModel", "ConsumedQuantity", "PricingQuantity", "PricingUnit", "RegionId",
       "ResourceId", "ResourceName", "ResourceType", "ServiceName", "ServiceCategory", "SkuId", "x_ListCostSource",
       "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountType", "ListUnitPrice",
       "ContractedUnitPrice", "Tags"]


def _norm(v: Any) -> Any:
    if isinstance(v, Decimal):
        return v.normalize()
    if isinstance(v, dict):  # the local MAP
        return tuple(sorted(v.items()))
    if isinstance(v, list):  # BigQuery's ARRAY<STRUCT<key, value>>
        return tuple(sorted((e["key"], e["value"]) for e in v))
    return v


@pytest.mark.parametrize("kind", list(TABLES))
def test_bigquery_lines_query_gives_the_local_lines(kind: str, local: dict[str, Path]) -> None:
    con = _warehouse_con()
    info = _bq_table(con, kind)
    q = ebq.audit_query(info, gp.parse_month(MONTH), "WITH unused AS (SELECT 1 AS one) SELECT * FROM line_items")
    assert "_PARTITIONTIME >= @partition_start" in q.sql and "invoice.month = @invoice_month" in q.sql
    remote = _as_duckdb(con, q.__class__(q.sql.replace("SELECT\n  *\nFROM line_items", "SELECT\n  " + ", ".join(
        f"line_items.{c}" for c in KEY) + "\nFROM line_items"), q.params, q.window))
    with billing_audit.open(local[kind]) as store:
        want = [tuple(r) for r in store.con.execute(
            f"SELECT {', '.join(KEY)} FROM line_items WHERE strftime(BillingPeriodStart, '%Y%m') = ?", [MONTH]).fetchall()]
    _same_lines(KEY, remote, want)


def test_bigquery_audit_query_gives_the_local_report(local: dict[str, Path], tmp_path: Path) -> None:
    con = _warehouse_con()
    info = _bq_table(con, "standard")
    q = ebq.audit_query(info, gp.parse_month(MONTH), pipeline.engine_sql("bigquery", RULES, Config(), PERIOD, "effective"))
    rows = _as_duckdb(con, q)
    assert {r[0] for r in rows} >= {"agg", "rule"}
    with billing_audit.open(local["standard"]) as store:
        want = build_report(store, Config(), PERIOD).to_dict()
    with billing_audit.open(tmp_path / "remote.duckdb") as store:
        run = pipeline.EngineRun("bigquery", TABLES["standard"][1], PERIOD, "effective", q.sql,
                                 pipeline.config_key(Config(), RULES, None))
        run_id = pipeline.store_results(store.con, run, rows)
        got = build_report(store, Config(), PERIOD, "effective", engine_run=run_id).to_dict()
    _same_report_but_gcp_savings(got, want)


def _same_report_but_gcp_savings(got: dict[str, Any], want: dict[str, Any]) -> None:
    """The engine's report is the local one, except the GCP spot savings: GCP exports carry no on-demand price of a
    spot SKU, and the warehouse has neither the price references nor the bill fallback the local store prices them
    with (the local report here: the bill's on-demand A100), so the engine says n/a, never 0 or a loss."""
    assert without_savings(got["jobs"]) == without_savings(want["jobs"]) and got["jobs"]
    assert without_savings(got["totals"]) == without_savings(want["totals"])
    assert [j["gross_spot_savings"] for j in got["jobs"] if j["spot_compute_cost"]] == \
        [None] * len([j for j in got["jobs"] if j["spot_compute_cost"]])
    assert any(j["gross_spot_savings"] for j in want["jobs"] if j["provider"] == "gcp")


# -- Athena ------------------------------------------------------------------------------------------
# The Glue tables the Data Exports Athena integration creates, as DuckDB tables ``cur_db.<kind>_export``: every
# column the format declares for its Glue table (athena.glue_table: Glue names, Glue types as DuckDB types, the map
# columns as MAP), filled from the fixture's parquet (a declared column the fixture lacks is NULL, a fixture column
# the table does not declare is dropped), and the ``billing_period`` partition column ('YYYY-MM') from the
# ``BILLING_PERIOD=`` folder the files sit in.

ATHENA_TABLES = {  # kind -> fixture
    "cur2": FIXTURES / "aws" / "cur2",
    "focus": FIXTURES / "focus" / "aws-focus-1.2",
}


def _glue_table(con: duckdb.DuckDBPyConnection, kind: str) -> str:
    src = f"read_parquet('{ATHENA_TABLES[kind]}/**/*.parquet', hive_partitioning = true)"
    have = {r[0].lower(): r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    assert "billing_period" in have  # the partition folder
    cols = athena.glue_table(kind)
    select = ", ".join((f'CAST("{have[c]}" AS {t})' if c in have else f"CAST(NULL AS {t})") + f" AS {c}"
                       for c, t in cols.items())
    table = f"cur_db.{kind}_export"
    con.execute("CREATE SCHEMA IF NOT EXISTS cur_db")
    con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {select} FROM {src}")
    assert [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()] == list(cols)
    return table


def _athena_as_duckdb(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    """Run Athena (Trino) statement `sql` on DuckDB, transpiled by sqlglot (read="athena").  One shim, for what
    sqlglot does not transpile (the production SQL is valid Trino as it is):

    * the tag merge ``transform_values(multimap_from_entries(<entries>), (k, v) -> v[1])`` (each key's first value)
      is the DuckDB macro ``athena_first_by_key(<entries>)`` (DuckDB has neither function);
    * ``arrays_overlap(a, b)`` is the DuckDB macro of that name (``list_has_any``).
    """
    con.execute("CREATE OR REPLACE MACRO arrays_overlap(a, b) AS list_has_any(a, b)")
    con.execute("""CREATE OR REPLACE MACRO athena_first_by_key(entries) AS map_from_entries(list_transform(
        list_distinct(list_transform(entries, lambda e: struct_extract_at(e, 1))),
        lambda key: {'key': key, 'value': struct_extract_at(list_filter(entries, lambda e: struct_extract_at(e, 1) = key)[1], 2)}))""")
    tree = sqlglot.parse_one(sql, read="athena")
    merges = 0
    for fn in list(tree.find_all(exp.Anonymous)):
        if fn.name.lower() != "transform_values":
            continue
        multimap, lam = fn.expressions
        assert isinstance(multimap, exp.Anonymous) and multimap.name.lower() == "multimap_from_entries", multimap
        assert isinstance(lam, exp.Lambda) and lam.this.sql("trino") == "v[1]", lam.sql("trino")
        fn.replace(exp.Anonymous(this="athena_first_by_key", expressions=[multimap.expressions[0].copy()]))
        merges += 1
    assert merges == (1 if "AS Tags" in sql else 0), sql  # the mapping's Tags is the one tag merge
    return [tuple(r) for r in con.execute(tree.sql(dialect="duckdb")).fetchall()]


@pytest.fixture(scope="module")
def aws_local(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each AWS fixture ingested and tagged locally, one store each."""
    out = {}
    for kind, folder in ATHENA_TABLES.items():
        db = tmp_path_factory.mktemp(f"athena-{kind}") / "store.duckdb"
        with billing_audit.open(db) as store:
            rep = store.ingest([str(folder)])
            assert not rep.errors, rep.errors
            store.tag()
        out[kind] = db
    return out


@pytest.mark.parametrize("kind", athena.KINDS)
def test_athena_lines_query_gives_the_local_lines(kind: str, aws_local: dict[str, Path]) -> None:
    con = _warehouse_con()
    table = _glue_table(con, kind)
    mapping = athena.mapping_sql(table, kind, PERIOD)  # every canonical column the Athena mapping gives
    key = [c for c in KEY if c in {p.alias_or_name for p in mapping.expressions}]
    # CUR 2.0 has no CommitmentDiscountCategory / ContractedUnitPrice source: the local store derives them, the
    # pipeline reads neither (the audit test below would fail on NotPortable if it did)
    assert set(KEY) - set(key) == ({"CommitmentDiscountCategory", "ContractedUnitPrice"} if kind == "cur2" else set())
    lines = sqlglot.parse_one(f"SELECT {', '.join(key)} FROM line_items", read="duckdb")
    assert isinstance(lines, exp.Select)
    sql = to_engine(lines.with_("line_items", as_=mapping), "athena")
    assert f"billing_period = '{PERIOD}'" in sql
    remote = _athena_as_duckdb(con, sql)
    with billing_audit.open(aws_local[kind]) as store:
        want = [tuple(r) for r in store.con.execute(
            f"SELECT {', '.join(key)} FROM line_items WHERE strftime(BillingPeriodStart, '%Y-%m') = ?", [PERIOD]).fetchall()]
    assert any(r[key.index("Tags")] for r in remote)  # the fixtures have tags: the merge is compared, not skipped
    _same_lines(key, remote, want)


def _same_lines(key: list[str], remote: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    """The warehouse query's lines are the local ingest's: as many, the same cost per currency, the same values."""
    assert len(remote) == len(want) > 0

    def per_currency(rows: list[tuple[Any, ...]]) -> dict[str, Decimal]:
        acc: dict[str, Decimal] = defaultdict(Decimal)
        for r in rows:
            acc[r[key.index("BillingCurrency")]] += Decimal(r[key.index("BilledCost")] or 0)
        return {c: v.quantize(Decimal("0.01")) for c, v in acc.items()}

    assert per_currency(remote) == per_currency(want)
    got = sorted((tuple(_norm(v) for v in r) for r in remote), key=repr)
    exp_ = sorted((tuple(_norm(v) for v in r) for r in want), key=repr)
    diffs = {(key[i], a[i], b[i]) for a, b in zip(got, exp_, strict=True) for i in range(len(key)) if a[i] != b[i]}
    assert not diffs, sorted(diffs, key=repr)[:20]


@pytest.mark.parametrize("kind", athena.KINDS)
def test_athena_audit_query_gives_the_local_report(kind: str, aws_local: dict[str, Path], tmp_path: Path) -> None:
    con = _warehouse_con()
    table = _glue_table(con, kind)
    sql = athena.athena_sql(table, kind, PERIOD, RULES, Config(), "effective")
    rows = _athena_as_duckdb(con, sql)
    assert {r[0] for r in rows} >= {"agg", "rule"}
    with billing_audit.open(aws_local[kind]) as store:
        want = build_report(store, Config(), PERIOD).to_dict()
    with billing_audit.open(tmp_path / "remote.duckdb") as store:
        run = pipeline.EngineRun("athena", table, PERIOD, "effective", sql, pipeline.config_key(Config(), RULES, None))
        run_id = pipeline.store_results(store.con, run, rows)
        got = build_report(store, Config(), PERIOD, "effective", engine_run=run_id).to_dict()
    assert got["jobs"] == want["jobs"] and got["jobs"]
    assert got["totals"] == want["totals"]


def test_an_engine_run_over_kubernetes_pod_records_says_nodes_are_not_shared(tmp_path: Path) -> None:
    """The audit query Athena and BigQuery run (DuckDB's own dialect, before transpiling; no node sharing) over the
    EKS split cost allocation fixture: the engine attributes the 10 pod records by their labels but cannot share
    node A's and B's lines out, so the report of its run warns, naming the records; the local report does not."""
    db = tmp_path / "eks.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([str(FIXTURES / "aws" / "cur2-eks")]).errors
        store.tag()
        local = build_report(store, Config(), "2026-07")  # first: its node shares are prepared on the connection
        sql = pipeline.pipeline_sql(RULES, Config(), "2026-07", "effective")
        rows = [tuple(r) for r in store.con.execute(sql, pipeline.bound_values(RULES, None)).fetchall()]
        run = pipeline.EngineRun("athena", "line_items", "2026-07", "effective", sql,
                                 pipeline.config_key(Config(), RULES, None))
        run_id = pipeline.store_results(store.con, run, rows)
        got = build_report(store, Config(), "2026-07", "effective", engine_run=run_id)
    k8s = [w for w in got.warnings if w.startswith("kubernetes:")]
    assert len(k8s) == 1 and "pod records of shared nodes (split cost allocation data: 10 in USD)" in k8s[0]
    assert "does not share a node's lines out" in k8s[0] and "restart fees" in k8s[0]
    assert not [w for w in local.warnings if w.startswith("kubernetes:")]
    # the figures it names do differ: locally llm-a holds its pods' share of the nodes, on the engine none
    spot = {r["job"]: r["spot_compute_cost"] for r in got.jobs.iter_rows(named=True)}
    assert spot.get("llm-a", Decimal(0)) == 0
    assert {r["job"]: r["spot_compute_cost"] for r in local.jobs.iter_rows(named=True)}["llm-a"] == Decimal("14")
