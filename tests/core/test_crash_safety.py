"""A kill in the middle of an ingest leaves the store exactly as it was before that delivery."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

import billing_audit
from support import FIXTURES, dump_line_items

PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10"


def _big_month(folder: Path, rows: int) -> Path:
    """A legacy CUR parquet file of another payer, many rows, made from the fixture by DuckDB."""
    folder.mkdir(parents=True)
    out = folder / "big-00001.snappy.parquet"
    src = str(PARQUET_DIR / "gpu-cur-00001.snappy.parquet")
    duckdb.execute(
        f"""COPY (SELECT * REPLACE ('999999999999' AS bill_payer_account_id,
                                     'li' || CAST(i AS VARCHAR) AS identity_line_item_id)
                  FROM read_parquet('{src}'), range({rows // 6}) t(i))
            TO '{out}' (FORMAT parquet, COMPRESSION snappy)"""
    )
    return out


@pytest.mark.slow
def test_kill_during_ingest_changes_nothing(db: Path, tmp_path: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
        before = dump_line_items(store.con)
        log_before = store.con.execute("SELECT * FROM ingest_log ORDER BY ALL").fetchall()
    big = _big_month(tmp_path / "big", 3_000_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "billing_audit.cli", "ingest", str(big.parent), "--db", str(db), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wal = Path(str(db) + ".wal")
    start_size = db.stat().st_size

    def written() -> int:
        return db.stat().st_size - start_size + (wal.stat().st_size if wal.exists() else 0)

    deadline = time.monotonic() + 60
    # wait until the insert is under way (the store or its log grows), then kill without warning
    while time.monotonic() < deadline and proc.poll() is None and written() < 2 << 20:
        time.sleep(0.01)
    assert proc.poll() is None, "ingest finished before it could be killed: make the file bigger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with billing_audit.open(db) as store:
        assert dump_line_items(store.con) == before
        assert store.con.execute("SELECT * FROM ingest_log ORDER BY ALL").fetchall() == log_before
        assert store.con.execute("SELECT count(*) FROM line_items WHERE BillingAccountId = '999999999999'").fetchone() == (0,)
        # and the store still works: the same file ingests completely afterwards
        report = store.ingest([big.parent])
        assert report.rows == 3_000_000
