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
"""

from __future__ import annotations

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
