"""Fee reconciliation against the scenario bills (fixtures/scenarios, fixtures/gen_scenarios.py) and the events
beside them (fixtures/events/scenarios, fixtures/gen_events.py), worked out by hand:

- alpha's fee (row 5 of the AWS CUR: i-0a0000000000a2, 2026-11-01 02:00-03:00, 2 restarts, 0.16 USD): warnings
  at 02:10 and 02:40, CloudTrail's eviction at 02:12:05 (2 minutes after the 02:10 warning: the same
  interruption) -> 2 interruptions, matched;
- delta's fee (row 20: i-0d0000000000d2, 2026-11-02 07:00-08:00, 3 restarts, 0.75 USD): no event -> flagged,
  0.75 USD disputable;
- Azure alpha's Spot Restart Fee (row 3 of the EA CSV: a100-spot-2, 2026-11-02, 2 x 0.07 EUR): Resource Health
  "preempted" at 05:00 and 14:30 -> matched (the Activity Log's upper-cased id is the same resource);
- beta's warning at 10:30 and gamma's eviction at 22:58: interruptions without a fee.
Totals: USD 2 fee lines, 0.91 billed, 1 disputed, 0.75 disputable; EUR 1 line, 0.14, none.
"""

from __future__ import annotations

import importlib.util
import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.report import build_report
from support import FIXTURES

_spec = importlib.util.spec_from_file_location("gen_events", FIXTURES / "gen_events.py")
assert _spec is not None and _spec.loader is not None
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)  # the fixtures' own generator: its shapes, not copies of them

SCENARIOS = FIXTURES / "scenarios"
CONFIG = SCENARIOS / "billing-audit.toml"
EVENTS = FIXTURES / "events" / "scenarios"
CUR = f"{SCENARIOS}/aws-cur-csv/20261101-20261201/scenario-cur-1.csv"
EA = f"{SCENARIOS}/azure-ea-eur/20261101-20261130/part_0_0001.csv"


def _store(tmp: Path, *paths: Path) -> Path:
    db = tmp / "s.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([SCENARIOS, *paths]).errors
        store.tag()
    return db


@pytest.fixture(scope="module")
def with_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("rec"), EVENTS)


@pytest.fixture(scope="module")
def bills_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("bills"))


def _report(db: Path) -> dict:
    with billing_audit.open(db, read_only=True) as store:
        return build_report(store, load_config(CONFIG), "2026-11").to_dict()


def _line_id(db: Path, source: str, row: int) -> str:
    with billing_audit.open(db, read_only=True) as store:
        return str(store.sql("SELECT x_LineItemId FROM line_items WHERE x_SourceFile = ? AND x_SourceRow = ?",
                             [source, row])["x_LineItemId"][0])


def test_every_fee_matched_a_fee_flagged_and_interruptions_without_a_fee(with_events: Path) -> None:
    rec = _report(with_events)["fee_reconciliation"]
    assert rec["period"] == "2026-11" and rec["providers_reconciled"] == ["aws", "azure"] and rec["events_held"] == 8
    assert rec["totals"] == [
        {"currency": "EUR", "fee_lines": 1, "billed_cost": "0.14", "fee_lines_disputed": 0, "disputable_amount": "0.00"},
        {"currency": "USD", "fee_lines": 2, "billed_cost": "0.91", "fee_lines_disputed": 1, "disputable_amount": "0.75"},
    ]
    by_id = {f["line_id"]: f for f in rec["fee_lines"]}
    alpha, delta, azure = (by_id[_line_id(with_events, CUR, 5)], by_id[_line_id(with_events, CUR, 20)],
                           by_id[_line_id(with_events, EA, 3)])
    assert (alpha["status"], alpha["restarts_billed"], alpha["interruptions_observed"], alpha["disputable_amount"]) == (
        "matched", 2, 2, "0.00")
    assert len(alpha["events"]) == 3  # two warnings and the eviction that is the first one's end
    assert (azure["status"], azure["restarts_billed"], azure["interruptions_observed"], azure["currency"]) == (
        "matched", 2, 2, "EUR")
    (flagged,) = rec["fees_without_events"]
    assert flagged == delta
    assert {k: flagged[k] for k in ("provider", "resource_id", "charge_period_start", "charge_period_end",
                                    "restarts_billed", "interruptions_observed", "restarts_unmatched", "billed_cost",
                                    "disputable_amount", "currency", "status", "source")} == {
        "provider": "aws", "resource_id": "i-0d0000000000d2", "charge_period_start": "2026-11-02T07:00:00",
        "charge_period_end": "2026-11-02T08:00:00", "restarts_billed": 3, "interruptions_observed": 0,
        "restarts_unmatched": 3, "billed_cost": "0.75", "disputable_amount": "0.75", "currency": "USD",
        "status": "unmatched", "source": f"{CUR}:20"}
    assert [(i["provider"], i["resource_id"], i["time"], i["kinds"], i["resource_in_bills"])
            for i in rec["interruptions_without_fee"]] == [
        ("aws", "i-0b0000000000b1", "2026-11-01T10:30:00", ["interruption_warning"], True),
        ("aws", "i-0c0000000000c1", "2026-11-01T22:58:00", ["eviction"], True)]
    assert rec["not_reconciled"] == []


def test_job_rows_count_interruptions_from_events_and_only_the_estimates_follow(with_events: Path,
                                                                                bills_only: Path) -> None:
    got = {(j["job"], j["currency"]): j for j in _report(with_events)["jobs"]}
    before = {(j["job"], j["currency"]): j for j in _report(bills_only)["jobs"]}
    assert {k: (j["interruptions"], j["interruptions_source"]) for k, j in got.items()} == {
        ("alpha", "USD"): (2, "events"), ("alpha", "EUR"): (2, "events"), ("beta", "USD"): (1, "events"),
        ("gamma", "USD"): (1, "events"), ("delta", "USD"): (3, "fee_lines"), ("(unattributed)", "USD"): (0, "none")}
    assert before[("beta", "USD")]["interruptions_source"] == "signals"
    # beta: 2 spot hours at 2.00 an hour; 1 interruption (not 2 signal lines) x 30 min / 2 x 2.00 = 0.50,
    # restart idle 1 x 5 min x 2.00 = 0.1666...
    assert got[("beta", "USD")]["recompute_cost_estimate"] == "0.50"
    assert Decimal(got[("beta", "USD")]["restart_idle_cost_estimate"]) == Decimal("0.166666666667")
    assert before[("beta", "USD")]["recompute_cost_estimate"] == "1.00"
    # what the bill says does not change: fees, billed overhead, spot cost, savings
    billed = ["restart_fees", "billed_interruption_overhead", "spot_compute_cost", "gross_spot_savings", "total_cost",
              "storage_reread_cost", "checkpoint_egress_cost"]
    for k in before:
        assert {c: got[k][c] for c in billed} == {c: before[k][c] for c in billed}, k
    # counts equal to the bill's leave every figure as it was
    for k in [("alpha", "USD"), ("alpha", "EUR"), ("gamma", "USD"), ("delta", "USD")]:
        assert {c: v for c, v in got[k].items() if c != "interruptions_source"} == \
               {c: v for c, v in before[k].items() if c != "interruptions_source"}, k


def test_without_events_nothing_is_reconciled_and_nothing_is_disputed(bills_only: Path) -> None:
    rec = _report(bills_only)["fee_reconciliation"]
    assert (rec["events_held"], rec["providers_reconciled"], rec["fees_without_events"], rec["totals"]) == (0, [], [], [])
    assert rec["not_reconciled"] == [
        {"provider": "aws", "fee_lines": 2, "reason": "no interruption events of aws are in the store (ingest its event "
                                                      "logs beside the bill: README \"Interruption events\")"},
        {"provider": "azure", "fee_lines": 1, "reason": "no interruption events of azure are in the store (ingest its "
                                                        "event logs beside the bill: README \"Interruption events\")"}]


def test_a_partly_matched_fee_disputes_its_share(tmp_path: Path) -> None:
    # the user's node handler is the only event source: it saw one of delta's three billed restarts
    # (0.75 x 2 / 3 = 0.50 disputable) and none of alpha's two (0.16 disputable): 0.66 USD in all
    p = tmp_path / "handler" / "evictions.csv"
    p.parent.mkdir()
    p.write_text("resource_id,time,kind,provider\ni-0d0000000000d2,2026-11-02T07:20:00Z,eviction,aws\n", encoding="utf-8")
    db = _store(tmp_path, p.parent)
    rec = _report(db)["fee_reconciliation"]
    assert [(f["line_id"], f["status"], f["restarts_unmatched"], f["disputable_amount"])
            for f in rec["fees_without_events"]] == [
        (_line_id(db, CUR, 5), "unmatched", 2, "0.16"), (_line_id(db, CUR, 20), "partly_matched", 2, "0.50")]
    assert [n["provider"] for n in rec["not_reconciled"]] == ["azure"]  # no Azure events: its fee is not disputed
    assert rec["totals"] == [{"currency": "USD", "fee_lines": 2, "billed_cost": "0.91", "fee_lines_disputed": 2,
                              "disputable_amount": "0.66"}]


def test_re_ingesting_the_events_changes_nothing(tmp_path: Path) -> None:
    db = _store(tmp_path, EVENTS)
    first = _report(db)
    with billing_audit.open(db) as store:
        again = store.ingest([EVENTS, FIXTURES / "events" / "overlap"])
    assert again.events.added == 1  # the overlap's one new event: a rebalance recommendation (no interruption)
    second = _report(db)
    assert second["fee_reconciliation"]["events_held"] == 9
    for key in ("totals", "fees_without_events", "interruptions_without_fee", "fee_lines"):
        assert second["fee_reconciliation"][key] == first["fee_reconciliation"][key], key
    assert second["jobs"] == first["jobs"]


def _search(db: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["search", "--db", str(db), "--fees-without-events", "--period", "2026-11", *args])
    return r.exit_code, r.output


def test_search_fees_without_events_for_automation(with_events: Path) -> None:
    code, out = _search(with_events, "--format", "json", "--fail-above", "0.50")
    assert code == 1
    doc = json.loads(out[: out.rindex("}") + 1])
    assert (doc["kind"], doc["filters"]) == ("fees_without_events", {"period": "2026-11", "provider": None,
                                                                     "fail_above": "0.50"})
    assert [f["line_id"] for f in doc["fees_without_events"]] == [_line_id(with_events, CUR, 20)]
    assert "disputable restart fees above 0.50 in USD" in out
    code, out = _search(with_events, "--format", "csv", "--fail-above", "0.75")  # 0.75 is not above 0.75
    assert code == 0
    assert out.splitlines() == [
        "line_id,provider,resource_id,charge_period_start,charge_period_end,restarts_billed,interruptions_observed,"
        "restarts_unmatched,billed_cost,disputable_amount,currency,status,source",
        f"{_line_id(with_events, CUR, 20)},aws,i-0d0000000000d2,2026-11-02T07:00:00,2026-11-02T08:00:00,3,0,3,0.75,"
        f"0.75,USD,unmatched,{CUR}:20"]
    code, out = _search(with_events, "--provider", "azure", "--fail-above", "0")
    assert code == 0 and "every restart fee of the providers reconciled has a matching interruption" in out
    code, out = _search(with_events, "restart")
    assert code == 2 and "--fees-without-events takes no QUERY" in out
    r = CliRunner().invoke(main, ["search", "--db", str(with_events)])
    assert r.exit_code == 2 and "give a QUERY" in r.output


def test_the_generator_writes_what_is_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen_events, "ROOT", tmp_path)
    gen_events.main()
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    held = sorted(p.relative_to(FIXTURES / "events") for p in (FIXTURES / "events").rglob("*") if p.is_file())
    assert made == held
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (FIXTURES / "events" / rel).read_bytes(), rel


def test_the_readmes_reconciliation_example_is_the_real_document(with_events: Path) -> None:
    """README "Interruption events and fee reconciliation": the search document of the scenario, its keys and
    values as they are (the envelope's schema_version and generated_at left out, the line id shortened)."""
    readme = (FIXTURES.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Interruption events and fee reconciliation")
    block = readme[readme.index("```json\n", start) + len("```json\n"):]
    shown = json.loads(block[:block.index("```")])
    code, out = _search(with_events, "--format", "json", "--fail-above", "0.50")
    assert code == 1
    real = json.loads(out[: out.rindex("}") + 1])
    assert [k for k in real if k not in ("schema_version", "generated_at")] == list(shown)
    (fee,) = real["fees_without_events"]
    assert fee["line_id"].startswith("aws-") and fee["line_id"].endswith("-20")
    fee["line_id"] = "aws-...-20"
    fee["source"] = fee["source"].removeprefix(f"{FIXTURES.parent}/")  # the README runs from the repository root
    for k, v in shown.items():
        assert real[k] == v, k


def test_the_html_report_has_the_reconciliation(with_events: Path, bills_only: Path) -> None:
    from billing_audit.html import render_html

    with billing_audit.open(with_events, read_only=True) as store:
        page = render_html(build_report(store, load_config(CONFIG), "2026-11"))
    section = page[page.index('<section id="reconciliation-section">'):]
    section = section[:section.index("</section>")]
    fees = section[section.index('id="fees-without-events"'):section.index("Interruptions without a fee")]
    assert fees.count("<tr>") == 2  # the head and delta's line
    assert _line_id(with_events, CUR, 20) in fees and "i-0d0000000000d2" in fees and ">0.75<" in fees
    assert section.count("i-0b0000000000b1") == 1 and section.count("i-0c0000000000c1") == 1
    with billing_audit.open(bills_only, read_only=True) as store:
        page = render_html(build_report(store, load_config(CONFIG), "2026-11"))
    assert 'id="reconciliation-none"' in page and "aws: 2 fee line(s) not reconciled" in page


def test_without_events_the_fee_lines_counted_from_the_groups_are_the_lines_of_category_restart_fee(
        bills_only: Path, tmp_path: Path) -> None:
    """With no events in the store, reconcile counts each provider's fee lines from the stored line groups; they
    are the lines whose category is restart_fee, in every period and in all of them, and when the groups are not
    those of the lines stored now it counts the lines themselves, with the same answer."""
    from billing_audit import reconcile as rec_mod

    with billing_audit.open(bills_only, read_only=True) as s:
        periods = [r[0] for r in s.con.execute(
            "SELECT DISTINCT strftime(date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY), '%Y-%m') "
            "FROM line_items ORDER BY 1").fetchall()]
        want = {}
        for p in [*periods, None, "2031-01"]:
            rows = s.con.execute(
                "SELECT l.x_Provider, count(*) FROM line_items l JOIN line_categories c USING (x_LineItemId) "
                "WHERE c.category = 'restart_fee' AND (? IS NULL OR strftime(date_trunc('month', "
                "l.BillingPeriodStart + INTERVAL 14 DAY), '%Y-%m') = ?) GROUP BY 1", [p, p]).fetchall()
            want[p] = dict(rows)
            assert rec_mod._fee_counts(s.con, p) == want[p], p
            got = {n["provider"]: n["fee_lines"] for n in rec_mod.reconcile(s, p).not_reconciled}
            assert got == want[p], p
    assert sum(want[None].values()) == 3 and want["2031-01"] == {}
    # groups of another tag run than the lines' (as an older store's): the lines are read, the same counts
    db = tmp_path / "old.duckdb"
    db.write_bytes(bills_only.read_bytes())
    with billing_audit.open(db) as s:
        s.con.execute("UPDATE line_groups_meta SET run_id = run_id - 1")
        assert rec_mod._fee_counts(s.con, None) is None
        assert {n["provider"]: n["fee_lines"] for n in rec_mod.reconcile(s, None).not_reconciled} == want[None]
