"""Restart windows across billing periods, and windows from signal lines and from inferred churn.

The export (fixtures/gen_scenarios.py ``months_rows``, ``fixtures/scenarios-months``), AWS CUR CSV, hourly lines,
January and February 2027; spot hours at 10.00 (list 32.00) unless said.  Defaults: the hourly window is the
interruption's charge period and the 3 after it; checkpoint interval 30 min, restart 5 min.

- mu (vision): January: spot Jan 31 21:00-23:00, a restart fee of 0.12 (1 restart) and GETs 0.30 at 23:00.
  February: spot Feb 1 00:00-02:00, GETs 0.50 at 00:00, egress 2.00 at 02:00, GETs 0.90 at 03:00.
- nu (nlp, January): 17 spot hours at 2.00 (list 5.00), interruption notices (BA050) at 01:00 and 10:00, GETs
  0.40 at 03:00 and 0.80 at 16:00.
- xi (speech, January): x1 runs 00:00-02:00 and stops at 03:00, x2 runs 03:00-05:00, at 3.00 (list 12.00); GETs
  0.60 at 03:00, egress 1.50 at 07:00.
- pi (nlp, February): lines under two payers (444455556666 and 777788889999), see the export test.
- rho and sigma (speech, February, Azure EA in EUR, daily lines): spot VMs billed in "100 Hours" and "10 Hours".
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit.config import Config
from billing_audit.report import MONEY_FIELDS, build_report
from support import FIXTURES

MONTHS = FIXTURES / "scenarios-months"
D = Decimal


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("months") / "m.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([MONTHS]).errors
        store.tag()
    return path


def _jobs(store_path: Path, period: str | None) -> dict[str, dict]:
    with billing_audit.open(store_path, read_only=True) as store:
        rep = build_report(store, Config(), period)
    return {r["job"]: r for r in rep.jobs.iter_rows(named=True)}


def _eq(got: Decimal | None, want: str) -> None:
    assert got is not None
    assert abs(got - D(want)) <= D("0.000000001"), f"{got} != {want}"


def test_the_restart_on_the_months_last_hour_is_counted_in_january(store_path: Path) -> None:
    """mu, January: 1 restart (fee lines); GETs 0.30 in the restart's hour, linked.  30.00 of spot for 3 hours:
    10.00 an hour; recompute 1 x 0.25 h x 10.00 = 2.50, idle 1 x 5/60 h x 10.00 = 0.833333333333; overhead
    0.12 + 0.30 + 2.50 + 0.833333333333 = 3.753333333333; gross 96 - 30 = 66."""
    m = _jobs(store_path, "2027-01")["mu"]
    assert (m["interruptions"], m["interruptions_source"]) == (1, "fee_lines")
    _eq(m["restart_fees"], "0.12")
    _eq(m["storage_reread_cost"], "0.30")
    _eq(m["checkpoint_io_unlinked"], "0")
    _eq(m["hidden_overhead_total"], "3.753333333333")
    _eq(m["gross_spot_savings"], "66")


def test_februarys_traffic_links_with_januarys_last_restart(store_path: Path) -> None:
    """mu, February: no interruption of its own (the restart stays counted in January), but the window of the
    restart at Jan 31 23:00 runs to Feb 1 02:00: GETs 0.50 (00:00) and egress 2.00 (02:00) are linked, GETs 0.90
    (03:00, 4 hours after) is not.  No estimates (0 interruptions x the rate); overhead 0.50 + 2.00 = 2.50;
    gross 96 - 30 = 66, net 63.50; total 30 + 0.50 + 2.00 + 0.90 = 33.40."""
    m = _jobs(store_path, "2027-02")["mu"]
    assert (m["interruptions"], m["interruptions_source"]) == (0, "none")
    _eq(m["storage_reread_cost"], "0.50")
    _eq(m["checkpoint_egress_cost"], "2.00")
    _eq(m["checkpoint_io_unlinked"], "0.90")
    _eq(m["billed_interruption_overhead"], "2.50")
    _eq(m["hidden_overhead_total"], "2.50")
    _eq(m["net_spot_savings"], "63.50")
    _eq(m["total_cost"], "33.40")


def test_all_periods_is_the_sum_of_the_two_months(store_path: Path) -> None:
    """Every money figure of every job over all periods = January's + February's: mu 1 restart, re-reads
    0.30 + 0.50 = 0.80, egress 2.00, unlinked 0.90, overhead 3.753333333333 + 2.50 = 6.253333333333."""
    jan, feb, whole = (_jobs(store_path, p) for p in ("2027-01", "2027-02", None))
    assert set(whole) == set(jan) | set(feb)
    for job, row in whole.items():
        for c in [*MONEY_FIELDS, "total_cost", "interruptions"]:
            parts = [r[job][c] for r in (jan, feb) if job in r and r[job][c] is not None]
            assert row[c] == (sum(parts, D(0)) if parts else None), (job, c)
    m = whole["mu"]
    assert m["interruptions"] == 1
    _eq(m["storage_reread_cost"], "0.80")
    _eq(m["checkpoint_egress_cost"], "2.00")
    _eq(m["checkpoint_io_unlinked"], "0.90")
    _eq(m["hidden_overhead_total"], "6.253333333333")


def test_a_window_from_signal_lines(store_path: Path) -> None:
    """nu: 2 interruptions from signal lines (BA050), at 01:00 and 10:00.  GETs 0.40 at 03:00 are 2 hours after
    the first (linked); GETs 0.80 at 16:00 are 6 hours after the second (unlinked: the window is 10:00-13:00).
    34.00 of spot for 17 hours: 2.00 an hour; recompute 2 x 0.25 h x 2.00 = 1.00, idle 2 x 5/60 h x 2.00 =
    0.333333333333; overhead 0.40 + 1.00 + 0.333333333333 = 1.733333333333; gross 85 - 34 = 51."""
    n = _jobs(store_path, "2027-01")["nu"]
    assert (n["interruptions"], n["interruptions_source"]) == (2, "signals")
    _eq(n["storage_reread_cost"], "0.40")
    _eq(n["checkpoint_egress_cost"], "0")
    _eq(n["checkpoint_io_unlinked"], "0.80")
    _eq(n["hidden_overhead_total"], "1.733333333333")
    _eq(n["net_spot_savings"], "49.266666666667")
    _eq(n["total_cost"], "35.20")


def test_a_window_from_inferred_churn(store_path: Path) -> None:
    """xi: x1 stops at 03:00 and x2 takes over: 1 inferred interruption, whose charge period is x1's last hour
    (02:00-03:00), so the window is 02:00-06:00.  GETs 0.60 at 03:00, right after the stop, are linked; egress
    1.50 at 07:00 (4 hours after the stop) is not.  18.00 of spot for 6 hours: 3.00 an hour; recompute
    1 x 0.25 h x 3.00 = 0.75, idle 1 x 5/60 h x 3.00 = 0.25; overhead 0.60 + 0.75 + 0.25 = 1.60; gross 72 - 18."""
    x = _jobs(store_path, "2027-01")["xi"]
    assert (x["interruptions"], x["interruptions_source"]) == (1, "inferred")
    _eq(x["storage_reread_cost"], "0.60")
    _eq(x["checkpoint_egress_cost"], "0")
    _eq(x["checkpoint_io_unlinked"], "1.50")
    _eq(x["hidden_overhead_total"], "1.60")
    _eq(x["net_spot_savings"], "52.40")


def test_the_daily_rows_carry_the_linked_traffic_into_february(store_path: Path) -> None:
    """mu's billed overhead per day: Jan 31 0.12 + 0.30 = 0.42; Feb 1 0.50 + 2.00 = 2.50 (the 0.90 is unlinked)."""
    with billing_audit.open(store_path, read_only=True) as store:
        rep = build_report(store, Config(), None)
    daily = {str(r["day"]): r["overhead"] for r in rep.daily.iter_rows(named=True) if r["job"] == "mu"}
    _eq(daily["2027-01-31"], "0.42")
    _eq(daily["2027-02-01"], "2.50")


def test_export_by_team_and_billing_account(store_path: Path, tmp_path: Path) -> None:
    """pi (nlp, February) runs under two payers.  444455556666: 2 spot hours at 4.00 (list 10.00), a fee of 0.20
    for 2 restarts; 777788889999: 2 spot hours at 4.00, a fee of 0.10 for 1 restart, GETs 0.30 linked.  The job:
    3 restarts, 16.00 for 4 hours, 4.00 an hour: recompute 3 x 0.25 h x 4.00 = 3.00, idle 3 x 5/60 h x 4.00 = 1.00,
    shared by each account's restarts: 2.00 + 0.666666666667 and 1.00 + 0.333333333333.  Overhead per account
    0.20 + 2.666666666667 = 2.866666666667 and 0.10 + 0.30 + 1.333333333333 = 1.733333333333 (the job's 4.60);
    savings 20.00 - 8.00 = 12.00 each, net 9.133333333333 and 10.266666666667; total 8.20 and 8.40.  The rows by
    account sum to the rows by team, per period and currency, and to the store's totals."""
    from billing_audit import app

    by_team = app.export(str(store_path), tmp_path / "t.json", by="team", fmt="json").to_dicts()
    for by in ("team,account", "team,provider,account"):
        rows = app.export(str(store_path), tmp_path / f"{by}.json", by=by, fmt="json").to_dicts()
        feb = {(r["team"], r["billing_account"]): r for r in rows if r["period"] == "2027-02"}
        a, b = feb[("nlp", "444455556666")], feb[("nlp", "777788889999")]
        _eq(a["interruptions"], "2")
        _eq(b["interruptions"], "1")
        _eq(a["estimated_interruption_overhead"], "2.666666666667")
        _eq(b["estimated_interruption_overhead"], "1.333333333333")
        _eq(a["hidden_overhead_total"], "2.866666666667")
        _eq(b["hidden_overhead_total"], "1.733333333333")
        _eq(b["storage_reread_cost"], "0.30")
        _eq(a["net_spot_savings"], "9.133333333333")
        _eq(b["net_spot_savings"], "10.266666666667")
        _eq(a["total_cost"], "8.20")
        _eq(b["total_cost"], "8.40")
        if by == "team,provider,account":
            assert {(r["provider"], r["billing_account"]) for r in rows} == {
                ("aws", "444455556666"), ("aws", "777788889999"), ("azure", "33445566")}
        for t in by_team:  # each team row is the sum of its account rows, to the cent and below
            parts = [r for r in rows if (r["period"], r["team"], r["currency"]) == (t["period"], t["team"], t["currency"])]
            for c in ("interruptions", "billed_interruption_overhead", "estimated_interruption_overhead",
                      "hidden_overhead_total", "checkpoint_io_unlinked", "spot_compute_cost", "gross_spot_savings",
                      "net_spot_savings", "total_cost"):
                got = [r[c] for r in parts if r[c] is not None]  # n/a (not measured) rows left out, as per team
                assert (sum(got, D(0)) if got else None) == t[c], (by, t["period"], t["team"], c)
        # the totals file beside the export: the rows' total cost per period and currency is the store's own
        totals = json.loads((tmp_path / f"{by}.totals.json").read_text())
        assert {(t["period"], t["currency"]) for t in totals} == {("2027-01", "USD"), ("2027-02", "USD"),
                                                                    ("2027-02", "EUR")}
        assert all(t["ties"] for t in totals), totals


def test_units_of_ten_and_a_hundred_hours_scale_the_spot_hours(store_path: Path) -> None:
    """rho: one daily spot line of 0.2 x "100 Hours" for 14.00 = 20 hours, 0.70 an hour (not 0.2 hours at 70.00);
    sigma: 1.6 x "10 Hours" for 11.20 = 16 hours, 0.70 an hour (not the day's 24 hours).  Each has 1 restart:
    recompute 1 x 0.25 h x 0.70 = 0.175, idle 1 x 5/60 h x 0.70 = 0.058333333333, overhead with the 0.07 fee
    0.303333333333."""
    jobs = _jobs(store_path, "2027-02")
    for job, hours in (("rho", 20.0), ("sigma", 16.0)):
        r = jobs[job]
        assert (r["currency"], r["spot_hours"], r["interruptions"]) == ("EUR", hours, 1)
        _eq(r["spot_hourly_cost"], "0.70")
        _eq(r["recompute_cost_estimate"], "0.175")
        _eq(r["restart_idle_cost_estimate"], "0.058333333333")
        _eq(r["hidden_overhead_total"], "0.303333333333")


def test_rows_by_account_tie_to_the_team_rows_on_another_cost_basis(store_path: Path, tmp_path: Path) -> None:
    """--cost-basis list: pi's components are list cost (4 spot hours at 10.00: 20.00 per account), its savings stay
    the effective ones (12.00 per account), and the rows by account still sum to the rows by team."""
    from billing_audit import app

    team = app.export(str(store_path), None, by="team", fmt="json", basis="list").to_dicts()
    acct = app.export(str(store_path), None, by="team,account", fmt="json", basis="list").to_dicts()
    feb = {(r["team"], r["billing_account"]): r for r in acct if r["period"] == "2027-02"}
    for key in (("nlp", "444455556666"), ("nlp", "777788889999")):
        _eq(feb[key]["spot_compute_cost"], "20")
        _eq(feb[key]["gross_spot_savings"], "12")
    for t in team:
        parts = [r for r in acct if (r["period"], r["team"], r["currency"]) == (t["period"], t["team"], t["currency"])]
        for c in ("spot_compute_cost", "gross_spot_savings", "net_spot_savings", "hidden_overhead_total", "total_cost"):
            got = [r[c] for r in parts if r[c] is not None]
            assert (sum(got, D(0)) if got else None) == t[c], (t["period"], t["team"], c)


def test_explain_places_februarys_first_gets_in_januarys_restart_window(store_path: Path) -> None:
    """explain says what the report counts: mu's GETs of 0.50 at Feb 1 00:00 are linked by the restart of Jan 31
    23:00 (the previous period's interruption), the GETs of 0.90 at 03:00 are unlinked checkpoint I/O."""
    from billing_audit import app

    with billing_audit.open(store_path, read_only=True) as store:
        ids = dict(store.con.execute(
            "SELECT strftime(ChargePeriodStart, '%H'), x_LineItemId FROM line_items WHERE Tags['training_job'] = 'mu' "
            "AND ChargePeriodStart >= TIMESTAMP '2027-02-01' AND x_UsageType LIKE '%Requests%'").fetchall())
    first = app.explain(store_path, ids["00"]).window
    assert first is not None and (first["linked"], first["counted_as"]) == (True, "storage_reread_cost")
    assert [(str(i["end"]), i["previous_period"]) for i in first["interruptions"]] == [("2027-02-01 00:00:00", True)]
    late = app.explain(store_path, ids["03"]).window
    assert late is not None and (late["linked"], late["counted_as"]) == (False, "checkpoint_io_unlinked")


def test_the_groups_are_stored_in_period_order_so_one_periods_scan_skips_the_others(store_path: Path) -> None:
    """A store of several billing periods keeps its line groups in period order: DuckDB skips a row group whose
    min/max billing period start is outside the period a report filters on."""
    with billing_audit.open(store_path, read_only=True) as store:
        bps = [r[0] for r in store.con.execute("SELECT bps FROM line_groups ORDER BY rowid").fetchall()]
    assert len(set(bps)) >= 2
    assert bps == sorted(bps)


@pytest.mark.parametrize("period", ["2027-01", "2027-02"])
def test_the_previous_periods_narrow_aggregates_choose_the_same_interruption_sources(store_path: Path,
                                                                                    period: str) -> None:
    """The previous period of a report is prepared for its interruptions alone (ba_agg by job row and signal):
    each job row's interruption source and its interruptions are those of the full aggregates."""
    from billing_audit.report import EV_CTE, SRC_CTE, STOPPED_CTE
    from billing_audit.rollup import prepare

    got = {}
    with billing_audit.open(store_path, read_only=True) as store:
        for narrow in (False, True):
            prepare(store.con, Config(), period, "effective", sources_only=narrow)
            src = store.con.execute(f"WITH {SRC_CTE} SELECT * FROM src ORDER BY ALL").fetchall()
            ev = store.con.execute(f"WITH {STOPPED_CTE}, {SRC_CTE}, {EV_CTE} SELECT * FROM ev ORDER BY ALL").fetchall()
            got[narrow] = (src, ev)
    assert got[True] == got[False]
    assert got[False][1]  # the period holds interruptions to link with
    if period == "2027-01":  # mu's fee line, nu's notices, xi's churn
        assert {r[-1] for r in got[False][0] if r[0] in ("mu", "nu", "xi")} == {"fee_lines", "signals", "inferred"}


def test_the_rules_fired_of_each_period_count_that_periods_hits_and_add_up_to_the_stores(store_path: Path) -> None:
    """The rules fired of one period read the hits between the period's smallest and largest line id (storage
    skips the rest): the counts are those of a plain join of the hits to the period's lines, and the two months
    add up to the whole store's."""
    from billing_audit.report import _rules_fired

    with billing_audit.open(store_path, read_only=True) as store:
        whole = {r[0]: r[2] for r in _rules_fired(store, None).iter_rows()}
        by_month = {}
        for period in ("2027-01", "2027-02"):
            got = {r[0]: r[2] for r in _rules_fired(store, period).iter_rows()}
            plain = dict(store.con.execute(
                "SELECT h.rule_id, count(*) FROM rule_hits h JOIN line_items l USING (x_LineItemId) "
                "WHERE strftime(date_trunc('month', l.BillingPeriodStart + INTERVAL 14 DAY), '%Y-%m') = ? "
                "GROUP BY 1", [period]).fetchall())
            assert got == plain and got, period
            by_month[period] = got
        nothing = _rules_fired(store, "2026-06")  # a month the store does not hold
    assert nothing.height == 0
    assert {r: by_month["2027-01"].get(r, 0) + by_month["2027-02"].get(r, 0) for r in whole} == whole
