"""The full tag scan's regular expressions read from a memo of distinct descriptions: the hits are each rule's own."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

import billing_audit
from billing_audit import tagging, tagmemo
from billing_audit.rules import load_rules
from billing_audit.store import checkpoint_params
from support import writable_lines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# copies of every fixture line with a description column NULL, or its case changed: the memo keys on the exact
# text (NULL included), so each copy must hit exactly what its rules hit on it alone
VARIANTS = {
    "nullsku": "NULL AS SkuMeter",
    "nullusage": "NULL AS x_UsageType",
    "nulldesc": "NULL AS ChargeDescription",
    "nullall": "NULL AS x_UsageType, NULL AS ChargeDescription, NULL AS SkuMeter, NULL AS ServiceName",
    "upper": "upper(ChargeDescription) AS ChargeDescription, upper(x_UsageType) AS x_UsageType",
}


@pytest.fixture(scope="module")
def stocked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every provider's fixtures ingested, plus the variant lines (shared descriptions: each is many lines')."""
    db = tmp_path_factory.mktemp("memo") / "store.duckdb"
    with billing_audit.open(db) as store:
        assert store.ingest([FIXTURES]).rows > 0
        store.con.execute("CREATE TEMP TABLE ingested AS SELECT * FROM line_items")
        for name, change in VARIANTS.items():
            store.con.execute(f"INSERT INTO {writable_lines(store.con)} BY NAME SELECT * REPLACE (x_LineItemId || '-{name}' AS x_LineItemId, "
                              f"{change}) FROM ingested")
    return db


def _copy(stocked: Path, tmp_path: Path) -> Path:
    shutil.copy(stocked, tmp_path / "store.duckdb")
    return tmp_path / "store.duckdb"


def _hits(db: Path) -> set[tuple[str, str, str]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {(str(a), str(b), str(c)) for a, b, c in
                con.execute("SELECT x_LineItemId, rule_id, reason FROM rule_hits").fetchall()}
    finally:
        con.close()


def _each_rule_alone(db: Path) -> set[tuple[str, str, str]]:
    """Every built-in rule's own query, one at a time, over the same lines (no fusing, no memo)."""
    rules = load_rules().rules
    params = checkpoint_params(rules, None)
    con = duckdb.connect(str(db))
    try:
        con.execute(f"CREATE TEMP TABLE checkpoint_resources AS {tagging.checkpoint_sql()}")
        out: set[tuple[str, str, str]] = set()
        for r in rules:
            sql = f"SELECT x_LineItemId, CAST(reason AS VARCHAR) FROM ({tagging._renamed(r).sql(dialect='duckdb')})"
            out |= {(str(i), r.id, str(why)) for i, why in con.execute(sql, tagging._bind(r, params)).fetchall()}
        return out
    finally:
        con.close()


def _tag(db: Path, monkeypatch: pytest.MonkeyPatch, memo: bool) -> list[Any]:
    """Tag the store (the full scan); returns what the memo step answered (None: the scan evaluated every call)."""
    seen: list[Any] = []
    real = tagmemo.memoized

    def spy(*args: Any) -> Any:
        answer = real(*args) if memo else None
        seen.append(answer)
        return answer

    monkeypatch.setattr(tagmemo, "memoized", spy)
    with billing_audit.open(db) as store:
        result = store.tag(force=True)
    assert result.scans == 1 and not result.failed
    return seen


def test_the_memo_hits_what_each_rule_hits_alone(stocked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _copy(stocked, tmp_path)
    seen = _tag(db, monkeypatch, memo=True)
    assert len(seen) == 1 and seen[0] is not None  # the memo was used
    _, source = seen[0]
    assert "IS NOT DISTINCT FROM" in source
    hits = _hits(db)
    alone = _each_rule_alone(db)
    assert hits == alone
    # every rule fires, and the variants are really tested: NULL and upper-cased descriptions hit too
    assert {rule for _, rule, _ in hits} == {r.id for r in load_rules().rules}
    by_variant = {name: {rule for i, rule, _ in hits if i.endswith(f"-{name}")} for name in VARIANTS}
    for name in ("nullsku", "nullusage", "nulldesc", "upper"):
        assert by_variant[name] == {r.id for r in load_rules().rules}, name
    assert by_variant["nullall"] == set()  # no description: no rule can tell what the line is


def test_the_memo_gives_the_scan_without_it(stocked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_memo, without = _copy(stocked, tmp_path / "a"), _copy(stocked, tmp_path / "b")
    assert _tag(with_memo, monkeypatch, memo=True)[0] is not None
    assert _tag(without, monkeypatch, memo=False) == [None]
    assert _hits(with_memo) == _hits(without) != set()


def test_calls_outside_the_description_columns_stay_in_the_scan() -> None:
    import sqlglot

    def call(sql: str) -> set[str] | None:
        return tagmemo._memo_call(sqlglot.parse_one(sql, read="duckdb"))

    assert call("regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)), 'spot')") == {
        "x_UsageType", "ChargeDescription"}
    assert call("regexp_matches(lower(coalesce(line_items.skumeter, '')), 'a', 'i')") == {"SkuMeter"}
    assert call("regexp_matches(ResourceId, 'i-')") is None  # not a description: one value per line
    assert call("regexp_matches(x_UsageType, $pattern)") is None  # a bound pattern
    assert call("regexp_matches(x_UsageType || CAST(BilledCost AS VARCHAR), 'x')") is None
    assert call("regexp_matches(replace(x_UsageType, 'a', 'b'), 'x')") is None  # not a plain string function


def test_the_scan_without_its_bit_mask_hits_the_same(stocked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More fused rules than a mask holds are scanned as before the mask: the same hits, reasons included."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    masked, unmasked = _copy(stocked, tmp_path / "a"), _copy(stocked, tmp_path / "b")
    _tag(masked, monkeypatch, memo=True)
    monkeypatch.setattr(tagging, "MASK_RULES", 0)
    _tag(unmasked, monkeypatch, memo=True)
    assert _hits(masked) == _hits(unmasked) != set()


@pytest.mark.parametrize("mask_rules", [tagging.MASK_RULES, 0])
def test_a_memo_column_in_a_reason_is_read_in_the_masked_scan(monkeypatch: pytest.MonkeyPatch, mask_rules: int) -> None:
    """A reason that reads the memo (ba_m) reads it on the masked scan's rows too; NULL conditions are no hit."""
    import sqlglot

    monkeypatch.setattr(tagging, "MASK_RULES", mask_rules)
    con = duckdb.connect()
    con.execute("CREATE TABLE line_items AS SELECT * FROM (VALUES ('l1', 'SpotUsage:p4d'), ('l2', 'BoxUsage:p4d'), "
                "('l3', NULL)) t(x_LineItemId, x_UsageType)")
    con.execute("CREATE TABLE ba_memo AS SELECT * FROM (VALUES ('SpotUsage:p4d', true), ('BoxUsage:p4d', false), "
                "(NULL, NULL)) t(ba_d0, ba_m0)")
    first, second = load_rules().rules[:2]
    part = [(first, sqlglot.parse_one("ba_m.ba_m0", read="duckdb"),
             sqlglot.parse_one("'spot ' || CAST(ba_m.ba_m0 AS VARCHAR) || ' ' || line_items.x_UsageType", read="duckdb")),
            (second, sqlglot.parse_one("NOT ba_m.ba_m0", read="duckdb"),
             sqlglot.parse_one("'not spot: ' || x_UsageType", read="duckdb"))]
    source = "line_items LEFT JOIN ba_memo ba_m ON line_items.x_UsageType IS NOT DISTINCT FROM ba_m.ba_d0"
    rows = con.execute(f"SELECT x_LineItemId, h.rule_id, h.reason FROM ({tagging.fused_scan_sql(part, source)}) "
                       "ORDER BY 1").fetchall()
    assert rows == [("l1", first.id, "spot true SpotUsage:p4d"), ("l2", second.id, "not spot: BoxUsage:p4d")]
