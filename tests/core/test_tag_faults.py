"""A tag run that fails, is killed or fills the disk never leaves a store that reports zeros.

After any of these, `report` and `export` either refuse ("no completed tag run of the lines in the store") with
exit 2, or give exactly the figures of a clean run: a tag run is written in one transaction, and a report comes
from a completed tag run of the lines stored now.
"""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

import killing
from billing_audit.rollup import NO_TAG_RUN
from support import FIXTURES

CLI = [sys.executable, "-m", "billing_audit.cli"]
SCENARIOS = FIXTURES / "scenarios"
FAILING_RULE = """/*
id: TM700
name: custom.fails
title: a rule that fails while it runs
category: custom
severity: low
providers: [aws]
*/
select x_LineItemId, 'x' as reason from line_items where CAST(x_UsageType AS INTEGER) > 0
"""


def _cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]


def _figures(db: Path, tmp: Path) -> tuple[int, str, str]:
    """(exit code, report JSON without generated_at, job export CSV), or the refusal's message in place of both."""
    rep = _cli("report", "--db", str(db), "--format", "json")
    out = tmp / f"export-{time.monotonic_ns()}.csv"
    exp = _cli("export", "--db", str(db), "--by", "job", "--out", str(out))
    if rep.returncode:
        assert exp.returncode == rep.returncode, exp.stderr
        return rep.returncode, rep.stderr, exp.stderr
    assert exp.returncode == 0, exp.stderr
    doc = json.loads(rep.stdout)
    assert doc["kind"] == "report" and doc.pop("generated_at")  # the clock's: two runs differ only there
    return 0, json.dumps(doc), out.read_text()


def _refuses_or_equals(db: Path, tmp: Path, clean: tuple[int, str, str]) -> str:
    code, rep, exp = _figures(db, tmp)
    if code:
        assert code == 2
        assert NO_TAG_RUN in rep and NO_TAG_RUN in exp, (rep, exp)
        assert "Traceback" not in rep + exp
        return "refused"
    assert (rep, exp) == clean[1:], "a report after the fault differs from the clean run's"
    return "equal"


@pytest.fixture
def ingested(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    assert _cli("ingest", str(SCENARIOS), "--db", str(db), "-q").returncode == 0
    return db


def _clean(db: Path, tmp: Path) -> tuple[int, str, str]:
    ref = tmp / "clean.duckdb"
    shutil.copy(db, ref)
    assert _cli("tag", "--db", str(ref), "-q").returncode == 0
    clean = _figures(ref, tmp)
    assert clean[0] == 0
    assert any(Decimal(j["hidden_overhead_total"]) > 0 for j in json.loads(clean[1])["jobs"]), "the clean run finds nothing"
    return clean


def test_report_before_any_tag_run_refuses(ingested: Path, tmp_path: Path) -> None:
    code, rep, exp = _figures(ingested, tmp_path)
    assert code == 2 and NO_TAG_RUN in rep and NO_TAG_RUN in exp


def test_a_failing_first_tag_never_gives_a_report_of_zeros(ingested: Path, tmp_path: Path) -> None:
    clean = _clean(ingested, tmp_path)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "TM700_fails.sql").write_text(FAILING_RULE)
    p = _cli("tag", "--db", str(ingested), "--rules", str(rules))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "TM700" in p.stderr
    _refuses_or_equals(ingested, tmp_path, clean)


def test_ingest_after_tag_makes_report_refuse_until_the_next_tag(ingested: Path, tmp_path: Path) -> None:
    assert _cli("tag", "--db", str(ingested), "-q").returncode == 0
    assert _figures(ingested, tmp_path)[0] == 0
    assert _cli("ingest", str(FIXTURES / "aws"), "--db", str(ingested), "-q").returncode == 0
    code, rep, _ = _figures(ingested, tmp_path)
    assert code == 2 and NO_TAG_RUN in rep
    assert _cli("tag", "--db", str(ingested), "-q").returncode == 0
    assert _figures(ingested, tmp_path)[0] == 0


def _limit_file_size(limit: int):  # type: ignore[no-untyped-def]
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_disk_full_during_the_first_tag(ingested: Path, tmp_path: Path) -> None:
    clean = _clean(ingested, tmp_path)
    # no file may grow past 16 KiB: the store cannot grow and its write-ahead log fills at once
    p = subprocess.run([*CLI, "tag", "--db", str(ingested)], capture_output=True, text=True,
                       preexec_fn=_limit_file_size(16 << 10))
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    _refuses_or_equals(ingested, tmp_path, clean)


# -- kills ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, tuple[int, str, str]]:
    """A generated AWS month of 200,000 lines: (its export folder, a store with it ingested, the clean figures)."""
    root = tmp_path_factory.mktemp("big")
    assert _cli("generate", "--provider", "aws", "--rows", "200000", "--out", str(root / "gen")).returncode == 0
    db = root / "ingested.duckdb"
    assert _cli("ingest", str(root / "gen"), "--db", str(db), "-q").returncode == 0
    return root / "gen", db, _clean(db, root)


@pytest.mark.slow
def test_kills_during_the_first_tag(big: tuple[Path, Path, tuple[int, str, str]], tmp_path: Path) -> None:
    _, ingested, clean = big
    run = killing.timed([*CLI, "tag", "--db", str(shutil.copy(ingested, tmp_path / "probe.duckdb")), "-q"])
    outcomes = []
    for i, delay in enumerate(killing.delays(15, 4, run, killing.startup())):
        db = tmp_path / f"k{i}.duckdb"
        shutil.copy(ingested, db)
        killed = killing.kill_after([*CLI, "tag", "--db", str(db), "-q"], delay)
        outcomes.append((killed, _refuses_or_equals(db, tmp_path, clean)))
        # and a tag run afterwards gives the clean figures
        assert _cli("tag", "--db", str(db), "-q").returncode == 0
        assert _figures(db, tmp_path) == clean
    # a kill after the commit gives the clean figures; the rest must refuse
    assert sum(o == "refused" for _, o in outcomes) >= 2, f"too few tag runs were killed mid-run ({run:.2f} s): {outcomes}"


@pytest.mark.slow
def test_kills_during_the_tag_step_of_audit(big: tuple[Path, Path, tuple[int, str, str]], tmp_path: Path) -> None:
    gen, ingested, clean = big
    # after "file(s) ingested" the audit's tag step runs in the process already started: no start-up to skip
    tag = killing.timed([*CLI, "tag", "--db", str(shutil.copy(ingested, tmp_path / "probe.duckdb")), "-q"]) - killing.startup()
    outcomes = []
    for i, delay in enumerate(killing.delays(9, 3, tag, 0.0)):
        db = tmp_path / f"a{i}.duckdb"
        killed = killing.kill_after([*CLI, "audit", str(gen), "--db", str(db), "--out", str(tmp_path / f"out{i}")],
                             delay, ready="file(s) ingested")
        outcomes.append((killed, _refuses_or_equals(db, tmp_path, clean)))
    assert sum(o == "refused" for _, o in outcomes) >= 2, f"too few audits were killed in their tag step: {outcomes}"


@pytest.fixture(scope="module")
def two_months(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, str, str]]:
    """A store of two generated months (October 2026, and it moved to September) tagged, then October re-delivered
    with 5% more lines and ingested: (the store, the figures of a full tag of its lines)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run", Path(__file__).resolve().parents[2] / "bench" / "run.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path_factory.mktemp("months")
    for name, rows in (("gen", 150_000), ("grown", 157_500)):
        assert _cli("generate", "--provider", "aws", "--rows", str(rows), "--out", str(root / name)).returncode == 0
    exports = root / "exports"
    src, grown = next((root / "gen").rglob("month=10")), next((root / "grown").rglob("month=10"))
    bench._shifted(src, exports, -1)
    bench._shifted(src, exports, 0)
    db = root / "store.duckdb"
    assert _cli("ingest", str(exports), "--db", str(db), "-q").returncode == 0
    assert _cli("tag", "--db", str(db), "-q").returncode == 0
    bench._shifted(grown, exports, 0)  # October again, in place: a re-delivery
    assert _cli("ingest", str(exports), "--db", str(db), "-q").returncode == 0
    return db, _clean(db, root)


@pytest.mark.slow
def test_kills_during_an_incremental_tag(two_months: tuple[Path, tuple[int, str, str]], tmp_path: Path) -> None:
    """The run that redoes only October's slice: killed, the store refuses (the lines changed since the last
    completed run) or gives the figures of a full tag; never a mix of the old and the new state."""
    db0, clean = two_months
    t = time.monotonic()
    p = subprocess.run([*CLI, "tag", "--db", str(shutil.copy(db0, tmp_path / "probe.duckdb"))], capture_output=True,
                       text=True)
    run = time.monotonic() - t
    assert p.returncode == 0 and "incremental: 1 of 2 slices changed since tag run 1" in p.stderr, p.stderr
    outcomes = []
    for i, delay in enumerate(killing.delays(19, 4, run, killing.startup())):
        db = tmp_path / f"i{i}.duckdb"
        shutil.copy(db0, db)
        killed = killing.kill_after([*CLI, "tag", "--db", str(db), "-q"], delay)
        outcomes.append((killed, _refuses_or_equals(db, tmp_path, clean)))
        assert _cli("tag", "--db", str(db), "-q").returncode == 0
        assert _figures(db, tmp_path) == clean
    assert sum(o == "refused" for _, o in outcomes) >= 1, f"no incremental tag run was killed mid-run ({run:.2f} s): {outcomes}"
