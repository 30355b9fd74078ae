"""Bad input: a clear error naming file/row/column, nothing of that file lands, other files still ingest."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from support import FIXTURES, dump_line_items

PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10"
CSV_GZ = next((FIXTURES / "aws/cur-legacy-csv").rglob("b2e1d6c3*/*-1.csv.gz"))


def _csv_text() -> str:
    return gzip.decompress(CSV_GZ.read_bytes()).decode()


def _store_state(db: Path) -> tuple[str, list[tuple[object, ...]]]:
    with billing_audit.open(db) as store:
        log = store.con.execute("SELECT file, fingerprint, status FROM ingest_log ORDER BY ALL").fetchall()
        return dump_line_items(store.con), log


@pytest.fixture
def seeded(db: Path) -> Path:
    """A store that already holds the legacy parquet fixture."""
    with billing_audit.open(db) as store:
        assert store.ingest([PARQUET_DIR]).rows == 12
    return db


def _ingest_bad(db: Path, path: Path) -> billing_audit.IngestReport:
    with billing_audit.open(db) as store:
        return store.ingest([path])


def _write_csv(tmp_path: Path, text: str, name: str = "bad.csv") -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    p = folder / name
    p.write_text(text)
    return p


def test_truncated_parquet(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    src = PARQUET_DIR / "gpu-cur-00001.snappy.parquet"
    bad = tmp_path / "t" / "part.parquet"
    bad.parent.mkdir()
    bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    err = report.errors[0]
    assert err.file == str(bad)
    assert "parquet" in str(err).lower()
    assert _store_state(seeded) == before


def test_csv_with_a_broken_row_names_the_row(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    lines = _csv_text().splitlines()
    lines[3] = lines[3] + ',"an extra field'  # unbalanced quote on data record 3
    bad = _write_csv(tmp_path, "\n".join(lines) + "\n")
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    msg = str(report.errors[0])
    assert str(bad) in msg
    assert report.errors[0].row is not None
    assert _store_state(seeded) == before


def test_short_row_is_refused(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    lines = _csv_text().splitlines()
    lines[2] = ",".join(lines[2].split(",")[:5])
    bad = _write_csv(tmp_path, "\n".join(lines) + "\n")
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    assert report.errors[0].row == 2, str(report.errors[0])
    assert _store_state(seeded) == before


def test_missing_required_column(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    table = pq.read_table(PARQUET_DIR / "gpu-cur-00001.snappy.parquet").drop(["line_item_unblended_cost"])
    bad = tmp_path / "m" / "part.parquet"
    bad.parent.mkdir()
    pq.write_table(table, bad)
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    err = report.errors[0]
    assert err.column == "line_item_unblended_cost"
    assert "required column" in str(err)
    assert _store_state(seeded) == before


def test_wrong_type_names_row_and_column(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    table = pq.read_table(PARQUET_DIR / "gpu-cur-00001.snappy.parquet")
    costs = [str(v) for v in table.column("line_item_unblended_cost").to_pylist()]
    costs[4] = "N/A"
    idx = table.schema.get_field_index("line_item_unblended_cost")
    table = table.set_column(idx, "line_item_unblended_cost", pa.array(costs, pa.string()))
    bad = tmp_path / "w" / "part.parquet"
    bad.parent.mkdir()
    pq.write_table(table, bad)
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    err = report.errors[0]
    assert (err.row, err.column) == (5, "line_item_unblended_cost")
    assert "'N/A'" in str(err)
    assert _store_state(seeded) == before


def test_bad_date_in_csv_names_row_and_column(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    lines = _csv_text().splitlines()
    header = lines[0].split(",")
    col = header.index("lineItem/UsageStartDate")
    fields = lines[2].split(",")
    fields[col] = "yesterday"
    lines[2] = ",".join(fields)
    bad = _write_csv(tmp_path, "\n".join(lines) + "\n")
    report = _ingest_bad(seeded, bad)
    err = report.errors[0]
    assert (err.row, err.column) == (2, "lineItem/UsageStartDate")
    assert _store_state(seeded) == before


def test_non_utf8_is_refused(seeded: Path, tmp_path: Path) -> None:
    before = _store_state(seeded)
    text = _csv_text().replace("Amazon Elastic Compute Cloud", "Amazon Elastic Compute Cloud – Zürich", 1)
    folder = tmp_path / "latin"
    folder.mkdir()
    bad = folder / "latin1.csv"
    bad.write_bytes(text.encode("cp1252"))
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    assert "UTF-8" in str(report.errors[0])
    assert str(bad) in str(report.errors[0])
    assert _store_state(seeded) == before


@pytest.mark.parametrize("content", ["", "\n", "lineItem/UsageStartDate,lineItem/UnblendedCost,lineItem/LineItemType\n"])
def test_empty_and_header_only_files(seeded: Path, tmp_path: Path, content: str) -> None:
    before = _store_state(seeded)
    bad = _write_csv(tmp_path, content)
    report = _ingest_bad(seeded, bad)
    assert report.failed == 1
    assert "empty" in str(report.errors[0]) or "no data rows" in str(report.errors[0])
    assert _store_state(seeded) == before


def test_unknown_format_lists_the_understood_ones(db: Path, tmp_path: Path) -> None:
    bad = _write_csv(tmp_path, "name,age\nada,36\n")
    report = _ingest_bad(db, bad)
    msg = str(report.errors[0])
    assert "not a billing export" in msg
    for fmt in ("aws-cur",):
        assert fmt in msg


def test_one_bad_file_does_not_stop_the_others(db: Path, tmp_path: Path) -> None:
    good = tmp_path / "good"
    shutil.copytree(PARQUET_DIR, good)
    badf = tmp_path / "bad" / "x.csv"
    badf.parent.mkdir()
    badf.write_text("name,age\nada,36\n")
    result = CliRunner().invoke(main, ["ingest", str(good), str(badf), "--db", str(db)])
    assert result.exit_code == 2
    assert "1 file(s) failed" in result.output
    assert str(badf) in result.output
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (12,)


def test_a_bad_part_fails_its_whole_delivery(db: Path, tmp_path: Path) -> None:
    """A multi-part delivery is all or nothing: half a month would under-count."""
    folder = tmp_path / "month"
    shutil.copytree(PARQUET_DIR, folder)
    p2 = folder / "gpu-cur-00002.snappy.parquet"
    p2.write_bytes(p2.read_bytes()[:100])
    with billing_audit.open(db) as store:
        report = store.ingest([folder])
        assert report.failed == 1
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (0,)
        statuses = {Path(f.file).name: f.status for f in report.files}
        assert statuses == {"gpu-cur-00001.snappy.parquet": "not ingested", "gpu-cur-00002.snappy.parquet": "failed"}


def test_missing_path_is_an_error(db: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "nope"), "--db", str(db)])
    assert result.exit_code == 2
    assert "no such file or folder" in result.output
