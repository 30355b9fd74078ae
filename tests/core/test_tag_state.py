"""Nothing changed, nothing redone (issue #19): a tag run records what its state was computed from.

`tag` (and `audit`'s tag step) with the same lines, rules, parameters, checkpoint config and price references as
the last completed tag run does nothing and says so; `--force` re-tags; each of those inputs changing re-tags.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import billing_audit
from billing_audit import pricing
from billing_audit.cli import main
from support import FIXTURES

CSV_PERIOD = FIXTURES / "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101"
OLD = CSV_PERIOD / "a1f0c5d2-0000-4000-8000-000000000001"
NEW = CSV_PERIOD / "b2e1d6c3-0000-4000-8000-000000000002"
CUR_2018 = FIXTURES / "aws" / "cur-2018-csv"
PRICE_FILE = FIXTURES / "prices" / "aws" / "AmazonEC2-20180601-us-east-1.csv"

RULE = """/*
id: TS100
name: custom.big_lines
title: lines above a cost
category: custom
severity: low
providers: [aws]
params:
  min_big: {{default: {default}, description: the cost a line must reach}}
*/
select x_LineItemId, 'big: ' || BilledCost as reason from line_items where BilledCost >= $min_big{extra}
"""


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _runs(db: Path) -> int:
    with billing_audit.open(db, read_only=True) as s:
        return int(s.con.execute("SELECT count(*) FROM tag_runs").fetchone()[0])


def _state(db: Path) -> tuple[list[Any], ...]:
    """Everything a tag run writes, in a comparable order (run ids aside)."""
    with billing_audit.open(db, read_only=True) as s:
        q = s.con.execute
        return (q("SELECT x_LineItemId, rule_id, category, reason FROM rule_hits ORDER BY ALL").fetchall(),
                q("SELECT * EXCLUDE (run_id) FROM spot_od ORDER BY ALL").fetchall(),
                q("SELECT * FROM line_groups ORDER BY ALL").fetchall(),
                q("SELECT * FROM search_index ORDER BY ALL").fetchall())


def _slices_by_hand(db: Path) -> int:
    """The slices, counted from the lines themselves (provider x billing account x billing month)."""
    with billing_audit.open(db, read_only=True) as s:
        return int(s.con.execute("SELECT count(*) FROM (SELECT DISTINCT x_Provider, BillingAccountId, "
                                 "date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY) FROM line_items)"
                                 ).fetchone()[0])


def _tag(db: Path, *args: str) -> Any:
    r = _cli("tag", "--db", str(db), "-q", *args)
    assert r.exit_code == 0, r.output
    return r


def test_tag_with_nothing_changed_does_nothing_and_says_so(db: Path) -> None:
    assert _cli("ingest", str(FIXTURES / "aws"), "--db", str(db), "-q").exit_code == 0
    _tag(db)
    before = _state(db)
    n = _slices_by_hand(db)
    assert n >= 2
    r = _tag(db)
    assert f"tag: nothing changed since tag run 1 ({n} slices); --force re-tags" in r.output
    assert _runs(db) == 1
    assert _state(db) == before
    r = _cli("tag", "--db", str(db))  # the table shows the hits as run 1 recorded them
    assert "hits from 7 rules, as tag run 1 recorded them" in r.output
    with billing_audit.open(db, read_only=True) as s:
        hits = int(s.con.execute("SELECT count(*) FROM rule_hits").fetchone()[0])
    assert f"{hits:,} hits" in r.output
    r = _tag(db, "--force")
    assert "nothing changed" not in r.output
    assert _runs(db) == 2
    assert _state(db) == before
    assert "nothing changed since tag run 2" in _tag(db).output


def test_a_changed_parameter_or_rule_re_tags(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(FIXTURES / "aws"), "--db", str(db), "-q").exit_code == 0
    rules = tmp_path / "rules"
    rules.mkdir()
    rule = rules / "TS100_big.sql"
    rule.write_text(RULE.format(default=1, extra=""))
    _tag(db, "--rules", str(rules))
    assert "nothing changed since tag run 1" in _tag(db, "--rules", str(rules)).output
    # a parameter given on the command line
    assert "nothing changed" not in _tag(db, "--rules", str(rules), "--param", "min_big=5").output
    assert _runs(db) == 2
    assert "nothing changed since tag run 2" in _tag(db, "--rules", str(rules), "--param", "min_big=5").output
    # the same value as the rule's default, given explicitly: the same state
    assert "nothing changed" not in _tag(db, "--rules", str(rules)).output
    assert "nothing changed since tag run 3" in _tag(db, "--rules", str(rules), "--param", "min_big=1").output
    # the rule's default changed in its header (same SQL)
    rule.write_text(RULE.format(default=2, extra=""))
    assert "nothing changed" not in _tag(db, "--rules", str(rules)).output
    assert _runs(db) == 4
    # the rule's SQL changed
    rule.write_text(RULE.format(default=2, extra=" and x_Provider = 'aws'"))
    assert "nothing changed" not in _tag(db, "--rules", str(rules)).output
    assert _runs(db) == 5
    # fewer rules (the user rule left out)
    assert "nothing changed" not in _tag(db).output
    assert _runs(db) == 6
    # another selection of the same rules
    assert "nothing changed" not in _tag(db, "--select", "restart_fee").output
    assert _runs(db) == 7
    assert "nothing changed since tag run 7" in _tag(db, "--select", "restart_fee").output


def test_a_changed_checkpoint_config_re_tags(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(FIXTURES / "aws"), "--db", str(db), "-q").exit_code == 0
    cfg = tmp_path / "billing-audit.toml"
    cfg.write_text('[attribution]\njob_tag_keys = ["job"]\n')
    _tag(db, "--config", str(cfg))
    assert "nothing changed since tag run 1" in _tag(db, "--config", str(cfg)).output
    # attribution is read at report time: it feeds no rule, group or index
    cfg.write_text('[attribution]\njob_tag_keys = ["training-job"]\n')
    assert "nothing changed since tag run 1" in _tag(db, "--config", str(cfg)).output
    cfg.write_text('[attribution]\ncheckpoint_resources = ["arn:aws:s3:::some-bucket"]\n')
    assert "nothing changed" not in _tag(db, "--config", str(cfg)).output
    cfg.write_text('[attribution]\ncheckpoint_tag_values = ["ckpt"]\n')
    assert "nothing changed" not in _tag(db, "--config", str(cfg)).output
    assert _runs(db) == 3


def test_a_re_delivery_re_tags_and_gives_what_a_fresh_tag_gives(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(OLD), "--db", str(db), "-q").exit_code == 0
    _tag(db)
    old = _state(db)
    assert _cli("ingest", str(NEW), "--db", str(db), "-q").exit_code == 0  # the month's newer assembly
    r = _tag(db)
    assert "nothing changed" not in r.output
    assert _runs(db) == 2
    fresh = tmp_path / "fresh.duckdb"
    assert _cli("ingest", str(NEW), "--db", str(fresh), "-q").exit_code == 0
    _tag(fresh)
    assert _state(db) == _state(fresh) != old
    # the older assembly again: superseded, the lines stay, nothing to redo
    assert _cli("ingest", str(OLD), "--db", str(db), "-q").exit_code == 0
    assert "nothing changed since tag run 2" in _tag(db).output


def test_changed_price_references_re_tag(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(CUR_2018), "--db", str(db), "-q").exit_code == 0
    _tag(db)
    with billing_audit.open(db, read_only=True) as s:
        assert s.con.execute("SELECT count(*) FROM spot_od WHERE od_source = 'reference'").fetchone() == (0,)
    with billing_audit.open(db) as s:  # references loaded behind the tag run's back: no reprice
        load = pricing.load_files(s.con, [PRICE_FILE])
        assert load.added > 0
    r = _tag(db)
    assert "nothing changed" not in r.output
    with billing_audit.open(db, read_only=True) as s:
        priced = s.con.execute("SELECT count(*) FROM spot_od WHERE od_source = 'reference'").fetchone()[0]
    assert priced > 0
    assert "nothing changed since tag run 2" in _tag(db).output


def test_prices_ingest_reprices_so_the_next_tag_has_nothing_to_redo(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(CUR_2018), "--db", str(db), "-q").exit_code == 0
    _tag(db)
    assert _cli("prices", "ingest", str(PRICE_FILE), "--db", str(db)).exit_code == 0
    assert "nothing changed since tag run 1" in _tag(db).output
    repriced = _state(db)
    report = _cli("report", "--db", str(db), "--format", "json").stdout
    _tag(db, "--force")
    assert _state(db) == repriced
    forced = _cli("report", "--db", str(db), "--format", "json").stdout

    def figures(text: str) -> Any:
        doc = json.loads(text)
        doc.pop("generated_at", None)
        return doc

    assert figures(report) == figures(forced)


def test_a_failed_user_rule_is_run_again(db: Path, tmp_path: Path) -> None:
    assert _cli("ingest", str(FIXTURES / "aws"), "--db", str(db), "-q").exit_code == 0
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "TS100_big.sql").write_text(RULE.format(default=1, extra=" and CAST(x_UsageType AS INTEGER) > 0"))
    r = _cli("tag", "--db", str(db), "-q", "--rules", str(rules))
    assert r.exit_code == 2 and "rule skipped" in r.output
    r = _cli("tag", "--db", str(db), "-q", "--rules", str(rules))
    assert r.exit_code == 2 and "nothing changed" not in r.output
    assert _runs(db) == 2


def test_audit_of_exports_already_in_the_store_does_not_re_tag(db: Path, tmp_path: Path) -> None:
    out1, out2 = tmp_path / "a1", tmp_path / "a2"
    r = _cli("audit", str(FIXTURES / "aws"), "--db", str(db), "--out", str(out1), "-q")
    assert r.exit_code == 0, r.output
    assert "nothing changed" not in r.output
    r = _cli("audit", str(FIXTURES / "aws"), "--db", str(db), "--out", str(out2), "-q")
    assert r.exit_code == 0, r.output
    assert "tag: nothing changed since tag run 1" in r.output
    assert _runs(db) == 1
    for name in ("jobs.csv", "teams.csv"):
        assert (out1 / name).read_text() == (out2 / name).read_text()
    r = _cli("audit", str(FIXTURES / "aws"), "--db", str(db), "--out", str(out2), "-q", "--force")
    assert r.exit_code == 0 and "nothing changed" not in r.output
    assert _runs(db) == 2
