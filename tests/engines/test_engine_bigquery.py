"""`--engine bigquery`: the audit as one BigQuery statement over the GCP billing export.

The SQL is checked by parsing (sqlglot, BigQuery dialect) and against golden files; the job flow runs
the real google-cloud-bigquery client against the local REST peer (tests/peers_bigquery.py), which
answers the audit query with the aggregates the local engine computes from the same fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlglot

import billing_audit
from billing_audit.config import Config
from billing_audit.engines import pipeline
from billing_audit.errors import BillingAuditError
from billing_audit.rules import load_rules
from connectors.gcp import bigquery as ebq
from connectors.gcp import pull as gp
from peers_bigquery import STANDARD_SCHEMA, FakeBigQuery, FakeTable, ndjson_rows
from support import FIXTURES, GOLDEN, without_savings

PROJECT = "billing-proj"
DATASET = "billing_export"
TABLE = "gcp_billing_export_v1_01ABCD_23EF45_678901"
FULL = f"{PROJECT}.{DATASET}.{TABLE}"
STANDARD = FIXTURES / "gcp" / "standard-ndjson"
MONTH, PERIOD = "202610", "2026-10"
SNAP = GOLDEN / "engines" / "bigquery"
RULES = load_rules().rules
BQ_TYPES = {"VARCHAR": "STRING", "DATE": "DATE", "BOOLEAN": "BOOLEAN", "BIGINT": "INTEGER",
            "DECIMAL(38,12)": "BIGNUMERIC", "DOUBLE": "FLOAT", "TIMESTAMP": "DATETIME"}


def _same_as_golden(name: str, got: str, update: bool) -> None:
    golden = SNAP / name
    if update or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
        if not update:
            pytest.fail(f"golden file {golden.name} was missing and has been written: review and commit it")
    assert got == golden.read_text(), f"{name} differs from {golden}; rerun with --update-golden if intended"


def _round_trips(sql: str) -> None:
    tree = sqlglot.parse_one(sql, read="bigquery")
    again = tree.sql(dialect="bigquery")
    assert sqlglot.parse_one(again, read="bigquery") == tree


def _info(partitioned: bool = True) -> gp.TableInfo:
    from google.cloud.bigquery import SchemaField, TimePartitioning

    fields = [SchemaField.from_api_repr(f) for f in STANDARD_SCHEMA]
    return gp.classify(gp.parse_table(FULL), fields, "TABLE", TimePartitioning() if partitioned else None)


# -- the SQL ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_sql_parses_as_bigquery(rule: Any, update_golden: bool) -> None:
    sql = pipeline.check_rules([rule], "bigquery")[rule.id]
    _round_trips(sql)
    _same_as_golden(f"{rule.id}.sql", sql + "\n", update_golden)


def test_audit_statement_parses_and_matches_golden(update_golden: bool) -> None:
    audit = pipeline.engine_sql("bigquery", RULES, Config(), PERIOD, "effective")
    _round_trips(audit)
    _same_as_golden("pipeline.sql", audit + "\n", update_golden)
    q = ebq.audit_query(_info(), gp.parse_month(MONTH), audit)
    _round_trips(q.sql)
    _same_as_golden("audit-standard-partitioned.sql", q.sql + "\n", update_golden)
    tree = sqlglot.parse_one(q.sql, read="bigquery")
    with_ = tree.args.get("with_") or tree.args.get("with")
    names = [c.alias_or_name for c in with_.expressions]
    assert names[:3] == ["gcp_fields", "line_items", "checkpoint_resources"]
    assert len(names) == len(set(names))
    assert "invoice.month = @invoice_month" in q.sql and "_PARTITIONTIME >= @partition_start" in q.sql
    assert [p.name for p in q.params] == ["invoice_month", "partition_start", "partition_end"]
    assert "@" not in audit  # the rules' values are literals; only the month and the window are parameters


def test_mapping_gives_every_column_the_pipeline_reads() -> None:
    from sqlglot import exp

    audit = pipeline.pipeline_sql(RULES, Config(), PERIOD, "effective")
    ctes = {n for n, _ in pipeline.pipeline_parts(RULES, Config(), PERIOD, "effective")}
    outputs = {e.alias_or_name for e in sqlglot.parse_one(ebq.mapping_select(), read="duckdb").expressions}
    read = {c.name for c in sqlglot.parse_one(audit, read="duckdb").find_all(exp.Column)
            if c.name[:1].isupper() or c.name.startswith("x_")}
    assert read - ctes <= outputs, sorted(read - outputs)
    unpartitioned = ebq.audit_query(_info(partitioned=False), gp.parse_month(MONTH),
                                    pipeline.engine_sql("bigquery", RULES, Config(), PERIOD, "effective"))
    assert "_PARTITIONTIME" not in unpartitioned.sql and [p.name for p in unpartitioned.params] == ["invoice_month"]


# -- the job flow against the REST peer ----------------------------------------------------------------------------


@pytest.fixture
def bq() -> Iterator[FakeBigQuery]:
    srv = FakeBigQuery(page_size=50).start()
    srv.add_table(FakeTable(PROJECT, DATASET, TABLE, STANDARD_SCHEMA, ndjson_rows(STANDARD)))
    try:
        yield srv
    finally:
        srv.stop()


def _client(srv: FakeBigQuery) -> Any:
    from google.auth.credentials import AnonymousCredentials

    return gp.make_client(PROJECT, api_endpoint=srv.url, credentials=AnonymousCredentials())


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    """The aggregates the local engine computes from the fixture exports (what BigQuery would return)."""
    db = tmp_path_factory.mktemp("local") / "store.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([str(STANDARD), str(FIXTURES / "gcp" / "resource-parquet")])
        assert not rep.errors, rep.errors
        store.tag()
        rows = store.con.execute(pipeline.engine_sql("duckdb", RULES, Config(), PERIOD, "effective")).fetchall()
    assert {r[0] for r in rows} == {"agg", "hours", "res", "rule", "win"}  # every kind, DATETIME cells included
    return [tuple(r) for r in rows]


def _rest(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, date):
        return v.isoformat()
    return v


def _serve(srv: FakeBigQuery, rows: list[tuple[Any, ...]]) -> None:
    schema = [{"name": n, "type": BQ_TYPES[t], "mode": "NULLABLE"} for n, t in pipeline.RESULT_COLUMNS]
    names = [n for n, _ in pipeline.RESULT_COLUMNS]
    srv.add_result("line_items AS (", schema, [{n: _rest(v) for n, v in zip(names, r, strict=True)} for r in rows])


def _norm(rows: Any) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        out.append(tuple(v.normalize() if isinstance(v, Decimal) else v for v in r))
    return sorted(out, key=repr)


def test_dry_run_then_query_with_byte_limit_and_month_parameter(bq: FakeBigQuery, tmp_path: Path,
                                                                  local_rows: list[tuple[Any, ...]]) -> None:
    _serve(bq, local_rows)
    audit = pipeline.engine_sql("bigquery", RULES, Config(), PERIOD, "effective")
    limit = 10 * 1024**3
    rows, processed = ebq.run(_client(bq), FULL, audit, MONTH, limit, retry=gp.make_retry(deadline=10, initial=0.02))

    jobs = bq.queries()
    assert [bool(j.get("dryRun")) for j in jobs] == [True, False]
    dry, real = jobs
    assert dry["query"]["useQueryCache"] is False and "maximumBytesBilled" not in dry["query"]
    assert real["query"]["maximumBytesBilled"] == str(limit)
    for j in (dry, real):
        q = j["query"]
        assert q["useLegacySql"] is False and q["query"] == dry["query"]["query"]
        assert f"FROM `{FULL}` AS t" in q["query"] and "invoice.month = @invoice_month" in q["query"]
        params = {p["name"]: (p["parameterType"]["type"], p["parameterValue"]["value"]) for p in q["queryParameters"]}
        assert params["invoice_month"] == ("STRING", MONTH)
        assert params["partition_start"][0] == params["partition_end"][0] == "TIMESTAMP"
    assert processed == bq.bytes_per_row * len(ndjson_rows(STANDARD))

    assert [type(r) for r in rows] == [tuple] * len(local_rows)
    money = [pipeline.RESULT_COLUMNS.index((n, "DECIMAL(38,12)")) for n in ("cost", "list_cost", "fee_n")]
    assert all(isinstance(r[i], Decimal) for r in rows for i in money if r[i] is not None)
    assert _norm(rows) == _norm(local_rows)

    db = tmp_path / "remote.duckdb"
    with billing_audit.open(db) as store:
        run = pipeline.EngineRun("bigquery", FULL, PERIOD, "effective", real["query"]["query"],
                                 pipeline.config_key(Config(), RULES, None), processed)
        run_id = pipeline.store_results(store.con, run, rows)
        stored = store.con.execute(
            f"SELECT {', '.join(n for n, _ in pipeline.RESULT_COLUMNS)} FROM engine_results WHERE run_id = ?",
            [run_id]).fetchall()
        assert _norm(stored) == _norm(local_rows)
        pipeline.load_run(store.con, run_id)
        agg = store.con.execute("SELECT currency, sum(cost), sum(n) FROM ba_agg GROUP BY ALL ORDER BY ALL").fetchall()
    want: dict[str, list[Any]] = {}
    for r in local_rows:
        if r[0] == "agg":
            acc = want.setdefault(r[4], [Decimal(0), 0])
            acc[0] += r[9] or 0
            acc[1] += r[8]
    assert [(c, s, n) for c, s, n in agg] == sorted((c, s, n) for c, (s, n) in want.items())


def test_max_bytes_billed_refuses_before_any_query(bq: FakeBigQuery) -> None:
    _serve(bq, [])
    audit = pipeline.engine_sql("bigquery", RULES, Config(), PERIOD, "effective")
    estimate = bq.bytes_per_row * len(ndjson_rows(STANDARD))
    with pytest.raises(BillingAuditError, match="max-bytes-billed"):
        ebq.run(_client(bq), FULL, audit, MONTH, estimate - 1, retry=gp.make_retry(deadline=10, initial=0.02))
    assert [bool(j.get("dryRun")) for j in bq.queries()] == [True]
    assert bq.jobs == {}


# -- the command line ----------------------------------------------------------------------------------------------

from gcp_adc import adc, private_key  # noqa: E402,F401 - the ADC fixtures (service-account key, token peer)


@pytest.fixture(scope="module")
def local_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """The local engine's aggregates and report over the same fixture exports."""
    from billing_audit.report import build_report

    db = tmp_path_factory.mktemp("local-cli") / "store.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([str(STANDARD), str(FIXTURES / "gcp" / "resource-parquet")]).errors
        store.tag()
        rows = store.con.execute(pipeline.engine_sql("duckdb", RULES, Config(), PERIOD, "effective")).fetchall()
        rep = build_report(store, Config(), PERIOD).to_dict()
    return [tuple(r) for r in rows], rep


def test_report_engine_bigquery_on_the_command_line(adc: FakeBigQuery, tmp_path: Path,  # noqa: F811
                                                   local_report: tuple[list[tuple[Any, ...]], dict[str, Any]]) -> None:
    import json

    from click.testing import CliRunner

    from billing_audit.cli import main

    rows, want = local_report
    _serve(adc, rows)
    db = tmp_path / "remote.duckdb"  # nothing ingested here: the lines stay in the warehouse
    args = ["report", "--db", str(db), "--engine", "bigquery", "--bq-table", FULL, "--period", PERIOD,
            "--max-bytes-billed", str(10**12), "--format", "json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["filters"] == {"period": PERIOD, "cost_basis": "effective", "engine": "bigquery"}
    # the same report, except the GCP spot savings the warehouse cannot measure (no price references nor bill
    # fallback there; the local report prices the A100 spot lines from the bill's on-demand A100): n/a, never 0
    want = json.loads(json.dumps(want, default=str))
    assert without_savings(got["jobs"]) == without_savings(want["jobs"]) and got["jobs"]
    assert without_savings(got["totals"]) == without_savings(want["totals"])
    assert all(j["gross_spot_savings"] is None for j in got["jobs"])
    assert any(j["gross_spot_savings"] for j in want["jobs"] if j["provider"] == "gcp")
    real = adc.queries(dry_run=False)
    assert len(real) == 1 and "invoice_month" in json.dumps(real[0])
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    engine, source, scanned = con.execute("SELECT engine, source, bytes_processed FROM engine_runs").fetchone()
    assert (engine, source) == ("bigquery", FULL) and scanned > 0
    assert f"it processed {scanned:,} bytes" in r.stderr
    assert con.execute("SELECT count(*) FROM line_items").fetchone()[0] == 0
    con.close()
    # the byte guard from the command line: refused after the dry run, nothing more sent
    r = CliRunner().invoke(main, ["report", "--db", str(tmp_path / "g.duckdb"), "--engine", "bigquery",
                                  "--bq-table", FULL, "--period", PERIOD, "--max-bytes-billed", "1"])
    assert r.exit_code != 0 and "--max-bytes-billed" in r.output
    assert len(adc.queries(dry_run=False)) == 1


def test_a_rule_bigquery_cannot_run_is_refused_at_load_time(tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "ZZ901_bang_escape.sql").write_text(
        "/*\nid: ZZ901\nname: custom.bang\ntitle: bang escape\ncategory: custom\nseverity: low\n"
        "providers: [gcp]\ndescription: LIKE with an escape character BigQuery does not have\n*/\n"
        "select x_LineItemId, 'x' as reason from line_items where ChargeDescription like 'GPU!_%' escape '!'\n")
    custom = load_rules([rules_dir]).rules
    with pytest.raises(pipeline.RuleNotPortable, match="ZZ901.*cannot run on bigquery.*ESCAPE") as e:
        pipeline.engine_sql("bigquery", [*RULES, *custom], Config(), PERIOD, "effective")
    assert "ZZ901_bang_escape.sql" in str(e.value)
    # the same rule is fine where the construct exists
    assert "ESCAPE" in pipeline.engine_sql("athena", custom, Config(), PERIOD, "effective")
