"""A zero price is not a price (issue #14): NULL ListCost with the reason, and a report that leaves such
spot lines out of the measured savings instead of counting them as a loss."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import billing_audit
from billing_audit.config import Config
from billing_audit.report import build_report
from support import FIXTURES


def _ingest(db: Path, *paths: Path) -> billing_audit.Store:
    store = billing_audit.open(db)
    report = store.ingest(list(paths))
    assert not report.errors, report.errors
    return store


def test_2018_cur_spot_lines_with_zero_on_demand_cost(db: Path) -> None:
    with _ingest(db, FIXTURES / "aws/cur-2018-csv") as store:
        rows = store.con.execute(
            "SELECT x_UsageType, PricingCategory, BilledCost, ListCost, ListUnitPrice, x_ListCostSource, Tags "
            "FROM line_items ORDER BY x_SourceRow").fetchall()
        spot = [r for r in rows if "SpotUsage:" in (r[0] or "")]
        missing = "missing: pricing_public_on_demand_cost = 0"
        assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in spot] == [
            ("USE1-SpotUsage:p3.16xlarge", "Dynamic", Decimal("7.344"), None, None, missing),
            ("USE1-SpotUsage:p3.16xlarge", "Dynamic", Decimal("7.344"), None, None, missing),
            ("USE1-SpotUsage:p3.16xlarge", "Dynamic", Decimal("3.672"), None, None, missing),
            ("USE1-SpotUsage:p3.2xlarge", "Dynamic", Decimal("0.918"), None, None, missing),
            ("USE1-SpotUsage:p3.2xlarge", "Dynamic", Decimal("0.918"), None, None, missing),
            ("USE1-SpotUsage:p3.8xlarge", "Dynamic", Decimal("3.672"), None, None, missing),
            ("USE1-SpotUsage:p3.8xlarge", "Dynamic", Decimal("3.672"), None, None, missing),
            ("USE1-SpotUsage:c5.large", "Dynamic", Decimal("0.0331"), None, None, missing),
        ]
        # costCategory/* and resourceTags/noTags are ignored; real tags still read
        assert json.dumps(spot[0][6], sort_keys=True) == '{"team": "vision", "training_job": "detr-2018"}'
        assert rows[3][3:6] == (Decimal("6.12"), Decimal("3.06"), "pricing_public_on_demand_cost")
        assert rows[10][0] == "USE1-BoxUsage:c5.large" and rows[10][3:6] == (
            Decimal("0.085"), Decimal("0.085"), "pricing_public_on_demand_cost")
        assert rows[11][3] == Decimal("1.30")  # tax keeps its cost
        log = store.con.execute("SELECT format, periods, cost_total FROM ingest_log").fetchall()
        # 25.78 + 0.918 + 0.918 + 3.672 + 0.16 (restart fee) + 3.672 + 0.0331 + 0.085
        assert log == [("aws-cur", "2018-06", {"USD": Decimal("35.2381")})]


def test_cur2_with_split_cost_allocation_and_cost_categories(db: Path) -> None:
    with _ingest(db, FIXTURES / "aws/cur2-split") as store:
        got = store.con.execute(
            "SELECT count(*), sum(BilledCost), count(ListCost), sum(ListCost), "
            "count(*) FILTER (WHERE x_ListCostSource = 'missing: pricing_public_on_demand_cost = 0'), "
            "any_value(BillingAccountName), any_value(Tags['training_job']) FROM line_items").fetchone()
        assert got == (3, Decimal("20.6668"), 2, Decimal("33.7786"), 1, "Example Split Payer", "llm-split-1")


def _focus(tmp: Path, rows: list[str]) -> Path:
    header = ("BilledCost,EffectiveCost,ListCost,ListUnitPrice,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,"
              "BillingPeriodStart,BillingPeriodEnd,ChargeCategory,ProviderName,BillingAccountId,ServiceName,"
              "PricingCategory")
    f = tmp / "focus" / "focus.csv"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(header + "\n" + "\n".join(rows) + "\n")
    return f


def test_focus_zero_list_cost_on_a_costed_line(tmp_path: Path, db: Path) -> None:
    common = "USD,2026-10-01,2026-10-02,2026-10-01,2026-11-01"
    f = _focus(tmp_path, [
        f"2.5,2.5,0,0,{common},Usage,Acme,a1,Compute,Dynamic",
        f"2.5,2.5,7.5,3,{common},Usage,Acme,a1,Compute,Dynamic",
        f"0,0,0,0,{common},Usage,Acme,a1,Compute,Standard",  # free: 0 is the list price
        f"-1,-1,0,,{common},Credit,Acme,a1,Compute,",  # a credit has no list price to miss
    ])
    with _ingest(db, f) as store:
        rows = store.con.execute("SELECT ListCost, ListUnitPrice, x_ListCostSource FROM line_items ORDER BY x_SourceRow"
                                 ).fetchall()
    assert rows == [(None, None, "missing: ListCost = 0"), (Decimal("7.5"), Decimal("3"), "ListCost"),
                    (Decimal("0"), Decimal("0"), "ListCost"), (Decimal("0"), None, "ListCost")]


def test_gcp_zero_cost_at_list_on_a_costed_line(tmp_path: Path, db: Path) -> None:
    base = {"billing_account_id": "01ABCD-23EF45-678904", "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
            "usage_start_time": "2026-10-01 00:00:00 UTC", "usage_end_time": "2026-10-01 01:00:00 UTC",
            "project": {"id": "p1"}, "currency": "USD", "cost_type": "regular", "invoice": {"month": "202610"},
            "credits": []}
    lines = [
        {**base, "sku": {"id": "A", "description": "Spot Preemptible Nvidia Tesla A100 GPU running in Americas"},
         "cost": 1.1, "cost_at_list": 0},
        {**base, "sku": {"id": "B", "description": "Nvidia Tesla A100 GPU running in Americas"}, "cost": 2.9,
         "cost_at_list": 2.9},
    ]
    f = tmp_path / "gcp" / "gcp_billing_export_v1_01ABCD_23EF45_678904-000000000000.json"
    f.parent.mkdir(parents=True)
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with _ingest(db, f) as store:
        rows = store.con.execute("SELECT ListCost, x_ListCostSource FROM line_items ORDER BY x_SourceRow").fetchall()
    assert rows == [(None, "missing: cost_at_list = 0"), (Decimal("2.9"), "cost_at_list")]


def test_report_leaves_unpriced_spot_out_of_savings(db: Path) -> None:
    """ea-currency-column: two spot lines (24 h + 16 h of NC24ads A100 v4 Spot at 0.7346 = 29.384 USD) with
    PayGPrice 0. Before, their NULL list cost counted as 0 and the job showed -29.38 of 'savings'.  The export
    says nothing about their on-demand price, but the same bill holds the same meter bought on demand in the
    same region (4 h for 13.224: 3.306 an hour), so the Azure price part prices them from the bill:
    40 h x 3.306 = 132.24 on demand, gross savings 132.24 - 29.384 = 102.856 (no overhead in this export).
    The 2018 CUR's detr-2018 has no price anywhere (no references loaded here): unpriced, n/a."""
    store = _ingest(db, FIXTURES / "azure/ea-currency-column", FIXTURES / "aws/cur-2018-csv")
    with store:
        store.tag()
        report = build_report(store, Config())
        sources = store.con.execute(
            "SELECT DISTINCT o.od_source, o.od_unit_price FROM spot_od o JOIN line_items l USING (x_LineItemId) "
            "WHERE l.x_Provider = 'azure'").fetchall()
    assert sources == [("bill", Decimal("3.306"))]
    jobs = {r["job"]: r for r in report.jobs.iter_rows(named=True)}
    vit = jobs["vit-ea-4"]
    assert vit["spot_compute_cost"] == Decimal("29.384")
    assert vit["spot_unpriced_cost"] == 0
    assert vit["on_demand_equivalent_cost"] == Decimal("132.24")
    assert vit["gross_spot_savings"] == Decimal("102.856")
    assert vit["net_spot_savings"] == Decimal("102.856")
    assert vit["recommendation"] == "keep_spot"
    detr = jobs["detr-2018"]  # no price references loaded here
    assert (detr["spot_compute_cost"], detr["spot_unpriced_cost"], detr["gross_spot_savings"]) == (
        Decimal("18.36"), Decimal("18.36"), None)
    assert detr["recommendation"] == "review"
