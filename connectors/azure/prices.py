"""Azure price references: on-demand VM prices for the spot lines of Azure bills (issue #16).

Azure prices a spot meter at the spot rate: ``PayGPrice`` (cost details) and ``ListCost`` (FOCUS) of a spot
line are the spot price (EA leaves ``PayGPrice`` empty for spot), so the export never says what the same hours
cost on demand.  The on-demand counterpart of a spot meter is the same VM size's meter without " Spot" (or
" Low Priority"), in the same region, type Consumption, for the same OS, in the same currency, per hour.

**The price key** both sides build: ``<meter name without the Spot / Low Priority suffix, lower case>|<os>``,
e.g. ``nc24ads a100 v4|linux``.  The meter name is what a bill line and a price list share: cost details
``MeterName`` (``SkuMeter`` in the store), Azure FOCUS ``SkuMeter`` / ``x_SkuMeterName``, the Retail Prices API
``meterName``, the price sheets' ``meterName`` (one meter can serve two sizes, "D4 v3/D4s v3": so it is in
both the bill and the list).  The OS is ``windows`` when the product (cost details ``ProductName``, the API's
``productName``, the price sheet's ``product``) or the meter subcategory says "Windows" (Windows VMs have their
own products and meters), else ``linux``.  The region is the ``armRegionName`` (``eastus``): a line's RegionId
or RegionName ("East US", "EastUS", "eastus" or the meter region "US East") is normalised to it.  The unit is
always ``1 Hour``: a price per "10 Hours" or "100 Hours" is divided down, a line's quantity multiplied up.
The currency is the line's BillingCurrency (the Retail Prices API converts from USD on request).

**Formats** (recognised from their content):

- ``azure-retail-prices``: a Retail Prices API response page saved as JSON (``{"BillingCurrency", "Items": [...],
  "NextPageLink", "Count"}``).  Only items of type Consumption, tier 0, of a Virtual Machines meter priced per
  hour that is not itself a Spot / Low Priority meter are on-demand prices; the rest (Reservation,
  DevTestConsumption, savings plans, spot meters, other services, a non-primary copy of a primary meter) are
  skipped and counted (``read(path).skipped``).  Kind ``retail``.
- ``azure-price-sheet-ea`` / ``azure-price-sheet-mca``: the account's own price sheet CSV (Cost Management price
  sheet download, camelCase or PascalCase, EA with ``partNumber`` / ``offerId``, MCA with ``marketPrice``):
  ``unitPrice`` of priceType Consumption is the account's negotiated price (kind ``negotiated``, which the core
  prefers to retail, and the source says so); an MCA (or newer EA) sheet's ``marketPrice`` of priceType
  Consumption is the pay-as-you-go price, read as a ``retail`` reference from the same row.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from billing_audit.errors import InputError
from billing_audit.prices import Kind, PriceFormat, PriceRef, keys_sql_of
from billing_audit.sql import lit

PROVIDER = "azure"
HOUR = "1 Hour"

# Meter regions ("US East") as cost details' MeterRegion, price sheets' meterRegion and the Retail Prices API's
# ``location`` write them -> armRegionName.  A display name ("East US") is the armRegionName with spaces.
METER_REGIONS: dict[str, str] = {
    "US East": "eastus", "US East 2": "eastus2", "US West": "westus", "US West 2": "westus2", "US West 3": "westus3",
    "US Central": "centralus", "US North Central": "northcentralus", "US South Central": "southcentralus",
    "US West Central": "westcentralus", "EU West": "westeurope", "EU North": "northeurope", "UK South": "uksouth",
    "UK West": "ukwest", "FR Central": "francecentral", "FR South": "francesouth", "DE West Central": "germanywestcentral",
    "DE North": "germanynorth", "CH North": "switzerlandnorth", "CH West": "switzerlandwest", "NO East": "norwayeast",
    "NO West": "norwaywest", "SE Central": "swedencentral", "SE South": "swedensouth", "PL Central": "polandcentral",
    "IT North": "italynorth", "ES Central": "spaincentral", "AP Southeast": "southeastasia", "AP East": "eastasia",
    "JA East": "japaneast", "JA West": "japanwest", "AU East": "australiaeast", "AU Southeast": "australiasoutheast",
    "AU Central": "australiacentral", "IN Central": "centralindia", "IN South": "southindia", "IN West": "westindia",
    "KR Central": "koreacentral", "KR South": "koreasouth", "CA Central": "canadacentral", "CA East": "canadaeast",
    "BR South": "brazilsouth", "ZA North": "southafricanorth", "AE North": "uaenorth", "QA Central": "qatarcentral",
    "IL Central": "israelcentral", "MX Central": "mexicocentral",
}
_REGION_BY_SQUASHED = {k.lower().replace(" ", ""): v for k, v in METER_REGIONS.items()}

_SPOT_SUFFIX = re.compile(r"\s+(spot|low priority)\s*$", re.IGNORECASE)
_HOURS = re.compile(r"^\s*(\d+)?\s*hours?\s*$", re.IGNORECASE)


def region_code(value: str | None) -> str | None:
    """``"US East"`` / ``"East US"`` / ``"EastUS"`` / ``"eastus"`` -> ``"eastus"``; empty -> None."""
    if value is None or not value.strip():
        return None
    squashed = value.strip().lower().replace(" ", "")
    return _REGION_BY_SQUASHED.get(squashed, squashed)


def is_spot_meter(meter: str) -> bool:
    return _SPOT_SUFFIX.search(meter) is not None


def os_of(*texts: str | None) -> str:
    """``windows`` when a product / subcategory text names Windows, else ``linux``."""
    return "windows" if any(t and "windows" in t.lower() for t in texts) else "linux"


def price_key(meter: str, os: str) -> str:
    """``("NC24ads A100 v4 Spot", "linux")`` -> ``"nc24ads a100 v4|linux"``."""
    base = _SPOT_SUFFIX.sub("", " ".join(meter.split()))
    return f"{base.lower()}|{os}"


def hours_per_unit(unit: str | None) -> int | None:
    """``"1 Hour"`` -> 1, ``"10 Hours"`` -> 10, ``"Hours"`` -> 1; not a unit of hours -> None."""
    m = _HOURS.match(unit or "")
    if not m:
        return None
    return int(m.group(1) or 1)


# -- what a bill line needs: keys_sql() over l (the line_items columns of Azure lines) ------------------

def _region_sql(expr: str) -> str:
    squashed = f"lower(replace(trim({expr}), ' ', ''))"
    arms = " ".join(f"WHEN {lit(k)} THEN {lit(v)}" for k, v in sorted(_REGION_BY_SQUASHED.items()))
    return f"CASE {squashed} {arms} ELSE nullif({squashed}, '') END"


_METER = "coalesce(nullif(trim(l.SkuMeter), ''), nullif(trim(split_part(l.x_UsageType, '|', 3)), ''))"
_VM = ("(lower(coalesce(nullif(trim(l.ServiceName), ''), split_part(l.x_UsageType, '|', 1))) = 'virtual machines' "
       "OR lower(split_part(coalesce(l.x_UsageType, ''), '|', 1)) = 'virtual machines')")
_HOURS_RE = r"^\s*(\d+)?\s*hours?\s*$"
_CONSUMED_HOURLY = f"regexp_matches(coalesce(l.ConsumedUnit, ''), {lit(_HOURS_RE)}, 'i')"
_PRICING_HOURLY = f"regexp_matches(coalesce(l.PricingUnit, ''), {lit(_HOURS_RE)}, 'i')"
# pay-as-you-go (MOSP 2019-11-01) usage details have no unit column: a VM meter's UsageQuantity is hours there,
# except for fee meters ("Spot Restart Fee"), which are counts
_NO_UNIT_HOURLY = (f"(l.ConsumedUnit IS NULL AND l.PricingUnit IS NULL AND NOT regexp_matches(coalesce({_METER}, ''), "
                   "'\\b(fee|charges?|restart)\\b', 'i'))")
_HOURLY = f"({_CONSUMED_HOURLY} OR {_PRICING_HOURLY} OR {_NO_UNIT_HOURLY})"


def _scale(unit: str) -> str:
    return f"CAST(coalesce(nullif(regexp_extract({unit}, {lit(_HOURS_RE)}, 1, 'i'), ''), '1') AS INTEGER)"


_SPOT_LINE = ("(coalesce(l.PricingCategory, '') = 'Dynamic' OR coalesce(l.x_PricingModel, '') IN ('Spot', 'Low Priority') "
              f"OR regexp_matches(coalesce({_METER}, ''), '\\s(spot|low priority)\\s*$', 'i'))")


def key_parts() -> tuple[dict[str, str], str]:
    """Per Azure VM usage line priced per hour: the key of its on-demand price (module docstring), the
    armRegionName, ``1 Hour``, the billing currency and the hours (a "10 Hours" quantity times 10), over ``l``,
    and the test a line passes to have one (:func:`billing_audit.prices.keys_sql_of`)."""
    meter = _METER
    base = f"lower(regexp_replace(regexp_replace(trim({meter}), '\\s+', ' ', 'g'), '\\s+(spot|low priority)\\s*$', '', 'i'))"
    os = ("CASE WHEN coalesce(l.ChargeDescription, '') ILIKE '%windows%' "
          "OR coalesce(split_part(l.x_UsageType, '|', 2), '') ILIKE '%windows%' THEN 'windows' ELSE 'linux' END")
    region = f"coalesce({_region_sql('l.RegionId')}, {_region_sql('l.RegionName')})"
    hours = (f"CASE WHEN {_CONSUMED_HOURLY} AND l.ConsumedQuantity IS NOT NULL "
             f"THEN CAST(l.ConsumedQuantity * {_scale('l.ConsumedUnit')} AS DECIMAL(38,12)) "
             f"WHEN {_PRICING_HOURLY} THEN CAST(l.PricingQuantity * {_scale('l.PricingUnit')} AS DECIMAL(38,12)) "
             "ELSE CAST(coalesce(l.PricingQuantity, l.ConsumedQuantity) AS DECIMAL(38,12)) END")
    return {
        "price_key": f"{base} || '|' || {os}",
        "region": region,
        "unit": lit(HOUR),
        "currency": "l.BillingCurrency",
        "quantity": hours,
    }, (f"l.ChargeCategory = 'Usage' AND {_VM} AND {meter} IS NOT NULL AND {_HOURLY} "
        "AND l.BillingCurrency IS NOT NULL")


def keys_sql() -> str:
    """The key of each Azure VM hour's on-demand price (:func:`key_parts`)."""
    return keys_sql_of(*key_parts())


def export_od_sql() -> str:
    """Never: a spot meter's PayGPrice / paygCostInBillingCurrency / FOCUS ListCost is the spot price (EA
    leaves it empty), and MOSP ResourceRate is the rate paid; none is an on-demand price."""
    return "CAST(NULL AS DECIMAL(38,12))"


def is_on_demand_sql() -> str:
    """A VM meter (not a Spot / Low Priority one) bought on demand: pay-as-you-go usage, not reserved or
    savings-plan usage, priced per hour."""
    return (f"(l.ChargeCategory = 'Usage' AND {_VM} AND NOT {_SPOT_LINE} "
            "AND coalesce(l.x_PricingModel, 'OnDemand') = 'OnDemand' "
            "AND coalesce(l.PricingCategory, 'Standard') = 'Standard' "
            f"AND {_HOURLY})")


# -- reading price files ---------------------------------------------------------------------------------

@dataclass
class Read:
    """The references of one file, as an iterator; ``skipped`` counts what was not an on-demand price, by why
    (filled as the iteration goes, complete when it ends)."""

    refs: Iterator[PriceRef]
    skipped: Counter[str] = field(default_factory=Counter)

    def __iter__(self) -> Iterator[PriceRef]:
        return self

    def __next__(self) -> PriceRef:
        return next(self.refs)


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise InputError(str(path), f"not a readable gzip file ({e})") from e
    return data


def _fetched_at(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(tzinfo=None)


def _time(file: str, row: int, column: str, value: object, required: bool = False) -> datetime | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(file, "empty (a date-time is needed)", row=row, column=column)
        return None
    if not isinstance(value, str):
        raise InputError(file, f"not a date-time: {value!r}", row=row, column=column)
    s = value.strip().replace("Z", "+00:00")
    s = re.sub(r"(\.\d{6})\d+", r"\1", s)
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        m = re.fullmatch(r"(\d{1,2})/(\d{1,2})/(\d{4})(?:\s.*)?", value.strip())  # M/D/YYYY (price sheet downloads)
        if not m:
            raise InputError(file, f"not a date-time: {value!r}", row=row, column=column) from None
        t = datetime(int(m.group(3)), int(m.group(1)), int(m.group(2)))
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _price(file: str, row: int, column: str, value: object) -> Decimal:
    if isinstance(value, bool) or value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(file, "empty (a price is needed)", row=row, column=column)
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise InputError(file, f"not a number: {value!r}", row=row, column=column) from None
    if not d.is_finite() or d < 0:
        raise InputError(file, f"not a price: {value!r}", row=row, column=column)
    return d


def _text(file: str, row: int, column: str, value: object, required: bool = True) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(file, "empty", row=row, column=column)
        return None
    if not isinstance(value, str):
        raise InputError(file, f"not text: {value!r}", row=row, column=column)
    return value.strip()


# Retail Prices API pages ---------------------------------------------------------------------------------

_RETAIL_HEAD = re.compile(rb'"(Items|NextPageLink|BillingCurrency|CustomerEntityType)"\s*:')


def _sniff_retail(path: Path, head: bytes) -> bool:
    keys = {m.group(1).decode() for m in _RETAIL_HEAD.finditer(head)}
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") and "Items" in keys and bool(
        keys & {"NextPageLink", "BillingCurrency", "CustomerEntityType"})


def read_retail(path: Path) -> Read:
    """A saved Retail Prices API page: its on-demand VM prices (module docstring); ``source_row`` is the item's
    1-based place in ``Items``."""
    file = str(path)
    try:
        page = json.loads(_raw(path).decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(file, f"not a JSON Retail Prices API page ({e})") from e
    if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
        raise InputError(file, "not a Retail Prices API page: no \"Items\" list", column="Items")
    items: list[Any] = page["Items"]
    fetched = _fetched_at(path)
    out = Read(iter(()))
    out.refs = _retail_refs(file, items, page.get("BillingCurrency"), fetched, out.skipped)
    return out


def _retail_refs(file: str, items: list[Any], page_currency: object, fetched: datetime,
                 skipped: Counter[str]) -> Iterator[PriceRef]:
    chosen: dict[tuple[Any, ...], tuple[PriceRef, bool, int]] = {}
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise InputError(file, "an item that is not an object", row=n, column="Items")
        kind = _text(file, n, "type", item.get("type"))
        if kind != "Consumption":
            skipped[f"type {kind}"] += 1
            continue
        # a Consumption item may list its savings-plan rates (``savingsPlan``) beside retailPrice: not read
        if _text(file, n, "serviceName", item.get("serviceName"), required=False) != "Virtual Machines":
            skipped["not Virtual Machines"] += 1
            continue
        tier = _price(file, n, "tierMinimumUnits", item.get("tierMinimumUnits", 0))
        if tier != 0:
            skipped["a higher tier"] += 1
            continue
        meter = _text(file, n, "meterName", item.get("meterName"))
        assert meter is not None
        if is_spot_meter(meter):
            skipped["a Spot / Low Priority meter"] += 1
            continue
        unit = _text(file, n, "unitOfMeasure", item.get("unitOfMeasure"))
        per = hours_per_unit(unit)
        if per is None:
            skipped[f"unit {unit}"] += 1
            continue
        currency = _text(file, n, "currencyCode", item.get("currencyCode"), required=False) or (
            page_currency if isinstance(page_currency, str) and page_currency else None)
        if currency is None:
            raise InputError(file, "empty, and the page has no BillingCurrency", row=n, column="currencyCode")
        price = _price(file, n, "retailPrice", item.get("retailPrice"))
        product = _text(file, n, "productName", item.get("productName"), required=False)
        region = region_code(_text(file, n, "armRegionName", item.get("armRegionName"), required=False))
        start = _time(file, n, "effectiveStartDate", item.get("effectiveStartDate"))
        sku = _text(file, n, "armSkuName", item.get("armSkuName"), required=False)
        ref = PriceRef(
            provider=PROVIDER, price_key=price_key(meter, os_of(product)), region=region, unit=HOUR,
            currency=currency.upper(), unit_price=price / per, effective_from=start, effective_to=None, kind="retail",
            source=f"{file} (Azure Retail Prices API page, meterId {item.get('meterId')})", source_row=n,
            fetched_at=fetched,
            description=" - ".join(x for x in (product, sku, meter, unit) if x),
        )
        primary = item.get("isPrimaryMeterRegion") is not False
        key = (ref.price_key, ref.region, ref.currency, ref.effective_from)
        old = chosen.get(key)
        if old is None:
            chosen[key] = (ref, primary, n)
            continue
        old_ref, old_primary, old_n = old
        if old_primary and not primary:
            skipped["a non-primary copy of a primary meter"] += 1
        elif primary and not old_primary:
            skipped["a non-primary copy of a primary meter"] += 1
            chosen[key] = (ref, primary, n)
        elif old_ref.unit_price == ref.unit_price:
            skipped["a duplicate"] += 1
        else:
            raise InputError(file, f"item {old_n} prices the same meter, region, currency and start at "
                                   f"{old_ref.unit_price} per hour, this one at {ref.unit_price}", row=n, column="retailPrice")
    for ref, _, _ in chosen.values():
        yield ref


# Price sheets ----------------------------------------------------------------------------------------------

def _header(head: bytes) -> list[str] | None:
    text = head.decode("utf-8-sig", errors="replace")
    first = text.splitlines()[0] if text else ""
    try:
        return [english(c) for c in next(csv.reader([first]))]
    except (csv.Error, StopIteration):
        return None


def english(name: str) -> str:
    """A header as a lower-case English name (``Preis (unitPrice)`` -> ``unitprice``)."""
    m = re.fullmatch(r".*\(\s*([A-Za-z][A-Za-z0-9_]*)\s*\)\s*", name)
    return (m.group(1) if m else name).strip().lower()


_SHEET_NEEDS = {"meterid", "metername", "unitprice", "unitofmeasure"}


def _is_sheet(cols: list[str] | None) -> bool:
    have = set(cols or [])
    return (have >= _SHEET_NEEDS and bool({"currency", "currencycode", "billingcurrency"} & have)
            and not {"costinbillingcurrency", "quantity", "date"} & have)  # cost details have prices too


def _sniff_ea(path: Path, head: bytes) -> bool:
    cols = _header(head)
    return _is_sheet(cols) and bool({"partnumber", "offerid", "enrollmentnumber"} & set(cols or []))


def _sniff_mca(path: Path, head: bytes) -> bool:
    cols = _header(head)
    return _is_sheet(cols) and not ({"partnumber", "offerid", "enrollmentnumber"} & set(cols or []))


def read_sheet(path: Path, agreement: str) -> Read:
    file = str(path)
    try:
        text = _raw(path).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(file, f"not UTF-8 text ({e})") from e
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        raw_header = next(reader)
    except StopIteration:
        raise InputError(file, "empty file") from None
    header = [english(c) for c in raw_header]
    missing = sorted(_SHEET_NEEDS - set(header))
    if missing:
        raise InputError(file, f"not a price sheet: no column {', '.join(missing)}", row=None, column=missing[0])
    fetched = _fetched_at(path)
    out = Read(iter(()))
    shown = dict(zip(header, (c.strip() for c in raw_header), strict=True))
    out.refs = _sheet_refs(file, header, shown, reader, agreement, fetched, out.skipped)
    return out


def _col(r: dict[str, str], shown: dict[str, str], *names: str) -> tuple[str, str]:
    """(the column as the file names it, its value) of the first of ``names`` the sheet has."""
    for c in names:
        if c in r:
            return shown[c], r[c]
    return names[0], ""


def _sheet_refs(file: str, header: list[str], shown: dict[str, str], reader: Any, agreement: str, fetched: datetime,
                skipped: Counter[str]) -> Iterator[PriceRef]:
    for n, values in enumerate(reader, 1):
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise InputError(file, f"{len(values)} fields where the header has {len(header)}", row=n)
        r = dict(zip(header, values, strict=True))

        def col(*names: str, r: dict[str, str] = r) -> tuple[str, str]:
            return _col(r, shown, *names)

        price_type = r.get("pricetype", "").strip()
        if price_type and price_type.lower() != "consumption":
            skipped[f"priceType {price_type}"] += 1
            continue
        if r.get("term", "").strip():
            skipped["a term (reservation / savings plan)"] += 1
            continue
        category = r.get("metercategory", "").strip()
        if category and category != "Virtual Machines":
            skipped["not Virtual Machines"] += 1
            continue
        tier_col, tier = col("tierminimumunits")
        if tier.strip() and _price(file, n, tier_col, tier) != 0:
            skipped["a higher tier"] += 1
            continue
        meter = _text(file, n, shown["metername"], r["metername"])
        assert meter is not None
        if is_spot_meter(meter):
            skipped["a Spot / Low Priority meter"] += 1
            continue
        unit = r["unitofmeasure"].strip()
        per = hours_per_unit(unit)
        if per is None:
            skipped[f"unit {unit or '(empty)'}"] += 1
            continue
        cur_col, currency = col("currency", "currencycode", "billingcurrency")
        currency = _text(file, n, cur_col, currency) or ""
        _, product = col("product", "productname")
        os = os_of(product, r.get("metersubcategory"))
        _, meter_region = col("meterregion")
        region = region_code(meter_region)
        _, start_s = col("effectivestartdate")
        _, end_s = col("effectiveenddate")
        start = _time(file, n, col("effectivestartdate")[0], start_s)
        end = _time(file, n, col("effectiveenddate")[0], end_s)
        if end is not None and end == end.replace(hour=0, minute=0, second=0, microsecond=0):
            end += timedelta(days=1)  # the sheet's last day, inclusive; effective_to is exclusive
        key = price_key(meter, os)
        desc = " - ".join(x for x in (product.strip(), meter, unit) if x)
        prices: list[tuple[Kind, str]] = [("negotiated", "unitprice")]
        if r.get("marketprice", "").strip():
            prices.append(("retail", "marketprice"))
        for kind, pcol in prices:
            price = _price(file, n, shown[pcol], r[pcol])
            what = ("the account's negotiated price (unitPrice)" if kind == "negotiated"
                    else "pay-as-you-go price (marketPrice)")
            yield PriceRef(
                provider=PROVIDER, price_key=key, region=region, unit=HOUR, currency=currency.upper(),
                unit_price=price / per, effective_from=start, effective_to=end, kind=kind,
                source=f"{file} ({agreement} price sheet, {what}, meterId {r['meterid'].strip()})", source_row=n,
                fetched_at=fetched, description=desc,
            )


FORMATS = [
    PriceFormat(id="azure-retail-prices", title="Azure Retail Prices API response page (JSON: Items, NextPageLink)",
                sniff=_sniff_retail, read=read_retail),
    PriceFormat(id="azure-price-sheet-ea", title="Azure EA price sheet (CSV: meterId, unitPrice, partNumber ...)",
                sniff=_sniff_ea, read=lambda p: read_sheet(p, "EA")),
    PriceFormat(id="azure-price-sheet-mca", title="Azure MCA price sheet (CSV: meterId, unitPrice, marketPrice ...)",
                sniff=_sniff_mca, read=lambda p: read_sheet(p, "MCA")),
]
