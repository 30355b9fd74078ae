"""Kill -9 a pull at random points (while listing, downloading or ingesting): the store always holds
whole periods, and a final pull completes to the same totals as ingesting the files locally."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import billing_audit
import killing
from peers_aws import AwsPeer
from support import FIXTURES

pytestmark = pytest.mark.slow
BUCKET = "example-billing-bucket"
SRC = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10/gpu-cur-00001.snappy.parquet"


@pytest.fixture(scope="module")
def peer() -> Iterator[AwsPeer]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    p = AwsPeer()
    try:
        yield p
    finally:
        p.stop()


def _months(root: Path) -> Path:
    """Two Athena-layout CUR months of a few hundred thousand lines, so a pull takes a while."""
    for month in (9, 10):
        folder = root / "cur" / "big-cur" / "big-cur" / "year=2026" / f"month={month}"
        folder.mkdir(parents=True)
        duckdb.execute(
            f"""COPY (SELECT * REPLACE ('933333333333' AS bill_payer_account_id,
                         TIMESTAMP '2026-{month:02d}-01' AS bill_billing_period_start_date,
                         line_item_unblended_cost + (i % 11) * 0.01 AS line_item_unblended_cost)
                      FROM read_parquet('{SRC}'), range(120000) t(i))
                TO '{folder / "big-cur-00001.snappy.parquet"}' (FORMAT parquet)"""
        )
    return root


def _totals(db: Path) -> list[tuple[object, ...]]:
    with billing_audit.open(db) as store:
        return store.con.execute(
            "SELECT strftime(BillingPeriodStart, '%Y-%m'), count(*), sum(BilledCost) FROM line_items "
            "GROUP BY 1 ORDER BY 1").fetchall()


def test_kills_during_pull(peer: AwsPeer, tmp_path: Path) -> None:
    peer.reset()
    data = _months(tmp_path / "src")
    peer.seed(BUCKET, data)
    ref = tmp_path / "local.duckdb"
    with billing_audit.open(ref) as store:
        assert not store.ingest([data]).errors
    whole = {row[0]: row for row in _totals(ref)}

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    db, cache = tmp_path / "pulled.duckdb", tmp_path / "cache"
    pull = [sys.executable, "-m", "billing_audit.cli", "pull", "aws", "--endpoint-url", peer.url, "--bucket", BUCKET, "-q"]
    cmd = [*pull, "--db", str(db), "--cache", str(cache)]
    # a whole pull timed (listing, downloading, ingesting), so that the kills land inside a pull's own work on any
    # machine: in its first half, where the periods are not all stored yet (a pull after one that stored a period
    # has less to do)
    run = killing.timed([*pull, "--db", str(tmp_path / "probe.duckdb"), "--cache", str(tmp_path / "probe-cache")], env)
    start = killing.startup(killing.PULL_IMPORTS)
    at = killing.delays(11, 10, run, start, 0.02, 0.5)
    kills = 0
    for i in range(10):
        kills += killing.kill_after(cmd, at[i], env=env)
        if db.exists():
            for period, n, total in _totals(db):
                assert (period, n, total) == whole[period], f"a partial period after kill {i}"
        if i % 4 == 3:  # start again from nothing now and then, so early phases get killed too
            db.unlink(missing_ok=True)
            Path(str(db) + ".wal").unlink(missing_ok=True)
    assert kills >= 4, f"only {kills} pulls were killed (a pull {run:.2f} s, its start-up {start:.2f} s)"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _totals(db) == _totals(ref)
