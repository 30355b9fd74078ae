"""GCP price references: the two price-file formats, their errors, and the line keys over a real store.

The price fixtures are ``fixtures/prices/gcp/`` (``fixtures/gen_gcp_prices.py``): a pricing export NDJSON of the
USD account of ``gcp/standard-ndjson`` and two Catalog API pages in EUR for ``gcp/resource-parquet``.
"""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import billing_audit
from billing_audit.errors import InputError
from billing_audit.prices import COLUMNS, PriceRef
from connectors.gcp import prices
from support import FIXTURES

PRICES = FIXTURES / "prices" / "gcp"
EXPORT = PRICES / "pricing-export" / "cloud_pricing_export-000000000000.json"
PAGE1 = PRICES / "catalog" / "skus-page-0001.json"
PAGE2 = PRICES / "catalog" / "skus-page-0002.json"
STANDARD = FIXTURES / "gcp" / "standard-ndjson"
RESOURCE = FIXTURES / "gcp" / "resource-parquet"
FOCUS = FIXTURES / "focus" / "gcp-focus-1.0"
AMERICAS = ["us-central1", "us-east1", "us-east4", "us-west1", "us-west4"]


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_gcp_prices", FIXTURES / "gen_gcp_prices.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _head(path: Path) -> bytes:
    return path.read_bytes()[:65536]


def _fmt(path: Path) -> list[str]:
    return [f.id for f in prices.FORMATS if f.sniff(path, _head(path))]


def _refs(path: Path) -> list[tuple[Any, ...]]:
    fmt = next(f for f in prices.FORMATS if f.sniff(path, _head(path)))
    return [(r.price_key, r.region, r.unit, r.currency, r.unit_price, r.kind) for r in fmt.read(path)]


# -- recognising the files -------------------------------------------------------------------------------------


def test_each_price_file_is_recognised_as_its_format_only(tmp_path: Path) -> None:
    assert _fmt(EXPORT) == ["gcp-pricing-export"]
    assert _fmt(PAGE1) == ["gcp-catalog-skus"]
    assert _fmt(PAGE2) == ["gcp-catalog-skus"]
    parquet = tmp_path / "cloud_pricing_export-000000000000.parquet"
    _gen().write_pricing_parquet(_gen().pricing_export_rows(), parquet)
    assert _fmt(parquet) == ["gcp-pricing-export"]
    # billing exports are not price files, and a price file is no billing export
    bill = next(STANDARD.rglob("*.json"))
    assert _fmt(bill) == []
    assert _fmt(next(RESOURCE.rglob("*.parquet"))) == []
    empty_page = tmp_path / "page.json"
    empty_page.write_text('{"skus": []}')
    assert _fmt(empty_page) == ["gcp-catalog-skus"] and _refs(empty_page) == []
    other = tmp_path / "other.json"
    other.write_text('{"Items": [{"retailPrice": 1}], "NextPageLink": null}')
    assert _fmt(other) == []


def test_a_parquet_footer_decides_only_what_it_cannot_hold(tmp_path: Path) -> None:
    """The footer's bytes rule out a parquet file that cannot be a pricing export without reading its schema; one
    whose footer holds the names only inside other names, or whose footer is unreadable, is still decided by its
    schema (not a price file), and the export's own parquet still is one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lookalike = tmp_path / "lookalike.parquet"
    pq.write_table(pa.table({"sku_id": ["a"], "list_price_usd": [1.0], "export_time_utc": ["x"]}), lookalike)
    assert prices._footer_may_name(lookalike, (b"sku", b"list_price"), (b"export_time",))
    assert _fmt(lookalike) == []
    cur = next((FIXTURES / "aws" / "cur2").rglob("*.parquet"))  # (a GCP billing export names them all: read)
    assert not prices._footer_may_name(cur, (b"sku", b"list_price"), (b"pricing_as_of_time", b"export_time"))
    assert _fmt(cur) == []
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + b"\0" * 64 + b"\xff\xff\xff\x7fPAR1")  # a footer longer than the file
    assert prices._footer_may_name(broken, (b"sku",), (b"x",)) and _fmt(broken) == []
    export = tmp_path / "cloud_pricing_export-000000000000.parquet"
    _gen().write_pricing_parquet(_gen().pricing_export_rows(), export)
    assert prices._footer_may_name(export, (b"sku", b"list_price"), (b"pricing_as_of_time", b"export_time"))


# -- the pricing export ----------------------------------------------------------------------------------------


def test_pricing_export_rows_give_list_and_account_prices_per_region() -> None:
    refs = _refs(EXPORT)
    a100 = [r for r in refs if r[0] == "nvidia tesla a100 gpu running in americas"]
    assert a100 == [("nvidia tesla a100 gpu running in americas", reg, "hour", "USD", Decimal("2.933908"), "retail")
                    for reg in AMERICAS]
    # the A2 core SKU is in the snapshots of 1 and 2 November: the later price wins
    cores = {r[4] for r in refs if r[0] == "a2 instance core running in americas"}
    assert cores == {Decimal("0.031611")}
    ram = [r for r in refs if r[0] == "a2 instance ram running in americas"]
    assert {r[2] for r in ram} == {"gibibyte hour"} and {r[4] for r in ram} == {Decimal("0.004237")}
    assert {r[1] for r in ram} == set(AMERICAS[:4])
    # billing_account_price differs from the list price only for N1 cores: one negotiated reference per region
    negotiated = [r for r in refs if r[5] == "negotiated"]
    assert negotiated == [("n1 predefined instance core running in americas", reg, "hour", "USD", Decimal("0.02845"),
                           "negotiated") for reg in AMERICAS]
    # a GLOBAL SKU (no regions) prices any region
    assert ("network inter region data transfer out from americas to emea", None, "gibibyte", "USD", Decimal("0.02"),
            "retail") in refs
    # the spot A100 and the A2 commitment are no on-demand prices
    assert not any("spot" in r[0] or "commitment" in r[0] for r in refs)
    counts = prices.read_counts(EXPORT)
    assert counts.skus == 8 and counts.replaced == 1
    assert counts.skipped == {"spot, preemptible or commitment SKU": 2}
    assert counts.references == len(refs) == 5 + 4 + 4 + 5 + 5 + 1


def test_pricing_export_reference_provenance() -> None:
    ref = next(r for r in prices.read_pricing_export(EXPORT) if r.region == "us-central1"
               and r.price_key.startswith("nvidia tesla a100"))
    assert ref.source == f"{EXPORT} (GCP pricing export, list_price)" and ref.source_row == 2
    assert ref.fetched_at == datetime(2026, 11, 2, tzinfo=UTC)
    assert ref.effective_from is None and ref.effective_to is None
    assert ref.description == "Nvidia Tesla A100 GPU running in Americas" and ref.provider == "gcp"
    assert len(ref.row()) == len(COLUMNS)


def test_parquet_extract_reads_like_the_ndjson(tmp_path: Path) -> None:
    parquet = tmp_path / "cloud_pricing_export-000000000000.parquet"
    _gen().write_pricing_parquet(_gen().pricing_export_rows(), parquet)
    assert sorted(_refs(parquet), key=str) == sorted(_refs(EXPORT), key=str)


def _export_row(**changes: Any) -> dict[str, Any]:
    row = json.loads(EXPORT.read_text().splitlines()[1])
    for path, value in changes.items():
        node = row
        *parents, last = path.split("__")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return row


def _write_rows(tmp_path: Path, *rows: dict[str, Any]) -> Path:
    f = tmp_path / "cloud_pricing_export.json"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_tiered_export_price_is_the_tier_from_zero_and_says_so(tmp_path: Path) -> None:
    row = _export_row()
    row["list_price"]["tiered_rates"] = [
        {"pricing_unit_quantity": 1.0, "start_usage_amount": "100", "usd_amount": "2.5", "account_currency_amount": "2.5"},
        {"pricing_unit_quantity": 1.0, "start_usage_amount": "0", "usd_amount": "3", "account_currency_amount": "3"},
    ]
    row["billing_account_price"] = row["list_price"]
    f = _write_rows(tmp_path, row)
    refs = list(prices.read_pricing_export(f))
    assert {r.unit_price for r in refs} == {Decimal(3)}
    assert refs[0].source.endswith("(GCP pricing export, list_price, tier starting at 0 of 2)")
    assert prices.read_counts(f).multi_tier == 1


def test_export_price_per_pricing_unit_quantity_and_in_usd_beside_the_account_currency(tmp_path: Path) -> None:
    row = _export_row(account_currency_code="EUR")
    row["list_price"]["tiered_rates"] = [{"pricing_unit_quantity": 10.0, "start_usage_amount": "0",
                                          "usd_amount": "29.33908", "account_currency_amount": "27.0915"}]
    row["billing_account_price"] = row["list_price"]
    refs = {(r.region, r.currency): r.unit_price for r in prices.read_pricing_export(_write_rows(tmp_path, row))}
    assert refs[("us-central1", "EUR")] == Decimal("2.70915")
    assert refs[("us-central1", "USD")] == Decimal("2.933908")


@pytest.mark.parametrize(("change", "column", "message"), [
    ({"list_price": None}, "list_price", "no price"),
    ({"list_price__tiered_rates__0__account_currency_amount": "N/A"}, "list_price.tiered_rates.account_currency_amount",
     "cannot read 'N/A' as a number"),
    ({"list_price__tiered_rates__0__start_usage_amount": "5"}, "list_price.tiered_rates.start_usage_amount",
     "no tier starts at 0"),
    ({"sku__description": None}, "sku.description", "the SKU has no description"),
    ({"pricing_as_of_time": "yesterday"}, "pricing_as_of_time", "cannot read 'yesterday' as a timestamp"),
    ({"account_currency_code": None}, "account_currency_code", "the row has no currency"),
])
def test_export_errors_name_file_row_and_field(tmp_path: Path, change: dict[str, Any], column: str,
                                               message: str) -> None:
    f = _write_rows(tmp_path, _export_row(), _export_row(**change))
    with pytest.raises(InputError) as e:
        list(prices.read_pricing_export(f))
    assert (e.value.file, e.value.row, e.value.column) == (str(f), 2, column)
    assert message in str(e.value)
    assert str(e.value).startswith(f"{f}, row 2, column {column!r}: ")


def test_export_line_that_is_not_json(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text(json.dumps(_export_row()) + "\n{not json\n")
    with pytest.raises(InputError, match=r", row 2: not a JSON object"):
        list(prices.read_pricing_export(f))


# -- the Catalog API pages -------------------------------------------------------------------------------------


def test_catalog_pages_units_nanos_on_demand_only() -> None:
    page1, page2 = _refs(PAGE1), _refs(PAGE2)
    # units "10" + nanos 230325000
    assert page1 == [("nvidia h100 80gb gpu running in emea", reg, "hour", "EUR", Decimal("10.230325"), "retail")
                     for reg in ("europe-west1", "europe-west4")]
    assert prices.read_counts(PAGE1).skipped == {"usageType Preemptible": 1, "usageType Commit1Yr": 1}
    # units left out (0) + nanos 18269200
    assert ("a3 instance core running in emea", "europe-west4", "hour", "EUR", Decimal("0.0182692"), "retail") in page2
    assert ("nvidia tesla a100 gpu running in emea", "europe-west4", "hour", "EUR", Decimal("3.4105"), "retail") in page2
    egress = [r for r in prices.read_catalog(PAGE2) if r.price_key.startswith("network internet")]
    assert {r.unit_price for r in egress} == {Decimal("0.115425")} and {r.unit for r in egress} == {"gibibyte"}
    assert egress[0].source.endswith("skus/C3D5-1A8E-0B23, tier starting at 0 of 3)")
    assert egress[0].fetched_at == datetime(2026, 11, 2, 7, 14, 3, 412518, tzinfo=UTC)
    assert prices.read_counts(PAGE2).multi_tier == 1 and prices.read_counts(PAGE2).skipped == {}


def _page(tmp_path: Path, edit: Any) -> Path:
    page = json.loads(PAGE2.read_text())
    edit(page["skus"][1])
    f = tmp_path / "page.json"
    f.write_text(json.dumps(page))
    return f


def _set(path: str, value: Any) -> Any:
    def edit(sku: dict[str, Any]) -> None:
        node: Any = sku
        *parents, last = path.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return edit


RATE = "pricingInfo.0.pricingExpression.tieredRates.0"


@pytest.mark.parametrize(("path", "value", "column", "message"), [
    (f"{RATE}.unitPrice.nanos", "410500000", "skus[1].pricingInfo[0].pricingExpression.tieredRates[0].unitPrice.nanos",
     "cannot read '410500000' as nanos"),
    (f"{RATE}.unitPrice.nanos", 1_000_000_000, "skus[1].pricingInfo[0].pricingExpression.tieredRates[0].unitPrice.nanos",
     "cannot read 1000000000 as nanos"),
    (f"{RATE}.unitPrice.units", "3.4", "skus[1].pricingInfo[0].pricingExpression.tieredRates[0].unitPrice.units",
     "cannot read '3.4' as whole units"),
    (f"{RATE}.unitPrice.currencyCode", None,
     "skus[1].pricingInfo[0].pricingExpression.tieredRates[0].unitPrice.currencyCode", "no currencyCode"),
    (f"{RATE}.startUsageAmount", 10, "skus[1].pricingInfo[0].pricingExpression.tieredRates", "no tier starts at 0"),
    ("category.usageType", None, "skus[1].category.usageType", "the SKU has no category.usageType"),
    ("pricingInfo.0.effectiveTime", "soon", "skus[1].pricingInfo[0].effectiveTime", "cannot read 'soon' as a timestamp"),
    ("pricingInfo", [], "skus[1].pricingInfo", "the SKU has no pricingInfo"),
])
def test_catalog_errors_name_file_sku_and_field(tmp_path: Path, path: str, value: Any, column: str, message: str) -> None:
    f = _page(tmp_path, _set(path, value))
    with pytest.raises(InputError) as e:
        list(prices.read_catalog(f))
    assert (e.value.file, e.value.row, e.value.column) == (str(f), 2, column)
    assert message in str(e.value)


def test_catalog_file_without_skus_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "page.json"
    f.write_text('{"services": []}')
    with pytest.raises(InputError, match=r"column 'skus': not a Catalog API skus page"):
        list(prices.read_catalog(f))


# -- the key mapping -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spot", "on_demand"), [
    ("Spot Preemptible Nvidia A100 80GB GPU running in Americas", "Nvidia A100 80GB GPU running in Americas"),
    ("Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas", "Nvidia Tesla A100 GPU running in Americas"),
    ("Spot Preemptible A2 Instance Core running in Americas", "A2 Instance Core running in Americas"),
    ("Preemptible N1 Predefined Instance Ram running in APAC", "N1 Predefined Instance Ram running in APAC"),
    ("Nvidia Tesla T4 GPU attached to preemptible VMs running in EMEA", "Nvidia Tesla T4 GPU running in EMEA"),
    ("SSD backed Local Storage attached to Spot Preemptible VMs in EMEA", "SSD backed Local Storage in EMEA"),
    ("TPU v5e  Spot Preemptible chip-hours running in Americas", "TPU v5e chip-hours running in Americas"),
])
def test_spot_sku_maps_to_its_on_demand_counterpart(spot: str, on_demand: str) -> None:
    assert prices.counterpart_key(spot) == prices.normalise(on_demand) == prices.counterpart_key(on_demand)


def _load_refs(store: billing_audit.Store, refs: list[PriceRef]) -> None:
    cols = ", ".join(f"{c} {t}" for c, t, _ in COLUMNS)
    store.con.execute(f"CREATE TEMP TABLE refs ({cols})")
    store.con.executemany(f"INSERT INTO refs VALUES ({', '.join('?' * len(COLUMNS))})", [r.row() for r in refs])


def _keyed(store: billing_audit.Store) -> list[tuple[Any, ...]]:
    """Each keyed line with its usage type, whether it is on demand, the export's own on-demand cost, and the
    reference price it matches (key, region or any, unit, currency), as the core would join them."""
    return store.con.execute(f"""
        WITH l AS (SELECT * FROM line_items WHERE x_Provider = 'gcp'),
             k AS ({prices.keys_sql()})
        SELECT l.x_UsageType, l.RegionId, k.unit, k.currency, k.quantity, {prices.is_on_demand_sql()} AS od,
               {prices.export_od_sql()} AS export_od,
               (SELECT list(DISTINCT r.unit_price) FROM refs r WHERE r.price_key = k.price_key
                  AND (r.region IS NULL OR r.region = k.region) AND r.unit = k.unit AND r.currency = k.currency
                  AND r.kind = 'retail') AS price
        FROM k JOIN l USING (x_LineItemId)
        ORDER BY l.x_SourceFile, l.x_SourceRow""").fetchall()


def test_keys_match_the_references_of_the_fixture_price_files(tmp_path: Path) -> None:
    refs = [*prices.read_pricing_export(EXPORT), *prices.read_catalog(PAGE1), *prices.read_catalog(PAGE2)]
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        assert not store.ingest([STANDARD, RESOURCE]).errors
        _load_refs(store, refs)
        rows = _keyed(store)
        unkeyed = store.con.execute(f"""
            WITH l AS (SELECT * FROM line_items WHERE x_Provider = 'gcp')
            SELECT DISTINCT x_UsageType FROM l WHERE x_LineItemId NOT IN (SELECT x_LineItemId FROM ({prices.keys_sql()}))
            ORDER BY 1""").fetchall()
    by_sku: dict[str, set[tuple[Any, ...]]] = {}
    for sku, region, unit, cur, qty, od, export_od, price in rows:
        assert export_od is None  # a GCP export never carries a spot line's on-demand cost
        by_sku.setdefault(sku, set()).add((region, unit, cur, qty, od, tuple(price or ())))
    d = Decimal
    # the US account (pricing export): GPU, cores and RAM of us-central1
    assert by_sku["Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas"] == {
        ("us-central1", "hour", "USD", d(8), False, (d("2.933908"),))}
    assert by_sku["Spot Preemptible A2 Instance Core running in Americas"] == {
        ("us-central1", "hour", "USD", d(96), False, (d("0.031611"),))}
    assert by_sku["Spot Preemptible A2 Instance Ram running in Americas"] == {
        ("us-central1", "gibibyte hour", "USD", d(4170), False, (d("0.004237"),))}
    # the EUR account (Catalog pages): GPU and cores of europe-west4, both A100 description styles
    assert by_sku["Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in EMEA"] == {
        ("europe-west4", "hour", "EUR", d(8), False, (d("10.230325"),))}
    assert by_sku["Spot Preemptible A3 Instance Core running in EMEA"] == {
        ("europe-west4", "hour", "EUR", d(208), False, (d("0.0182692"),))}
    assert by_sku["Spot Preemptible Nvidia Tesla A100 GPU running in EMEA"] == {
        ("europe-west4", "hour", "EUR", d(1), False, (d("3.4105"),))}
    # spot lines nothing prices: local SSD, TPU chips
    assert by_sku["SSD backed Local Storage attached to Spot Preemptible VMs in EMEA"] == {
        ("europe-west4", "gibibyte month", "EUR", d("0.00959"), False, ())}
    assert by_sku["Spot Preemptible TPU v5e chip running in Americas"] == {("us-west4", "hour", "USD", d(8), False, ())}
    # bought on demand at its price: the A100; not the cores with sustained-use and promotion credits, nor the
    # CUD-covered ones (their cost over their quantity is no on-demand price)
    assert by_sku["Nvidia Tesla A100 GPU running in Americas"] == {
        ("us-central1", "hour", "USD", d(1), True, (d("2.933908"),))}
    assert by_sku["A2 Instance Core running in Americas"] == {("us-central1", "hour", "USD", d(96), False, (d("0.031611"),))}
    assert by_sku["A3 Instance Core running in EMEA"] == {
        ("europe-west4", "hour", "EUR", d(208), False, (d("0.0182692"),))}  # flexible CUD consumption model
    # the global egress SKU prices the us-central1 line
    assert by_sku["Network Inter Region Data Transfer Out from Americas to EMEA"] == {
        ("us-central1", "gibibyte", "USD", d(120), True, (d("0.02"),))}
    # no key: restart fees, the commitment fee, month-level lines, the standalone credit (no usage)
    assert [u for (u,) in unkeyed] == [
        "A2 Instance Core running in Americas", "Commitment v1: A2 Cpu in Americas for 1 Year",
        "Invoice rounding error", "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
        "Spot Preemptible TPU v5e chip preemption overhead running in Americas", "Tax"]


def test_keys_of_a_gcp_focus_export_read_the_same(tmp_path: Path) -> None:
    """GCP's FOCUS export writes units as ``Hours`` / ``GiBy.h``: the keys and units are those of the billing export."""
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        assert not store.ingest([FOCUS]).errors
        rows = store.con.execute(f"""
            WITH l AS (SELECT * FROM line_items WHERE x_Provider = 'gcp')
            SELECT k.price_key, k.region, k.unit, k.currency, k.quantity FROM ({prices.keys_sql()}) k
            JOIN l USING (x_LineItemId) WHERE l.PricingCategory = 'Dynamic' ORDER BY l.x_SourceRow""").fetchall()
    assert rows[:3] == [
        ("nvidia tesla a100 gpu running in americas", "us-central1", "hour", "EUR", Decimal(1)),
        ("a2 instance core running in americas", "us-central1", "hour", "EUR", Decimal(12)),
        ("a2 instance ram running in americas", "us-central1", "gibibyte hour", "EUR", Decimal(85)),
    ]
