"""Restart windows: checkpoint re-reads and egress are interruption overhead only inside a restart window of the
same job (the charge period holding an interruption and the next N), else ``checkpoint_io_unlinked``.

The exports (fixtures/gen_scenarios.py, ``fixtures/scenarios-windows``), December 2026:

- eps (vision, AWS, hourly lines): 10 spot hours (hours 0-9) at 10.00, list 32.00, one instance; a restart fee of
  0.12 (1 restart) at hour 3; checkpoint traffic on bucket ckpt-eps: egress 1.00 at hour 1, GETs 0.50 at hour 3,
  egress 2.00 at hour 5, GETs 0.70 at hour 6, GETs 0.90 at hour 7, egress 4.00 at hour 9.
- zeta (nlp, AWS, hourly): 2 spot hours at 2.00 (list 5.00), GETs 0.60 and egress 3.00 at hour 21, no fee, no
  signal, one instance (no churn).
- iota (speech, Azure EA in EUR, daily lines): 4 spot days of 10 hours at 0.70 (pay-as-you-go 2.00), a Spot Restart
  Fee of 0.07 (1 restart) on day 2, checkpoint reads 0.30 on day 2, 0.40 on day 3, 0.50 on day 4.

Defaults: hourly window 3 periods after the interruption's, daily 1; checkpoint interval 30 min, restart 5 min.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit.config import Config, load_config
from billing_audit.report import build_report
from support import FIXTURES

WINDOWS = FIXTURES / "scenarios-windows"
D = Decimal


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("win") / "w.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([WINDOWS]).errors
        store.tag()
    return path


def _jobs(store_path: Path, cfg: Config | None = None) -> dict[str, dict]:
    with billing_audit.open(store_path, read_only=True) as store:
        rep = build_report(store, cfg or Config(), "2026-12")
    return {r["job"]: r for r in rep.jobs.iter_rows(named=True)}


def _eq(got: Decimal | None, want: str) -> None:
    assert got is not None
    assert abs(got - D(want)) <= D("0.000000001"), f"{got} != {want}"


def test_hourly_export_links_the_restarts_hour_and_the_three_after(store_path: Path) -> None:
    """eps: the restart is at hour 3, so the window is hours 3, 4, 5 and 6.
    linked: GETs 0.50 (h3) + 0.70 (h6) = 1.20 re-read; egress 2.00 (h5).
    unlinked: egress 1.00 (h1, before) + GETs 0.90 (h7) + egress 4.00 (h9) = 5.90.
    rate 100 / 10 h = 10.00: recompute 1 x 0.5 h / 2 x 10 = 2.50, idle 1 x 5/60 h x 10 = 0.833333333333.
    overhead 0.12 + 1.20 + 2.00 + 2.50 + 0.833333333333 = 6.653333333333; gross 320 - 100 = 220."""
    e = _jobs(store_path)["eps"]
    assert (e["interruptions"], e["interruptions_source"]) == (1, "fee_lines")
    _eq(e["restart_fees"], "0.12")
    _eq(e["storage_reread_cost"], "1.20")
    _eq(e["checkpoint_egress_cost"], "2.00")
    _eq(e["checkpoint_io_unlinked"], "5.90")
    _eq(e["hidden_overhead_total"], "6.653333333333")
    _eq(e["gross_spot_savings"], "220")
    _eq(e["net_spot_savings"], "213.346666666667")
    assert e["savings_eroded_pct"] == pytest.approx(6.653333333333 / 220 * 100)
    _eq(e["total_cost"], "109.22")  # 100 + 0.12 + 1.00 + 0.50 + 2.00 + 0.70 + 0.90 + 4.00: every cent still counted


def test_the_window_is_configurable_per_job(store_path: Path, tmp_path: Path) -> None:
    """eps with restart_window_periods = 0: only hour 3 is in the window (GETs 0.50 linked); egress 2.00 (h5) and
    GETs 0.70 (h6) move to unlinked: 5.90 + 2.70 = 8.60.  With 6: hours 3-9, all but the egress at hour 1."""
    (tmp_path / "c.toml").write_text('[estimates.jobs."eps"]\nrestart_window_periods = 0\n')
    e = _jobs(store_path, load_config(tmp_path / "c.toml"))["eps"]
    _eq(e["storage_reread_cost"], "0.50")
    _eq(e["checkpoint_egress_cost"], "0")
    _eq(e["checkpoint_io_unlinked"], "8.60")
    (tmp_path / "c6.toml").write_text('[estimates.jobs."eps"]\nrestart_window_periods = 6\n')
    e = _jobs(store_path, load_config(tmp_path / "c6.toml"))["eps"]
    _eq(e["storage_reread_cost"], "2.10")  # 0.50 + 0.70 + 0.90
    _eq(e["checkpoint_egress_cost"], "6.00")  # 2.00 + 4.00
    _eq(e["checkpoint_io_unlinked"], "1.00")
    (tmp_path / "h.toml").write_text("[estimates]\nrestart_window_hourly_periods = 1\n")
    e = _jobs(store_path, load_config(tmp_path / "h.toml"))["eps"]  # hours 3-4: only the 0.50 GETs
    _eq(e["storage_reread_cost"], "0.50")
    _eq(e["checkpoint_io_unlinked"], "8.60")


def test_traffic_without_interruptions_is_no_overhead(store_path: Path) -> None:
    """zeta: no fee, no signal, no churn: 0 interruptions, so no window: the 0.60 + 3.00 are ordinary checkpoint
    I/O, shown as checkpoint_io_unlinked = 3.60; overhead 0; nothing of the savings (10 - 4 = 6) is eroded."""
    z = _jobs(store_path)["zeta"]
    assert (z["interruptions"], z["interruptions_source"]) == (0, "none")
    _eq(z["hidden_overhead_total"], "0")
    _eq(z["storage_reread_cost"], "0")
    _eq(z["checkpoint_egress_cost"], "0")
    _eq(z["checkpoint_io_unlinked"], "3.60")
    _eq(z["net_spot_savings"], "6")
    assert z["savings_eroded_pct"] == 0


def test_daily_export_links_the_restarts_day_and_the_next(store_path: Path) -> None:
    """iota (daily lines): the fee is on day 2, so the window is days 2 and 3: reads 0.30 + 0.40 = 0.70 linked,
    day 4's 0.50 unlinked.  40 spot hours for 28.00: 0.70 an hour; recompute 1 x 0.25 h x 0.70 = 0.175, idle
    1 x 5/60 h x 0.70 = 0.058333333333; overhead 0.07 + 0.70 + 0.175 + 0.058333333333 = 1.003333333333."""
    i = _jobs(store_path)["iota"]
    assert (i["currency"], i["interruptions"], i["interruptions_source"]) == ("EUR", 1, "fee_lines")
    _eq(i["restart_fees"], "0.07")
    _eq(i["storage_reread_cost"], "0.70")
    _eq(i["checkpoint_io_unlinked"], "0.50")
    _eq(i["hidden_overhead_total"], "1.003333333333")


def test_daily_rows_count_only_linked_traffic(store_path: Path) -> None:
    """Per day: eps 0.12 + 0.50 + 2.00 + 0.70 = 3.32 on 2026-12-01; iota 0.07 + 0.30 on day 2, 0.40 on day 3, none on
    day 4 (its 0.50 is unlinked); zeta 0."""
    with billing_audit.open(store_path, read_only=True) as store:
        rep = build_report(store, Config(), "2026-12")
    daily = {(r["job"], str(r["day"])): r["overhead"] for r in rep.daily.iter_rows(named=True)}
    _eq(daily[("eps", "2026-12-01")], "3.32")
    _eq(daily[("iota", "2026-12-02")], "0.37")
    _eq(daily[("iota", "2026-12-03")], "0.40")
    _eq(daily[("iota", "2026-12-04")], "0")
    _eq(daily[("zeta", "2026-12-01")], "0")


def test_a_spike_says_what_switching_from_then_would_have_cost(store_path: Path) -> None:
    """kappa: one spot hour a day on days 1-5 at 10.00 (list 32.00); fees: 1 restart (0.10) on day 1, 5 (50.00) on
    day 4.  Daily interruptions 1, 0, 0, 5, 0: median 0 (counted as 1), so day 4 (5 > 3) spikes.  From day 4 on, on
    demand would have cost 2 x 32.00 = 64.00; spot cost 2 x 10.00 + the billed overhead 50.00 = 70.00: on demand
    would have saved 6.00.  Over the month spot still saves: spot 50.00 + fees 50.10 + recompute 6 x 0.25 h x 10.00
    + idle 6 x 5/60 h x 10.00 = 120.10 < the on-demand 160.00, so no switch."""
    with billing_audit.open(store_path, read_only=True) as store:
        rep = build_report(store, Config(), "2026-12")
    spikes = [(str(r["day"]), r["interruptions"]) for r in rep.daily.iter_rows(named=True)
              if r["job"] == "kappa" and r["spike"]]
    assert spikes == [("2026-12-04", 5)]
    k = next(r for r in rep.jobs.iter_rows(named=True) if r["job"] == "kappa")
    assert ("interruptions spiked on 2026-12-04: switching to on demand from then would have cost 64.00 USD against "
            "70.00 USD on spot with its billed overhead (on demand would have saved 6.00 USD)") in k["reasons"]
    assert k["recommendation"] != "switch_to_on_demand"


def test_the_seeds_worked_example_still_comes_out_the_same(tmp_path: Path) -> None:
    """fixtures/scenarios-seed: llama, August-October 2026: 54 + 54 + 53 = 161 spot hours at 10.00 (list 30.00),
    7 + 7 + 6 = 20 fee lines of 60 restarts at 7.20, each hour with a re-read of 15.00 and egress of 10.00, every
    one in the hour of its restarts (so in its window).  1,200 restarts; fees 20 x 7.20 = 144.00, re-reads
    20 x 15.00 = 300.00, egress 20 x 10.00 = 200.00: 644.00 of billed overhead; savings 161 x 20.00 = 3,220.00;
    644 / 3,220 = 20%.  The all-periods row is the three months' sum."""
    db = tmp_path / "seed.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "scenarios-seed"]).errors
        store.tag()
    (tmp_path / "c.toml").write_text("[estimates]\nenabled = false\n")
    cfg = load_config(tmp_path / "c.toml")
    with billing_audit.open(db, read_only=True) as store:
        months = {p: build_report(store, cfg, p) for p in ("2026-08", "2026-09", "2026-10")}
        whole = build_report(store, cfg, None)
    row = next(r for r in whole.jobs.iter_rows(named=True) if r["job"] == "llama")
    assert (row["interruptions"], row["interruptions_source"]) == (1200, "fee_lines")
    _eq(row["restart_fees"], "144")
    _eq(row["storage_reread_cost"], "300")
    _eq(row["checkpoint_egress_cost"], "200")
    _eq(row["checkpoint_io_unlinked"], "0")
    _eq(row["billed_interruption_overhead"], "644")
    _eq(row["gross_spot_savings"], "3220")
    assert row["savings_eroded_pct"] == pytest.approx(20.0)
    assert row["recommendation"] == "keep_spot"
    per_month = [next(r for r in m.jobs.iter_rows(named=True) if r["job"] == "llama") for m in months.values()]
    assert [r["interruptions"] for r in per_month] == [420, 420, 360]  # 7 x 60, 7 x 60, 6 x 60
    _eq(sum((r["hidden_overhead_total"] for r in per_month), D(0)), "644")
