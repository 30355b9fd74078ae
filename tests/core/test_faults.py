"""Faults: kills at random points, two processes on one store, a disk that fills up."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
from support import FIXTURES

PARQUET_DIR = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10"
CLI = [sys.executable, "-m", "billing_audit.cli"]


def _month(folder: Path, rows: int, payer: str, month: int) -> Path:
    """A legacy CUR parquet month for another payer, made from the fixture by DuckDB."""
    folder.mkdir(parents=True)
    src = str(PARQUET_DIR / "gpu-cur-00001.snappy.parquet")
    duckdb.execute(
        f"""COPY (SELECT * REPLACE ('{payer}' AS bill_payer_account_id,
                     TIMESTAMP '2026-{month:02d}-01' AS bill_billing_period_start_date,
                     line_item_unblended_cost + (i % 7) * 0.01 AS line_item_unblended_cost)
                  FROM read_parquet('{src}'), range({rows // 6}) t(i))
            TO '{folder / "part-00001.snappy.parquet"}' (FORMAT parquet)"""
    )
    return folder


def _state(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with billing_audit.open(db) as store:
        totals = store.con.execute(
            "SELECT BillingAccountId, count(*), sum(BilledCost) FROM line_items GROUP BY 1 ORDER BY 1").fetchall()
        hits = store.con.execute("SELECT rule_id, count(*) FROM rule_hits GROUP BY 1 ORDER BY 1").fetchall() \
            if store._has_table("rule_hits") else []
    return totals, hits


@pytest.mark.slow
def test_twenty_kills_during_ingest_and_tag_then_a_rerun_completes(tmp_path: Path) -> None:
    months = [_month(tmp_path / f"m{i}", 480_000, f"90000000000{i}", 9 + i) for i in range(2)]
    # the reference: an uninterrupted run
    ref_db = tmp_path / "ref.duckdb"
    for m in months:
        subprocess.run([*CLI, "ingest", str(m), "--db", str(ref_db), "-q"], check=True)
    subprocess.run([*CLI, "tag", "--db", str(ref_db), "-q"], check=True)
    reference = _state(ref_db)
    complete = {row[0]: row for row in reference[0]}

    db = tmp_path / "store.duckdb"
    rng = random.Random(7)
    kills = 0
    for i in range(20):
        cmd = [*CLI, "ingest", str(months[i % 2]), "--db", str(db), "-q"] if i % 3 else [*CLI, "tag", "--db", str(db), "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 2.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        # after every kill: the store opens, and each account holds all of its month or none of it
        if db.exists():
            totals, _ = _state(db)
            for acct, n, total in totals:
                assert (acct, n, total) == complete[acct], f"partial month after kill {i}"
    assert kills >= 10, f"only {kills} runs were killed: the test did not test much"
    for m in months:
        subprocess.run([*CLI, "ingest", str(m), "--db", str(db), "-q"], check=True)
    subprocess.run([*CLI, "tag", "--db", str(db), "-q"], check=True)
    assert _state(db) == reference


def _hold_store(db: Path, seconds: float) -> subprocess.Popen[bytes]:
    code = f"import billing_audit, time; s = billing_audit.open({str(db)!r}); print('ready', flush=True); time.sleep({seconds})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_second_process_fails_clearly_then_waits(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    holder = _hold_store(db, 3)
    try:
        env = {**os.environ, "BILLING_AUDIT_LOCK_TIMEOUT": "0.5"}
        p = subprocess.run([*CLI, "ingest", str(PARQUET_DIR), "--db", str(db)], env=env, capture_output=True, text=True)
        assert p.returncode == 2
        assert f"in use by process {holder.pid}" in p.stderr
        assert "waiting for process" in p.stderr
        env["BILLING_AUDIT_LOCK_TIMEOUT"] = "30"  # this one waits for the holder to finish
        p = subprocess.run([*CLI, "ingest", str(PARQUET_DIR), "--db", str(db), "-q"], env=env, capture_output=True,
                           text=True)
        assert p.returncode == 0, p.stderr
    finally:
        holder.kill()
        holder.wait()
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone() == (12,)


def _limit_file_size(limit: int):  # type: ignore[no-untyped-def]
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_disk_full_while_ingesting_leaves_the_store_intact(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([PARQUET_DIR])
    before = _state(db)
    size = db.stat().st_size
    big = _month(tmp_path / "big", 600_000, "911111111111", 10)
    p = subprocess.run([*CLI, "ingest", str(big), "--db", str(db)], capture_output=True, text=True,
                       preexec_fn=_limit_file_size(size + (1 << 20)))
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    assert "error" in p.stderr.lower()
    assert _state(db) == before


def test_disk_full_while_writing_an_export(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([FIXTURES / "scenarios"])
        store.tag()
    out = tmp_path / "jobs.csv"
    p = subprocess.run([*CLI, "export", "--db", str(db), "--by", "job", "--out", str(out)], capture_output=True,
                       text=True, preexec_fn=_limit_file_size(200))
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    assert "jobs.csv" in p.stderr
    assert not out.exists() and not list(tmp_path.glob("jobs.csv*"))  # no half-written export
    totals, _ = _state(db)
    assert sum((t[2] for t in totals), Decimal(0)) != 0
