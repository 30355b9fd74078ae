"""Every fixture ingests with golden output, the detected format, and its cost total conserved."""

from __future__ import annotations

import importlib
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from support import GOLDEN, Case, dump_line_items, source_total

CASES: list[Case] = []
for mod in sorted(next(q for q in Path(__file__).resolve().parents if q.name == "tests").glob("cases_*.py")):
    CASES.extend(importlib.import_module(mod.stem).CASES)


def test_every_format_has_a_fixture() -> None:
    from billing_audit.formats import registry

    covered = {c.format for c in CASES}
    missing = [f.id for f in registry() if f.id not in covered]
    assert not missing, f"formats without a fixture case: {missing}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_golden(case: Case, db: Path, update_golden: bool) -> None:
    with billing_audit.open(db) as store:
        report = store.ingest([case.abspath])
        assert not report.errors, report.errors
        assert report.rows > 0
        got = dump_line_items(store.con)
    golden = GOLDEN / f"{case.name}.jsonl"
    if update_golden or not golden.exists():
        golden.write_text(got)
        if not update_golden:
            pytest.fail(f"golden file {golden.name} was missing and has been written: review and commit it")
    assert got == golden.read_text(), f"normalised output differs from {golden}; rerun with --update-golden if intended"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_format_and_totals(case: Case, db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([case.abspath])
        log = store.con.execute("SELECT file, format, status FROM ingest_log WHERE status = 'ingested'").fetchall()
        assert log
        for file, fmt, _ in log:
            assert fmt == case.format, f"{file} detected as {fmt}, expected {case.format}"
            if "!" in file:  # a member of a zip: total the archive as a whole below
                continue
            got = store.con.execute(
                "SELECT coalesce(sum(BilledCost), 0) FROM line_items WHERE x_SourceFile = ?", [file]
            ).fetchone()[0]
            want = source_total(Path(file), case)
            assert abs(got - want) <= Decimal("0.000001"), f"{file}: store {got} != source {want}"
        zips = {f.split("!")[0] for f, _, _ in log if "!" in f}
        for z in zips:
            got = store.con.execute(
                "SELECT sum(BilledCost) FROM line_items WHERE x_SourceFile LIKE ? || '!%'", [z]
            ).fetchone()[0]
            want = source_total(Path(z), case)
            assert abs(got - want) <= Decimal("0.000001"), f"{z}: store {got} != source {want}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reingest_changes_nothing(case: Case, db: Path) -> None:
    with billing_audit.open(db) as store:
        store.ingest([case.abspath])
        before = dump_line_items(store.con)
        log_before = store.con.execute("SELECT count(*) FROM ingest_log").fetchone()
        report = store.ingest([case.abspath])
        assert report.count("ingested") == 0
        assert not report.errors
        assert dump_line_items(store.con) == before
        assert store.con.execute("SELECT count(*) FROM ingest_log").fetchone() == log_before
