"""The built-in pack on every bundled fixture: golden hits, every claimed provider covered, fees exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import billing_audit
from billing_audit.rules import load_rules
from support import FIXTURES, GOLDEN, ROOT

FEE_WORDS = ("restart fee", "recovery charge", "preemption overhead")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> billing_audit.Store:
    store = billing_audit.open(tmp_path_factory.mktemp("tag") / "all.duckdb")
    report = store.ingest([FIXTURES])
    assert not report.errors, report.errors
    store.tag()
    yield store
    store.close()


def _hits(store: billing_audit.Store) -> list[dict[str, object]]:
    rows = store.con.execute(
        """SELECT l.x_SourceFile, l.x_SourceRow, h.rule_id, h.category, l.x_Provider,
                  coalesce(l.x_UsageType, l.ChargeDescription)
           FROM rule_hits h JOIN line_items l USING (x_LineItemId)
           ORDER BY 1, 2, 3"""
    ).fetchall()
    prefix = str(ROOT) + "/"
    return [
        {"file": f.replace(prefix, ""), "row": r, "rule": rule, "category": cat, "provider": p, "what": what}
        for f, r, rule, cat, p, what in rows
    ]


def test_golden_hits(tagged: billing_audit.Store, update_golden: bool) -> None:
    got = "".join(json.dumps(h) + "\n" for h in _hits(tagged))
    golden = GOLDEN / "rule_hits.jsonl"
    if update_golden or not golden.exists():
        golden.write_text(got)
    assert got == golden.read_text(), "rule hits on the fixtures changed; rerun with --update-golden if intended"


@pytest.mark.parametrize("rule", load_rules().rules, ids=lambda r: r.id)
def test_rule_fires_on_every_provider_it_claims(tagged: billing_audit.Store, rule) -> None:  # type: ignore[no-untyped-def]
    seen = {r[0] for r in tagged.con.execute(
        "SELECT DISTINCT l.x_Provider FROM rule_hits h JOIN line_items l USING (x_LineItemId) WHERE h.rule_id = ?",
        [rule.id],
    ).fetchall()}
    assert set(rule.meta.providers) <= seen, f"{rule.id} claims {rule.meta.providers} but fired on {sorted(seen)}"


def test_fee_rule_tags_exactly_the_fee_lines(tagged: billing_audit.Store) -> None:
    """An independent reading of the fixtures: a line is a fee when its text names one."""
    rows = tagged.con.execute(
        """SELECT l.x_LineItemId, lower(concat_ws(' ', l.ChargeDescription, l.x_UsageType, l.SkuMeter)),
                  EXISTS (SELECT 1 FROM rule_hits h WHERE h.x_LineItemId = l.x_LineItemId AND h.rule_id = 'BA010')
           FROM line_items l"""
    ).fetchall()
    fees = {r[0] for r in rows if any(w in r[1] for w in FEE_WORDS)}
    tagged_fees = {r[0] for r in rows if r[2]}
    assert fees, "the fixtures hold no fee lines"
    assert tagged_fees == fees


def test_no_rule_fires_on_an_empty_store(tmp_path: Path) -> None:
    with billing_audit.open(tmp_path / "empty.duckdb") as store:
        assert store.tag().hits == 0
