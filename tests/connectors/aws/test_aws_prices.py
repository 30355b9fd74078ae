"""AWS price references (issue #16): the Price List files read into references, a spot line's on-demand
counterpart, and the 2018 CUR's spot jobs priced by the price list, by the bill and not at all."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit import pricing
from billing_audit.config import Config
from billing_audit.errors import InputError
from billing_audit.report import build_report
from billing_audit.rules import load_rules
from connectors.aws import prices
from support import FIXTURES

PRICES = FIXTURES / "prices" / "aws"
CUR_2018 = FIXTURES / "aws" / "cur-2018-csv"
D = Decimal


def _refs(name: str) -> list[tuple[object, ...]]:
    path = PRICES / name
    fmt = next(f for f in prices.FORMATS if f.sniff(path, path.read_bytes()[:65536]))
    return [(fmt.id, r.price_key, r.region, r.unit, r.currency, r.unit_price, r.effective_from, r.fetched_at,
             r.kind, r.source_row) for r in fmt.read(path)]


def test_offer_csv_keeps_on_demand_shared_used_instance_hours_only() -> None:
    """The CSV's five rows: Linux on demand (kept), reserved (another term), Windows on demand (kept: its own
    operation), unused capacity reservation and dedicated tenancy (not a spot hour's counterpart)."""
    june, may = datetime(2018, 6, 1), datetime(2018, 5, 1)
    assert _refs("AmazonEC2-20180601-us-east-1.csv") == [
        ("aws-price-list-csv", "BoxUsage:p3.16xlarge|RunInstances", "us-east-1", "Hrs", "USD", D("24.48"), may, june,
         "retail", 1),
        ("aws-price-list-csv", "BoxUsage:p3.16xlarge|RunInstances:0002", "us-east-1", "Hrs", "USD", D("27.424"), may,
         june, "retail", 3),
    ]


def test_offer_json_and_get_products_pages() -> None:
    aug = datetime(2026, 8, 1)
    assert _refs("AmazonEC2-20260801-us-east-1.json") == [
        ("aws-price-list-json", "BoxUsage:p4d.24xlarge|RunInstances", "us-east-1", "Hrs", "USD", D("32.7726"), aug,
         aug, "retail", 1)]  # the reserved term beside it is not an on-demand price
    sep = datetime(2026, 9, 1)
    assert _refs("get-products-us-east-1.json") == [  # two pages, each PriceList entry a JSON string
        ("aws-get-products", "BoxUsage:p4d.24xlarge|RunInstances", "us-east-1", "Hrs", "USD", D("32.7726"), aug, sep,
         "retail", 1),
        ("aws-get-products", "BoxUsage:g5.xlarge|RunInstances", "us-east-1", "Hrs", "USD", D("1.006"), aug, sep,
         "retail", 2),
    ]


def test_sniffs_tell_the_files_apart_and_refuse_exports() -> None:
    got = {}
    for path in sorted(PRICES.iterdir()):
        head = path.read_bytes()[:65536]
        got[path.name] = [f.id for f in prices.FORMATS if f.sniff(path, head)]
    assert got == {"AmazonEC2-20180601-us-east-1.csv": ["aws-price-list-csv"],
                   "AmazonEC2-20260801-us-east-1.json": ["aws-price-list-json"],
                   "get-products-us-east-1.json": ["aws-get-products"]}
    cur = next(CUR_2018.rglob("*.csv"))
    assert not any(f.sniff(cur, cur.read_bytes()[:65536]) for f in prices.FORMATS)


def test_a_bad_price_names_the_file_row_and_column(tmp_path: Path) -> None:
    src = (PRICES / "AmazonEC2-20180601-us-east-1.csv").read_text()
    bad = tmp_path / "index.csv"
    bad.write_text(src.replace('"24.4800000000"', '"24,48"', 1))
    fmt = prices.FORMATS[0]
    with pytest.raises(InputError, match=r"index.csv, row 1, column 'PricePerUnit': '24,48' "
                                                              r"is not a price"):
        list(fmt.read(bad))


@pytest.mark.parametrize(("usage", "operation", "key"), [
    ("USE1-SpotUsage:p3.2xlarge", "RunInstances:SV001", "BoxUsage:p3.2xlarge|RunInstances"),
    ("SpotUsage:p3.2xlarge", "RunInstances:SV001", "BoxUsage:p3.2xlarge|RunInstances"),  # us-east-1, no prefix
    ("USW2-SpotUsage:g5.12xlarge", "RunInstances:0002:SV050", "USW2-BoxUsage:g5.12xlarge|RunInstances:0002"),
    ("USE1-BoxUsage:c5.large", "RunInstances", "BoxUsage:c5.large|RunInstances"),  # on demand: its own key
])
def test_a_spot_hour_and_its_on_demand_counterpart(usage: str, operation: str, key: str) -> None:
    con = duckdb.connect()
    rows = con.execute(
        f"WITH l AS (SELECT 'x' AS x_LineItemId, ? AS x_UsageType, ? AS x_Operation, 'us-west-2' AS RegionId, "
        f"'Hrs' AS PricingUnit, 'Hrs' AS ConsumedUnit, 'USD' AS BillingCurrency, 2.5 AS PricingQuantity, "
        f"2.5 AS ConsumedQuantity) {prices.keys_sql()}", [usage, operation]).fetchall()
    assert rows == [("x", key, "us-west-2", "Hrs", "USD", D("2.5"))]


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("prices") / "s.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([CUR_2018, PRICES])
        assert not rep.errors, rep.errors
        store.tag()
    return db


def _od(db: Path) -> dict[str, list[tuple[object, ...]]]:
    with billing_audit.open(db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT l.Tags['training_job'], l.x_UsageType, l.EffectiveCost, o.od_cost, o.od_source, o.od_unit_price "
            "FROM spot_od o JOIN line_items l USING (x_LineItemId) ORDER BY l.x_SourceRow").fetchall()
    out: dict[str, list[tuple[object, ...]]] = {}
    for job, *rest in rows:
        out.setdefault(job, []).append(tuple(rest))
    return out


def test_each_spot_line_gets_its_on_demand_equivalent(priced: Path) -> None:
    """detr-2018: 1 h, 1 h and 0.5 h of p3.16xlarge, public price 0 in the CUR, 24.48 an hour in the offer file:
    24.48, 24.48, 12.24.  yolo-2018: two p3.2xlarge hours priced by the bill's own on-demand p3.2xlarge line
    (6.12 for 2 h = 3.06 an hour); one p3.8xlarge hour nothing prices (NULL, never 0 or its spot price).
    bert-2018: one p3.8xlarge hour, unpriced.  The c5.large spot hour is not GPU compute: no spot line."""
    ref, bill = "reference", "bill"
    assert _od(priced) == {
        "detr-2018": [("USE1-SpotUsage:p3.16xlarge", D("7.344"), D("24.48"), ref, D("24.48")),
                      ("USE1-SpotUsage:p3.16xlarge", D("7.344"), D("24.48"), ref, D("24.48")),
                      ("USE1-SpotUsage:p3.16xlarge", D("3.672"), D("12.24"), ref, D("24.48"))],
        "yolo-2018": [("USE1-SpotUsage:p3.2xlarge", D("0.918"), D("3.06"), bill, D("3.06")),
                      ("USE1-SpotUsage:p3.2xlarge", D("0.918"), D("3.06"), bill, D("3.06")),
                      ("USE1-SpotUsage:p3.8xlarge", D("3.672"), None, None, None)],
        "bert-2018": [("USE1-SpotUsage:p3.8xlarge", D("3.672"), None, None, None)],
    }


def test_savings_and_erosion_fully_partly_and_not_priced(priced: Path) -> None:
    """Estimates at the defaults (checkpoint every 30 min: 15 min recomputed per interruption; 5 min restart).

    detr-2018, fully priced: spot 18.36, on demand 61.20, gross 42.84.  One interruption inferred (instance
    ...20180 stops, ...20181 takes over); 2.5 spot hours, 7.344 an hour: recompute 0.25 h x 7.344 = 1.836,
    idle 5/60 x 7.344 = 0.612, overhead 2.448; net 40.392; eroded 2.448 / 42.84 = 5.7143 %.

    yolo-2018, partly priced: spot 0.918 + 0.918 + 3.672 = 5.508, of which 3.672 unpriced; the priced 1.836 would
    cost 6.12 on demand: gross 4.284.  One restart fee (0.16, 1 restart); 3 spot hours, 5.508 / 3 = 1.836 an hour:
    recompute 0.459, idle 0.153, overhead 0.772; net 3.512; eroded 0.772 / 4.284 = 18.0205 %.

    bert-2018, not priced: 3.672 of spot, all unpriced: on-demand equivalent, savings and erosion n/a."""
    with billing_audit.open(priced, read_only=True) as store:
        rep = build_report(store, Config())
    jobs = {r["job"]: r for r in rep.jobs.iter_rows(named=True)}
    fields = ("spot_compute_cost", "spot_unpriced_cost", "on_demand_equivalent_cost", "gross_spot_savings",
              "hidden_overhead_total", "net_spot_savings")

    def money(job: str) -> tuple[object, ...]:
        return tuple(jobs[job][f] for f in fields)

    assert money("detr-2018") == (D("18.36"), 0, D("61.2"), D("42.84"), D("2.448"), D("40.392"))
    assert jobs["detr-2018"]["savings_eroded_pct"] == pytest.approx(2.448 / 42.84 * 100, abs=1e-9)
    assert money("yolo-2018") == (D("5.508"), D("3.672"), D("6.12"), D("4.284"), D("0.772"), D("3.512"))
    assert jobs["yolo-2018"]["savings_eroded_pct"] == pytest.approx(0.772 / 4.284 * 100, abs=1e-9)
    assert jobs["yolo-2018"]["recommendation"] == "review"
    assert any("3.67 USD of spot cost has no on-demand price" in r for r in jobs["yolo-2018"]["reasons"])
    bert = jobs["bert-2018"]
    assert money("bert-2018") == (D("3.672"), D("3.672"), None, None, D("0"), None)
    assert bert["savings_eroded_pct"] is None and bert["recommendation"] == "review"
    assert any("prices pull aws" in r for r in bert["reasons"])
    # totals: measured over detr and yolo only; coverage 20.196 of 27.54 USD of spot cost = 73.33 %
    (usd,) = rep.totals.iter_rows(named=True)
    assert (usd["spot_cost_priced"], usd["spot_unpriced_cost"]) == (D("20.196"), D("7.344"))
    assert usd["on_demand_equivalent_cost"] == D("67.32") and usd["gross_spot_savings"] == D("47.124")
    assert usd["savings_coverage_pct"] == pytest.approx(20.196 / 27.54 * 100)
    assert usd["savings_eroded_pct"] == pytest.approx((2.448 + 0.772) / 47.124 * 100)  # bert's 0 is not counted
    assert rep.warnings == ["savings measured for 73% of USD spot cost; 27% unpriced: run "
                            "`billing-audit prices pull aws`"]  # connectors/aws/prices_pull.py is installed


def test_the_bill_prices_a_cpu_spot_hour_the_way_a_2018_cur_allows(tmp_path: Path) -> None:
    """A team rule counts CPU spot as spot compute: SpotUsage:c5.large (0.0331, public price 0) has no price list
    here, but the bill holds BoxUsage:c5.large bought on demand at 0.085 for 1 h: 0.085, labelled as the bill's."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "TM100_cpu_spot.sql").write_text(
        "/*\nid: TM100\nname: spot_compute.cpu\ntitle: CPU spot hours\ncategory: spot_compute\nseverity: info\n"
        "providers: [aws]\ndescription: CPU spot instance hours.\n*/\n"
        "select x_LineItemId, 'cpu spot: ' || x_UsageType as reason from line_items "
        "where x_UsageType like '%SpotUsage:c5.%'\n")
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([CUR_2018]).errors
        store.tag(load_rules([rules]).rules)
        row = store.con.execute(
            "SELECT o.x_LineItemId, o.od_cost, o.od_source, o.od_unit_price, o.price_key, o.price_ref FROM spot_od o "
            "JOIN line_items l USING (x_LineItemId) WHERE l.x_UsageType = 'USE1-SpotUsage:c5.large'").fetchone()
        assert row is not None
        od = pricing.line(store.con, row[0])
    # the bill's lines behind the price are kept per key (spot_bill) and said by pricing.line (explain)
    assert row[1:] == (D("0.085"), "bill", D("0.085"), "BoxUsage:c5.large|RunInstances", None)
    assert od is not None and (od["price_ref"], od["price_as_of"]) == (
        "the bill: 1 on-demand line(s) of BoxUsage:c5.large|RunInstances in the store, 2018-06-14 to 2018-06-14",
        datetime(2018, 6, 14, 4))  # the end of the last on-demand line's charge period
