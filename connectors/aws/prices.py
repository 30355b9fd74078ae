"""AWS price references: the AWS Price List files, and how an EC2 spot line finds its on-demand counterpart.

Files read (recognised from their content, see :data:`FORMATS`):

- **Bulk API offer file, CSV** (``.../offers/v1.0/aws/AmazonEC2/<version>/<region>/index.csv``): five metadata
  rows (``FormatVersion``, ``Disclaimer``, ``Publication Date``, ``Version``, ``OfferCode``), then the header
  ``SKU, OfferTermCode, RateCode, TermType, PriceDescription, EffectiveDate, StartingRange, EndingRange, Unit,
  PricePerUnit, Currency, ...`` with the product attributes (``usageType``, ``operation``, ``Location``,
  ``Region Code``, ``Tenancy``, ``Operating System``, ``CapacityStatus``, ...);
- **Bulk API offer file, JSON** (``index.json``): ``{formatVersion, offerCode, version, publicationDate,
  products: {sku: {attributes}}, terms: {OnDemand: {sku: {offerTermCode: {effectiveDate, priceDimensions:
  {rateCode: {unit, pricePerUnit: {USD}, beginRange, ...}}}}}}}``;
- **Query API** ``pricing.get_products`` responses as saved (boto3's answer without ``ResponseMetadata``):
  ``{"FormatVersion": "aws_v1", "PriceList": ["<one product with its terms, as a JSON string>", ...]}``, or a
  list of such pages.

Only what a spot line's counterpart can be is kept: on-demand (``TermType`` OnDemand) instance hours
(``BoxUsage``) of shared tenancy and used capacity (not capacity reservations), first price tier.

**The key** of an instance-hour price is ``<usage type>|<operation>``: a spot line ``USE1-SpotUsage:p3.2xlarge``
with operation ``RunInstances:SV001`` (Linux/UNIX spot in availability zone 001) has the counterpart
``BoxUsage:p3.2xlarge|RunInstances``; ``RunInstances:0002:SV050`` (Windows) has ``...|RunInstances:0002``.
US East (N. Virginia) usage types have no region prefix in the price list (``BoxUsage:p3.2xlarge``) but may
carry ``USE1-`` in a bill; the prefix is dropped on both sides.  Region: the region code; unit ``Hrs``; currency
the price's (USD; CNY in the China regions), which must be the line's billing currency.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from billing_audit.errors import InputError
from billing_audit.prices import PriceFormat, PriceRef, keys_sql_of

PROVIDER = "aws"

_BOX = re.compile(r"(^|-)BoxUsage:")
_META = ("formatversion", "disclaimer", "publication date", "version", "offercode")


def canonical_usage_type(usage_type: str) -> str:
    """The price list's form of a usage type: US East (N. Virginia) without its ``USE1-`` prefix."""
    return usage_type[5:] if usage_type.startswith("USE1-") else usage_type


def _time(value: str | None, shown: str, row: int | None, field: str) -> datetime | None:
    if value is None or not str(value).strip():
        return None
    text = str(value).strip().replace("Z", "+00:00")
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(shown, f"{value!r} is not a date", row=row, column=field) from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _price(value: Any, shown: str, row: int | None, field: str) -> Decimal:
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise InputError(shown, f"{value!r} is not a price", row=row, column=field) from None
    if not d.is_finite() or d < 0:
        raise InputError(shown, f"{value!r} is not a price", row=row, column=field)
    return d


def _wanted(attrs: dict[str, str]) -> bool:
    """An on-demand instance hour of shared tenancy and used capacity: what a spot hour's counterpart is."""
    usage = attrs.get("usagetype") or ""
    if not _BOX.search(usage) or not attrs.get("operation"):
        return False
    if (attrs.get("tenancy") or "Shared") != "Shared":
        return False
    return (attrs.get("capacitystatus") or "Used") == "Used"


def _first_tier(begin: Any) -> bool:
    return begin in (None, "") or str(begin).strip() in ("0", "0.0", "0.00")


def _ref(attrs: dict[str, str], unit: str | None, currency: str, price: Decimal, effective: datetime | None,
         source: str, row: int, fetched: datetime, description: str | None) -> PriceRef:
    return PriceRef(
        provider=PROVIDER,
        price_key=f"{canonical_usage_type(attrs['usagetype'])}|{attrs['operation']}",
        region=attrs.get("regioncode") or None,
        unit=unit,
        currency=currency,
        unit_price=price,
        effective_from=effective,
        effective_to=None,
        kind="retail",
        source=source,
        source_row=row,
        fetched_at=fetched,
        description=description,
    )


# -- the CSV offer file ---------------------------------------------------------------------------------------------
def _text_head(head: bytes) -> str:
    return head.decode("utf-8-sig", errors="replace").lstrip()


def _sniff_csv(path: Path, head: bytes) -> bool:
    text = _text_head(head)
    return (text.startswith('"FormatVersion",') or text.startswith("FormatVersion,")) and "OfferCode" in text \
        and bool(re.search(r'^"?SKU"?,"?OfferTermCode"?,"?RateCode"?', text, re.MULTILINE))


def _open_text(path: Path) -> io.TextIOWrapper:
    import gzip

    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


# CSV header -> the JSON attribute names (the CSV spells them as titles: "Region Code", "Operating System")
_CSV_ATTRS = {"usagetype": "usagetype", "operation": "operation", "regioncode": "regioncode", "tenancy": "tenancy",
              "capacitystatus": "capacitystatus", "location": "location", "instancetype": "instancetype",
              "operatingsystem": "operatingSystem"}


def _read_csv(path: Path) -> Iterator[PriceRef]:
    shown = str(path)
    with _open_text(path) as f:
        reader = csv.reader(f)
        meta: dict[str, str] = {}
        for n in range(5):
            rec = next(reader, None)
            if rec is None or len(rec) < 2:
                raise InputError(shown, "an AWS price list CSV starts with five metadata rows (FormatVersion, "
                                        "Disclaimer, Publication Date, Version, OfferCode)", row=n + 1)
            meta[rec[0].strip().lower()] = rec[1].strip()
        missing = [m for m in _META if m not in meta]
        if missing:
            raise InputError(shown, f"the metadata rows lack {', '.join(missing)}")
        fetched = _time(meta["publication date"], shown, 3, "Publication Date")
        assert fetched is not None
        header = next(reader, None)
        if not header:
            raise InputError(shown, "no column header after the metadata rows", row=6)
        cols = {_norm(h): i for i, h in enumerate(header)}
        need = ["sku", "termtype", "effectivedate", "unit", "priceperunit", "currency", "usagetype", "operation"]
        lacking = [h for h in need if h not in cols]
        if lacking:
            raise InputError(shown, f"the column header lacks {', '.join(lacking)}", row=6)
        source = f"{path.name}: AWS price list {meta['offercode']} version {meta['version']}"
        for row_no, rec in enumerate(reader, 1):
            if not rec:
                continue
            if len(rec) != len(header):
                raise InputError(shown, f"the row has {len(rec)} fields, the header {len(header)}", row=row_no)

            def get(name: str, rec: list[str] = rec) -> str:
                i = cols.get(name)
                return rec[i].strip() if i is not None else ""

            if get("termtype") != "OnDemand":
                continue
            attrs = {attr: get(col) for col, attr in _CSV_ATTRS.items() if col in cols}
            if not _wanted(attrs) or not _first_tier(get("startingrange")):
                continue
            yield _ref(attrs, get("unit") or None, get("currency") or "USD",
                       _price(get("priceperunit"), shown, row_no, "PricePerUnit"),
                       _time(get("effectivedate"), shown, row_no, "EffectiveDate"), source, row_no, fetched,
                       get("pricedescription") or None)


# -- the JSON offer file and the get_products pages -----------------------------------------------------------------
def _sniff_offer_json(path: Path, head: bytes) -> bool:
    text = _text_head(head)
    return text.startswith("{") and '"formatVersion"' in text and '"offerCode"' in text \
        and '"publicationDate"' in text


def _sniff_get_products(path: Path, head: bytes) -> bool:
    text = _text_head(head)
    return text[:1] in ("{", "[") and '"PriceList"' in text and re.search(r'"FormatVersion"\s*:\s*"aws_v1"', text) \
        is not None


def _load_json(path: Path) -> Any:
    try:
        with _open_text(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(str(path), f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


def _terms(on_demand: dict[str, Any], attrs: dict[str, str], shown: str, row: int, fetched: datetime,
           source: str) -> Iterator[PriceRef]:
    """The on-demand price dimensions of one product: {offerTermCode: {effectiveDate, priceDimensions}}."""
    for term in on_demand.values():
        if not isinstance(term, dict):
            raise InputError(shown, "an OnDemand term is not an object", row=row, column="terms")
        effective = _time(term.get("effectiveDate"), shown, row, "effectiveDate")
        for dim in (term.get("priceDimensions") or {}).values():
            if not _first_tier(dim.get("beginRange")):
                continue
            prices = dim.get("pricePerUnit") or {}
            if not prices:
                raise InputError(shown, "a price dimension has no pricePerUnit", row=row, column="pricePerUnit")
            for currency, value in prices.items():
                yield _ref(attrs, dim.get("unit") or None, currency, _price(value, shown, row, "pricePerUnit"),
                           effective, source, row, fetched, dim.get("description") or None)


def _attrs(product: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (product.get("attributes") or {}).items()}


def _read_offer_json(path: Path) -> Iterator[PriceRef]:
    shown = str(path)
    doc = _load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("products"), dict):
        raise InputError(shown, "an AWS offer file has an object of products", column="products")
    fetched = _time(doc.get("publicationDate"), shown, None, "publicationDate")
    if fetched is None:
        raise InputError(shown, "the offer file has no publicationDate", column="publicationDate")
    source = f"{path.name}: AWS price list {doc.get('offerCode')} version {doc.get('version')}"
    on_demand = (doc.get("terms") or {}).get("OnDemand") or {}
    for row, (sku, product) in enumerate(doc["products"].items(), 1):
        attrs = _attrs(product)
        if not _wanted(attrs):
            continue
        yield from _terms(on_demand.get(sku) or {}, attrs, shown, row, fetched, source)


def _read_get_products(path: Path) -> Iterator[PriceRef]:
    shown = str(path)
    doc = _load_json(path)
    pages = doc if isinstance(doc, list) else [doc]
    row = 0
    for p, page in enumerate(pages, 1):
        if not isinstance(page, dict) or not isinstance(page.get("PriceList"), list):
            raise InputError(shown, f"page {p} has no PriceList list", column="PriceList")
        for item in page["PriceList"]:
            row += 1
            try:
                entry = json.loads(item) if isinstance(item, str) else item
            except json.JSONDecodeError as e:
                raise InputError(shown, f"a PriceList entry is not a JSON product: {e.msg}", row=row,
                                 column="PriceList") from None
            if not isinstance(entry, dict):
                raise InputError(shown, "a PriceList entry is not a product object", row=row, column="PriceList")
            attrs = _attrs(entry.get("product") or {})
            if not _wanted(attrs):
                continue
            fetched = _time(entry.get("publicationDate"), shown, row, "publicationDate")
            if fetched is None:
                raise InputError(shown, "the product has no publicationDate", row=row, column="publicationDate")
            source = (f"{path.name}: AWS Price List Query API ({entry.get('serviceCode')} version "
                      f"{entry.get('version')})")
            yield from _terms((entry.get("terms") or {}).get("OnDemand") or {}, attrs, shown, row, fetched, source)


FORMATS = [
    PriceFormat("aws-price-list-csv", "AWS Price List Bulk API offer file (CSV)", _sniff_csv, _read_csv),
    PriceFormat("aws-price-list-json", "AWS Price List Bulk API offer file (JSON)", _sniff_offer_json,
                _read_offer_json),
    PriceFormat("aws-get-products", "AWS Price List Query API get_products response (JSON)", _sniff_get_products,
                _read_get_products),
]


# -- the lines' side ------------------------------------------------------------------------------------------------
_HOURS = "lower(coalesce(l.PricingUnit, l.ConsumedUnit, 'Hrs')) IN ('hrs', 'hr', 'hours', 'hour')"


def _usage_is(*kinds: str) -> str:
    """The usage type is one of ``kinds`` (``BoxUsage``...), alone or after a region prefix: what
    ``regexp_matches(coalesce(l.x_UsageType, ''), '(^|-)(<kinds>):')`` says, as prefix and substring tests (at 10M
    lines the regular expression cost the bill's prices 1.6 of their 4 thread-seconds)."""
    u = "coalesce(l.x_UsageType, '')"
    return "(" + " OR ".join(f"starts_with({u}, '{k}:') OR contains({u}, '-{k}:')" for k in kinds) + ")"


def key_parts() -> tuple[dict[str, str], str]:
    """Each EC2 instance-hour line (spot or on demand) and the key of its on-demand price: the key's columns over
    ``l`` and the test a line passes to have one (:func:`billing_audit.prices.keys_sql_of`)."""
    return {
        "price_key": ("regexp_replace(regexp_replace(l.x_UsageType, '^USE1-', ''), '(^|-)SpotUsage:', '\\1BoxUsage:') "
                      "|| '|' || regexp_replace(l.x_Operation, ':SV[0-9A-Za-z]+$', '')"),
        "region": "l.RegionId",
        "unit": f"CASE WHEN {_HOURS} THEN 'Hrs' ELSE coalesce(l.PricingUnit, l.ConsumedUnit) END",
        "currency": "l.BillingCurrency",
        "quantity": "coalesce(l.PricingQuantity, l.ConsumedQuantity)",
    }, f"{_usage_is('SpotUsage', 'BoxUsage')} AND l.x_Operation IS NOT NULL"


def keys_sql() -> str:
    """Each EC2 instance-hour line (spot or on demand) and the key of its on-demand price."""
    return keys_sql_of(*key_parts())


def export_od_sql() -> str:
    """The CUR's public on-demand cost (``pricing_public_on_demand_cost``, AWS FOCUS ``ListCost``) when above 0;
    a CUR without the column keeps the unblended cost as list cost, which is no on-demand price."""
    return ("CASE WHEN l.ListCost > 0 AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost') "
            "THEN l.ListCost END")


def is_on_demand_sql() -> str:
    """An instance hour bought on demand (not spot, not covered by a reservation or savings plan)."""
    return (f"({_usage_is('BoxUsage')} "
            "AND coalesce(l.x_LineItemType, 'Usage') = 'Usage' "
            "AND coalesce(l.x_PricingModel, 'OnDemand') = 'OnDemand' "
            "AND coalesce(l.PricingCategory, 'Standard') = 'Standard')")
