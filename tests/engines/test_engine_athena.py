"""The audit on Athena: the Trino SQL it sends (golden files) and the job flow through the real boto3
client against a local Athena peer (tests/peers_athena.py) with moto's S3 as the result location.

The peer runs no SQL: it serves, as Athena ResultSet pages, the rows the same pipeline gives on the
local DuckDB store of the scenario exports; the client must turn those strings back into exactly them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
import sqlglot
from peers_athena import AthenaPeer, Canned

import billing_audit
from billing_audit.config import Config, load_config
from billing_audit.engines import pipeline
from billing_audit.engines.portable import NotPortable
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule, load_rules
from connectors.aws import athena
from connectors.aws.cur import athena_name
from connectors.aws.cur2 import Cur2
from connectors.focus.formats import AwsFocus
from peers_aws import DUMMY, REGION, AwsPeer
from support import FIXTURES, GOLDEN

SCENARIOS = FIXTURES / "scenarios"
PERIOD = "2026-11"
OUTPUT = "s3://athena-results/audit/"
GOLDEN_DIR = GOLDEN / "engines" / "athena"
ATHENA_TYPES = {"VARCHAR": "varchar", "DATE": "date", "BOOLEAN": "boolean", "BIGINT": "bigint",
                "DECIMAL(38,12)": "decimal", "DOUBLE": "double", "TIMESTAMP": "timestamp"}


@pytest.fixture(scope="module")
def rules() -> list[Rule]:
    return load_rules().rules


@pytest.fixture(scope="module")
def cfg() -> Config:
    return load_config(SCENARIOS / "billing-audit.toml")


@pytest.fixture(scope="module")
def peers() -> Iterator[tuple[AthenaPeer, AwsPeer]]:
    aws = AwsPeer()
    aws.s3().create_bucket(Bucket="athena-results")
    peer = AthenaPeer(s3=aws.s3())
    yield peer, aws
    peer.stop()
    aws.stop()


@pytest.fixture
def client(peers: tuple[AthenaPeer, AwsPeer]) -> Any:
    return boto3.client("athena", endpoint_url=peers[0].url, region_name=REGION, **DUMMY)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("athena") / "s.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([SCENARIOS]).errors
        store.tag()
    return path


def _trino_pretty(sql: str) -> str:
    """The SQL must parse as Trino and survive a round trip; the pretty form is what the golden file holds."""
    tree = sqlglot.parse_one(sql, read="trino")
    assert sqlglot.parse_one(tree.sql(dialect="trino"), read="trino") == tree
    return tree.sql(dialect="trino", pretty=True) + "\n"


def _golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN_DIR / name
    if update or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path} differs (run with --update-golden if intended)"


# -- the SQL ------------------------------------------------------------------------------------------

def test_every_rule_as_trino(rules: list[Rule], update_golden: bool) -> None:
    sqls = pipeline.check_rules(rules, "athena")
    assert set(sqls) == {r.id for r in rules} and sqls
    for rule_id, sql in sqls.items():
        _golden(f"rule-{rule_id}.sql", _trino_pretty(sql), update_golden)


@pytest.mark.parametrize("kind", athena.KINDS)
def test_pipeline_as_trino(kind: str, rules: list[Rule], cfg: Config, update_golden: bool) -> None:
    sql = athena.athena_sql(f"cur_db.{kind}_export", kind, PERIOD, rules, cfg, "effective")
    _golden(f"pipeline-{kind}.sql", _trino_pretty(sql), update_golden)
    tree = sqlglot.parse_one(sql, read="trino")
    first = tree.args["with_"].expressions[0]
    assert first.alias == "line_items"  # the mapping comes before every step that reads it
    mapping = first.this
    assert mapping.args["from_"].this.sql(dialect="trino") == f"cur_db.{kind}_export"
    assert mapping.args["where"].this.sql(dialect="trino") == "billing_period = '2026-11'"
    mapped = {p.alias_or_name for p in mapping.expressions}
    assert mapped == athena.referenced_columns(pipeline.pipeline_sql(rules, cfg, PERIOD, "effective"))
    assert {"x_LineItemId", "x_Provider", "Tags", "EffectiveCost", "BillingPeriodStart"} <= mapped
    # map lookups are ELEMENT_AT, never [] (a missing key is an error in Trino)
    code = re.sub(r"'(?:[^']|'')*'", "''", sql)  # outside string literals
    assert not re.search(r"\b(tags|product|resource_tags)\s*\[", code, re.IGNORECASE)
    assert "ELEMENT_AT(l.Tags, 'training-job')" in sql


def test_the_glue_tables_are_the_formats_declarations() -> None:
    """athena.py reads the columns each format declares for its Glue table (docs/aws-cur2-and-focus12-columns.tsv)."""
    cur2, focus = athena.glue_table("cur2"), athena.glue_table("focus")
    assert list(cur2) == [athena_name(n) for n, _ in Cur2.glue_table] == [n for n, _ in Cur2.glue_table]
    assert {"product_usagetype", "product_fee_code", "line_item_currency_code", "product_product_family"} <= set(cur2)
    assert "product_product_name" not in cur2 and "product_region" not in cur2  # inside the product map
    assert cur2["product"] == cur2["resource_tags"] == "MAP(VARCHAR, VARCHAR)" and cur2["discount"] == "MAP(VARCHAR, DOUBLE)"
    assert cur2["line_item_usage_start_date"] == "TIMESTAMP" and cur2["line_item_unblended_cost"] == "DOUBLE"
    assert list(focus) == [n.lower() for n, _ in AwsFocus.glue_table]
    assert focus["x_discounts"] == "MAP(VARCHAR, DOUBLE)" and focus["tags"] == focus["skupricedetails"] == "MAP(VARCHAR, VARCHAR)"
    assert not {"x_usagetype", "x_skumetercategory", "x_invoiceid", "x_pricingcurrency"} & set(focus)
    assert list(cur2)[-1] == list(focus)[-1] == "billing_period"
    # the FOCUS line id hashes the scalar line columns in table order (not the maps, not where the row was delivered)
    hashed = re.findall(r"CAST\((\w+) AS VARCHAR\)", athena.mapping_sql("t", "focus", PERIOD, {"x_LineItemId"}).sql("trino"))
    assert hashed == [c for c, t in focus.items() if not t.startswith("MAP") and c not in AwsFocus.glue_delivery_columns]
    assert hashed[:3] == ["availabilityzone", "billedcost", "billingaccountid"] and "source_account_id" not in hashed


def test_mapping_refuses_what_it_cannot_map() -> None:
    with pytest.raises(NotPortable, match="x_SourceFile"):
        athena.mapping_sql("t", "cur2", PERIOD, {"x_SourceFile", "BilledCost"})
    with pytest.raises(BillingAuditError, match="table"):
        athena.mapping_sql("t; DROP TABLE x", "cur2", PERIOD)
    with pytest.raises(BillingAuditError, match="period"):
        athena.mapping_sql("t", "cur2", "2026-11' OR '1'='1")
    with pytest.raises(BillingAuditError, match="kind"):
        athena.mapping_sql("t", "legacy", PERIOD)


# -- the job flow ---------------------------------------------------------------------------------------

def _cell(value: Any) -> str | None:
    """A value as Athena writes it in VarCharValue."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, (date, Decimal, int, float)):
        return str(value)
    return str(value)


def _canned(rows: Sequence[Sequence[Any]], **kw: Any) -> Canned:
    return Canned(columns=[(n.lower(), ATHENA_TYPES[t]) for n, t in pipeline.RESULT_COLUMNS],
                  rows=[[_cell(v) for v in r] for r in rows], **kw)


def _sorted(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


def test_job_flow(peers: tuple[AthenaPeer, AwsPeer], client: Any, store_path: Path, rules: list[Rule],
                  cfg: Config) -> None:
    peer, aws = peers
    with billing_audit.open(store_path) as store:
        local = store.con.execute(pipeline.engine_sql("duckdb", rules, cfg, PERIOD, "effective")).fetchall()
    kinds = {r[0] for r in local}
    assert {"agg", "hours", "res", "rule", "win"} <= kinds and len(local) > 7  # enough rows for several pages
    peer.queue.append(_canned(local, scanned=123_456_789, page_size=7))

    result = athena.run(client, "cur_db", "cur2_export", "cur2", PERIOD, "audit-wg", OUTPUT,
                        rules=rules, cfg=cfg, poll=0, sleep=lambda s: None)

    (req,) = peer.requests("StartQueryExecution")[-1:]
    assert req["QueryString"] == result.sql
    assert "billing_period = '2026-11'" in req["QueryString"]
    assert req["QueryExecutionContext"] == {"Database": "cur_db"}
    assert req["WorkGroup"] == "audit-wg"
    assert req["ResultConfiguration"] == {"OutputLocation": OUTPUT}
    sqlglot.parse_one(req["QueryString"], read="trino")
    assert result.states == ["QUEUED", "RUNNING", "SUCCEEDED"]
    assert result.pages == -(-(len(local) + 1) // 7) > 1  # header row + rows, 7 a page
    pages = peer.requests("GetQueryResults")
    assert [p.get("NextToken") for p in pages][1:] == [str(7 * i) for i in range(1, result.pages)]
    assert result.data_scanned_bytes == 123_456_789
    key = f"audit/{result.query_execution_id}.csv"  # the result file landed at the output location
    assert aws.s3().head_object(Bucket="athena-results", Key=key)["ContentLength"] > 0

    assert _sorted(result.rows) == _sorted(local)
    with billing_audit.open(store_path) as store:
        run = pipeline.EngineRun("athena", "cur_db.cur2_export", PERIOD, "effective", result.sql,
                                 pipeline.config_key(cfg, rules, None), result.data_scanned_bytes)
        run_id = pipeline.store_results(store.con, run, result.rows)
        stored = store.con.execute("SELECT * EXCLUDE (run_id) FROM engine_results WHERE run_id = ?",
                                   [run_id]).fetchall()
        meta = store.con.execute("SELECT engine, period, bytes_processed, sql FROM engine_runs WHERE run_id = ?",
                                 [run_id]).fetchone()
    assert _sorted(stored) == _sorted(local)
    assert [[type(v) for v in r] for r in _sorted(stored)] == [[type(v) for v in r] for r in _sorted(local)]
    assert meta == ("athena", PERIOD, 123_456_789, result.sql)


def test_failed_query_names_the_reason(peers: tuple[AthenaPeer, AwsPeer], client: Any, rules: list[Rule],
                                       cfg: Config) -> None:
    reason = "COLUMN_NOT_FOUND: line 1:8: Column 'line_item_currency_code' cannot be resolved"
    peers[0].queue.append(Canned(states=("QUEUED", "RUNNING", "FAILED"), reason=reason))
    with pytest.raises(BillingAuditError, match="FAILED: COLUMN_NOT_FOUND.*cannot be resolved"):
        athena.run(client, "cur_db", "cur2_export", "cur2", PERIOD, "audit-wg", OUTPUT,
                   rules=rules, cfg=cfg, poll=0, sleep=lambda s: None)
    failed = list(peers[0].queries)[-1]
    assert peers[0].queries[failed].polls == 3  # polled to the end, and no results asked for
    assert all(r["QueryExecutionId"] != failed for r in peers[0].requests("GetQueryResults"))


def test_missing_output_bucket_is_a_clear_error(client: Any, rules: list[Rule], cfg: Config) -> None:
    with pytest.raises(BillingAuditError, match="StartQueryExecution.*no-such-bucket"):
        athena.run(client, "cur_db", "cur2_export", "cur2", PERIOD, "audit-wg", "s3://no-such-bucket/x/",
                   rules=rules, cfg=cfg, poll=0, sleep=lambda s: None)


# -- the command line --------------------------------------------------------------------------------------------


def test_report_engine_athena_on_the_command_line(peers: tuple[AthenaPeer, AwsPeer], store_path: Path,
                                                 rules: list[Rule], cfg: Config, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import duckdb
    from click.testing import CliRunner

    from billing_audit.cli import main
    from billing_audit.report import build_report

    peer, _ = peers
    with billing_audit.open(store_path) as store:
        local = store.con.execute(pipeline.engine_sql("duckdb", rules, cfg, PERIOD, "effective")).fetchall()
        want = build_report(store, cfg, PERIOD).to_dict()
    peer.queue.append(_canned(local, scanned=42_000, page_size=50))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY["aws_secret_access_key"])
    monkeypatch.setattr(time, "sleep", lambda s: None)
    db = tmp_path / "remote.duckdb"
    r = CliRunner().invoke(main, [
        "report", "--db", str(db), "--config", str(SCENARIOS / "billing-audit.toml"), "--engine", "athena",
        "--athena-table", "cur_db.cur2_export", "--period", PERIOD, "--athena-workgroup", "audit-wg",
        "--athena-output", OUTPUT, "--aws-endpoint", peer.url, "--aws-region", REGION, "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["filters"] == {"period": PERIOD, "cost_basis": "effective", "engine": "athena"}
    assert got["jobs"] == json.loads(json.dumps(want["jobs"], default=str)) and got["jobs"]
    req = peer.requests("StartQueryExecution")[-1]
    assert req["QueryExecutionContext"] == {"Database": "cur_db"} and req["WorkGroup"] == "audit-wg"
    assert "billing_period = '2026-11'" in req["QueryString"] and "cur2_export" in req["QueryString"]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT engine, source, bytes_processed FROM engine_runs").fetchone() == \
        ("athena", "cur_db.cur2_export", 42_000)
    con.close()
    r = CliRunner().invoke(main, ["report", "--db", str(db), "--engine", "athena", "--period", PERIOD])
    assert r.exit_code != 0 and "--athena-table" in r.output
