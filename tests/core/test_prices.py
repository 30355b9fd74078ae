"""Price references in the store (issue #16): loading (one transaction per file, re-ingest changes nothing, a
newer list replaces), recognition by ingest and audit, `prices list`, `prices pull`'s needs and cache, `explain`,
and the n/a shapes of savings nobody can measure.  The price files are the AWS fixtures (the only ones here)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit import app, pricing
from billing_audit.cli import main
from billing_audit.prices import PriceNeed
from support import FIXTURES, ROOT, writable_lines

PRICES = FIXTURES / "prices" / "aws"
CUR_2018 = FIXTURES / "aws" / "cur-2018-csv"
D = Decimal


def _gen() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_aws_prices", ROOT / "fixtures" / "gen_aws_prices.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _held(db: Path) -> list[tuple[object, ...]]:
    with billing_audit.open(db, read_only=True) as store:
        return store.con.execute("SELECT * FROM price_references ORDER BY ALL").fetchall()


def test_reingesting_a_price_file_changes_nothing(db: Path) -> None:
    r = _cli("prices", "ingest", str(PRICES / "AmazonEC2-20180601-us-east-1.csv"), "--db", str(db))
    assert r.exit_code == 0, r.output
    assert "1 price file(s) read (2 references: 2 new, 0 replaced)" in r.stderr
    before = _held(db)
    assert len(before) == 2
    r = _cli("prices", "ingest", str(PRICES), "--db", str(db))  # the folder: the same file and two more
    assert "3 price file(s) read (5 references: 2 new, 1 replaced), 1 unchanged" in r.stderr  # p4d, g5 new
    # the get_products page is a later publication of the offer file's p4d price: it replaces it, and says so
    assert "get-products-us-east-1.json: 1 price reference(s) of an older price list replaced" in r.stderr
    again = _held(db)
    r = _cli("prices", "ingest", str(PRICES), "--db", str(db))
    assert r.exit_code == 0 and "(5 references: 0 new, 0 replaced), 3 unchanged" in r.stderr
    assert _held(db) == again
    assert [x for x in again if x[1].startswith("BoxUsage:p3")] == before


def test_a_newer_price_list_replaces_the_older_and_an_older_one_does_not(tmp_path: Path, db: Path) -> None:
    """The same prices (same key and effective date) published on 2018-07-01 at 23.00 an hour replace the
    2018-06-01 list's 24.48; loading the June list afterwards keeps July's.  The spot lines are priced again at
    once: detr-2018's 2.5 hours cost 2.5 x 23.00 = 57.50 on demand."""
    gen = _gen()
    newer = gen.offer_2018(tmp_path / "july" / "index.csv", publication="2018-07-01T00:00:00Z",
                           version="20180701000000", price="23.0000000000")
    with billing_audit.open(db) as store:
        assert not store.ingest([CUR_2018, PRICES / "AmazonEC2-20180601-us-east-1.csv"]).errors
        store.tag()
    r = _cli("prices", "ingest", str(newer), "--db", str(db))
    assert r.exit_code == 0, r.output
    assert "2 price reference(s) of an older price list replaced" in r.stderr  # Linux and Windows
    assert "2 references: 0 new, 2 replaced" in r.stderr and "spot line(s) priced again" in r.stderr
    r = _cli("prices", "ingest", str(PRICES / "AmazonEC2-20180601-us-east-1.csv"), "--db", str(db))
    assert "2 price reference(s) older than those held; the newer ones stay" in r.stderr
    held = {(x[1], x[5], x[11]) for x in _held(db)}
    assert held == {("BoxUsage:p3.16xlarge|RunInstances", D("23"), datetime(2018, 7, 1)),
                    ("BoxUsage:p3.16xlarge|RunInstances:0002", D("27.424"), datetime(2018, 7, 1))}
    with billing_audit.open(db, read_only=True) as store:
        row = store.con.execute("SELECT sum(o.od_cost) FROM spot_od o JOIN line_items l USING (x_LineItemId) "
                                "WHERE l.Tags['training_job'] = 'detr-2018'").fetchone()
    assert row == (D("57.5"),)


def test_a_bad_price_file_loads_nothing_and_names_file_row_and_column(tmp_path: Path, db: Path) -> None:
    src = (PRICES / "AmazonEC2-20180601-us-east-1.csv").read_text()
    bad = tmp_path / "bad" / "index.csv"
    bad.parent.mkdir()
    lines = src.splitlines()
    lines[8] = lines[8].replace('"27.4240000000"', '"abc"')  # the Windows row, the third record
    bad.write_text("\n".join(lines) + "\n")
    r = _cli("prices", "ingest", str(bad), str(PRICES / "get-products-us-east-1.json"), "--db", str(db))
    assert r.exit_code == 2
    assert "index.csv, row 3, column 'PricePerUnit': 'abc' is not a price" in r.stderr
    assert {x[1] for x in _held(db)} == {"BoxUsage:p4d.24xlarge|RunInstances", "BoxUsage:g5.xlarge|RunInstances"}
    r = _cli("prices", "ingest", str(CUR_2018), "--db", str(db))  # an export is not a price file
    assert r.exit_code == 2 and "not a price file of any known format" in r.stderr


def test_ingest_and_audit_recognise_price_files_among_their_paths(tmp_path: Path) -> None:
    db = tmp_path / "a.duckdb"
    r = _cli("ingest", str(CUR_2018), str(PRICES), "--db", str(db))
    assert r.exit_code == 0, r.output
    assert ("1 file(s) ingested (12 lines), 3 price file(s) read (5 references: 4 new, 1 replaced)"
            in r.stderr)
    out = tmp_path / "out"
    r = _cli("audit", str(CUR_2018), str(PRICES), "--db", str(tmp_path / "b.duckdb"), "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "report.json").read_text())
    jobs = {j["job"]: j for j in doc["jobs"]}
    assert jobs["detr-2018"]["on_demand_equivalent_cost"] == "61.20" and jobs["detr-2018"]["gross_spot_savings"] == "42.84"
    # the n/a shapes: null in JSON, "n/a" in the CSV, never 0 nor a loss
    bert = jobs["bert-2018"]
    assert [bert[f] for f in ("on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings",
                              "savings_eroded_pct")] == [None, None, None, None]
    rows = {row["job"]: row for row in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    assert [rows["bert-2018"][f] for f in ("on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings",
                                           "savings_eroded_pct")] == ["n/a"] * 4
    assert rows["bert-2018"]["spot_unpriced_cost"] == "3.6720"
    usd = doc["totals"][0]
    assert (usd["spot_cost_priced"], usd["spot_unpriced_cost"], usd["savings_coverage_pct"]) == ("20.196", "7.344", 73.3333)
    # the HTML savings chart draws only the jobs whose savings are measured
    html = (out / "report.html").read_text()
    assert 'data-field="gross_spot_savings">n/a</dd>' in html
    charts = re.findall(r'<figure class="chart"[^>]*data-kind="savings".*?</figure>', html, re.DOTALL)
    drawn = [re.findall(r'<g class="row[^"]*" data-job="([^"]*)"', c) for c in charts]
    assert charts and all("bert-2018" not in d for d in drawn) and any("yolo-2018" in d for d in drawn)
    assert any("1 job with unmeasured savings (n/a: no on-demand price) left out." in c for c in charts)


@pytest.fixture
def tagged(db: Path) -> Path:
    with billing_audit.open(db) as store:
        assert not store.ingest([CUR_2018, PRICES]).errors
        store.tag()
    return db


def test_report_table_and_markdown_say_n_a(tagged: Path) -> None:
    r = _cli("report", "--db", str(tagged))
    assert r.exit_code == 0, r.output
    bert = next(line for line in r.stdout.splitlines() if "bert-2018" in line)
    cells = [c.strip() for c in bert.split("│")]
    header = next(line for line in r.stdout.splitlines() if "gross savings" in line)
    names = [c.strip() for c in header.split("┃")]
    shown = dict(zip(names, cells, strict=True))
    assert (shown["gross savings"], shown["net savings"], shown["erosion %"]) == ("n/a", "n/a", "n/a")
    assert "warning: savings measured for 73% of USD spot cost; 27% unpriced" in r.stderr
    r = _cli("report", "--db", str(tagged), "--format", "markdown")
    row = next(line for line in r.stdout.splitlines() if line.startswith("| bert-2018"))
    assert row.count("| n/a ") == 4


def test_prices_list_shows_references_and_coverage(tagged: Path) -> None:
    r = _cli("prices", "list", "--db", str(tagged), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(x["provider"], x["kind"], x["refs"], x["keys"], x["sources"]) for x in doc["references"]] == [
        ("aws", "retail", 4, 4, 2)]  # p3.16xlarge Linux and Windows, p4d, g5: the p4d offer's was replaced
    (cov,) = doc["coverage"]
    # spot 27.54: 18.36 by the price list, 1.836 by the bill, 7.344 unpriced (3 lines: yolo's and bert's p3.8xlarge)
    assert (cov["spot_lines"], D(cov["spot_cost"]), D(cov["priced_by_export"]), D(cov["priced_by_reference"]),
            D(cov["priced_by_bill"]), D(cov["unpriced"]), cov["unpriced_lines"]) == (
        7, D("27.54"), D("0"), D("18.36"), D("1.836"), D("7.344"), 2)


@pytest.mark.parametrize("folder", ["aws/cur-legacy-parquet", "scenarios"])
def test_coverage_counts_the_spot_lines_the_export_prices_which_spot_od_does_not_hold(db: Path, folder: str) -> None:
    """spot_od holds no row of a spot line the export prices; prices list's coverage still counts every spot line
    (by the categories), and its sums are those of every line's equivalent (pricing.od_rows_sql) by source."""
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES / folder]).errors
        s.tag()
        con = s.con
        assert con.execute("SELECT count(*) FROM spot_od WHERE od_source = 'export'").fetchone() == (0,)
        expected = con.execute(f"""SELECT o.x_Provider, l.BillingCurrency, count(*), sum(l.EffectiveCost),
                coalesce(sum(l.EffectiveCost) FILTER (WHERE o.od_source = 'export'), 0),
                coalesce(sum(l.EffectiveCost) FILTER (WHERE o.od_source = 'reference'), 0),
                coalesce(sum(l.EffectiveCost) FILTER (WHERE o.od_source = 'bill'), 0),
                coalesce(sum(l.EffectiveCost) FILTER (WHERE o.od_source IS NULL), 0),
                count(*) FILTER (WHERE o.od_source IS NULL)
            FROM ({pricing.od_rows_sql()}) o JOIN line_items l USING (x_LineItemId) GROUP BY ALL ORDER BY ALL""").fetchall()
        spot = con.execute("SELECT count(*) FROM line_categories WHERE category = 'spot_compute'").fetchone()[0]
        cov = pricing.coverage(con)
    assert [tuple(c.values()) for c in cov] == expected
    assert sum(c["spot_lines"] for c in cov) == spot > 0
    assert any(c["priced_by_export"] > 0 for c in cov)


def test_explain_says_how_the_on_demand_equivalent_was_found(tagged: Path) -> None:
    with billing_audit.open(tagged, read_only=True) as store:
        ids = dict(store.con.execute(
            "SELECT l.x_UsageType || '/' || l.Tags['training_job'], min(l.x_LineItemId) FROM line_items l "
            "WHERE l.x_UsageType LIKE '%SpotUsage%' GROUP BY 1").fetchall())
    r = _cli("explain", ids["USE1-SpotUsage:p3.16xlarge/detr-2018"], "--db", str(tagged))
    assert r.exit_code == 0, r.output
    assert ("on-demand equivalent: 24.4800 USD from reference: AmazonEC2-20180601-us-east-1.csv: AWS price list "
            "AmazonEC2 version 20180601000000 row 1 (retail price)") in r.stdout
    assert "BoxUsage:p3.16xlarge|RunInstances in us-east-1 (Hrs, USD): 24.480000000000 per Hrs" in r.stdout
    assert "price as of        2018-06-01 00:00" in r.stdout
    r = _cli("explain", ids["USE1-SpotUsage:p3.2xlarge/yolo-2018"], "--db", str(tagged))
    assert "on-demand equivalent: 3.0600 USD from bill: the bill: 1 on-demand line(s) of" in r.stdout
    r = _cli("explain", ids["USE1-SpotUsage:p3.8xlarge/bert-2018"], "--db", str(tagged))
    assert ("on-demand equivalent: n/a (no price reference of BoxUsage:p3.8xlarge|RunInstances in us-east-1 "
            "(Hrs, USD) covers 2018-06-14 01:00") in r.stdout


class _Puller:
    """A PricePuller of the contract, answering from the generator's get_products pages (the real pullers are
    the providers' prices_pull parts, tested against their protocol peers)."""

    name = "aws"
    help = "test"
    Options = dict

    def __init__(self) -> None:
        self.asked: list[list[PriceNeed]] = []

    def fetch(self, needs: list[PriceNeed], dest: Path, options: Any,
              progress: Callable[[str], None] | None) -> list[Path]:
        self.asked.append(needs)
        gen = _gen()
        items = []
        for n in needs:
            usage, op = n.price_key.split("|")
            p = gen.product("SKU" + str(len(items)), usage.split(":")[1], usage, op, "Linux")
            price = {"BoxUsage:p3.8xlarge": "12.2400000000", "BoxUsage:p3.2xlarge": "3.0600000000"}[usage]
            items.append(gen.get_products_item(p, price, "2018-01-01T00:00:00Z", "2018-06-20T00:00:00Z",
                                               "20180620000000", f"{usage} on demand"))
        out = dest / "page-1.json"
        out.write_text(json.dumps({"FormatVersion": "aws_v1", "PriceList": items}))
        return [out]


def test_prices_pull_fetches_what_the_spot_lines_need_then_nothing(tagged: Path) -> None:
    """Needed: p3.8xlarge (yolo's and bert's hours, unpriced) and p3.2xlarge (priced only by the bill).  Once
    pulled, bert costs 12.24 on demand for its hour, and a second pull needs and fetches nothing."""
    needs = app.prices_needs(str(tagged), "aws")
    assert [(n.price_key, n.region, n.unit, n.currency, n.lines, n.first, n.last) for n in needs] == [
        ("BoxUsage:p3.2xlarge|RunInstances", "us-east-1", "Hrs", "USD", 2, datetime(2018, 6, 13, 5),
         datetime(2018, 6, 13, 7)),
        ("BoxUsage:p3.8xlarge|RunInstances", "us-east-1", "Hrs", "USD", 2, datetime(2018, 6, 13, 7),
         datetime(2018, 6, 14, 2)),
    ]
    puller = _Puller()
    got = app.prices_pull(str(tagged), "aws", {}, puller=puller)
    assert got.files == [app.prices_cache(str(tagged), "aws") / "page-1.json"] and got.files[0].is_file()
    assert got.load is not None and (got.load.added, got.load.repriced) == (2, 7)
    with billing_audit.open(tagged, read_only=True) as store:
        assert pricing.needs(store.con, "aws") == []
        row = store.con.execute("SELECT o.od_cost, o.od_source FROM spot_od o JOIN line_items l USING (x_LineItemId) "
                                "WHERE l.Tags['training_job'] = 'bert-2018'").fetchone()
    assert row == (D("12.24"), "reference")
    again = app.prices_pull(str(tagged), "aws", {}, puller=puller)
    assert again.needs == [] and again.files == [] and len(puller.asked) == 1


def test_prices_pull_without_a_puller_says_what_to_do(tagged: Path) -> None:
    with pytest.raises(billing_audit.errors.BillingAuditError, match="cannot pull price references"):
        app.prices_pull(str(tagged), "focus", {})


@pytest.mark.parametrize("folder", ["aws/cur-2018-csv", "aws/cur-legacy-parquet", "aws/cur2", "azure/payg-parquet",
                                    "azure/ea-actual-csv", "gcp/resource-parquet", "scenarios"])
def test_the_bills_slices_in_one_pass_are_those_of_the_keys_joined_to_their_lines(db: Path, folder: str) -> None:
    """The bill's on-demand prices per slice as a full tag makes them (one pass over the lines bought on demand,
    each key beside its line's columns) are exactly those of every line's key joined back to its line by id; also
    with lines that must stay out (bought on demand at no cost, or of no quantity, or counted as spot)."""
    with billing_audit.open(db) as s:
        rep = s.ingest([FIXTURES / folder])
        assert rep.rows > 0 and not rep.errors
        s.tag()
        con = s.con
        cats = f"({pricing.categories_sql()})"
        spot = "(SELECT x_LineItemId FROM ba_spot)"

        def compare() -> tuple[Any, ...]:
            con.execute(f"CREATE OR REPLACE TEMP TABLE ba_spot AS {pricing.spot_sql('line_items', cats)}")
            con.execute("INSERT INTO ba_spot (x_LineItemId) SELECT x_LineItemId FROM ba_fake_spot")
            pricing.bill_keys(con, "line_items", "ba_keys")
            one_pass = pricing.bill_slices_one_pass_sql("line_items", spot)
            assert one_pass is not None
            joined = pricing.bill_slices_sql("ba_keys", cats, spot=spot)
            row = con.execute(f"SELECT (SELECT count(*) FROM ({joined})), (SELECT sum(n) FROM ({joined})), "
                              f"(SELECT count(*) FROM (({one_pass}) EXCEPT ALL ({joined}))), "
                              f"(SELECT count(*) FROM (({joined}) EXCEPT ALL ({one_pass})))").fetchone()
            assert row is not None
            return tuple(row)

        con.execute("CREATE TEMP TABLE ba_fake_spot (x_LineItemId VARCHAR)")
        slices, lines, *differ = compare()
        assert slices > 0 and differ == [0, 0]  # each of these bills buys instance hours on demand
        assert con.execute("SELECT count(*) FROM (SELECT * EXCLUDE (run_id) FROM spot_bill EXCEPT ALL "
                           f"({pricing.bill_slices_sql('ba_keys', cats, spot=spot)}))").fetchone() == (0,)
        billed = con.execute(f"SELECT k.x_LineItemId FROM ba_keys k JOIN line_items l USING (x_LineItemId) WHERE "
                             f"{pricing._on_demand_case()} AND k.quantity > 0 AND coalesce(l.EffectiveCost, "
                             "l.BilledCost) > 0 ORDER BY 1 LIMIT 2").fetchall()
        for suffix, zero in (("-free", "0 AS EffectiveCost, 0 AS BilledCost"),
                             ("-none", "0 AS PricingQuantity, 0 AS ConsumedQuantity")):
            con.execute(f"INSERT INTO {writable_lines(con)} BY NAME SELECT * REPLACE (x_LineItemId || '{suffix}' AS x_LineItemId, {zero}) "
                        "FROM line_items WHERE x_LineItemId = ?", [billed[0][0]])
        if len(billed) > 1:
            con.execute("INSERT INTO ba_fake_spot VALUES (?)", [billed[1][0]])
        _, lines_after, *differ = compare()
        assert differ == [0, 0] and lines_after == lines - (len(billed) > 1)


@pytest.mark.parametrize("folder", ["aws/cur-2018-csv", "aws/cur-legacy-parquet", "aws/cur2", "azure/payg-parquet",
                                    "azure/ea-actual-csv", "gcp/resource-parquet", "scenarios"])
def test_the_spot_lines_with_their_keys_in_one_pass_are_those_of_the_keys_joined_by_id(db: Path, folder: str) -> None:
    """A full tag's spot lines with their keys (pricing.spot_keyed_sql: picked by their hits' categories, the
    providers' key_parts() computed on them) are exactly the spot lines by their grouped categories with every
    line's key joined by id: also a spot line with a hit of a category before spot (not spot), one hit twice, and
    one whose usage has no key (kept, its key NULL); and the equivalents priced from them are the same."""
    with billing_audit.open(db) as s:
        rep = s.ingest([FIXTURES / folder])
        assert rep.rows > 0 and not rep.errors
        s.tag()
        con = s.con
        keyed = pricing.spot_keyed_sql()
        assert keyed is not None  # every provider here has key_parts()

        def differ() -> tuple[int, int, int, int]:
            cats = f"({pricing.categories_sql()})"
            con.execute(f"CREATE OR REPLACE TEMP TABLE ba_keys AS {pricing.keys_sql('line_items')}")
            joined = (f"SELECT s.*, k.price_key, k.region, k.unit, k.currency, k.quantity FROM "
                      f"({pricing.spot_sql('line_items', cats)}) s LEFT JOIN ba_keys k USING (x_LineItemId)")
            row = con.execute(f"SELECT (SELECT count(*) FROM ({joined})), "
                              f"(SELECT count(*) FROM ({joined}) WHERE price_key IS NULL), "
                              f"(SELECT count(*) FROM (({keyed}) EXCEPT ALL ({joined}))), "
                              f"(SELECT count(*) FROM (({joined}) EXCEPT ALL ({keyed})))").fetchone()
            assert row is not None
            return tuple(row)  # type: ignore[return-value]

        spot, _, *d = differ()
        assert spot > 0 and d == [0, 0]
        ids = [r[0] for r in con.execute("SELECT x_LineItemId FROM rule_hits WHERE category = 'spot_compute' "
                                         "ORDER BY 1 LIMIT 3").fetchall()]
        con.execute("INSERT INTO rule_hits SELECT x_LineItemId, 'test-fee', 'restart_fee', 'test', run_id "
                    "FROM rule_hits WHERE x_LineItemId = ? LIMIT 1", [ids[0]])  # a fee now: not spot
        con.execute("INSERT INTO rule_hits SELECT * REPLACE ('test-twice' AS rule_id) FROM rule_hits "
                    "WHERE x_LineItemId = ? AND category = 'spot_compute' LIMIT 1", [ids[1]])
        con.execute(f"UPDATE {writable_lines(con)} SET x_UsageType = 'no key', SkuMeter = NULL, ChargeDescription = NULL, "
                    "ServiceName = 'no key', ChargeCategory = 'Tax' WHERE x_LineItemId = ?", [ids[2]])
        spot_after, unkeyed, *d = differ()
        assert d == [0, 0] and spot_after == spot - 1 and unkeyed >= 1
        con.execute("BEGIN TRANSACTION")
        pricing.classify(con)  # priced from the keyed spot lines
        con.execute("CREATE TEMP TABLE ba_od_keyed AS SELECT * FROM ba_spot_od")
        pricing.classify(con, cats=f"({pricing.categories_sql()})")  # by the categories and keys joined back
        assert con.execute("SELECT count(*) FROM (SELECT * FROM ba_od_keyed EXCEPT ALL SELECT * FROM ba_spot_od) "
                           "UNION ALL SELECT count(*) FROM (SELECT * FROM ba_spot_od EXCEPT ALL "
                           "SELECT * FROM ba_od_keyed)").fetchall() == [(0,), (0,)]
        # the rows are those of the spot lines the export does not price; those it prices are said from the line
        # (pricing.export_rows_sql), by both ways of picking the spot lines alike, and both together are every one
        cats = f"({pricing.categories_sql()})"
        by_export = con.execute(f"SELECT count(*) FILTER (WHERE export_od IS NOT NULL) FROM "
                                f"({pricing.spot_sql('line_items', cats)})").fetchone()[0]
        assert con.execute("SELECT count(*) FROM ba_spot_od").fetchone() == (spot_after - by_export,)
        exported = pricing.export_rows_sql()
        assert con.execute(f"SELECT count(*) FROM ({exported})").fetchone() == (by_export,)
        assert con.execute(f"SELECT count(*) FROM ({exported}) WHERE od_source <> 'export' OR od_cost IS NULL "
                           "OR NOT (od_cost > 0) OR price_ref NOT LIKE 'the export: %'").fetchone() == (0,)
        # a tag run writes them into spot_od in the one statement: the same rows, with its run id
        assert pricing.build_spot_od(con, 424242) == spot_after - by_export
        assert con.execute("SELECT count(*) FROM (SELECT * FROM ba_od_keyed EXCEPT ALL SELECT * EXCLUDE (run_id) "
                           "FROM spot_od) UNION ALL SELECT count(*) FROM (SELECT * EXCLUDE (run_id) FROM spot_od "
                           "EXCEPT ALL SELECT * FROM ba_od_keyed) UNION ALL SELECT count(*) FROM spot_od "
                           "WHERE run_id IS DISTINCT FROM 424242").fetchall() == [(0,), (0,), (0,)]
        con.execute("ROLLBACK")


# price x quantity at the tiers of pricing._times: under 10^6 both (64-bit), under 10^8 / 10^7, and beyond
_TIER_VALUES = ["0", "1", "0.5", "2.123456789012", "3.000000000001", "0.000000000005", "0.00000000005",
                "0.12345678905", "0.12345678915", "1.00000000005", "999998.999999999999", "999999", "1000000.5",
                "99999998.999999999999", "9999998.99999999995", "9999999.00000000005", "123456789.123456789012"]


@pytest.mark.parametrize("sign", [1, -1])
def test_an_equivalent_is_the_price_times_the_quantity_rounded_once_at_every_size(sign: int) -> None:
    """Every tier of the product gives what Python's Decimal does: the quantity taken to 10 places, the exact
    product taken to 12, both half away from zero (DuckDB's and Spark's CAST and round).  Products up to 10^15
    (the wide tier's DECIMAL(38,22) holds under 10^16)."""
    import duckdb

    pairs = [(D(p), sign * D(q)) for p in _TIER_VALUES for q in _TIER_VALUES if D(p) * D(q) < D("1e15")]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (i INTEGER, p DECIMAL(38,12), q DECIMAL(38,12))")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, p, q) for i, (p, q) in enumerate(pairs)])
    got = dict(con.execute(f"SELECT i, {pricing._times('p', 'q')} FROM t").fetchall())
    for i, (p, q) in enumerate(pairs):
        want = (p * q.quantize(D("1e-10"), rounding=ROUND_HALF_UP)).quantize(D("1e-12"), rounding=ROUND_HALF_UP)
        assert got[i] == want, (p, q, got[i], want)
