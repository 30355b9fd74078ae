"""Never double count: snapshots, restatements and re-deliveries of the same period."""

from __future__ import annotations

import itertools
import os
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import billing_audit
from support import FIXTURES, Case, source_total

CSV_PERIOD = FIXTURES / "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101"
OLD = CSV_PERIOD / "a1f0c5d2-0000-4000-8000-000000000001"
NEW = CSV_PERIOD / "b2e1d6c3-0000-4000-8000-000000000002"
CSV_CASE = Case("csv", "", "aws-cur", ("lineItem/UnblendedCost",))
PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10"


def _total(store: billing_audit.Store) -> Decimal:
    return store.con.execute("SELECT coalesce(sum(BilledCost), 0) FROM line_items").fetchone()[0]


def _folder_total(folder: Path) -> Decimal:
    return sum((source_total(f, CSV_CASE) for f in folder.iterdir() if f.suffix in (".gz", ".zip")), Decimal(0))


def test_all_assemblies_count_once(db: Path) -> None:
    assert _folder_total(OLD) != _folder_total(NEW)
    with billing_audit.open(db) as store:
        store.ingest([CSV_PERIOD])
        assert _total(store) == _folder_total(NEW)
        files = {r[0] for r in store.con.execute("SELECT DISTINCT x_SourceFile FROM line_items").fetchall()}
        assert all(str(NEW) in f for f in files)


@pytest.mark.parametrize("order", list(itertools.permutations(["old", "new", "period"])))
def test_assembly_order_does_not_matter(db: Path, order: tuple[str, ...]) -> None:
    """The period-level manifest marks the current assembly, whatever order things arrive in."""
    paths = {"old": OLD, "new": NEW, "period": CSV_PERIOD}
    with billing_audit.open(db) as store:
        for name in order:
            store.ingest([paths[name]])
        assert _total(store) == _folder_total(NEW)


def test_older_assembly_after_newer_is_superseded(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([CSV_PERIOD])
        report = store.ingest([OLD])
        assert {f.status for f in report.files} == {"superseded"}
        assert _total(store) == _folder_total(NEW)


def _restate(folder: Path, factor: str) -> Decimal:
    """Rewrite a parquet delivery in place, as CUR overwrite mode does; returns the new total."""
    total = Decimal(0)
    for f in sorted(folder.glob("*.parquet")):
        t = pq.read_table(f)
        costs = [float(Decimal(repr(v)) * Decimal(factor)) for v in t.column("line_item_unblended_cost").to_pylist()]
        t = t.set_column(t.schema.get_field_index("line_item_unblended_cost"), "line_item_unblended_cost",
                         pa.array(costs, pa.float64()))
        pq.write_table(t, f)
        total += sum((Decimal(repr(c)) for c in costs), Decimal(0))
    return total


def test_overwrite_restatement_replaces_the_month(db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "year=2026" / "month=10"
    shutil.copytree(PARQUET_DIR, folder)
    with billing_audit.open(db) as store:
        store.ingest([folder])
        first = _total(store)
        new_total = _restate(folder, "1.5")
        # even when the rewritten files carry an older modification time
        for f in folder.iterdir():
            os.utime(f, (0, 0))
        report = store.ingest([folder])
        assert report.replaced_rows == 12
        assert _total(store) == new_total != first
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (12,)


def test_same_month_other_account_is_kept(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        store.ingest([CSV_PERIOD])
        accounts = store.con.execute("SELECT BillingAccountId, count(*) FROM line_items GROUP BY 1 ORDER BY 1").fetchall()
        assert accounts == [("012345678901", 12), ("123456789012", 12)]


def test_ingest_log_records_each_file(db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        rows = store.con.execute(
            "SELECT file, length(fingerprint), format, periods, rows, cost_total, status FROM ingest_log ORDER BY file"
        ).fetchall()
    assert [r[0].rsplit("/", 1)[1] for r in rows] == ["gpu-cur-00001.snappy.parquet", "gpu-cur-00002.snappy.parquet"]
    assert all(r[1] == 64 and r[2] == "aws-cur" and r[3] == "2026-10" and r[4] == 6 and r[6] == "ingested" for r in rows)
    want = source_total(PARQUET_DIR / "gpu-cur-00001.snappy.parquet", Case("p", "", "aws-cur", ("line_item_unblended_cost",)))
    assert rows[0][5] == {"USD": want}


@pytest.mark.parametrize("first", ["old", "new"])
def test_file_times_do_not_decide_when_a_manifest_does(db: Path, tmp_path: Path, first: str) -> None:
    """A fresh clone gives files arbitrary times: the period manifest, not mtime, names the current assembly."""
    period = tmp_path / "20261001-20261101"
    shutil.copytree(CSV_PERIOD, period)
    old = period / OLD.name
    for f in old.iterdir():
        os.utime(f, (4_000_000_000, 4_000_000_000))  # the outdated assembly looks newest on disk
    with billing_audit.open(db) as store:
        order = [old, period / NEW.name] if first == "old" else [period / NEW.name, old]
        for p in order:
            store.ingest([p])
        assert _total(store) == _folder_total(NEW)


def test_export_time_orders_extracts_without_a_stamped_folder(db: Path, tmp_path: Path) -> None:
    """GCP extracts in plainly named folders: the rows' export_time says which is newer, not the file time."""
    src = FIXTURES / "gcp/reexport"
    early, late = sorted(p for p in src.iterdir() if p.is_dir())
    a, b = tmp_path / "extract-a", tmp_path / "extract-b"
    shutil.copytree(late, a)
    shutil.copytree(early, b)
    for f in a.iterdir():
        os.utime(f, (1_000_000, 1_000_000))  # the later extract looks oldest on disk
    with billing_audit.open(db) as store:
        store.ingest([a])
        store.ingest([b])
        files = {r[0] for r in store.con.execute(
            "SELECT DISTINCT x_SourceFile FROM line_items WHERE BillingPeriodStart = '2026-10-01'").fetchall()}
    assert files and all("/extract-a/" in f for f in files)


def test_partly_downloaded_delivery_is_refused_and_replaces_nothing(db: Path, tmp_path: Path) -> None:
    period = tmp_path / "20261001-20261101"
    shutil.copytree(CSV_PERIOD, period)
    with billing_audit.open(db) as store:
        store.ingest([period / OLD.name])
        before = _total(store)
        (period / NEW.name / "gpu-cur-csv-2.zip").unlink()  # half of the newest assembly is missing
        report = store.ingest([period])
        assert report.failed >= 1
        assert any("not found locally" in str(e) and "gpu-cur-csv-2.zip" in str(e) for e in report.errors)
        assert _total(store) == before


def test_line_ids_do_not_depend_on_where_the_files_are(db: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "20261001-20261101"
    shutil.copytree(CSV_PERIOD, moved)
    ids = []
    for i, path in enumerate([CSV_PERIOD, moved]):
        with billing_audit.open(tmp_path / f"s{i}.duckdb") as store:
            store.ingest([path])
            ids.append(sorted(r[0] for r in store.con.execute("SELECT x_LineItemId FROM line_items").fetchall()))
    assert ids[0] == ids[1] and len(ids[0]) == 12


def test_period_starting_at_local_midnight_is_the_same_month(db: Path, tmp_path: Path) -> None:
    """GCP's FOCUS view starts periods at Pacific midnight (07:00 UTC): still October, still one slice."""
    folder = tmp_path / "a"
    shutil.copytree(PARQUET_DIR, folder)
    with billing_audit.open(db) as store:
        store.ingest([folder])
        for f in sorted(folder.glob("*.parquet")):
            t = pq.read_table(f)
            i = t.schema.get_field_index("bill_billing_period_start_date")
            shifted = pa.array([v.replace(hour=7) for v in t.column(i).to_pylist()], t.schema.field(i).type)
            pq.write_table(t.set_column(i, "bill_billing_period_start_date", shifted), f)
        report = store.ingest([folder])
        assert report.replaced_rows == 12
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (12,)
        assert store.summary()["period"].to_list() == ["2026-10"]


def test_unchanged_files_are_not_rehashed(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-ingesting an unchanged month reads no export bytes: same path, size and mtime reuse the fingerprint."""
    import billing_audit.deliveries as deliveries

    folder = tmp_path / "m"
    shutil.copytree(PARQUET_DIR, folder)
    with billing_audit.open(db) as store:
        store.ingest([folder])
        calls: list[Path] = []
        real = deliveries.fingerprint
        monkeypatch.setattr(deliveries, "fingerprint", lambda p: calls.append(p) or real(p))
        report = store.ingest([folder])
        assert report.count("unchanged") == 2 and calls == []
        # touching a file makes it hash again (and, unchanged in content, still counts as unchanged)
        os.utime(folder / "gpu-cur-00001.snappy.parquet", (5, 5))
        report = store.ingest([folder])
        assert report.count("unchanged") == 2 and [p.name for p in calls] == ["gpu-cur-00001.snappy.parquet"]
