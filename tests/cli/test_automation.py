"""Automation must never pass by mistake (issue #18): a wrong --db, a missing path, a closed pipe, --out -,
a missing folder, a period the store does not hold, and readers beside writers; each by its exit code,
its message and what is (not) created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import billing_audit
from billing_audit.errors import BillingAuditError
from support import FIXTURES

CLI = [sys.executable, "-m", "billing_audit.cli"]
SCENARIOS = FIXTURES / "scenarios"


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auto") / "s.duckdb"
    with billing_audit.open(path) as s:
        assert not s.ingest([SCENARIOS]).errors
        s.tag()
    return path


# -- 1: read commands never create a store ------------------------------------------------------------------------
READS = [
    ["summary"], ["summary", "--exports"], ["search", "restart"], ["report"], ["report", "--format", "json"],
    ["export", "--out", "OUT"], ["explain", "aws-1"], ["lines-export", "LINES"],
]


@pytest.mark.parametrize("args", READS, ids=lambda a: " ".join(a))
def test_read_command_on_a_missing_store_fails_and_creates_nothing(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "typo.duckdb"
    args = [str(tmp_path / a) if a in ("OUT", "LINES") else a for a in args]
    p = run(*args, "--db", str(db))
    assert p.returncode == 2, p.stderr
    assert f"error: no store at {db}: run `billing-audit ingest` first" in p.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no wal, no output


def test_open_read_only_raises_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BillingAuditError, match="no store at"):
        billing_audit.open(tmp_path / "none.duckdb", read_only=True)
    assert not (tmp_path / "none.duckdb").exists()
    with billing_audit.open(tmp_path / "new.duckdb") as s:  # writing creates it
        assert s.summary().height == 0
    assert (tmp_path / "new.duckdb").exists()


# -- 2: readers side by side; a writer waits, says so, then names the holder ---------------------------------------
def _reader(db: Path, seconds: float) -> subprocess.Popen[bytes]:
    code = (f"import duckdb, time; c = duckdb.connect({str(db)!r}, read_only=True); "
            f"print('ready', flush=True); time.sleep({seconds})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_readers_run_side_by_side(store: Path, tmp_path: Path) -> None:
    holders = [_reader(store, 60), _reader(store, 60)]
    try:
        env = {**os.environ, "BILLING_AUDIT_LOCK_TIMEOUT": "0"}  # no waiting allowed: readers never wait for readers
        started = time.monotonic()
        procs = [subprocess.Popen([*CLI, *args, "--db", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
                 for args in (["summary"], ["report", "--format", "json"], ["search", "restart"])]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
        assert time.monotonic() - started < 30
        assert json.loads(outs[1][0])["jobs"]
    finally:
        for h in holders:
            h.kill()
            h.wait()


def test_writer_waits_for_a_reader_then_names_it(store: Path, tmp_path: Path) -> None:
    holder = _reader(store, 60)
    try:
        started = time.monotonic()
        p = run("tag", "--db", str(store), "--wait", "1")
        assert p.returncode == 2
        assert time.monotonic() - started < 30
        assert f"waiting for process {holder.pid}" in p.stderr and "to close the store" in p.stderr
        assert f"in use by process {holder.pid}" in p.stderr
        assert "--wait" in p.stderr
    finally:
        holder.kill()
        holder.wait()
    assert run("tag", "--db", str(store), "-q", "--wait", "1").returncode == 0  # free again


def test_writer_waits_until_the_reader_is_gone(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    billing_audit.open(db).close()
    holder = _reader(db, 8)  # long enough for the writer to start and find it, on a busy machine too
    try:
        p = run("ingest", str(SCENARIOS), "--db", str(db), "-q", "--wait", "30")
        assert p.returncode == 0, p.stderr
        assert "waiting for process" in p.stderr
    finally:
        holder.kill()
        holder.wait()


# -- 3: audit of a path that does not exist --------------------------------------------------------------------------
def test_audit_of_a_missing_path_is_an_error(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    p = run("audit", str(tmp_path / "nope"), "--db", str(store), "--out", str(out))
    assert p.returncode == 2
    assert f"no such file or folder: {tmp_path / 'nope'}" in p.stderr
    assert not out.exists()


# -- 4: a closed pipe exits 0 quietly ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from billing_audit import app

    folder = tmp_path_factory.mktemp("big")
    app.generate("aws", 3000, str(folder / "aws"))
    db = folder / "b.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([folder / "aws"]).errors
        s.tag()
    return db


@pytest.mark.parametrize("args", [
    ["report", "--format", "html"], ["search", "spot", "--lines", "--limit", "100000", "--format", "csv"],
    ["search", "spot", "--lines", "--limit", "100000"],  # the terminal table: rich's own broken-pipe exit is 1
], ids=["report", "search", "table"])
def test_closed_pipe_exits_0_quietly(big_store: Path, args: list[str]) -> None:
    full = run(*args, "--db", str(big_store))
    assert full.returncode == 0, full.stderr
    assert len(full.stdout.encode()) > 128 * 1024  # well beyond a pipe's buffer (64 KiB on Linux)
    p = subprocess.Popen([*CLI, *args, "--db", str(big_store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()  # `| head -1`
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "error" not in err


# -- 5: --out - and a missing folder --------------------------------------------------------------------------------
def test_report_and_export_out_dash_write_stdout(store: Path, tmp_path: Path) -> None:
    p = subprocess.run([*CLI, "report", "--db", str(store), "--format", "json", "--out", "-"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"]
    p = subprocess.run([*CLI, "export", "--db", str(store), "--format", "csv", "--out", "-"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("period,")
    p = subprocess.run([*CLI, "export", "--db", str(store), "--format", "parquet", "--out", "-"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "parquet is binary" in p.stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"


@pytest.mark.parametrize("cmd", ["report", "export"])
def test_out_into_a_missing_folder_is_an_error(store: Path, tmp_path: Path, cmd: str) -> None:
    target = tmp_path / "nonexistent" / "dir" / "out.csv"
    p = run(cmd, "--db", str(store), "--format", "csv", "--out", str(target))
    assert p.returncode == 2
    assert f"no folder {target.parent}" in p.stderr
    assert not (tmp_path / "nonexistent").exists()


# -- 6: a period the store does not hold -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown", "html"])
def test_report_on_a_period_not_in_the_store_warns(store: Path, fmt: str) -> None:
    p = run("report", "--db", str(store), "--period", "2025-01", "--format", fmt)
    assert p.returncode == 0, p.stderr
    assert "warning: no lines for 2025-01; the store holds 2026-11" in p.stderr
    if fmt == "json":
        assert "no lines for 2025-01; the store holds 2026-11" in json.loads(p.stdout)["warnings"]
    q = run("report", "--db", str(store), "--period", "2026-11", "--format", fmt)
    assert "no lines for" not in q.stderr


def test_an_engine_that_reads_the_store_needs_one_a_warehouse_engine_does_not(tmp_path: Path) -> None:
    """Spark over the store's own lines on a missing store is the missing-store error; BigQuery and Athena read the
    provider's table and keep only their aggregates locally (tests/engines: report --engine bigquery|athena)."""
    db = tmp_path / "typo.duckdb"
    p = run("report", "--engine", "spark", "--db", str(db))
    assert p.returncode == 2 and f"no store at {db}" in p.stderr
    assert not db.exists()
    from billing_audit.engines import engine, options_from_flat

    assert not engine("bigquery").reads_store(options_from_flat("bigquery"))
    assert not engine("spark").reads_store(options_from_flat("spark", {"spark_lines": "s3a://lake/lines/"}))
