"""`billing-audit pull gcp` against a local server speaking the BigQuery REST protocol (tests/peers_bigquery.py).

The server answers with the rows of the NDJSON / FOCUS fixtures in BigQuery's nested ``f``/``v``
shape; a pull followed by ingest must give the same store as ingesting the fixture files locally.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.report import build_report
from connectors.gcp import pull as gp
from connectors.pull_common import STATE_FILE, PullCache, PullError
from gcp_adc import SECRET, adc, private_key  # noqa: F401 - the ADC fixtures
from peers_bigquery import STANDARD_SCHEMA, FakeBigQuery, FakeTable, Fault, focus_rows, focus_schema, ndjson_rows
from support import FIXTURES, ROOT, report_body

PROJECT = "billing-proj"
DATASET = "billing_export"
TABLE = "gcp_billing_export_v1_01ABCD_23EF45_678901"
FULL = f"{PROJECT}.{DATASET}.{TABLE}"
STANDARD = FIXTURES / "gcp" / "standard-ndjson"
FOCUS_CSV = next((FIXTURES / "focus" / "gcp-focus-1.0").rglob("*.csv"))
FOCUS_TABLE = "gcp_billing_export_focus_01ABCD_23EF45_6789GH"

pytestmark = pytest.mark.slow


@pytest.fixture
def bq() -> Iterator[FakeBigQuery]:
    srv = FakeBigQuery(page_size=7).start()
    srv.add_table(FakeTable(PROJECT, DATASET, TABLE, STANDARD_SCHEMA, ndjson_rows(STANDARD)))
    try:
        yield srv
    finally:
        srv.stop()


def _client(srv: FakeBigQuery, project: str = PROJECT) -> Any:
    from google.auth.credentials import AnonymousCredentials

    return gp.make_client(project, api_endpoint=srv.url, credentials=AnonymousCredentials())


FAST = {"deadline": 20.0, "initial": 0.02}


def _pull(srv: FakeBigQuery, cache: Path, table: str = FULL, month: str = "202610", **kw: Any) -> list[gp.MonthResult]:
    plan = gp.PullPlan(gp.parse_table(table), PROJECT, [gp.parse_month(month)], cache,
                       max_bytes=kw.pop("max_bytes", None))
    _, results = gp.pull(plan, client=_client(srv), retry=gp.make_retry(**FAST), **kw)
    return results


def _numbers(db: Path) -> dict[str, Any]:
    """Summary, per-currency totals and the report JSON (after tagging) of a store."""
    with billing_audit.open(db) as store:
        summary = store.summary().to_dicts()
        per_currency = store.con.execute(
            "SELECT BillingCurrency, count(*), sum(BilledCost), sum(EffectiveCost), sum(ListCost) FROM line_items "
            "GROUP BY ALL ORDER BY ALL").fetchall()
        store.tag()
        report = report_body(build_report(store, load_config(None)).to_dict())  # without the clock's generated_at
    # the report orders rows by cost; rows that tie come in any order, so compare them as sets
    report = {k: sorted(json.dumps(r, sort_keys=True) for r in v) if isinstance(v, list) else v
              for k, v in report.items()}
    return {"summary": summary, "per_currency": per_currency, "report": report}


def _local(tmp_path: Path, *paths: Path) -> dict[str, Any]:
    db = tmp_path / "local.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([str(p) for p in paths])
        assert not rep.errors, rep.errors
    return _numbers(db)


def _ingest(db: Path, results: list[gp.MonthResult]) -> Any:
    with billing_audit.open(db) as store:
        rep = store.ingest([str(p) for p in gp.ingest_paths(results)])
    assert not rep.errors, rep.errors
    return rep


# -- names, months, SQL ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    "", "billing", "proj.dataset", "proj.dataset.table;DROP TABLE x", "proj.dataset.`table`", "proj.data set.table",
    "proj.dataset.gcp_billing_export_v1_*", "proj.dataset.table\n", "proj..table", "Proj.dataset.table",
    "proj.dataset.table.extra", "proj.dataset.ta`ble", "proj.dataset.table --", "proj.dataset.t'able",
])
def test_bad_table_names_are_refused(bad: str) -> None:
    with pytest.raises(PullError, match="--table"):
        gp.parse_table(bad)


def test_good_table_names() -> None:
    assert gp.parse_table(FULL).quoted == f"`{FULL}`"
    assert gp.parse_table("example.com:my-proj.billing.gcp_billing_export_resource_v1_0A").project == "example.com:my-proj"
    assert gp.parse_table("billing.gcp_billing_export_v1_0A", project="my-proj").full == "my-proj.billing.gcp_billing_export_v1_0A"
    with pytest.raises(PullError):
        gp.parse_table("billing.gcp_billing_export_v1_0A", project="bad`proj")


def test_months() -> None:
    m = gp.parse_month("202612")
    assert (m.invoice_month, m.start, m.end, m.period) == ("202612", date(2026, 12, 1), date(2027, 1, 1), "2026-12")
    assert gp.parse_month("2026-10").invoice_month == "202610"
    for bad in ("2026", "202613", "26-10", "202610; --", ""):
        with pytest.raises(PullError, match="--period"):
            gp.parse_month(bad)


def test_view_without_partitions_gets_the_month_filter_only() -> None:
    from google.cloud.bigquery import SchemaField

    fields = [SchemaField.from_api_repr(f) for f in STANDARD_SCHEMA]
    info = gp.classify(gp.parse_table(FULL), fields, table_type="VIEW", partitioning=None)
    q = gp.rows_query(info, gp.parse_month("202610"))
    assert "_PARTITIONTIME" not in q.sql and "invoice.month = @invoice_month" in q.sql
    assert [p.name for p in q.params] == ["invoice_month"]


# -- the pull ---------------------------------------------------------------------------------------------------------


def test_pull_sends_one_parameterised_query_with_a_partition_filter(bq: FakeBigQuery, tmp_path: Path) -> None:
    results = _pull(bq, tmp_path / "cache")
    assert [(r.status, r.rows) for r in results] == [("downloaded", 19)]
    freshness, rows = bq.queries(dry_run=False)
    for cfg in (freshness, rows):
        q = cfg["query"]
        sql = q["query"]
        assert q["useLegacySql"] is False
        assert f"FROM `{FULL}`" in sql
        assert "invoice.month = @invoice_month" in sql
        assert "_PARTITIONTIME >= @partition_start AND _PARTITIONTIME < @partition_end" in sql
        assert "202610" not in sql and "2026-" not in sql  # values travel as parameters only
        params = {p["name"]: (p["parameterType"]["type"], p["parameterValue"]["value"]) for p in q["queryParameters"]}
        assert params["invoice_month"] == ("STRING", "202610")
        assert params["partition_start"][0] == "TIMESTAMP" and params["partition_start"][1].startswith("2026-09-28")
        assert params["partition_end"][0] == "TIMESTAMP" and params["partition_end"][1].startswith("2026-11-16")
    assert "COUNT(*) AS line_count" in freshness["query"]["query"]
    assert "MAX(`export_time`)" in freshness["query"]["query"]
    sql = rows["query"]["query"]
    assert "UNNEST" not in sql.upper() and "JOIN" not in sql.upper()
    for col in ("`service`", "`sku`", "`project`", "`labels`", "`credits`", "`invoice`", "`cost`", "`currency`",
                "`usage`", "`location`", "`export_time`", "`cost_at_list`"):
        assert col in sql
    # the rows came page by page (7 a page) and BigQuery Storage was never asked
    pages = bq.requests("GET", r"/queries/")
    assert len([r for r in pages if "pageToken" in r.query]) == 2
    assert not bq.requests("POST", r"ReadSession|bigquerystorage")


def test_pull_then_summary_equals_local_ingest(bq: FakeBigQuery, tmp_path: Path) -> None:
    results = _pull(bq, tmp_path / "cache")
    path = results[0].path
    assert path.name == f"{TABLE}-202610.parquet" and path.parent.name == "invoice_month=202610"
    assert not list(path.parent.glob("*.part"))
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    assert str(schema.field("credits").type).startswith("list<element: struct<name: string, amount: double")
    assert str(schema.field("export_time").type) == "timestamp[us, tz=UTC]"
    db = tmp_path / "pulled.duckdb"
    rep = _ingest(db, results)
    assert rep.rows == 19
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT DISTINCT format FROM ingest_log").fetchall() == [("gcp-billing",)]
    pulled = _numbers(db)
    local = _local(tmp_path, STANDARD)
    assert pulled == local
    assert pulled["per_currency"][0][:2] == ("USD", 19)
    assert pulled["report"]["jobs"], "the report has jobs to compare"


def test_second_pull_downloads_nothing_until_the_month_changes(bq: FakeBigQuery, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    db = tmp_path / "store.duckdb"
    first = _pull(bq, cache)
    _ingest(db, first)
    state = PullCache(cache, FULL).state
    (rec,) = state.values()
    assert rec["etag"] == "2026-11-02T05:00:00+00:00|19 rows"
    mtime = first[0].path.stat().st_mtime_ns
    bq.log.clear()

    second = _pull(bq, cache)
    assert [r.status for r in second] == ["unchanged"]
    assert len(bq.queries(dry_run=False)) == 1  # the freshness check only
    assert "COUNT(*)" in bq.queries()[0]["query"]["query"]
    assert not [r for r in bq.requests("GET", "/queries/") if "pageToken" in r.query]
    assert first[0].path.stat().st_mtime_ns == mtime
    rep = _ingest(db, second)
    assert rep.count("unchanged") == 1 and rep.rows == 0

    # a re-export: one more row with a later export_time -> the month is fetched again and replaces the old one
    table = bq.tables[(PROJECT, DATASET, TABLE)]
    late = json.loads(json.dumps(table.rows[0]))
    late["export_time"] = "2026-11-06 02:00:00 UTC"
    late["cost"] = 1.5
    table.rows.append(late)
    bq.log.clear()
    third = _pull(bq, cache)
    assert [(r.status, r.rows) for r in third] == [("downloaded", 20)]
    assert len(bq.queries(dry_run=False)) == 2
    rep = _ingest(db, third)
    assert rep.replaced_rows == 19
    with billing_audit.open(db) as store:
        lines, total = store.con.execute("SELECT count(*), sum(BilledCost) FROM line_items").fetchone()
    assert lines == 20 and total == Decimal("442.6724064") + Decimal("1.5")


def test_empty_month_ingests_nothing(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.tables[(PROJECT, DATASET, TABLE)].rows.clear()
    results = _pull(bq, tmp_path / "cache", month="202611")
    assert [r.status for r in results] == ["empty"]
    assert gp.ingest_paths(results) == []
    assert len(bq.queries(dry_run=False)) == 1


def test_focus_table_maps_through_the_generic_focus_format(tmp_path: Path) -> None:
    header, rows = focus_rows(FOCUS_CSV)
    srv = FakeBigQuery(page_size=4).start()
    try:
        srv.add_table(FakeTable(PROJECT, DATASET, FOCUS_TABLE, focus_schema(header), rows,
                                partitioning={"type": "DAY", "field": "ChargePeriodStart"},
                                export_time_column="x_ExportTime"))
        results = _pull(srv, tmp_path / "cache", table=f"{PROJECT}.{DATASET}.{FOCUS_TABLE}")
        assert [(r.status, r.rows) for r in results] == [("downloaded", len(rows))]
        freshness, query = (q["query"] for q in srv.queries(dry_run=False))
        assert "FORMAT_TIMESTAMP('%Y%m', TIMESTAMP_ADD(`BillingPeriodStart`, INTERVAL 1 DAY), 'UTC') = @invoice_month" \
            in query["query"]
        assert "`ChargePeriodStart` >= @partition_start" in query["query"]
        params = {p["name"]: p["parameterValue"]["value"] for p in query["queryParameters"]}
        assert params["invoice_month"] == "202610" and params["partition_start"].startswith("2026-08-27")
        assert "MAX(`x_ExportTime`)" in freshness["query"]
        db = tmp_path / "pulled.duckdb"
        _ingest(db, results)
        with billing_audit.open(db) as store:
            assert store.con.execute("SELECT DISTINCT format FROM ingest_log").fetchall() == [("focus",)]
            pulled_tags = store.con.execute("SELECT CAST(Tags AS VARCHAR) FROM line_items ORDER BY ALL").fetchall()
        with billing_audit.open(tmp_path / "local.duckdb") as store:
            store.ingest([str(FOCUS_CSV)])
            local_tags = store.con.execute("SELECT CAST(Tags AS VARCHAR) FROM line_items ORDER BY ALL").fetchall()
        assert pulled_tags == local_tags and any("training-job" in t[0] for t in pulled_tags)
        (tmp_path / "l2").mkdir()
        assert _numbers(db) == _local(tmp_path / "l2", FOCUS_CSV)
    finally:
        srv.stop()


def test_dry_run_reports_bytes_and_fetches_nothing(bq: FakeBigQuery, tmp_path: Path) -> None:
    results = _pull(bq, tmp_path / "cache", dry_run=True)
    assert [r.status for r in results] == ["dry-run"]
    assert results[0].bytes_processed == 19_000
    assert "would process 19,000 bytes" in results[0].lines[0]
    assert not bq.queries(dry_run=False) and len(bq.queries(dry_run=True)) == 2
    assert not bq.requests("GET", "/queries/")
    assert not (tmp_path / "cache" / STATE_FILE).exists() or not json.loads((tmp_path / "cache" / STATE_FILE).read_text())
    assert not list((tmp_path / "cache").rglob("*.parquet"))


def test_max_bytes_billed_is_set_and_its_refusal_is_clear(bq: FakeBigQuery, tmp_path: Path) -> None:
    _pull(bq, tmp_path / "cache", max_bytes=10_000_000)
    for cfg in bq.queries(dry_run=False):
        assert cfg["query"]["maximumBytesBilled"] == "10000000"
    bq.faults.append(Fault("POST", r"/jobs$", 400, "bytesBilledLimitExceeded",
                           "Query exceeded limit for bytes billed: 1000. 10485760 or higher required."))
    with pytest.raises(PullError, match="--max-bytes-billed 1,000 bytes"):
        _pull(bq, tmp_path / "cache2", max_bytes=1000)


# -- faults ------------------------------------------------------------------------------------------------------------


def test_503_then_success_is_retried(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.faults += [Fault("GET", r"/tables/", 503, "backendError", "Service unavailable"),
                  Fault("POST", r"/jobs$", 503, "", "The service is currently unavailable."),
                  Fault("GET", r"/queries/", 503, "", "The service is currently unavailable."),
                  Fault("GET", r"/queries/", 429, "rateLimitExceeded", "Exceeded rate limits"),
                  Fault("GET", r"/queries/", 503, "", "The service is currently unavailable.", query="pageToken=7")]
    results = _pull(bq, tmp_path / "cache")
    assert [(r.status, r.rows) for r in results] == [("downloaded", 19)]
    assert not bq.faults, "every fault was met"
    assert len(bq.requests("GET", r"/tables/")) == 2


def test_connection_dropped_mid_download_is_retried(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.faults.append(Fault("GET", r"/queries/", "drop", query="pageToken=14"))  # the third page of the rows
    results = _pull(bq, tmp_path / "cache")
    assert [(r.status, r.rows) for r in results] == [("downloaded", 19)]
    assert not bq.faults
    assert len([r for r in bq.requests("GET", "/queries/") if r.query.get("pageToken") == ["14"]]) == 2
    local = tmp_path / "dropped.duckdb"
    _ingest(local, results)
    assert _numbers(local)["per_currency"] == _local(tmp_path, STANDARD)["per_currency"]


def test_access_denied_is_a_clear_message(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.faults.append(Fault("GET", r"/tables/", 403, "accessDenied",
                           f"Access Denied: Table {PROJECT}:{DATASET}.{TABLE}: Permission bigquery.tables.get denied"))
    with pytest.raises(PullError) as e:
        _pull(bq, tmp_path / "cache")
    msg = str(e.value)
    assert msg.startswith("access denied") and FULL in msg
    assert "roles/bigquery.dataViewer" in msg and "roles/bigquery.jobUser" in msg
    assert "\n" not in msg


def test_access_denied_on_the_query_is_clear(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.faults.append(Fault("POST", r"/jobs$", 403, "accessDenied",
                           f"Access Denied: Project {PROJECT}: User does not have bigquery.jobs.create permission"))
    with pytest.raises(PullError, match=r"^access denied .*bigquery.jobs.create"):
        _pull(bq, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.parquet"))


def test_table_not_found_is_a_clear_message(bq: FakeBigQuery, tmp_path: Path) -> None:
    with pytest.raises(PullError, match=rf"^table not found: {PROJECT}\.{DATASET}\.gcp_billing_export_v1_NOPE"):
        _pull(bq, tmp_path / "cache", table=f"{PROJECT}.{DATASET}.gcp_billing_export_v1_NOPE")
    assert not bq.queries()


def test_not_a_billing_table_is_refused(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.add_table(FakeTable(PROJECT, DATASET, "other", [{"name": "x", "type": "STRING", "mode": "NULLABLE"}], []))
    with pytest.raises(PullError, match="does not look like a GCP billing export"):
        _pull(bq, tmp_path / "cache", table=f"{PROJECT}.{DATASET}.other")


# -- the command -----------------------------------------------------------------------------------------------------




def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["pull", "gcp", *args], catch_exceptions=False)


def _assert_no_secret(*texts: str) -> None:
    for t in texts:
        assert SECRET not in t and "PRIVATE KEY" not in t


def test_cli_pull_with_application_default_credentials(adc: FakeBigQuery, tmp_path: Path) -> None:
    db = tmp_path / "cli.duckdb"
    r = _cli("--table", FULL, "--period", "2026-10", "--db", str(db))
    assert r.exit_code == 0, r.output
    assert "202610: 19 line(s) downloaded" in r.output
    assert "1 file(s) ingested (19 lines)" in r.output
    assert (tmp_path / "billing-audit-cache" / "gcp" / PROJECT / DATASET / TABLE / "invoice_month=202610").is_dir()
    bq_calls = [x for x in adc.log if x.path.startswith("/bigquery/")]
    assert bq_calls and all(x.auth == f"Bearer {adc.token}" for x in bq_calls)
    assert adc.requests("POST", "^/token$")
    again = _cli("--table", FULL, "--period", "2026-10", "--db", str(db))
    assert again.exit_code == 0, again.output
    assert "unchanged since the last pull" in again.output and "1 unchanged" in again.output
    summary = CliRunner().invoke(main, ["summary", "--db", str(db), "--format", "csv"])
    assert "gcp,2026-10,USD,19," in summary.output
    _assert_no_secret(r.output, again.output, summary.output)


def test_cli_dry_run_prints_bytes(adc: FakeBigQuery, tmp_path: Path) -> None:
    db = tmp_path / "dry.duckdb"
    r = _cli("--table", FULL, "--period", "2026-10", "--db", str(db), "--dry-run", "--max-bytes-billed", "5000")
    assert r.exit_code == 0, r.output
    assert "the query would process 19,000 bytes" in r.output
    assert "partition filter: _PARTITIONTIME from 2026-09-28 to 2026-11-16" in r.output
    assert "over --max-bytes-billed 5,000" in r.output
    assert not db.exists() and not adc.queries(dry_run=False)
    _assert_no_secret(r.output)


def test_cli_bad_table_fails_before_any_request(adc: FakeBigQuery) -> None:
    r = _cli("--table", "proj.dataset.t`; DROP TABLE x; --", "--period", "2026-10")
    assert r.exit_code == 2
    assert "error: --table" in r.output and "PROJECT.DATASET.TABLE" in r.output
    assert not adc.log


def test_cli_errors_are_one_line_exit_2(adc: FakeBigQuery) -> None:
    adc.faults.append(Fault("GET", r"/tables/", 403, "accessDenied", "Access Denied: Table billing-proj:x.y"))
    r = _cli("--table", FULL, "--period", "2026-10")
    assert r.exit_code == 2 and r.output.startswith("error: access denied") and r.output.count("\n") == 1
    r = _cli("--table", f"{PROJECT}.{DATASET}.gcp_billing_export_v1_NOPE", "--period", "2026-10")
    assert r.exit_code == 2 and r.output.startswith("error: table not found")
    _assert_no_secret(r.output)


def test_cli_rejected_credentials_do_not_leak_the_secret(adc: FakeBigQuery, monkeypatch: pytest.MonkeyPatch) -> None:
    adc.faults.append(Fault("POST", "^/token$", 400, body={"error": "invalid_grant",
                                                           "error_description": "Invalid JWT Signature."}))
    r = _cli("--table", FULL, "--period", "2026-10")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: the Google credentials were rejected when asking for an access token "
                               "(invalid_grant)")
    _assert_no_secret(r.output)


def test_cli_without_credentials(adc: FakeBigQuery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    r = _cli("--table", FULL, "--period", "2026-10")
    assert r.exit_code == 2
    assert r.output.startswith("error: no Google credentials found") and "missing.json" in r.output
    # no variable, no gcloud login, not on GCP
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    r = _cli("--table", FULL, "--period", "2026-10")
    assert r.exit_code == 2 and r.output.startswith("error: no Google credentials found"), r.output
    assert not adc.log


def test_help_documents_authentication_and_permissions() -> None:
    r = CliRunner().invoke(main, ["pull", "gcp", "--help"])
    assert r.exit_code == 0
    for text in ("GOOGLE_APPLICATION_CREDENTIALS", "application-default login", "roles/bigquery.dataViewer",
                 "roles/bigquery.jobUser", "bigquery.jobs.create", "bigquery.tables.getData", "--dry-run",
                 "--max-bytes-billed", "Examples:", "partition time"):
        assert text in r.output, text


def test_starting_the_cli_does_not_import_the_google_sdk() -> None:
    code = ("import sys, billing_audit.cli, billing_audit.cli.pull_cmd as p; p.build('gcp'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'google'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == "[]"


def test_month_window_edges() -> None:
    info = gp.TableInfo(gp.parse_table(FULL), "standard", {"invoice": "RECORD"}, partition_column="_PARTITIONTIME")
    where, params, words = gp._where(info, gp.parse_month("202612"), 15)
    values = {p.name: p.value for p in params}
    assert values["partition_start"] == datetime(2026, 11, 28, tzinfo=UTC)
    assert values["partition_end"] == datetime(2027, 1, 16, tzinfo=UTC)
    assert "streaming buffer" in words and "_PARTITIONTIME IS NULL" in where
