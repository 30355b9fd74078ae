"""Spark for real (pyspark, local[2]): the same rules and attribution give the same answers as DuckDB."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.engines import k8s_share, pipeline, run_engine, write_lines
from billing_audit.engines.pipeline import pipeline_sql
from billing_audit.engines.portable import to_engine
from billing_audit.errors import BillingAuditError
from billing_audit.report import build_report
from billing_audit.rules import load_rules
from connectors.spark import engine as spark
from support import FIXTURES, report_body

os.environ.setdefault("BILLING_AUDIT_SPARK_PARTITIONS", "2")
MASTER = "local[2]"
CFG = load_config(FIXTURES / "scenarios" / "billing-audit.toml")
RULES = load_rules().rules


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every fixture folder ingested and tagged locally, and its lines written for Spark."""
    out = {}
    for name in ("scenarios", "aws", "azure", "gcp", "focus"):
        path = tmp_path_factory.mktemp(name) / "s.duckdb"
        with billing_audit.open(path) as store:
            assert not store.ingest([FIXTURES / name]).errors
            store.tag()
            write_lines(store, Path(str(path) + ".lines"))
        out[name] = path
    return out


def _spark_rows(path: Path, period: str | None, basis: str) -> list[tuple]:
    steps = pipeline.engine_steps("spark", RULES, CFG, period, basis)
    return spark.run(steps, str(path) + ".lines", MASTER)


def _duck_rows(path: Path, period: str | None, basis: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        # the query Spark runs, on DuckDB: with Spark's own Kubernetes sharing (billing_audit.engines.k8s_share)
        sql = pipeline_sql(RULES, CFG, period, basis, None, k8s_share.shares("spark"))
        return con.execute(to_engine(sql, "duckdb", pipeline.bound_values(RULES, None))).fetchall()
    finally:
        con.close()


def _key(rows: list[tuple]) -> list[str]:
    return sorted(repr(r) for r in rows)


@pytest.mark.parametrize("name", ["scenarios", "aws", "azure", "gcp", "focus"])
def test_spark_returns_the_same_aggregates_as_duckdb(stores: dict[str, Path], name: str) -> None:
    got = _spark_rows(stores[name], None, "effective")
    assert got, "no aggregates came back"
    assert {r[0] for r in got} >= {"agg", "rule"}
    assert _key(got) == _key(_duck_rows(stores[name], None, "effective"))


def test_spark_hits_the_same_lines_as_local_tagging(stores: dict[str, Path]) -> None:
    for name in ("scenarios", "aws", "azure", "gcp"):
        steps = pipeline.engine_steps("spark", RULES, CFG, None, "effective")
        upto = [n for n, _ in steps].index("hits")
        hits = spark.run([*steps[:upto + 1], ("result", "SELECT x_LineItemId, rule_id, category FROM hits")],
                         str(stores[name]) + ".lines", MASTER)
        con = duckdb.connect(str(stores[name]), read_only=True)
        local = con.execute("SELECT x_LineItemId, rule_id, category FROM rule_hits").fetchall()
        con.close()
        assert sorted(hits) == sorted(local), name
        assert local, name


@pytest.mark.parametrize("period,basis", [("2026-11", "effective"), ("2026-11", "billed"), (None, "list")])
def test_spark_report_equals_the_local_report(stores: dict[str, Path], period: str | None, basis: str) -> None:
    path = stores["scenarios"]
    with billing_audit.open(path) as store:
        local = build_report(store, CFG, period, basis).to_dict()
        run_id = run_engine(store, "spark", RULES, CFG, period, basis, spark_master=MASTER,
                            spark_lines=str(path) + ".lines")
        savings = run_engine(store, "spark", RULES, CFG, period, "effective", spark_master=MASTER,
                             spark_lines=str(path) + ".lines") if basis != "effective" else None
        remote = build_report(store, CFG, period, basis, engine_run=run_id, savings_run=savings)
        fired_local = build_report(store, CFG, period, basis).rules_fired
        kinds = {r[0] for r in store.con.execute("SELECT DISTINCT kind FROM engine_results WHERE run_id = ?",
                                                 [run_id]).fetchall()}
        columns = {r[0] for r in store.con.execute("DESCRIBE engine_results").fetchall()}
    doc = remote.to_dict()
    assert (doc["filters"]["engine"], local["filters"]["engine"]) == ("spark", "duckdb")
    assert report_body(doc) == report_body(local)  # every row and value; not the clock's generated_at
    assert remote.rules_fired.equals(fired_local)
    assert any(j["job"] == "alpha" for j in local["jobs"])
    assert kinds <= {"agg", "hours", "res", "rule", "win"} and "agg" in kinds  # only aggregates came back:
    assert "x_LineItemId" not in columns  # no line ids, no per-line rows


def test_audit_engine_spark_prints_the_same_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    cfg = str(FIXTURES / "scenarios" / "billing-audit.toml")
    # one period (every fixture ingested): a report over all periods runs one engine run per period, which
    # test_spark_report_equals_the_local_report covers on the scenario store; here the whole audit path
    period = ["--period", "2026-10"]
    a = runner.invoke(main, ["audit", str(FIXTURES), "--db", "a.duckdb", "--out", "local", "--config", cfg, *period])
    b = runner.invoke(main, ["audit", str(FIXTURES), "--db", "b.duckdb", "--out", "spark", "--config", cfg, *period,
                             "--engine", "spark", "--spark-master", MASTER])
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    assert "Interruption overhead by job, 2026-10" in a.stdout and "Interruption overhead by job, 2026-10" in b.stdout
    # the same report, spot savings included: Spark prices the spot lines as the local tag run does, from the export,
    # the store's price references (fixtures/prices/...) and the bill's on-demand lines (a GCP export has no on-demand
    # price of a spot SKU: the references price them)
    local, remote = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("local", "spark"))
    assert remote["jobs"]
    for part in ("jobs", "teams", "totals"):
        assert remote[part] == local[part], part
    gcp = [r for r in remote["jobs"] if r["provider"] == "gcp"]
    assert gcp and any(r["gross_spot_savings"] for r in gcp)
    # what came back is aggregates, kept in the store with the query that made them
    con = duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True)
    engine, sql = con.execute("SELECT engine, sql FROM engine_runs").fetchone()
    assert engine == "spark" and "TRY_ELEMENT_AT" in sql
    con.close()


def test_tag_and_report_engine_spark_reuse_one_run(stores: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([FIXTURES / "scenarios"])
    runner = CliRunner()
    cfg = str(FIXTURES / "scenarios" / "billing-audit.toml")
    t = runner.invoke(main, ["tag", "--db", str(db), "--engine", "spark", "--spark-master", MASTER, "--config", cfg])
    assert t.exit_code == 0, t.output
    assert "BA010" in t.stdout and "engine run 1" in t.output
    r = runner.invoke(main, ["report", "--db", str(db), "--engine", "spark", "--spark-master", MASTER,
                             "--config", cfg, "--format", "json"])
    assert r.exit_code == 0, r.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM engine_runs").fetchone()[0] == 1  # the report reused tag's run
    con.close()
    local = runner.invoke(main, ["report", "--db", str(stores["scenarios"]), "--config", cfg, "--format", "json"])
    assert json.loads(r.stdout)["jobs"] == json.loads(local.stdout)["jobs"]


def test_a_rule_spark_cannot_run_is_named_before_any_work(stores: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "rules"
    bad.mkdir()
    (bad / "ZZ900_fuzzy.sql").write_text(
        "/*\nid: ZZ900\nname: custom.fuzzy\ntitle: fuzzy\ncategory: custom\nseverity: low\n"
        "providers: [aws]\ndescription: a DuckDB-only function\n*/\n"
        "select x_LineItemId, 'fuzzy' as reason from line_items\n"
        "where jaro_winkler_similarity(lower(coalesce(ChargeDescription, '')), 'spot restart') > 0.9\n")
    rules = load_rules([bad]).rules
    with billing_audit.open(stores["scenarios"]) as store, pytest.raises(BillingAuditError, match="ZZ900") as e:
        run_engine(store, "spark", rules, CFG, None, "effective", spark_master=MASTER,
                   spark_lines=str(stores["scenarios"]) + ".lines")
    assert "cannot run on spark" in str(e.value) and "ZZ900_fuzzy.sql" in str(e.value)


def test_lines_export_replaces_its_own_folder_and_refuses_others(stores: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "lines"
    for _ in range(2):
        r = runner.invoke(main, ["lines-export", str(out), "--db", str(stores["aws"]), "--period", "2026-10"])
        assert r.exit_code == 0, r.output
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)").fetchone()[0]
    want = duckdb.connect(str(stores["aws"]), read_only=True).execute(
        "SELECT count(*) FROM line_items WHERE strftime(date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY), "
        "'%Y-%m') = '2026-10'").fetchone()[0]
    assert n == want
    assert f"wrote {n:,} line items" in r.output
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    r = runner.invoke(main, ["lines-export", str(other), "--db", str(stores["aws"])])
    assert r.exit_code != 0 and "not written by billing-audit" in r.output
    assert (other / "keep.txt").read_text() == "x"
