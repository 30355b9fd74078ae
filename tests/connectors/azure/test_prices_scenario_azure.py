"""Azure spot savings measured end to end: the MCA scenario export plus the price files
(fixtures/gen_azure_prices.py: fixtures/azure-spot-scenario, fixtures/prices/azure), then `prices pull azure`
against a local Retail Prices API for what is left.

The scenario (October 2026, USD; the export prices every spot meter at the spot rate, so it says nothing about
on-demand prices):

- ``llm-ft-1`` (nlp): NC24ads A100 v4 Spot in eastus, 10 h at 0.7346 = 7.346, and NC6s v3 Low Priority located
  "US East", 0.8 x "10 Hours" at 6.12 = 4.896; two restarts at 0.07 = 0.14.
  On demand (retail page 1): 10 h x 3.673 = 36.73 and 8 h x 3.06 = 24.48, together 61.21.
  Gross savings 61.21 - 12.242 = 48.968; overhead 0.14; net 48.828; erosion 0.14 / 48.968 = 0.28590...%.
- ``vit-win-2`` (vision), partly priced: NC4as T4 v3 Spot (Windows) in westeurope, 6 h at 0.2104 = 1.2624, whose
  on-demand price is the MCA sheet's negotiated 0.639 (it beats the retail 0.71): 3.834; and NC24ads A100 v4 Spot
  in swedencentral, 5 h at 0.80 = 4.00, which no price file covers (unpriced).  Gross savings over the priced
  line only: 3.834 - 1.2624 = 2.5716; one restart 0.05; net 2.5216; erosion 0.05 / 2.5716 = 1.94431...%.
- ``sd-xl-3`` (vision), not priced: ND96asr A100 v4 Spot in westus2, 4 h at 5.4394 = 21.7576; a restart 0.12.
  On-demand equivalent, gross and net savings and erosion: n/a (None), never 0 or a loss; recommendation review.
- USD totals: gross 48.968 + 2.5716 = 51.5396; the overhead of the measured jobs 0.14 + 0.05 = 0.19, erosion
  0.19 / 51.5396 = 0.36865...% (sd-xl-3's 0.12 is not set against savings it has none of); coverage: priced
  spot 12.242 + 1.2624 = 13.5044 of 39.262 = 34.3956...%, "savings measured for 34% ... 66% unpriced".

Recompute and idle estimates are switched off so that the overhead is the bill's own restart fees.

Then ``prices pull azure``: the store needs nc24ads a100 v4|linux in swedencentral and nd96asr a100 v4|linux in
westus2; the peer lists them at 3.90 and 27.197: vit-win-2's on-demand equivalent becomes 3.834 + 5 x 3.90 =
23.334 (gross 23.334 - 5.2624 = 18.0716), sd-xl-3's 4 x 27.197 = 108.788 (gross 108.788 - 21.7576 = 87.0304, net
87.0304 - 0.12 = 86.9104).  A second pull needs nothing and fetches nothing.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import billing_audit
from billing_audit import pricing
from billing_audit.config import Config, Estimates
from billing_audit.report import build_report
from connectors.azure.prices_pull import AzurePricePuller, AzurePricesOptions
from peers_azure_prices import RetailPricesPeer, serve
from support import FIXTURES

AP = FIXTURES / "prices" / "azure"
SCENARIO = FIXTURES / "azure-spot-scenario"
D = Decimal
NO_ESTIMATES = Config(estimates=Estimates(enabled=False))


def _jobs(store: billing_audit.Store) -> tuple[dict[str, dict[str, Any]], dict[str, Any], list[str]]:
    rep = build_report(store, NO_ESTIMATES)
    (usd,) = rep.totals.iter_rows(named=True)
    return {r["job"]: r for r in rep.jobs.iter_rows(named=True)}, usd, rep.warnings


def _close(got: Any, want: str) -> None:
    assert got is not None, f"None != {want}"
    assert abs(D(got) - D(want)) <= D("0.000000001"), f"{got} != {want}"


@pytest.fixture
def store(db: Path) -> Any:
    with billing_audit.open(db) as s:
        report = s.ingest([SCENARIO, AP])
        assert not report.errors, report.errors
        assert report.prices is not None and report.prices.added == 12
        s.tag()
        yield s


def test_spot_savings_measured_over_priced_lines_only(store: billing_audit.Store) -> None:
    jobs, usd, warnings = _jobs(store)
    a = jobs["llm-ft-1"]
    assert (a["provider"], a["currency"], a["team"]) == ("azure", "USD", "nlp")
    _close(a["spot_compute_cost"], "12.242")
    _close(a["on_demand_equivalent_cost"], "61.21")
    _close(a["spot_unpriced_cost"], "0")
    _close(a["gross_spot_savings"], "48.968")
    _close(a["restart_fees"], "0.14")
    _close(a["hidden_overhead_total"], "0.14")
    _close(a["net_spot_savings"], "48.828")
    assert a["savings_eroded_pct"] == pytest.approx(0.14 / 48.968 * 100)
    assert a["recommendation"] == "keep_spot"

    b = jobs["vit-win-2"]
    _close(b["spot_compute_cost"], "5.2624")
    _close(b["spot_unpriced_cost"], "4.00")
    _close(b["on_demand_equivalent_cost"], "3.834")
    _close(b["gross_spot_savings"], "2.5716")
    _close(b["net_spot_savings"], "2.5216")
    assert b["savings_eroded_pct"] == pytest.approx(0.05 / 2.5716 * 100)
    assert b["recommendation"] == "review"
    assert any("4.00 USD of spot cost has no on-demand price" in r for r in b["reasons"])

    c = jobs["sd-xl-3"]
    _close(c["spot_compute_cost"], "21.7576")
    _close(c["spot_unpriced_cost"], "21.7576")
    assert (c["on_demand_equivalent_cost"], c["gross_spot_savings"], c["net_spot_savings"], c["savings_eroded_pct"]) \
        == (None, None, None, None)
    _close(c["hidden_overhead_total"], "0.12")
    assert c["recommendation"] == "review"
    assert any("`billing-audit prices pull azure`" in r for r in c["reasons"])

    _close(usd["gross_spot_savings"], "51.5396")
    _close(usd["spot_cost_priced"], "13.5044")
    _close(usd["spot_unpriced_cost"], "25.7576")
    assert usd["savings_eroded_pct"] == pytest.approx(0.19 / 51.5396 * 100)
    assert usd["savings_coverage_pct"] == pytest.approx(13.5044 / 39.262 * 100)
    assert "savings measured for 34% of USD spot cost; 66% unpriced: run `billing-audit prices pull azure`" in warnings


def test_each_spot_line_says_where_its_on_demand_price_came_from(store: billing_audit.Store) -> None:
    rows = store.con.execute(
        "SELECT l.SkuMeter, l.RegionId, o.price_key, o.region, o.quantity, o.od_unit_price, o.od_cost, o.od_source, "
        "o.price_kind, o.price_ref, o.reason FROM spot_od o JOIN line_items l USING (x_LineItemId) ORDER BY 1, 2"
    ).fetchall()
    page1 = str(Path("fixtures/prices/azure/retail-prices/vm-usd-page-1.json"))
    sheet = str(Path("fixtures/prices/azure/price-sheets/mca-price-sheet.csv"))
    got = [(r[0], r[1], r[2], r[3], D(r[4]), r[5] and D(r[5]), r[6] and D(r[6]), r[7], r[8]) for r in rows]
    assert got == [
        ("NC24ads A100 v4 Spot", "eastus", "nc24ads a100 v4|linux", "eastus", D(10), D("3.673"), D("36.73"),
         "reference", "retail"),
        ("NC24ads A100 v4 Spot", "swedencentral", "nc24ads a100 v4|linux", "swedencentral", D(5), None, None, None, None),
        ("NC4as T4 v3 Spot", "westeurope", "nc4as t4 v3|windows", "westeurope", D(6), D("0.639"), D("3.834"),
         "reference", "negotiated"),
        # the cost details' RegionId of "US East" is "useast": the key's region is its armRegionName
        ("NC6s v3 Low Priority", "useast", "nc6s v3|linux", "eastus", D(8), D("3.06"), D("24.48"), "reference", "retail"),
        ("ND96asr A100 v4 Spot", "westus2", "nd96asr a100 v4|linux", "westus2", D(4), None, None, None, None),
    ]
    by_meter = {(r[0], r[1]): r for r in rows}
    assert by_meter[("NC24ads A100 v4 Spot", "eastus")][9].endswith(
        "(Azure Retail Prices API page, meterId 4e1d2c3b-0000-4000-8000-000000000001) row 1 (retail price)")
    assert page1 in by_meter[("NC24ads A100 v4 Spot", "eastus")][9]
    t4 = by_meter[("NC4as T4 v3 Spot", "westeurope")][9]
    assert sheet in t4 and "MCA price sheet, the account's negotiated price (unitPrice)" in t4
    assert by_meter[("ND96asr A100 v4 Spot", "westus2")][10] == (
        "no price reference of nd96asr a100 v4|linux in westus2 (1 Hour, USD) covers 2026-10-03 00:00 and the bill "
        "holds none bought on demand: run `billing-audit prices pull azure`")


def _items() -> list[dict[str, Any]]:
    page = json.loads((AP / "retail-prices" / "vm-usd-page-1.json").read_text())["Items"]
    a100 = dict(page[0], armRegionName="swedencentral", location="SE Central", retailPrice=3.90, unitPrice=3.90,
                meterId="4e1d2c3b-0000-4000-8000-000000000101")
    nd96 = dict(page[0], meterName="ND96asr A100 v4", skuName="ND96asr A100 v4", armSkuName="Standard_ND96asr_v4",
                productName="Virtual Machines NDasrA100v4 Series", armRegionName="westus2", location="US West 2",
                retailPrice=27.197, unitPrice=27.197, meterId="4e1d2c3b-0000-4000-8000-000000000102")
    nd96_spot = dict(nd96, meterName="ND96asr A100 v4 Spot", skuName="ND96asr A100 v4 Spot", retailPrice=5.4394)
    return [*page, a100, nd96, nd96_spot]


def test_pull_prices_what_is_left_and_a_second_pull_fetches_nothing(store: billing_audit.Store, tmp_path: Path) -> None:
    needs = pricing.needs(store.con, "azure")
    assert [(n.price_key, n.region, n.unit, n.currency, n.lines) for n in needs] == [
        ("nc24ads a100 v4|linux", "swedencentral", "1 Hour", "USD", 1),
        ("nd96asr a100 v4|linux", "westus2", "1 Hour", "USD", 1),
    ]
    dest = tmp_path / "prices" / "azure"
    puller = AzurePricePuller(sleep=lambda s: None)
    with serve(RetailPricesPeer(_items(), page_size=1, fail=[500])) as peer:
        opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview")
        files = puller.fetch(needs, dest, opts, None)
        assert [p.name for p in files] == ["azure-retail-usd-swedencentral-nc24ads-a100-v4-p001.json",
                                           "azure-retail-usd-westus2-nd96asr-a100-v4-p001.json"]
        assert puller.last is not None and (puller.last.requests, puller.last.retried) == (3, 1)
        load = pricing.load_files(store.con, [dest])
        assert not load.errors and load.added == 2
        assert pricing.reprice(store.con) == 5

        jobs, usd, warnings = _jobs(store)
        b, c = jobs["vit-win-2"], jobs["sd-xl-3"]
        _close(b["on_demand_equivalent_cost"], "23.334")
        _close(b["spot_unpriced_cost"], "0")
        _close(b["gross_spot_savings"], "18.0716")
        _close(c["on_demand_equivalent_cost"], "108.788")
        _close(c["gross_spot_savings"], "87.0304")
        _close(c["net_spot_savings"], "86.9104")
        assert c["savings_eroded_pct"] == pytest.approx(0.12 / 87.0304 * 100)
        assert usd["savings_coverage_pct"] == pytest.approx(100.0)
        assert not [w for w in warnings if "unpriced" in w]

        asked = len(peer.log)
        again = pricing.needs(store.con, "azure")
        assert again == []
        assert puller.fetch(again, dest, opts, None) == []
        assert len(peer.log) == asked  # nothing was fetched
        # re-loading the pulled pages changes nothing
        assert pricing.load_files(store.con, [dest]).added == 0


def test_the_pull_command_and_explain(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from billing_audit.cli import main

    db = tmp_path / "store.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([SCENARIO, AP]).errors
        s.tag()
        spot = s.con.execute("SELECT x_LineItemId FROM line_items WHERE SkuMeter = 'ND96asr A100 v4 Spot'").fetchone()
    assert spot is not None
    runner = CliRunner()
    r = runner.invoke(main, ["explain", spot[0], "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "no price reference of nd96asr a100 v4|linux in westus2" in r.output
    with serve(RetailPricesPeer(_items(), page_size=1, fail=[429], retry_after="0")) as peer:
        base = f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview"
        r = runner.invoke(main, ["prices", "pull", "azure", "--base-url", base, "--backoff", "0", "--db", str(db)])
        assert r.exit_code == 0, r.output
        assert "2 on-demand price(s) needed by 2 spot line(s); 2 file(s) fetched" in r.output
        assert "retry 1/5 in 0s" in r.output
        cache = tmp_path / "billing-audit-cache" / "prices" / "azure"
        assert sorted(p.name for p in cache.iterdir()) == [
            "azure-retail-usd-swedencentral-nc24ads-a100-v4-p001.json",
            "azure-retail-usd-westus2-nd96asr-a100-v4-p001.json"]
        asked = len(peer.log)
        r = runner.invoke(main, ["prices", "pull", "azure", "--base-url", base, "--db", str(db)])
        assert r.exit_code == 0, r.output
        assert "nothing to pull" in r.output
        assert len(peer.log) == asked
    r = runner.invoke(main, ["explain", spot[0], "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "azure-retail-usd-westus2-nd96asr-a100-v4-p001.json" in r.output and "108.788" in r.output
