"""Spark over the providers' raw parquet exports (``--source raw``, pyspark local[2]): the deliveries local ingest
would keep, mapped by the formats' own SQL, give the same report as local ingest + audit."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import Config, load_config
from billing_audit.deliveries import OverlapPolicy
from billing_audit.engines import run_engine
from billing_audit.errors import BillingAuditError, InputError
from billing_audit.report import build_report
from billing_audit.rules import load_rules
from connectors.spark import raw
from support import FIXTURES, report_body

os.environ.setdefault("BILLING_AUDIT_SPARK_PARTITIONS", "2")
MASTER = "local[2]"
CFG_PATH = FIXTURES / "scenarios" / "billing-audit.toml"
CFG = load_config(CFG_PATH)
RULES = load_rules().rules
# every parquet fixture folder whose mapping translates (Azure and GCP parquet carry JSON text: refused, below)
PARQUET = ["aws/cur2", "aws/cur-legacy-parquet", "focus/aws-focus-1.2", "aws/cur2-split", "aws/cur2-create-new"]
SNAP = "exports/gpu-cur2-snap/data/BILLING_PERIOD=2026-09"
OLD, NEW = f"{SNAP}/20261002T041500Z", f"{SNAP}/20261003T041700Z"  # the month's two snapshots


RECONCILE = "fee reconciliation: not done"  # an engine run's report: the fee lines are not in the store
EVENT_NOTE = "record(s) are not interruption events"  # an event file's note, on both paths


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The report's figures: report_body (no clock, no engine name) without the fee reconciliation, which reads
    the restart-fee lines from the local store and so is null (with a warning saying why) after an engine run."""
    body = report_body(doc)
    body.pop("fee_reconciliation", None)
    body["warnings"] = [w for w in body["warnings"] if not w.startswith(RECONCILE)]
    return body


def _report(folder: Path) -> dict[str, Any]:
    return _figures(json.loads((folder / "report.json").read_text(encoding="utf-8")))


def test_audit_source_raw_writes_the_local_audits_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    paths = [str(FIXTURES / p) for p in PARQUET]
    common = ["--config", str(CFG_PATH), "-q"]
    runner = CliRunner()
    a = runner.invoke(main, ["audit", *paths, "--db", "a.duckdb", "--out", "local", *common])
    b = runner.invoke(main, ["audit", *paths, "--db", "b.duckdb", "--out", "spark", *common,
                             "--engine", "spark", "--source", "raw", "--spark-master", MASTER])
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    local, remote = _report(tmp_path / "local"), _report(tmp_path / "spark")
    assert remote == local
    full = {n: json.loads((tmp_path / n / "report.json").read_text(encoding="utf-8")) for n in ("local", "spark")}
    assert full["spark"]["fee_reconciliation"] is None and full["spark"]["filters"]["engine"] == "spark"
    assert any(w.startswith(RECONCILE) for w in full["spark"]["warnings"])
    assert [r["provider"] for r in full["local"]["fee_reconciliation"]["not_reconciled"]] == ["aws"]
    assert local["jobs"] and {j["provider"] for j in local["jobs"]} == {"aws"}  # type: ignore[index, union-attr]
    for name in ("jobs.csv", "teams.csv"):
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    con = duckdb.connect("b.duckdb", read_only=True)
    try:
        engine, source = con.execute("SELECT engine, source FROM engine_runs").fetchone()  # type: ignore[misc]
        lines = con.execute("SELECT count(*) FROM line_items").fetchone()[0]  # type: ignore[index]
    finally:
        con.close()
    assert engine == "spark" and source.startswith("raw:") and str(FIXTURES / "aws" / "cur2") in source
    assert lines == 0  # nothing was ingested: only the aggregates came back


@pytest.mark.parametrize("touch_old", [False, True], ids=["as-delivered", "old-snapshot-touched-last"])
def test_newest_snapshot_wins_as_in_local_ingest_in_either_order(tmp_path: Path, touch_old: bool) -> None:
    folder = tmp_path / "cur2"
    shutil.copytree(FIXTURES / "aws" / "cur2-create-new", folder)
    if touch_old:  # a file time never makes an old snapshot newest: the execution stamp and the manifest decide
        for f in (folder / OLD).iterdir():
            os.utime(f, (4_000_000_000, 4_000_000_000))
    reports = []
    for order in ([folder / OLD, folder], [folder, folder / OLD]):  # the old snapshot ingested first, then last
        with billing_audit.open(tmp_path / f"local-{len(reports)}.duckdb") as store:
            for p in order:
                assert not store.ingest([p]).errors
            store.tag()
            reports.append(build_report(store, CFG, None, "effective").to_dict())
    with billing_audit.open(tmp_path / "old-only.duckdb") as store:
        assert not store.ingest([folder / OLD]).errors
        store.tag()
        old_only = build_report(store, CFG, None, "effective").to_dict()
    with billing_audit.open(tmp_path / "spark.duckdb") as store:
        run_id = run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                            spark_raw=str(folder))
        remote = build_report(store, CFG, None, "effective", engine_run=run_id).to_dict()
    reports, remote, old_only = [_figures(r) for r in reports], _figures(remote), _figures(old_only)
    assert reports[0] == reports[1] == remote
    assert old_only["totals"] != remote["totals"]  # the two snapshots differ: which one won shows
    # the plan says which delivery is kept: the manifest's execution (the newer stamp), the older folder superseded
    with raw.plan([folder]) as plan:
        pass
    assert [d.delivery.version_source for d in plan.deliveries] == ["path", "manifest"]
    assert [len(d.files) for d in plan.deliveries] == [1, 2]
    assert all(f.path.parent.name == "20261003T041700Z" for f in plan.deliveries[1].files)


NDJSON = FIXTURES / "gcp" / "standard-ndjson" / "gcp_billing_export_v1_01ABCD_23EF45_678901" / "invoice_month=202610"


def _json_array(tmp_path: Path) -> Path:
    """The standard NDJSON fixture's first file written as one JSON array (local ingest reads it)."""
    src = NDJSON / "gcp_billing_export_v1_01ABCD_23EF45_678901-000000000000.json"
    records = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    folder = tmp_path / "array" / "gcp_billing_export_v1_01ABCD_23EF45_678901"
    folder.mkdir(parents=True)
    (folder / src.name).write_text(json.dumps(records, indent=1), encoding="utf-8")
    return folder.parent


def test_files_the_raw_path_cannot_read_are_named_before_any_work(tmp_path: Path) -> None:
    array = _json_array(tmp_path)  # a JSON array, not NDJSON: local ingest reads it, Spark refuses it saying why
    with billing_audit.open(tmp_path / "l.duckdb") as store:
        assert not store.ingest([array]).errors
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (9,)
    prices = FIXTURES / "prices"  # price references: an engine holds none
    with raw.plan([array, prices]) as plan:
        failed = [d.error for d in plan.deliveries if d.error is not None]
        errors = plan.errors
    assert len(failed) == len(plan.deliveries) == 1 and failed[0] is not None
    assert failed[0].file.startswith(str(array)) and failed[0].file.endswith(".json")
    assert failed[0].reason == raw.JSON_ARRAY and "not newline-delimited JSON" in failed[0].reason
    assert errors and all("a price reference" in e.reason for e in errors)
    with billing_audit.open(tmp_path / "s.duckdb") as store, pytest.raises(BillingAuditError) as err:
        run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                   spark_raw=str(array))
    assert "1 file(s) cannot be read on Spark (nothing was audited)" in str(err.value)
    assert str(failed[0].file) in str(err.value) and "JSON array file" in str(err.value)
    with billing_audit.open(tmp_path / "s.duckdb") as store, pytest.raises(BillingAuditError, match="no such file"):
        run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                   spark_raw=str(tmp_path / "nowhere"))


def _edited_cost(src: Path, dst: Path, cost: str) -> None:
    """A CUR 2.0 parquet file written again with its unblended cost replaced by `cost` (SQL over the file's columns
    and ``file_row_number``), its rows in order."""
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * EXCLUDE (file_row_number) REPLACE ({cost} AS line_item_unblended_cost) FROM "
                f"read_parquet('{src}', file_row_number = true, hive_partitioning = false) ORDER BY file_row_number) "
                f"TO '{dst}' (FORMAT parquet)")
    con.close()


def test_a_file_spark_cannot_map_or_a_value_it_refuses_names_the_file(tmp_path: Path) -> None:
    # a FOCUS CSV whose 15th record has too few fields, or whose last holds a byte that is not UTF-8 past the
    # first 64 KB the driver checks: local ingest refuses both, and so does Spark, naming the file and the row
    src = FIXTURES / "focus" / "gcp-focus-1.0" / "gcp_billing_export_focus_01ABCD_23EF45_6789GH"
    name = "focus-202610-000000000000.csv"
    text = (src / name).read_bytes()
    lines = text.splitlines(keepends=True)
    long = lines[:1] + lines[1:] * 20
    assert len(b"".join(long)) > 1 << 16
    for case, data, row in (("short", text + b"us-central1-a,0.5\n", len(lines)),
                            ("latin1", b"".join(long) + lines[1].replace(b"us-central1", b"us-c\xe9ntral1", 1),
                             len(long))):
        bad = tmp_path / case / src.name / name
        bad.parent.mkdir(parents=True)
        bad.write_bytes(data)
        with billing_audit.open(tmp_path / f"{case}-l.duckdb") as store:
            local = store.ingest([bad.parent]).errors
        assert local and local[0].file == str(bad), case
        with billing_audit.open(tmp_path / f"{case}-s.duckdb") as store, pytest.raises(InputError) as err:
            run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                       spark_raw=str(bad.parent))
        assert err.value.file == str(bad) and err.value.row == row, (case, err.value)
        if case == "short":
            assert "malformed row: the header has 43 columns" in err.value.reason
        else:
            assert err.value.column == "AvailabilityZone" and "not UTF-8" in err.value.reason
    # a CUR 2.0 file whose third row lacks its unblended cost: local ingest refuses it, and so does Spark
    src = FIXTURES / "aws" / "cur2" / "exports" / "gpu-cur2" / "data" / "BILLING_PERIOD=2026-10"
    bad = tmp_path / "bad" / "BILLING_PERIOD=2026-10" / "bad-00001.snappy.parquet"
    bad.parent.mkdir(parents=True)
    _edited_cost(src / "gpu-cur2-00001.snappy.parquet", bad, "CASE WHEN file_row_number = 2 THEN NULL ELSE "
                 "line_item_unblended_cost END")
    with billing_audit.open(tmp_path / "l.duckdb") as store:
        local = store.ingest([bad.parent.parent]).errors
    assert local and local[0].file == str(bad)
    with billing_audit.open(tmp_path / "b.duckdb") as store, pytest.raises(InputError) as err2:
        run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                   spark_raw=str(bad.parent.parent))
    assert err2.value.file == str(bad)
    assert "required value is missing" in err2.value.reason


def test_audit_dry_run_lists_the_deliveries_kept_superseded_and_refused(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    snap, csv_folder = FIXTURES / "aws" / "cur2-create-new", _json_array(tmp_path)
    res = CliRunner().invoke(main, ["audit", str(snap), str(csv_folder), "--db", "d.duckdb", "--engine", "spark",
                                    "--source", "raw", "--spark-master", MASTER, "--dry-run"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    con = duckdb.connect()
    rows = {name: con.execute(f"SELECT count(*) FROM read_parquet('{snap / SNAP}/{name}/*.parquet')").fetchone()[0]
            for name in ("20261002T041500Z", "20261003T041700Z")}  # type: ignore[index]
    con.close()
    old, new = out.split(f"{snap / OLD}  [")[1], out.split("gpu-cur2-snap 2026-09 execution ")[1]
    assert f"superseded by a newer delivery: aws 222233334444 2026-09 ({rows['20261002T041500Z']} lines)" in old
    assert f"kept: aws 222233334444 2026-09 ({rows['20261003T041700Z']} lines)" in new
    sizes = sum(f.stat().st_size for f in (snap / NEW).iterdir())
    assert f"by manifest; 2 file(s), {sizes / 1024:,.1f} KB]" in new
    assert out.count("refused: ") == 1 and out.count("JSON array file") == 1 and str(csv_folder) in out
    assert out.rstrip().endswith("2 of 3 deliveries readable, " + f"{(sum(f.stat().st_size for f in (snap / OLD).iterdir()) + sizes) / 1024:,.1f} KB to read")
    assert not (tmp_path / "d.duckdb").exists() and not (tmp_path / "audit-report").exists()  # nothing written


def _spark_home() -> Path | None:
    import pyspark

    home = Path(pyspark.__file__).parent
    return home if (home / "bin" / "spark-submit").exists() else None


def test_spark_submit_runs_the_job_and_report_reuses_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    home = _spark_home()
    assert home is not None, "pyspark ships bin/spark-submit"
    monkeypatch.chdir(tmp_path)
    folder = FIXTURES / "aws" / "cur2"
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "BILLING_AUDIT_SPARK_PARTITIONS": "2"}
    job = subprocess.run([str(home / "bin" / "spark-submit"), "--master", MASTER, raw.__file__.replace("raw.py", "submit.py"),
                          "--db", "s.duckdb", "--config", str(CFG_PATH), "--spark-write-lines", "kept", str(folder)],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.startswith("spark run 1 over ") and "aggregate rows stored in s.duckdb" in job.stdout
    assert "the kept lines written to kept (`--spark-lines kept` reads them)" in job.stdout
    con = duckdb.connect()
    written = con.execute("SELECT count(*) FROM read_parquet('kept/x_Provider=aws/billing_period=2026-10/*.parquet')"
                          ).fetchone()
    con.close()
    assert written is not None and f"{written[0]} canonical line items\n" == Path("kept/.billing-audit-lines").read_text()
    runner = CliRunner()
    common = ["--config", str(CFG_PATH), "--format", "json"]
    remote = runner.invoke(main, ["report", "--db", "s.duckdb", "--engine", "spark", "--source", "raw",
                                  "--spark-raw", str(folder), *common, "--out", "remote.json"])
    assert remote.exit_code == 0, remote.output
    assert "using spark run 1 (same source, period, basis, config and rules)" in remote.output  # no second Spark run
    local = runner.invoke(main, ["audit", str(folder), "--db", "a.duckdb", "--out", "local", "--config", str(CFG_PATH),
                                 "-q"])
    assert local.exit_code == 0, local.output
    assert runner.invoke(main, ["report", "--db", "a.duckdb", *common, "--out", "local.json"]).exit_code == 0
    docs = [_figures(json.loads(Path(n).read_text(encoding="utf-8"))) for n in ("local.json", "remote.json")]
    assert docs[0] == docs[1] and docs[0]["jobs"]
    bad = subprocess.run([sys.executable, "-m", "connectors.spark.submit", "--db", "x.duckdb", str(tmp_path / "none")],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --spark-raw: no such file or folder") and \
        "Traceback" not in bad.stderr


def _audit_both(tmp_path: Path, folders: list[Path], config: Path = CFG_PATH,
                check_csv: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Local ingest + audit and Spark --source raw over the same folders: both reports' figures (the CSVs
    compared byte for byte)."""
    common = ["--config", str(config), "-q"]
    paths = [str(f) for f in folders]
    runner = CliRunner()
    a = runner.invoke(main, ["audit", *paths, "--db", str(tmp_path / "a.duckdb"), "--out", str(tmp_path / "local"),
                             *common])
    assert a.exit_code == 0, a.output
    b = runner.invoke(main, ["audit", *paths, "--db", str(tmp_path / "b.duckdb"), "--out", str(tmp_path / "spark"),
                             *common, "--engine", "spark", "--source", "raw", "--spark-master", MASTER])
    assert b.exit_code == 0, b.output
    for name in ("jobs.csv", "teams.csv") if check_csv else ():
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    # an overlap, an event file's records that are not events: said on both paths
    told = [n for n in a.output.splitlines() if n.startswith("note: exports ") or EVENT_NOTE in n]
    assert [n for n in b.output.splitlines() if n.startswith("note: exports ") or EVENT_NOTE in n] == told
    return _report(tmp_path / "local"), _report(tmp_path / "spark")


# every CSV fixture folder the raw path reads: legacy CUR CSV.gz with a zip member and two deliveries of one
# month (the manifest's current one kept), FOCUS CSV, CSVs with a CR in a quoted value, mixed line endings (read
# from the normalised copy, as locally) and NULL literals; Azure cost details CSV, CSV.gz and parquet with their
# manifests (tags as JSON text), and Azure FOCUS CSV
CSV = ["aws/cur-legacy-csv", "focus/gcp-focus-1.0", "csv-quirks/cr-in-quoted-field", "csv-quirks/mixed-line-endings",
       "csv-quirks/null-literals", "csv-quirks/focus-mdyy-dates"]
AZURE = ["azure/ea-actual-csv", "azure/mca-actual-csv-gz", "azure/payg-mosp-csv", "azure/payg-mosp-camel-csv",
         "azure/ea-legacy-manifest", "azure/ea-currency-column", "azure/payg-parquet", "azure/ea-old-parquet",
         "focus/azure-focus-1.2"]


@pytest.mark.parametrize("folder", CSV)
def test_csv_exports_give_the_local_report(tmp_path: Path, folder: str) -> None:
    local, remote = _audit_both(tmp_path, [FIXTURES / folder])
    assert remote == local
    assert local["totals"]


def test_the_kept_lines_in_many_tiny_partitions_give_the_same_report(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # a few lines a partition: every step's aggregate, window and join over lines spread across partitions
    monkeypatch.setenv("BILLING_AUDIT_SPARK_PARTITIONS", "19")
    folders = [FIXTURES / "aws" / "cur2", FIXTURES / "aws" / "cur-legacy-csv"]
    local, remote = _audit_both(tmp_path, folders)
    assert remote == local
    assert local["jobs"] and local["totals"][0]["lines"] > 19  # type: ignore[index]


def _lines_both(tmp_path: Path, folder: Path, policy: OverlapPolicy | None = None,
                told: list[str] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The canonical lines local ingest stores and the lines the raw Spark path keeps (every column but the
    ingest id), in source order; `told`: gets local ingest's notes and the raw path's overlap notes."""
    from connectors.spark.engine import session

    with billing_audit.open(tmp_path / "l.duckdb") as store:
        rep = store.ingest([folder], overlap=policy or OverlapPolicy())
        assert not rep.errors
        local = store.con.sql("SELECT * EXCLUDE (x_IngestId) FROM line_items ORDER BY x_SourceFile, x_SourceRow"
                              ).to_arrow_table().to_pylist()
    spark = session(MASTER)
    with raw.plan([folder]) as plan:
        lines = raw.mapped_lines(spark, plan)
        kept = raw.keep_newest(spark, plan, lines, policy)
        if told is not None:
            told.extend([*rep.notes, "--", *kept.notes, "--", raw.describe(plan, kept)])
        remote = [r.asDict() for r in raw.kept_lines(lines, kept).drop("x_IngestId")
                  .orderBy("x_SourceFile", "x_SourceRow").collect()]
    for r in local:
        r["Tags"] = dict(r["Tags"])
    return local, remote


# Azure cost details (CSV, CSV.gz and parquet, with their manifests; tags as JSON text), Azure FOCUS CSV and the
# 2018 CUR CSV: Spark keeps the lines local ingest stores, value for value
@pytest.mark.parametrize("folder", [*AZURE, "aws/cur-2018-csv"])
def test_azure_and_2018_exports_keep_the_local_lines(tmp_path: Path, folder: str) -> None:
    local, remote = _lines_both(tmp_path, FIXTURES / folder)
    assert local and remote == local


# ... and their reports are the local ones: their spot lines have no on-demand price in the export (Azure prices a
# spot meter at the spot rate, the 2018 CUR has no public on-demand cost, GCP bills spot SKUs of their own), so Spark
# prices them as a local tag run does, from the bill's own on-demand lines (billing_audit.engines.priced)
BILL_PRICED = [*AZURE, "aws/cur-2018-csv", "gcp/standard-ndjson"]


@pytest.mark.parametrize("folder", BILL_PRICED)
def test_exports_priced_by_the_bill_give_the_local_report(tmp_path: Path, folder: str) -> None:
    local, remote = _audit_both(tmp_path, [FIXTURES / folder])
    assert remote == local
    assert local["totals"]
    # the bill prices spot lines of each, but Azure FOCUS's, whose bill holds no on-demand VM hour (n/a on both)
    gross = [t["gross_spot_savings"] for t in local["totals"]]  # type: ignore[union-attr]
    assert (gross == [None]) == (folder == "focus/azure-focus-1.2"), gross


def _local_in_order(db: Path, paths: list[Path]) -> dict[str, Any]:
    with billing_audit.open(db) as store:
        for p in paths:
            assert not store.ingest([p]).errors
        store.tag()
        return _figures(build_report(store, CFG, None, "effective").to_dict())


# snapshots of one month in CSV: legacy CUR's two assemblies (the manifest names the current one) and Azure's
# three daily month-to-date runs (the newest run wins)
SNAPSHOTS = {
    "aws/cur-legacy-csv": "cur/gpu-cur-csv/20261001-20261101/*-0000-4000-8000-*",
    "azure/snapshots": "costexports/ea/20261001-20261031/gpu-ea-daily/*/*",
}


@pytest.mark.parametrize("folder", list(SNAPSHOTS))
def test_csv_snapshots_in_any_order_the_newest_wins_on_both_paths(tmp_path: Path, folder: str) -> None:
    root = FIXTURES / folder
    snaps = sorted(root.glob(SNAPSHOTS[folder]))
    assert len(snaps) >= 2
    forward = _local_in_order(tmp_path / "f.duckdb", snaps)
    backward = _local_in_order(tmp_path / "b.duckdb", snaps[::-1])
    whole = _local_in_order(tmp_path / "w.duckdb", [root])
    olds = [_local_in_order(tmp_path / f"o{i}.duckdb", [s]) for i, s in enumerate(snaps)]
    assert forward == backward == whole
    assert sum(o["totals"] == whole["totals"] for o in olds) == 1  # the snapshots differ: exactly one won
    with billing_audit.open(tmp_path / "spark.duckdb") as store:
        run_id = run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER,
                            spark_source="raw", spark_raw=str(root))
        remote = _figures(build_report(store, CFG, None, "effective", engine_run=run_id).to_dict())
    assert remote == whole


# GCP's billing export (its nested records: labels, credits, project, system_labels, price, resource) as parquet and
# NDJSON (typed on the driver by the local reader's read_json over the whole file), and a semicolon CSV written with
# a decimal comma (read by the reader's own ba_num_dc): Spark keeps the lines local ingest stores, value for value
GCP_LINES = {"gcp/standard-ndjson": 19, "gcp/reexport": 12, "gcp/resource-parquet": 11,
             "gcp/gke-resource-parquet": 6, "csv-quirks/semicolon-decimal-comma": 5}


@pytest.mark.parametrize("folder", list(GCP_LINES))
def test_gcp_and_decimal_comma_exports_keep_the_local_lines(tmp_path: Path, folder: str) -> None:
    local, remote = _lines_both(tmp_path, FIXTURES / folder)
    assert len(local) == GCP_LINES[folder] and remote == local


# the reports too, where an engine's report can be the local one: the resource-level parquet and the decimal-comma
# CSV (the standard NDJSON export: with the exports priced by the bill, above; the GKE export: with the Kubernetes
# exports, below)
@pytest.mark.parametrize("folder", ["gcp/resource-parquet", "csv-quirks/semicolon-decimal-comma"])
def test_gcp_parquet_and_decimal_comma_exports_give_the_local_report(tmp_path: Path, folder: str) -> None:
    local, remote = _audit_both(tmp_path, [FIXTURES / folder])
    assert remote == local
    assert local["totals"] and local["jobs"]


def test_ndjson_is_parsed_with_the_types_local_ingest_gives_it(tmp_path: Path) -> None:
    # a cost written as a number on every record but the last, written as a string: read_json over the whole file
    # types it JSON (a sample of the first records would say DOUBLE); Spark reads it as that text, and both unwrap it
    src = NDJSON / "gcp_billing_export_v1_01ABCD_23EF45_678901-000000000000.json"
    records = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
    records[-1]["cost"] = str(records[-1]["cost"])
    folder = tmp_path / "mixed" / "gcp_billing_export_v1_01ABCD_23EF45_678901"
    folder.mkdir(parents=True)
    (folder / src.name).write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    con = duckdb.connect()
    from billing_audit import reader

    cols = reader.probe_columns(con, folder / src.name, src.name, "json")
    schema, text, own = raw.json_schema(con, folder / src.name, cols)
    con.close()
    assert cols["cost"] == "JSON" and "`cost` STRING" in schema and {"cost", "tags", "credits"} <= text
    assert "`usage` STRUCT<`amount`: DOUBLE, `unit`: STRING, `amount_in_pricing_units`: DOUBLE" in schema
    local, remote = _lines_both(tmp_path, folder.parent)
    assert len(local) == len(records) and remote == local
    assert str(remote[-1]["x_SourceRow"]) == str(len(records)) and remote[-1]["ContractedCost"] is not None


def _parquet_lines(con: duckdb.DuckDBPyConnection, folder: Path) -> tuple[list[Any], list[tuple[Any, ...]]]:
    """A lines folder read back as DuckDB reads it: its columns and types, and its rows in source order."""
    scan = f"read_parquet('{folder}/**/*.parquet', hive_partitioning = true)"
    cols = con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
    rows = con.execute(f"SELECT * FROM {scan} ORDER BY x_SourceFile, x_SourceRow").fetchall()
    return [c[:2] for c in cols], rows


def test_spark_write_lines_writes_the_lines_export_of_the_local_store(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folders = [str(FIXTURES / "aws" / "cur2"), str(FIXTURES / "aws" / "cur-legacy-csv")]
    common = ["--config", str(CFG_PATH), "-q"]
    runner = CliRunner()
    spark_opts = ["--engine", "spark", "--spark-master", MASTER]
    b = runner.invoke(main, ["audit", *folders, "--db", "b.duckdb", "--out", "spark", *common, *spark_opts,
                             "--source", "raw", "--spark-write-lines", "kept"])
    assert b.exit_code == 0, b.output
    with billing_audit.open(tmp_path / "a.duckdb") as store:
        assert not store.ingest([Path(f) for f in folders]).errors
        stored = store.con.execute("SELECT count(*) FROM line_items").fetchone()[0]  # type: ignore[index]
    assert runner.invoke(main, ["lines-export", "exported", "--db", "a.duckdb"]).exit_code == 0
    con = duckdb.connect()
    try:
        (cols, rows), (want_cols, want) = _parquet_lines(con, tmp_path / "kept"), _parquet_lines(con, tmp_path / "exported")
        parts = sorted(str(p.relative_to(tmp_path / "kept").parent) for p in (tmp_path / "kept").rglob("*.parquet"))
        local_parts = sorted(str(p.relative_to(tmp_path / "exported").parent)
                             for p in (tmp_path / "exported").rglob("*.parquet"))
    finally:
        con.close()
    assert cols == want_cols and ("BilledCost", "DECIMAL(38,12)") in cols and ("Tags", "MAP(VARCHAR, VARCHAR)") in cols
    ingest = [c[0] for c in cols].index("x_IngestId")
    assert len(rows) == len(want) == stored > 0 and {r[ingest] for r in rows} == {0}  # nothing was ingested: id 0
    assert [r[:ingest] + r[ingest + 1:] for r in rows] == [r[:ingest] + r[ingest + 1:] for r in want]
    assert sorted(set(parts)) == sorted(set(local_parts)) == ["x_Provider=aws/billing_period=2026-10"]
    assert (tmp_path / "kept" / ".billing-audit-lines").read_text(encoding="utf-8") == f"{len(rows)} canonical line items\n"
    # the written lines are --spark-lines: the report over them is the raw run's
    r = runner.invoke(main, ["report", "--db", "r.duckdb", "--config", str(CFG_PATH), "--format", "json",
                             "--out", "r.json", *spark_opts, "--spark-lines", "kept"])
    assert r.exit_code == 0, r.output
    assert _figures(json.loads(Path("r.json").read_text(encoding="utf-8"))) == _report(tmp_path / "spark")
    # a folder billing-audit did not write is refused before any work, as lines-export refuses it
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine", encoding="utf-8")
    c = runner.invoke(main, ["audit", *folders, "--db", "c.duckdb", "--out", "c", *common, *spark_opts,
                             "--source", "raw", "--spark-write-lines", "other"])
    assert c.exit_code == 2 and "--spark-write-lines other: not empty and not written by billing-audit" in c.output
    assert not (tmp_path / "c").exists() and sorted(p.name for p in (tmp_path / "other").iterdir()) == ["keep.txt"]
    d = runner.invoke(main, ["report", "--db", "r.duckdb", *spark_opts, "--spark-lines", "kept",
                             "--spark-write-lines", "again"])
    assert d.exit_code == 2 and "--spark-write-lines 'again': Value error, only with --source raw" in d.output


def _overlapping(root: Path) -> Path:
    """Two CUR 2.0 exports of one account and month: ``gpu-cur2`` (the fixture: two files, with its manifest) and
    ``gpu-cur2-sub`` (no manifest), the first file again with its first two lines' cost changed: of its lines, all
    but those two are lines ``gpu-cur2`` delivers too."""
    shutil.copytree(FIXTURES / "aws" / "cur2", root / "a")
    src = root / "a/exports/gpu-cur2/data/BILLING_PERIOD=2026-10/gpu-cur2-00001.snappy.parquet"
    dst = root / "b/exports/gpu-cur2-sub/data/BILLING_PERIOD=2026-10/gpu-cur2-sub-00001.snappy.parquet"
    dst.parent.mkdir(parents=True)
    _edited_cost(src, dst, "CASE WHEN file_row_number < 2 THEN line_item_unblended_cost + 1 ELSE "
                 "line_item_unblended_cost END")
    return root


OVERLAP_POLICIES = {"larger": ("", OverlapPolicy()), "prefer": ('prefer = ["gpu-cur2-sub"]', OverlapPolicy(
    prefer=("gpu-cur2-sub",))), "both": ('keep = "both"', OverlapPolicy(keep="both"))}


@pytest.mark.parametrize("policy", list(OVERLAP_POLICIES))
def test_overlapping_exports_count_their_shared_lines_once_as_local_ingest(tmp_path: Path, policy: str) -> None:
    root = _overlapping(tmp_path / "exports")
    table, overlap = OVERLAP_POLICIES[policy]
    config = tmp_path / "billing-audit.toml"
    config.write_text(CFG_PATH.read_text(encoding="utf-8") + f"\n[exports]\n{table}\n", encoding="utf-8")
    told: list[str] = []
    local, remote = _lines_both(tmp_path, root, overlap, told)
    assert remote == local  # the same lines kept, value for value
    notes, spark_notes, dry = told[: told.index("--")], told[told.index("--") + 1: -2], told[-1]
    assert spark_notes == notes and len(notes) == 1, told
    shared = "exports 'aws-data-export:gpu-cur2-sub' and 'aws-data-export:gpu-cur2' deliver 6 of the same lines"
    assert notes[0].startswith(shared), notes
    sub = str(root / "b/exports/gpu-cur2-sub/data/BILLING_PERIOD=2026-10")
    sub_lines = {"larger": 2, "prefer": 8, "both": 8}[policy]  # what the subscription-like export keeps
    assert sum(r["x_SourceFile"].startswith(sub) for r in local) == sub_lines
    assert len(local) == {"larger": 14 + 2, "prefer": 8 + 8, "both": 14 + 8}[policy]
    if policy == "larger":
        assert "counted once, in 'aws-data-export:gpu-cur2' (more lines); " + sub + " keeps its 2 other lines" in notes[0]
        assert "kept: aws 222233334444 2026-10 (8 lines, 6 of them counted in another export)" in dry
    elif policy == "prefer":
        assert "counted once, in 'aws-data-export:gpu-cur2-sub' (listed first in [exports] prefer)" in notes[0]
        assert "kept: aws 222233334444 2026-10 (14 lines, 6 of them counted in another export)" in dry
    else:
        assert notes[0].endswith('both counted ([exports] keep = "both")')
    assert dry.count("note: exports ") == 1 and "note: " + notes[0] in dry
    # the reports too: the audit's figures, jobs.csv and teams.csv, and the overlap said the same way
    local_report, remote_report = _audit_both(tmp_path, [root], config)
    assert remote_report == local_report and local_report["jobs"]


# Kubernetes: EKS split cost allocation data (pod records of two nodes) and GKE cost allocation rows, whose nodes'
# lines Spark shares out to the pods' jobs in its audit query as the local report does (engines/k8s_share.py)
@pytest.mark.parametrize("folder", ["aws/cur2-eks", "gcp/gke-resource-parquet"])
def test_kubernetes_exports_give_the_local_report(tmp_path: Path, folder: str) -> None:
    local, remote = _audit_both(tmp_path, [FIXTURES / folder])
    assert remote == local
    assert local["jobs"] and not [w for w in remote["warnings"] if "does not share a node's lines out" in w]


# the scenario folders (the bundled audit's own data, month after month, with restart windows, Azure's spot
# scenario, localised Azure headers), and exports beside their interruption event files: the event files are read
# on the driver into the store, as local ingest reads them, and the report counts interruptions from them
SCENARIOS = ["scenarios+events/scenarios", "scenarios-windows", "scenarios-months", "scenarios-seed",
             "azure-spot-scenario", "azure/localised-csv", "aws/cur2-eks+events/eks", "gcp+events/gcp"]
MATCHED = {"scenarios+events/scenarios", "aws/cur2-eks+events/eks"}  # whose events are of the jobs' resources
# several months in one run whose budgets break: checked on their sum, and said, naming the job rows it flags
SUMMED = {"gcp+events/gcp": "detr-x, sam-y", "scenarios-seed": "llama"}


@pytest.mark.parametrize("folders", SCENARIOS)
def test_scenarios_and_event_files_give_the_local_report(tmp_path: Path, folders: str) -> None:
    local, remote = _audit_both(tmp_path, [FIXTURES / f for f in folders.split("+")],
                                check_csv=folders not in SUMMED)
    if folders in SUMMED:  # several months in one run: its budgets checked on their sum, and said (below)
        said = [w for w in remote["warnings"] if w.startswith("budgets: this engine run covers ")]  # type: ignore[union-attr]
        assert len(said) == 1 and f"job row(s) it flags ({SUMMED[folders]})" in said[0]
        remote["warnings"] = [w for w in remote["warnings"] if w not in said]  # type: ignore[union-attr]
        for doc in (local, remote):  # the breaches and advice of the flagged rows: checked per month locally
            for j in doc["jobs"]:  # type: ignore[union-attr]
                j.pop("reasons", None), j.pop("recommendation", None), j.pop("budget_breaches", None)
    assert remote == local
    assert local["totals"] and local["jobs"]
    held = []
    for name in ("a", "b"):
        con = duckdb.connect(str(tmp_path / f"{name}.duckdb"), read_only=True)
        try:
            held.append(con.execute("SELECT provider, resource_id, time, kind FROM interruption_events ORDER BY ALL")
                        .fetchall())
        finally:
            con.close()
    assert held[1] == held[0]
    if "events" in folders:
        assert held[0]
    if folders in MATCHED:
        assert "events" in {j["interruptions_source"] for j in local["jobs"]}  # type: ignore[index]


def test_a_bad_event_file_refuses_the_raw_run_before_any_work(tmp_path: Path) -> None:
    good = FIXTURES / "events" / "eks" / "spot-events-1-2026-07-10-11-45-00-0e1a.jsonl"
    bad = tmp_path / "events" / good.name
    bad.parent.mkdir()
    record = json.loads(good.read_text(encoding="utf-8"))
    bad.write_text(good.read_text(encoding="utf-8") + json.dumps({**record, "time": "not-a-time"}) + "\n",
                   encoding="utf-8")
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(BillingAuditError) as err:
            run_engine(store, "spark", RULES, CFG, None, "effective", spark_master=MASTER, spark_source="raw",
                       spark_raw=os.pathsep.join([str(FIXTURES / "aws" / "cur2-eks"), str(bad.parent)]))
        held = store.con.execute("SELECT count(*) FROM interruption_events").fetchone()
        runs = store.con.execute("SELECT count(*) FROM engine_runs").fetchone() if store._has_table("engine_runs") \
            else (0,)
    assert "1 file(s) cannot be read on Spark (nothing was audited)" in str(err.value)
    assert f"{bad}, row 2: AWS EventBridge EC2 events: time: cannot read 'not-a-time'" in str(err.value)
    assert held == (0,) and runs == (0,)
    with raw.plan([FIXTURES / "aws" / "cur2-eks", good.parent]) as plan:
        assert plan.events == [good] and not plan.errors
        listed = raw.describe(plan, None)
    assert f"{good}\n    interruption events: read on the driver into the store" in listed


def test_an_engine_run_over_several_months_says_its_budgets_are_checked_on_their_sum(tmp_path: Path) -> None:
    """One engine run over every period (what --source raw and the warehouses run: the store holds no slices to
    run per period) checks a job's budgets on the months' sum; the local report checks each month's own.  Run here
    on DuckDB's engine over GCP's fixtures (several months): the warning says so; one month's run does not."""
    with billing_audit.open(tmp_path / "g.duckdb") as store:
        assert not store.ingest([FIXTURES / "gcp"]).errors
        store.tag()
        whole = build_report(store, CFG, None, "effective",
                             engine_run=run_engine(store, "duckdb", RULES, CFG, None, "effective"))
        month = build_report(store, CFG, "2026-10", "effective",
                             engine_run=run_engine(store, "duckdb", RULES, CFG, "2026-10", "effective"))
        unbudgeted = build_report(store, Config(), None, "effective",
                                  engine_run=run_engine(store, "duckdb", RULES, Config(), None, "effective"))
    said = [w for w in whole.warnings if w.startswith("budgets: this engine run covers ")]
    assert len(said) == 1 and "months as one (" in said[0] and "--period YYYY-MM" in said[0]
    assert "2 job row(s) it flags (detr-x, sam-y)" in said[0]
    assert not [w for w in month.warnings + unbudgeted.warnings if w.startswith("budgets: ")]
