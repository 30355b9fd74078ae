"""Azure price references: the Retail Prices API pages and price sheets read from the fixtures, the errors that
name file, row and field, and keys_sql over a real store ingested from the Azure fixtures (issue #16)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit.errors import InputError
from billing_audit.prices import COLUMNS, LINE_KEY_COLUMNS, PriceRef
from connectors.azure import prices
from support import FIXTURES

AP = FIXTURES / "prices" / "azure"
PAGE1 = AP / "retail-prices" / "vm-usd-page-1.json"
PAGE2 = AP / "retail-prices" / "vm-usd-page-2.json"
EUR = AP / "retail-prices" / "vm-eur-page-1.json"
MCA_SHEET = AP / "price-sheets" / "mca-price-sheet.csv"
EA_SHEET = AP / "price-sheets" / "ea-price-sheet.csv"
SCENARIO = FIXTURES / "azure-spot-scenario"
D = Decimal


def _fmt(path: Path) -> list[str]:
    head = path.read_bytes()[:65536]
    return [f.id for f in prices.FORMATS if f.sniff(path, head)]


def _read(path: Path) -> tuple[list[PriceRef], dict[str, int]]:
    (fmt,) = [f for f in prices.FORMATS if f.sniff(path, path.read_bytes()[:65536])]
    it = fmt.read(path)
    refs = list(it)
    return refs, dict(it.skipped)  # type: ignore[attr-defined]


def _short(refs: list[PriceRef]) -> set[tuple[object, ...]]:
    return {(r.price_key, r.region, r.unit, r.currency, r.unit_price, r.kind) for r in refs}


def test_each_file_is_recognised_as_its_format_and_nothing_else() -> None:
    assert _fmt(PAGE1) == _fmt(PAGE2) == _fmt(EUR) == ["azure-retail-prices"]
    assert _fmt(MCA_SHEET) == ["azure-price-sheet-mca"]
    assert _fmt(EA_SHEET) == ["azure-price-sheet-ea"]
    # cost details carry prices too, but they are bills, not price lists
    for f in SCENARIO.rglob("*.*"):
        assert _fmt(f) == [], f
    for f in (FIXTURES / "azure" / "ea-actual-csv").rglob("*.csv"):
        assert _fmt(f) == [], f


def test_retail_page_keeps_only_consumption_on_demand_vm_prices() -> None:
    refs, skipped = _read(PAGE1)
    assert _short(refs) == {
        ("nc24ads a100 v4|linux", "eastus", "1 Hour", "USD", D("3.673"), "retail"),
        ("nc24ads a100 v4|windows", "eastus", "1 Hour", "USD", D("3.857"), "retail"),  # the Windows product
        ("nc6s v3|linux", "eastus", "1 Hour", "USD", D("3.06"), "retail"),
        ("d4s v5|linux", "eastus", "1 Hour", "USD", D("0.192"), "retail"),  # its savingsPlan list is not read
    }
    # the page's ten items: four prices, the rest counted by why
    assert skipped == {"a Spot / Low Priority meter": 3, "type Reservation": 1, "type DevTestConsumption": 1,
                       "a non-primary copy of a primary meter": 1}
    a100 = next(r for r in refs if r.price_key == "nc24ads a100 v4|linux")
    assert a100.source_row == 1 and a100.effective_from is not None and a100.effective_from.isoformat() == "2024-03-01T00:00:00"
    assert a100.effective_to is None and a100.provider == "azure"
    assert "Azure Retail Prices API" in a100.source and str(PAGE1) in a100.source
    assert a100.description == "Virtual Machines NCadsA100v4 Series - Standard_NC24ads_A100_v4 - NC24ads A100 v4 - 1 Hour"
    assert len(a100.row()) == len(COLUMNS)


def test_second_page_and_other_currency() -> None:
    refs, skipped = _read(PAGE2)
    assert _short(refs) == {
        ("nc4as t4 v3|windows", "westeurope", "1 Hour", "USD", D("0.71"), "retail"),
        ("nc4as t4 v3|linux", "westeurope", "1 Hour", "USD", D("0.578"), "retail"),
        ("nc24ads a100 v4|linux", "westeurope", "1 Hour", "USD", D("4.039"), "retail"),
    }
    assert skipped == {"a Spot / Low Priority meter": 1}
    refs, _ = _read(EUR)
    assert _short(refs) == {("nc24ads a100 v4|linux", "eastus", "1 Hour", "EUR", D("3.37916"), "retail")}


def test_mca_sheet_gives_the_negotiated_price_and_the_market_price() -> None:
    refs, skipped = _read(MCA_SHEET)
    assert _short(refs) == {
        ("nc4as t4 v3|windows", "westeurope", "1 Hour", "USD", D("0.639"), "negotiated"),
        ("nc4as t4 v3|windows", "westeurope", "1 Hour", "USD", D("0.71"), "retail"),
    }
    assert skipped == {"priceType ReservedInstance": 1, "priceType SavingsPlan": 1, "not Virtual Machines": 1}
    neg = next(r for r in refs if r.kind == "negotiated")
    assert "negotiated price (unitPrice)" in neg.source and "MCA price sheet" in neg.source and neg.source_row == 1
    # the sheet's period: its last day (2026-10-31) included, effective_to exclusive
    assert neg.effective_from is not None and neg.effective_to is not None
    assert (neg.effective_from.isoformat(), neg.effective_to.isoformat()) == ("2026-10-01T00:00:00", "2026-11-01T00:00:00")


def test_ea_sheet_scales_a_ten_hour_unit_to_one_hour() -> None:
    refs, skipped = _read(EA_SHEET)
    assert _short(refs) == {
        ("d4s v5|linux", "eastus", "1 Hour", "USD", D("0.1728"), "negotiated"),
        ("d2s v5|windows", "eastus", "1 Hour", "USD", D("0.152"), "negotiated"),  # 1.52 per 10 Hours
    }
    assert skipped == {"priceType ReservedInstance": 1}
    assert all("EA price sheet" in r.source for r in refs)


def _page(tmp_path: Path, items: list[dict[str, object]]) -> Path:
    p = tmp_path / "page.json"
    p.write_text(json.dumps({"BillingCurrency": "USD", "CustomerEntityId": "Default", "Items": items,
                             "NextPageLink": None, "Count": len(items)}))
    return p


def _good_item() -> dict[str, object]:
    return dict(json.loads(PAGE1.read_text())["Items"][0])


@pytest.mark.parametrize(("field", "value", "why"), [
    ("retailPrice", "3,67", "not a number: '3,67'"),
    ("retailPrice", None, "empty (a price is needed)"),
    ("retailPrice", -1, "not a price: -1"),
    ("effectiveStartDate", "March 2024", "not a date-time: 'March 2024'"),
    ("type", None, "empty"),
    ("meterName", "", "empty"),
])
def test_retail_errors_name_file_item_and_field(tmp_path: Path, field: str, value: object, why: str) -> None:
    bad = _good_item() | {field: value}
    path = _page(tmp_path, [_good_item(), bad])
    with pytest.raises(InputError) as e:
        _read(path)
    assert (e.value.file, e.value.row, e.value.column) == (str(path), 2, field)
    assert str(e.value) == f"{path}, row 2, column {field!r}: {why}"


def test_retail_conflicting_prices_for_one_meter_are_refused(tmp_path: Path) -> None:
    path = _page(tmp_path, [_good_item(), _good_item() | {"retailPrice": 3.5}])
    with pytest.raises(InputError, match=r"row 2, column 'retailPrice': item 1 prices the same meter"):
        _read(path)


def test_retail_page_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('{"BillingCurrency": "USD", "Items": [{"meterName": "D4s v5"')
    assert _fmt(path) == ["azure-retail-prices"]
    with pytest.raises(InputError, match=r"cut.json: not a JSON Retail Prices API page"):
        _read(path)


def test_sheet_errors_name_file_row_and_column(tmp_path: Path) -> None:
    lines = MCA_SHEET.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("unitPrice")] = "n/a"
    path = tmp_path / "sheet.csv"
    path.write_text("\n".join([lines[0], lines[1], ",".join(row)]) + "\n")
    with pytest.raises(InputError) as e:
        _read(path)
    assert str(e.value) == f"{path}, row 2, column 'unitPrice': not a number: 'n/a'"
    row = lines[1].split(",")
    row[header.index("effectiveStartDate")] = "2026-13-01"
    path.write_text("\n".join([lines[0], ",".join(row)]) + "\n")
    with pytest.raises(InputError, match=r"row 1, column 'effectiveStartDate': not a date-time: '2026-13-01'"):
        _read(path)
    path.write_text(lines[0] + "\n" + ",".join(lines[1].split(",")[:-2]) + "\n")
    with pytest.raises(InputError, match=r"row 1: 24 fields where the header has 26"):
        _read(path)


@pytest.mark.parametrize(("text", "code"), [
    ("US East", "eastus"), ("East US", "eastus"), ("EastUS", "eastus"), ("eastus", "eastus"), ("EU West", "westeurope"),
    ("West Europe", "westeurope"), ("SE Central", "swedencentral"), ("US West 2", "westus2"), ("", None),
])
def test_region_names_normalise_to_arm_region_names(text: str, code: str | None) -> None:
    assert prices.region_code(text) == code


# -- keys_sql over a real store --------------------------------------------------------------------------

MOSP = FIXTURES / "azure" / "payg-mosp-csv"
EA = FIXTURES / "azure" / "ea-actual-csv"
FOCUS = FIXTURES / "focus" / "azure-focus-1.2"


@pytest.fixture
def keyed(db: Path) -> list[tuple[object, ...]]:
    with billing_audit.open(db) as store:
        report = store.ingest([SCENARIO, MOSP, EA, FOCUS])
        assert not report.errors, report.errors
        refs: list[PriceRef] = []
        for f in (PAGE1, PAGE2, MCA_SHEET, EA_SHEET):
            refs += _read(f)[0]
        store.con.execute("CREATE TEMP TABLE refs (price_key VARCHAR, region VARCHAR, unit VARCHAR, currency VARCHAR, "
                          "unit_price DECIMAL(38,12), kind VARCHAR)")
        store.con.executemany("INSERT INTO refs VALUES (?, ?, ?, ?, ?, ?)",
                              [(r.price_key, r.region, r.unit, r.currency, r.unit_price, r.kind) for r in refs])
        sql = (f"WITH l AS (SELECT * FROM line_items WHERE x_Provider = 'azure'), k AS ({prices.keys_sql()}) "
               "SELECT regexp_extract(li.x_SourceFile, 'fixtures/([^/]+/[^/]+)/', 1), li.SkuMeter, li.x_PricingModel, "
               "k.price_key, k.region, k.unit, k.currency, k.quantity, "
               "(SELECT string_agg(r.kind || ' ' || CAST(r.unit_price AS VARCHAR), ', ' ORDER BY r.kind) FROM refs r "
               " WHERE r.price_key = k.price_key AND r.region = k.region AND r.unit = k.unit AND r.currency = k.currency) "
               f"AS matched, {prices.is_on_demand_sql()} AS on_demand "
               "FROM k JOIN line_items li USING (x_LineItemId) JOIN l USING (x_LineItemId) ORDER BY ALL")
        cols = [c for c in store.con.execute(f"WITH l AS (SELECT * FROM line_items), k AS ({prices.keys_sql()}) "
                                             "SELECT * FROM k LIMIT 0").description]
        assert tuple(c[0] for c in cols) == LINE_KEY_COLUMNS
        rows = store.con.execute(sql).fetchall()
        # every Azure VM usage line priced per hour has a key; nothing else has one
        others = store.con.execute(
            f"WITH l AS (SELECT * FROM line_items WHERE x_Provider = 'azure'), k AS ({prices.keys_sql()}) "
            "SELECT DISTINCT coalesce(SkuMeter, '?') || ' / ' || coalesce(PricingUnit, '?') FROM l "
            "WHERE x_LineItemId NOT IN (SELECT x_LineItemId FROM k) AND ServiceName = 'Virtual Machines' "
            "AND ChargeCategory = 'Usage' ORDER BY 1").fetchall()
        assert others == [("Spot Restart Fee / 1 Restart",), ("Spot Restart Fee / ?",), ("Spot Restart Fee / Restarts",)]
        return rows


def test_keys_of_the_scenario_lines_match_the_price_files(keyed: list[tuple[object, ...]]) -> None:
    got = {r[1:9] + (r[9] is True,) for r in keyed if r[0] == "azure-spot-scenario/costexports"}
    assert got == {
        # Linux A100 spot in eastus: its on-demand counterpart, retail
        ("NC24ads A100 v4 Spot", "Spot", "nc24ads a100 v4|linux", "eastus", "1 Hour", "USD", D(10),
         "retail 3.673000000000", False),
        # Low Priority V100, located "US East", metered per "10 Hours": 0.8 x 10 hours
        ("NC6s v3 Low Priority", "Spot", "nc6s v3|linux", "eastus", "1 Hour", "USD", D(8),
         "retail 3.060000000000", False),
        # Windows T4 spot in westeurope: the MCA sheet's negotiated price and two retail ones (page, sheet)
        ("NC4as T4 v3 Spot", "Spot", "nc4as t4 v3|windows", "westeurope", "1 Hour", "USD", D(6),
         "negotiated 0.639000000000, retail 0.710000000000, retail 0.710000000000", False),
        # A100 spot in swedencentral and westus2: no price file covers them
        ("NC24ads A100 v4 Spot", "Spot", "nc24ads a100 v4|linux", "swedencentral", "1 Hour", "USD", D(5), None, False),
        ("ND96asr A100 v4 Spot", "Spot", "nd96asr a100 v4|linux", "westus2", "1 Hour", "USD", D(4), None, False),
        # the on-demand CI VM: its own key, and the bill's own on-demand price
        ("D4s v5", "OnDemand", "d4s v5|linux", "eastus", "1 Hour", "USD", D(24),
         "negotiated 0.172800000000, retail 0.192000000000", True),
    }


def test_keys_of_the_other_azure_formats(keyed: list[tuple[object, ...]]) -> None:
    got = {(r[0], r[1], r[3], r[4], r[9] is True) for r in keyed if r[0] != "azure-spot-scenario/costexports"}
    assert got == {
        # pay-as-you-go (MOSP): spot, Low Priority (no PricingModel: from the meter name) and on-demand
        ("azure/payg-mosp-csv", "NC24ads A100 v4 Spot", "nc24ads a100 v4|linux", "eastus", False),
        ("azure/payg-mosp-csv", "NC6s v3 Low Priority", "nc6s v3|linux", "eastus", False),
        ("azure/payg-mosp-csv", "NC24ads A100 v4", "nc24ads a100 v4|linux", "eastus", True),
        # EA cost details ("On Demand" with a space is on demand too)
        ("azure/ea-actual-csv", "NC24ads A100 v4 Spot", "nc24ads a100 v4|linux", "eastus", False),
        ("azure/ea-actual-csv", "NC24ads A100 v4", "nc24ads a100 v4|linux", "eastus", True),
        ("azure/ea-actual-csv", "D4s v5", "d4s v5|linux", "eastus", True),
        # Azure FOCUS: SkuMeter, RegionId, PricingUnit "Hours"; reserved hours have a key but are not on demand
        ("focus/azure-focus-1.2", "NC24ads A100 v4 Spot", "nc24ads a100 v4|linux", "eastus", False),
        ("focus/azure-focus-1.2", "NC24ads A100 v4", "nc24ads a100 v4|linux", "eastus", False),
        ("focus/azure-focus-1.2", "D4s v5", "d4s v5|linux", "eastus", True),
    }
    # every one of them finds its retail price
    found = {(r[3], r[4], r[8]) for r in keyed if r[0] != "azure-spot-scenario/costexports"}
    assert found == {("nc24ads a100 v4|linux", "eastus", "retail 3.673000000000"),
                     ("nc6s v3|linux", "eastus", "retail 3.060000000000"),
                     ("d4s v5|linux", "eastus", "negotiated 0.172800000000, retail 0.192000000000")}
    # a spot refund is no usage: no key (the refund's meter is a spot meter, its line a Credit)
    assert not [r for r in keyed if r[0] == "azure/ea-actual-csv" and r[7] is not None and D(str(r[7])) < 0]


def test_export_od_is_never_the_spot_price() -> None:
    assert prices.export_od_sql() == "CAST(NULL AS DECIMAL(38,12))"


def test_price_key_and_units() -> None:
    assert prices.price_key("NC24ads A100 v4 Spot", "linux") == "nc24ads a100 v4|linux"
    assert prices.price_key("D4 v3/D4s v3  Low Priority", "windows") == "d4 v3/d4s v3|windows"
    assert [prices.hours_per_unit(u) for u in ("1 Hour", "10 Hours", "100 Hours", "Hours", "1/Month", None)] == [
        1, 10, 100, 1, None, None]
