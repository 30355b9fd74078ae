"""GCP price references: on-demand prices of the SKUs spot capacity stands in for.

GCP bills spot capacity as SKUs of its own ("Spot Preemptible Nvidia A100 80GB GPU running in Americas",
"Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas"), so a spot line's ``cost_at_list``
is the *spot* SKU's list price (real exports show ``cost_at_list = cost`` when there are no credits).  What the
same usage costs on demand is the price of the counterpart SKU, found by its description:

==========================================================================  ===========================================
spot SKU                                                                    on-demand counterpart (the price key)
==========================================================================  ===========================================
``Spot Preemptible Nvidia A100 80GB GPU running in Americas``               ``nvidia a100 80gb gpu running in americas``
``Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in EMEA``  ``nvidia tesla a100 gpu running in emea``
``Spot Preemptible A2 Instance Core running in Americas``                   ``a2 instance core running in americas``
``Preemptible N1 Predefined Instance Ram running in APAC`` (older SKUs)     ``n1 predefined instance ram running in apac``
``SSD backed Local Storage attached to Spot Preemptible VMs in EMEA``       ``ssd backed local storage in emea``
==========================================================================  ===========================================

**The key** (``price_key``) is that description normalised: lower-case, runs of white space one space, the
``attached to (Spot) Preemptible VMs`` phrase and then the words ``Spot Preemptible`` / ``Preemptible`` /
``Spot`` removed wherever they are (``TPU v5e Spot Preemptible chip-hours ...`` -> ``tpu v5e chip-hours ...``).
An on-demand line's own SKU description is its key.  SKU ids are not used: the spot and on-demand SKUs have
unrelated ids.  Preemption overhead lines (``... preemption overhead ...``, restart fees) and
commitment fees (``Commitment v1: ...``) have no on-demand counterpart and get no key.

**The region** is the line's ``RegionId`` (``location.region``, e.g. ``us-central1``).  A SKU's price applies to
every region the SKU lists (Catalog ``serviceRegions``, pricing export ``geo_taxonomy.regions``), so a SKU is
read into one reference per listed region; a SKU without regions (``GLOBAL``, or ``serviceRegions: ["global"]``)
gives one reference with region NULL (any region).  The description's geography ("running in Americas") and
the region both have to match, so a SKU never prices a region it is not sold in.

**The unit** is the pricing unit in words, as the billing export's ``usage.pricing_unit`` writes it
(``hour``, ``gibibyte hour``, ``gibibyte month``, ``gibibyte``); the price lists' short codes (``h``,
``GiBy.h``, ``GiBy.mo``, ``GiBy``) and FOCUS's ``Hours`` read the same.  **The quantity** is
``usage.amount_in_pricing_units`` (``PricingQuantity``).  **The currency** is the line's billing currency.

**The price files** (``FORMATS``), recognised from their content:

- ``gcp-pricing-export``: rows of the Cloud Billing pricing export table ``cloud_pricing_export`` saved as
  NDJSON (``bq extract`` / the puller) or parquet.  ``list_price`` gives a ``retail`` reference;
  ``billing_account_price``, when it differs from the list price, a ``negotiated`` one.  Each in the account
  currency (``account_currency_amount`` with ``account_currency_code``) and, when that is not USD, in USD too
  (``usd_amount``).  The price is the amount over ``pricing_unit_quantity``.  Spot, preemptible and commitment
  SKUs (description or ``product_taxonomy``) are not on-demand prices: skipped and counted (:func:`read_counts`).
  Several rows of one SKU (daily snapshots): the latest ``pricing_as_of_time`` (then ``export_time``) wins.
- ``gcp-catalog-skus``: Cloud Billing Catalog API ``services/{id}/skus`` response pages saved as JSON.  Only
  ``category.usageType`` ``OnDemand`` gives on-demand prices (``Preemptible``, ``Commit1Yr``, ... skipped and
  counted); the price is ``unitPrice.units + nanos / 10^9`` per ``usageUnit``; ``retail``.

Tiered rates: the tier that starts at 0 is the price (GPU, core and RAM SKUs have only that one); a SKU with
several tiers says so in the reference's ``source``.  Both lists are the prices *as of* their time
(``pricing_as_of_time``, the Catalog's ``effectiveTime``): the references carry it as ``fetched_at`` with
``effective_from`` / ``effective_to`` NULL (they price any period; a newer list for the same key replaces an
older one).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from billing_audit.errors import InputError
from billing_audit.prices import Kind, PriceFormat, PriceRef, keys_sql_of

PROVIDER = "gcp"

# -- the key ----------------------------------------------------------------------------------------------------

_SPOT_ATTACHED = re.compile(r" attached to (?:spot preemptible|spot|preemptible) vms?\b")
_SPOT_WORDS = re.compile(r"\b(?:spot preemptible|preemptible|spot)\b")
_SPOT_WORD = re.compile(r"\b(?:spot|preemptible)\b", re.I)
_NO_COUNTERPART = re.compile(r"preemption overhead|^commitment\b", re.I)


def normalise(description: str) -> str:
    """A SKU description as a key: lower-case, white space collapsed."""
    return " ".join(description.split()).lower()


def counterpart_key(description: str) -> str:
    """The price key of the on-demand SKU a (spot or on-demand) SKU description stands for."""
    text = normalise(description)
    text = _SPOT_WORDS.sub("", _SPOT_ATTACHED.sub("", text))
    return " ".join(text.split())


def is_spot_description(description: str) -> bool:
    return bool(_SPOT_WORD.search(description or ""))


_UNITS = {"h": "hour", "hr": "hour", "hour": "hour", "hours": "hour",
          "giby.h": "gibibyte hour", "gibibyte hour": "gibibyte hour", "gibibyte hours": "gibibyte hour",
          "giby.mo": "gibibyte month", "gibibyte month": "gibibyte month", "gibibyte months": "gibibyte month",
          "giby": "gibibyte", "gibibyte": "gibibyte", "mo": "month", "month": "month"}


def unit_name(unit: str | None) -> str | None:
    """A pricing unit in words (``h`` -> ``hour``, ``GiBy.h`` -> ``gibibyte hour``); other units lower-cased."""
    if unit is None or not unit.strip():
        return None
    text = " ".join(unit.split()).lower()
    return _UNITS.get(text, text)


# -- keys_sql and friends ---------------------------------------------------------------------------------------

_DESC = "coalesce(nullif(trim(l.x_UsageType), ''), nullif(trim(l.SkuMeter), ''), nullif(trim(l.ChargeDescription), ''))"
_NORM = f"lower(trim(regexp_replace({_DESC}, '\\s+', ' ', 'g')))"
_KEY = (f"trim(regexp_replace(regexp_replace(regexp_replace({_NORM}, "
        "' attached to (spot preemptible|spot|preemptible) vms?\\b', '', 'g'), "
        "'\\b(spot preemptible|preemptible|spot)\\b', '', 'g'), '\\s+', ' ', 'g'))")


def _unit_sql(expr: str) -> str:
    low = f"lower(trim(regexp_replace({expr}, '\\s+', ' ', 'g')))"
    cases = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _UNITS.items())
    return f"CASE {low} {cases} ELSE nullif({low}, '') END"


def key_parts() -> tuple[dict[str, str], str]:
    """Per GCP usage line with a SKU description, a pricing unit and a positive pricing quantity: the key of the
    on-demand price of that usage (spot SKUs: the counterpart's), region, unit, currency and quantity, over ``l``,
    and the test a line passes to have one (:func:`billing_audit.prices.keys_sql_of`)."""
    return {
        "price_key": _KEY,
        "region": "lower(nullif(trim(l.RegionId), ''))",
        "unit": _unit_sql("l.PricingUnit"),
        "currency": "l.BillingCurrency",
        "quantity": "l.PricingQuantity",
    }, (f"l.ChargeCategory = 'Usage' AND {_DESC} IS NOT NULL "
        f"AND NOT regexp_matches({_DESC}, 'preemption overhead|^commitment\\b', 'i') "
        "AND nullif(trim(l.PricingUnit), '') IS NOT NULL AND l.PricingQuantity > 0")


def keys_sql() -> str:
    """The key of each GCP usage line's on-demand price (:func:`key_parts`)."""
    return keys_sql_of(*key_parts())


def export_od_sql() -> str:
    """GCP exports never carry a spot line's on-demand cost: ``cost_at_list`` of a spot SKU is its spot list price."""
    return "NULL"  # portable: the warehouse engines (BigQuery, Athena, Spark) run it too


def is_on_demand_sql() -> str:
    """A line of a non-spot SKU bought on demand at its price: standard pricing, no committed use discount, the
    default consumption model, and no credit at all (the bill's fallback price is the line's cost over its
    quantity, so a sustained-use, committed-use or promotional credit would make it no on-demand price)."""
    return ("(l.ChargeCategory = 'Usage' AND coalesce(l.PricingCategory, 'Standard') = 'Standard' "
            "AND l.CommitmentDiscountCategory IS NULL AND coalesce(l.x_PricingModel, 'OnDemand') = 'OnDemand' "
            "AND coalesce(l.ContractedCost, l.EffectiveCost) = l.EffectiveCost "
            f"AND {_DESC} IS NOT NULL AND NOT regexp_matches({_DESC}, '\\b(spot|preemptible)\\b', 'i'))")


# -- reading price files ----------------------------------------------------------------------------------------


@dataclass
class ReadCounts:
    """What reading a price file gave and left out (and why), for the messages and the tests."""

    skus: int = 0  # SKU records read
    references: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> SKUs
    replaced: int = 0  # older rows of a SKU replaced by a later pricing_as_of_time
    multi_tier: int = 0  # SKUs priced by their first of several tiers

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


_COUNTS: dict[str, ReadCounts] = {}


def read_counts(path: Path) -> ReadCounts:
    """The counts of the last read of ``path`` (reading it first when it was not read yet)."""
    key = str(path)
    if key not in _COUNTS:
        for _ in read(path):
            pass
    return _COUNTS[key]


def _open_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _dec(value: Any, file: str, row: int, column: str) -> Decimal:
    if isinstance(value, bool) or value is None or value == "":
        raise InputError(file, "no price" if value in (None, "") else f"cannot read {value!r} as a number", row, column)
    try:
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value).strip())
    except InvalidOperation:
        raise InputError(file, f"cannot read {value!r} as a number", row, column) from None
    if not d.is_finite():
        raise InputError(file, f"cannot read {value!r} as a number", row, column)
    if abs(d) >= Decimal("1e15"):
        raise InputError(file, f"the amount {value!r} is out of range", row, column)
    return d


def _ts(value: Any, file: str, row: int, column: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        raise InputError(file, f"cannot read {value!r} as a timestamp", row, column)
    s = value.strip().replace(" UTC", "+00:00")
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    m = re.match(r"^(.*?\.\d{6})\d+(.*)$", s)  # RFC 3339 with nanoseconds (the Catalog's effectiveTime)
    if m:
        s = m.group(1) + m.group(2)
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        raise InputError(file, f"cannot read {value!r} as a timestamp", row, column) from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _regions(regions: Any) -> list[str | None]:
    out = sorted({str(r).strip().lower() for r in (regions or []) if str(r).strip()} - {"global"})
    return list(out) or [None]


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


# -- the pricing export -----------------------------------------------------------------------------------------

_EXPORT_KEYS = ("list_price", "sku")
_NOT_ON_DEMAND_TAXONOMY = re.compile(r"preemptible|\bspot\b|commit", re.I)


@dataclass
class _ExportRow:
    row: int
    sku_id: str | None
    description: str
    as_of: datetime
    exported: datetime | None
    record: dict[str, Any]


def _export_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    raw = path.read_bytes()
    if raw[:4] == b"PAR1":
        import pyarrow.parquet as pq

        n = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for rec in batch.to_pylist():
                n += 1
                yield n, rec
        return
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    for n, line in enumerate(text.decode("utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(str(path), f"not a JSON object: {e.msg}", n) from None
        if not isinstance(rec, dict):
            raise InputError(str(path), "not a JSON object", n)
        yield n, rec


def _tier0(price: dict[str, Any], file: str, row: int, column: str) -> tuple[dict[str, Any], int]:
    tiers = price.get("tiered_rates")
    if not isinstance(tiers, list) or not tiers:
        raise InputError(file, "no tiered_rates", row, f"{column}.tiered_rates")
    for i, t in enumerate(tiers):
        if not isinstance(t, dict):
            raise InputError(file, "a tier that is not an object", row, f"{column}.tiered_rates[{i}]")
    zero = [t for t in tiers if _dec(t.get("start_usage_amount", 0) or 0, file, row,
                                     f"{column}.tiered_rates.start_usage_amount") == 0]
    if not zero:
        raise InputError(file, "no tier starts at 0", row, f"{column}.tiered_rates.start_usage_amount")
    return zero[0], len(tiers)


def _export_prices(r: _ExportRow, file: str, counts: ReadCounts) -> Iterator[PriceRef]:
    rec, row = r.record, r.row
    account_currency = _str(rec.get("account_currency_code")) or _str(rec.get("currency_code"))
    if account_currency is None:
        raise InputError(file, "the row has no currency", row, "account_currency_code")
    unit = unit_name(_str(rec.get("pricing_unit_description")) or _str(rec.get("pricing_unit")))
    geo = rec.get("geo_taxonomy") or {}
    regions = _regions(geo.get("regions") if isinstance(geo, dict) else None)
    prices: list[tuple[Kind, str, str, Decimal, int]] = []
    columns: tuple[tuple[Kind, str], ...] = (("retail", "list_price"), ("negotiated", "billing_account_price"))
    for kind, column in columns:
        price = rec.get(column)
        if price is None and kind == "negotiated":
            continue
        if not isinstance(price, dict):
            raise InputError(file, "no price" if price is None else "not an object", row, column)
        tier, n_tiers = _tier0(price, file, row, column)
        qty = _dec(tier.get("pricing_unit_quantity") or price.get("pricing_unit_quantity") or 1, file, row,
                   f"{column}.tiered_rates.pricing_unit_quantity")
        if qty <= 0:
            raise InputError(file, f"pricing_unit_quantity {qty} is not positive", row,
                             f"{column}.tiered_rates.pricing_unit_quantity")
        amounts: dict[str, Decimal] = {}
        if tier.get("account_currency_amount") is not None:
            amounts[account_currency] = _dec(tier["account_currency_amount"], file, row,
                                             f"{column}.tiered_rates.account_currency_amount") / qty
        if tier.get("usd_amount") is not None and "USD" not in amounts:
            amounts["USD"] = _dec(tier["usd_amount"], file, row, f"{column}.tiered_rates.usd_amount") / qty
        if not amounts:
            raise InputError(file, "no price", row, f"{column}.tiered_rates.account_currency_amount")
        tiers = f", tier starting at 0 of {n_tiers}" if n_tiers > 1 else ""
        for cur, amount in amounts.items():
            prices.append((kind, column + tiers, cur, amount, n_tiers))
    if any(n > 1 for *_, n in prices):
        counts.multi_tier += 1
    retail = {(cur): amount for kind, _, cur, amount, _ in prices if kind == "retail"}
    key = counterpart_key(r.description)
    for kind, which, cur, amount, _ in prices:
        if kind == "negotiated" and retail.get(cur) == amount:
            continue  # the account pays the list price: the retail reference says it
        for region in regions:
            counts.references += 1
            yield PriceRef(provider=PROVIDER, price_key=key, region=region, unit=unit, currency=cur,
                           unit_price=amount, effective_from=None, effective_to=None, kind=kind,
                           source=f"{file} (GCP pricing export, {which})", source_row=row,
                           fetched_at=r.as_of, description=r.description)


def read_pricing_export(path: Path) -> Iterator[PriceRef]:
    file = str(path)
    counts = ReadCounts()
    latest: dict[str, _ExportRow] = {}
    for row, rec in _export_records(path):
        sku = rec.get("sku")
        if not isinstance(sku, dict):
            raise InputError(file, "no sku record", row, "sku")
        desc = _str(sku.get("description"))
        if desc is None:
            raise InputError(file, "the SKU has no description", row, "sku.description")
        as_of_raw = rec.get("pricing_as_of_time") or rec.get("export_time")
        if as_of_raw is None:
            raise InputError(file, "no pricing_as_of_time or export_time", row, "pricing_as_of_time")
        as_of = _ts(as_of_raw, file, row, "pricing_as_of_time" if rec.get("pricing_as_of_time") else "export_time")
        exported = _ts(rec["export_time"], file, row, "export_time") if rec.get("export_time") else None
        counts.skus += 1
        taxonomy = " ".join(str(t) for t in (rec.get("product_taxonomy") or []))
        if is_spot_description(desc) or _NOT_ON_DEMAND_TAXONOMY.search(taxonomy) or _NO_COUNTERPART.search(desc):
            counts.skip("spot, preemptible or commitment SKU")
            continue
        sku_id = _str(sku.get("id"))
        key = sku_id or desc
        this = _ExportRow(row, sku_id, desc, as_of, exported, rec)
        old = latest.get(key)
        if old is not None:
            counts.replaced += 1
            ex = datetime.min.replace(tzinfo=UTC)
            if (old.as_of, old.exported or ex) > (as_of, exported or ex):
                continue
        latest[key] = this
    _COUNTS[file] = counts
    for r in sorted(latest.values(), key=lambda x: x.row):
        yield from _export_prices(r, file, counts)


def _footer_may_name(path: Path, names: tuple[bytes, ...], any_of: tuple[bytes, ...]) -> bool:
    """Whether a parquet file's footer may name these columns (each of ``names`` and one of ``any_of``): the footer
    holds the column names as plain UTF-8, so one without them is not of a format that needs them.  A cheap test
    before the schema is read (every parquet export is sniffed: reading its schema took 0.1 s, pyarrow imported);
    True whenever the footer cannot be read so (encrypted, short): the schema then decides."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            if size < 12:
                return True
            f.seek(size - 8)
            tail = f.read(8)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or length > size - 12:
                return True
            f.seek(size - 8 - length)
            footer = f.read(length)
    except OSError:
        return True
    return all(n in footer for n in names) and any(n in footer for n in any_of)


def sniff_pricing_export(path: Path, head: bytes) -> bool:
    if head[:4] == b"PAR1":
        if not _footer_may_name(path, (b"sku", b"list_price"), (b"pricing_as_of_time", b"export_time")):
            return False
        try:
            import pyarrow.parquet as pq

            names = set(pq.read_schema(path).names)
        except Exception:  # not a readable parquet file: not this format
            return False
        return {"sku", "list_price"} <= names and bool({"pricing_as_of_time", "export_time"} & names)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if not text.startswith("{"):
        return False
    first = text.split("\n", 1)[0]
    return all(f'"{k}"' in first for k in _EXPORT_KEYS) and '"tiered_rates"' in first and '"skus"' not in first


# -- the Catalog API --------------------------------------------------------------------------------------------


def _money(up: Any, file: str, row: int, column: str) -> tuple[Decimal, str]:
    if not isinstance(up, dict):
        raise InputError(file, "no unitPrice", row, column)
    cur = _str(up.get("currencyCode"))
    if cur is None:
        raise InputError(file, "no currencyCode", row, f"{column}.currencyCode")
    units = up.get("units", "0")
    if isinstance(units, bool) or not isinstance(units, (str, int)) or not re.fullmatch(r"-?\d+", str(units).strip()):
        raise InputError(file, f"cannot read {units!r} as whole units (a string of digits)", row, f"{column}.units")
    nanos = up.get("nanos", 0)
    if isinstance(nanos, bool) or not isinstance(nanos, int) or not -999_999_999 <= nanos <= 999_999_999:
        raise InputError(file, f"cannot read {nanos!r} as nanos (an integer from -999999999 to 999999999)", row,
                         f"{column}.nanos")
    return Decimal(int(str(units).strip())) + Decimal(nanos) / Decimal(10**9), cur


def read_catalog(path: Path) -> Iterator[PriceRef]:
    file = str(path)
    try:
        page = json.loads(_open_bytes(path).decode("utf-8-sig"))
    except ValueError as e:
        raise InputError(file, f"not JSON: {e}") from None
    if not isinstance(page, dict) or not isinstance(page.get("skus"), list):
        raise InputError(file, "not a Catalog API skus page (no \"skus\" list)", None, "skus")
    counts = ReadCounts()
    _COUNTS[file] = counts
    out: list[PriceRef] = []
    for n, sku in enumerate(page["skus"], 1):
        col = f"skus[{n - 1}]"
        if not isinstance(sku, dict):
            raise InputError(file, "a SKU that is not an object", n, col)
        desc = _str(sku.get("description"))
        if desc is None:
            raise InputError(file, "the SKU has no description", n, f"{col}.description")
        counts.skus += 1
        usage = (sku.get("category") or {}).get("usageType") if isinstance(sku.get("category"), dict) else None
        if usage is None:
            raise InputError(file, "the SKU has no category.usageType", n, f"{col}.category.usageType")
        if usage != "OnDemand":
            counts.skip(f"usageType {usage}")
            continue
        if _NO_COUNTERPART.search(desc):
            counts.skip("commitment or preemption overhead SKU")
            continue
        infos = sku.get("pricingInfo")
        if not isinstance(infos, list) or not infos:
            raise InputError(file, "the SKU has no pricingInfo", n, f"{col}.pricingInfo")
        info = infos[-1]  # the latest (the API lists them in time order; without a time range there is one)
        icol = f"{col}.pricingInfo[{len(infos) - 1}]"
        if not isinstance(info, dict) or not isinstance(info.get("pricingExpression"), dict):
            raise InputError(file, "no pricingExpression", n, f"{icol}.pricingExpression")
        expr = info["pricingExpression"]
        effective = _ts(info.get("effectiveTime"), file, n, f"{icol}.effectiveTime")
        tiers = expr.get("tieredRates")
        if not isinstance(tiers, list) or not tiers:
            raise InputError(file, "no tieredRates", n, f"{icol}.pricingExpression.tieredRates")
        zero = None
        for i, t in enumerate(tiers):
            tcol = f"{icol}.pricingExpression.tieredRates[{i}]"
            if not isinstance(t, dict):
                raise InputError(file, "a tier that is not an object", n, tcol)
            if _dec(t.get("startUsageAmount", 0) or 0, file, n, f"{tcol}.startUsageAmount") == 0 and zero is None:
                zero = (i, t)
        if zero is None:
            raise InputError(file, "no tier starts at 0", n, f"{icol}.pricingExpression.tieredRates")
        i, tier = zero
        price, cur = _money(tier.get("unitPrice"), file, n, f"{icol}.pricingExpression.tieredRates[{i}].unitPrice")
        unit = unit_name(_str(expr.get("usageUnitDescription")) or _str(expr.get("usageUnit")))
        if unit is None:
            raise InputError(file, "no usageUnit", n, f"{icol}.pricingExpression.usageUnit")
        if len(tiers) > 1:
            counts.multi_tier += 1
        which = f", tier starting at 0 of {len(tiers)}" if len(tiers) > 1 else ""
        name = _str(sku.get("name")) or f"skuId {sku.get('skuId')}"
        for region in _regions(sku.get("serviceRegions")):
            counts.references += 1
            out.append(PriceRef(provider=PROVIDER, price_key=counterpart_key(desc), region=region, unit=unit,
                                currency=cur, unit_price=price, effective_from=None, effective_to=None, kind="retail",
                                source=f"{file} (GCP Cloud Billing Catalog API {name}{which})", source_row=n,
                                fetched_at=effective, description=desc))
    yield from out


def sniff_catalog(path: Path, head: bytes) -> bool:
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    return (text.startswith("{") and re.search(r'"skus"\s*:\s*\[', text) is not None
            and ('"pricingInfo"' in text or re.search(r'"skus"\s*:\s*\[\s*\]', text) is not None))


def read(path: Path) -> Iterator[PriceRef]:
    """Either format, from the content (for :func:`read_counts`)."""
    head = _open_bytes(path)[:65536]
    if sniff_catalog(path, head):
        yield from read_catalog(path)
    else:
        yield from read_pricing_export(path)


FORMATS = [
    PriceFormat("gcp-pricing-export", "GCP Cloud Billing pricing export rows (cloud_pricing_export), NDJSON or parquet",
                sniff_pricing_export, read_pricing_export),
    PriceFormat("gcp-catalog-skus", "GCP Cloud Billing Catalog API services/{id}/skus response page, JSON",
                sniff_catalog, read_catalog),
]
