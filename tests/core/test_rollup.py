"""The report's line groups: built by `tag`, used by `report`, dropped when lines change."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit import rollup
from billing_audit.config import load_config
from billing_audit.errors import BillingAuditError
from billing_audit.report import build_report
from support import FIXTURES, report_body

SCENARIOS = FIXTURES / "scenarios"
CFG = load_config(SCENARIOS / "billing-audit.toml")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rollup") / "s.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([SCENARIOS]).errors
        store.tag()
    return path


@pytest.fixture
def store_copy(tagged: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "c.duckdb"
    shutil.copy(tagged, dst)
    return dst


def _report(path: Path, period: str | None = "2026-11", basis: str = "effective") -> dict:
    with billing_audit.open(path) as store:
        d = build_report(store, CFG, period, basis).to_dict()
    assert d["kind"] == "report" and d["filters"] == {"period": period, "cost_basis": basis, "engine": "duckdb"}
    return report_body(d)


def test_tag_stores_groups_that_hold_every_line_and_every_cent(tagged: Path) -> None:
    con = duckdb.connect(str(tagged), read_only=True)
    assert rollup.current_groups(con) == ("line_groups", "line_group_keys")
    run, lines = con.execute("SELECT run_id, lines FROM line_groups_meta").fetchone()
    assert run == con.execute("SELECT max(run_id) FROM tag_runs").fetchone()[0]
    assert lines == con.execute("SELECT count(*) FROM line_items").fetchone()[0] > 0
    by_cur = con.execute(
        "SELECT k.currency, sum(g.n), sum(g.effective), sum(g.billed), sum(g.list) "
        "FROM line_groups g JOIN line_group_keys k USING (h) GROUP BY 1 ORDER BY 1").fetchall()
    want = con.execute(
        "SELECT coalesce(BillingCurrency, '?'), count(*), sum(coalesce(EffectiveCost, 0)), "
        "sum(coalesce(BilledCost, 0)), sum(coalesce(ListCost, 0)) FROM line_items GROUP BY 1 ORDER BY 1").fetchall()
    assert by_cur == want
    # every group's category is its lines' first category in precedence order
    cats = con.execute(
        "SELECT g.rank, sum(g.n) FROM line_groups g GROUP BY 1 ORDER BY 1 NULLS LAST").fetchall()
    want_cats = con.execute(
        f"SELECT c.rank, count(*) FROM line_items l LEFT JOIN {rollup.RANKS_SQL} c USING (x_LineItemId) "
        "GROUP BY 1 ORDER BY 1 NULLS LAST").fetchall()
    assert cats == want_cats
    # one key per hash: the keys' columns are distinct wherever the hashes are
    n_keys, n_distinct = con.execute(
        "SELECT count(*), count(DISTINCT (provider, currency, ResourceId, ResourceName, SubAccountId, "
        "BillingAccountId, Tags)) FROM line_group_keys").fetchone()
    assert n_keys == n_distinct
    con.close()


@pytest.mark.parametrize("period,basis", [("2026-11", "effective"), (None, "billed"), ("2026-11", "list")])
def test_report_from_stored_groups_equals_report_from_the_lines(store_copy: Path, period: str | None,
                                                                basis: str) -> None:
    stored = _report(store_copy, period, basis)
    con = duckdb.connect(str(store_copy))
    rollup.drop_groups(con)
    assert rollup.current_groups(con) is None
    con.close()
    assert _report(store_copy, period, basis) == stored
    assert any(j["job"] == "alpha" for j in stored["jobs"])


def test_ingest_after_tag_makes_the_groups_stale_and_the_report_refuses_until_the_next_tag(store_copy: Path) -> None:
    with billing_audit.open(store_copy) as store:
        assert not store.ingest([FIXTURES / "aws"]).errors
        con = store.con
        # kept for the next tag run, which rebuilds only the changed slices' groups; nothing reads them meanwhile
        assert store._has_table("line_groups")
        assert rollup.current_groups(con) is None
        with pytest.raises(BillingAuditError, match="no completed tag run of the lines in the store"):
            build_report(store, CFG, None)
        lines = con.execute("SELECT count(*) FROM line_items").fetchone()[0]
    with billing_audit.open(store_copy) as store:
        store.tag()
        assert rollup.current_groups(store.con) is not None
        again = build_report(store, CFG, None)
    assert int(again.totals["lines"].sum()) == lines
    assert not [w for w in again.warnings if not w.startswith("savings measured for")]  # coverage: its own test


def test_unchanged_reingest_keeps_the_groups(store_copy: Path) -> None:
    with billing_audit.open(store_copy) as store:
        store.ingest([SCENARIOS])
        assert rollup.current_groups(store.con) is not None


def test_a_partial_tag_run_regroups_with_every_rules_hits(store_copy: Path) -> None:
    before = _report(store_copy)
    from billing_audit.rules import load_rules

    with billing_audit.open(store_copy) as store:
        store.tag([r for r in load_rules().rules if r.id == "BA010"])
        assert rollup.current_groups(store.con) is not None
    assert _report(store_copy) == before


def test_a_hash_collision_stops_grouping_and_keeps_the_stored_groups(store_copy: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # force what a real collision looks like: one hash whose lines disagree on the second hash
    monkeypatch.setattr(rollup, "KEYS_SQL", rollup.KEYS_SQL.replace(rollup.KEY_HASH2, "hash(l.x_LineItemId)"))
    con = duckdb.connect(str(store_copy))
    before = con.execute("SELECT count(*), sum(n) FROM line_groups").fetchone()
    con.execute("BEGIN")
    with pytest.raises(BillingAuditError, match="hashed alike"):
        rollup.build_groups(con, 99)
    con.execute("ROLLBACK")
    assert con.execute("SELECT count(*), sum(n) FROM line_groups").fetchone() == before
    assert rollup.current_groups(con) is not None
    con.close()
