"""Faults: kills at random points, two processes on one store, a disk that fills up."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
import killing
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
    """Three steps (ingest one month, ingest another beside it, tag both), each killed seven times inside its own
    work and then let complete: after every kill the store opens and holds what the completed steps stored, every
    account's month whole, and no rule hits until a tag run completes; at the end it equals an uninterrupted
    run's.  The kills are timed from each step's run measured on a reference store in the same state (a kill
    timed in absolute seconds lands after a fast run's commit, and a run after one that completed has nothing
    left to do)."""
    accounts = [f"90000000000{i}" for i in range(2)]
    months = [_month(tmp_path / f"m{i}", 480_000, acct, 9 + i) for i, acct in enumerate(accounts)]

    def steps(db: Path) -> list[list[str]]:
        return [*([*CLI, "ingest", str(m), "--db", str(db), "-q"] for m in months), [*CLI, "tag", "--db", str(db), "-q"]]

    # the reference: the steps uninterrupted, each timed from the state the steps before it left
    start = killing.startup()
    ref_db = tmp_path / "ref.duckdb"
    runs = [killing.timed(cmd) for cmd in steps(ref_db)]
    reference = _state(ref_db)
    complete = {row[0]: row for row in reference[0]}

    db = tmp_path / "store.duckdb"
    kills = tries = 0
    for step, (cmd, run) in enumerate(zip(steps(db), runs, strict=True)):
        stored = accounts[:step]  # the accounts the completed steps ingested
        for delay in killing.delays(7 + step, 7, run, start, 0.05, 0.8):
            tries += 1
            kills += killing.kill_after(cmd, delay)
            if not db.exists():
                assert not stored
                continue
            totals, hits = _state(db)
            for acct, n, total in totals:
                assert (acct, n, total) == complete[acct], f"a partial month after kill {tries} (step {step})"
            held = [row[0] for row in totals]
            assert held == stored or (step < 2 and held == accounts[:step + 1]), f"after kill {tries}: {held}"
            assert hits == [] or (step == 2 and hits == reference[1]), f"rule hits after kill {tries}: {hits}"
        subprocess.run(cmd, check=True)  # then the step completes over what the killed runs left
    assert kills >= 15, f"only {kills} of {tries} runs were killed: the test did not test much"
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
