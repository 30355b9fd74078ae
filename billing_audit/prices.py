"""Price references: what the same usage costs on demand, from the providers' own price lists.

The exports do not reliably say what a spot line would have cost on demand (Azure prices spot meters at the
spot rate, GCP bills spot capacity as its own SKUs, AWS leaves ``pricing_public_on_demand_cost`` at 0 on some
spot lines).  Price references fill the gap.  This module is the contract between the core and the provider
packages; the core never names a provider.

**The table** ``price_references`` (:data:`COLUMNS`; created in :mod:`billing_audit.ddl`): one row per
on-demand price, keyed by :data:`KEY` (a newer list for the same key and period replaces the older one).

**A provider's part** ``connectors/<name>/prices.py`` (found with ``registry.with_part("prices")``) has:

- ``PROVIDER``: the ``x_Provider`` value its references and lines carry;
- ``FORMATS``: a list of :class:`PriceFormat` (the files ``prices ingest``, ``ingest`` and ``audit`` recognise
  from their content: API response pages, price sheets, offer files, pricing export rows);
- ``keys_sql()``: a SELECT over the relation ``l`` (line_items columns, this provider's lines only) giving, for
  every compute line whose on-demand price could be looked up, the columns of :data:`LINE_KEY_COLUMNS`: the key
  of the *on-demand* price of that usage (for a spot line its on-demand counterpart, for an on-demand line its
  own key), the region, unit and currency the price is in, and the line's quantity in that unit;
- optionally ``key_parts()``: the same as (expressions over ``l`` by key column, the test a line passes to have a
  key), of which ``keys_sql()`` is :func:`keys_sql_of`: a local tag run then computes the spot lines' keys in
  the pass that picks them (:func:`billing_audit.pricing.spot_keyed_sql`), not by joining keys back by id;
- ``export_od_sql()``: an SQL expression over ``l`` giving the export's own on-demand equivalent cost of a spot
  line when the export carries a usable one (AWS ``pricing_public_on_demand_cost`` > 0), else NULL (Azure spot
  meters' PayGPrice and GCP spot SKUs' ``cost_at_list`` are spot prices, never usable);
- ``is_on_demand_sql()``: an SQL expression over ``l``, true for a line bought on demand (the bill's own
  fallback price: the same key bought on demand elsewhere in the store);

A second, optional part ``connectors/<name>/prices_pull.py`` (``registry.with_part("prices_pull")``; kept apart so
that recognising price files never imports a cloud SDK) has ``PULLER``, a :class:`PricePuller`: it fetches the
references for a list of :class:`PriceNeed` into files of the provider's ``FORMATS`` (the core then reads them
exactly as ``prices ingest`` does, so a pulled page and a saved page are one code path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

Kind = Literal["retail", "negotiated"]

# (column, DuckDB type, meaning): the price_references table
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("provider", "VARCHAR NOT NULL", "x_Provider of the lines the price is for"),
    ("price_key", "VARCHAR NOT NULL", "the provider's key of the on-demand price (see its prices.py)"),
    ("region", "VARCHAR", "the provider's region code (armRegionName, AWS region code, GCP region or geo); NULL = any"),
    ("unit", "VARCHAR", "the unit the price is per, as the provider writes it"),
    ("currency", "VARCHAR NOT NULL", "the price's currency"),
    ("unit_price", "DECIMAL(38,12) NOT NULL", "price per unit, on demand"),
    ("effective_from", "TIMESTAMP", "first instant the price applies (NULL = always)"),
    ("effective_to", "TIMESTAMP", "first instant it no longer applies (NULL = still)"),
    ("kind", "VARCHAR NOT NULL", "retail (public list) or negotiated (the account's own price sheet)"),
    ("source", "VARCHAR NOT NULL", "the file or API the price came from, and which price list (e.g. a URL)"),
    ("source_row", "BIGINT", "1-based record in the source file"),
    ("fetched_at", "TIMESTAMP NOT NULL", "when the price list was fetched or the file written (newer replaces older)"),
    ("description", "VARCHAR", "the SKU / meter / product as the provider describes it"),
)
COLUMN_NAMES = tuple(c for c, _, _ in COLUMNS)
KEY = ("provider", "price_key", "region", "unit", "currency", "kind", "effective_from")

# what a provider's keys_sql() returns per line
LINE_KEY_COLUMNS = ("x_LineItemId", "price_key", "region", "unit", "currency", "quantity")


def keys_sql_of(columns: dict[str, str], where: str) -> str:
    """A provider's ``keys_sql()`` from its ``key_parts()``: each of :data:`LINE_KEY_COLUMNS` but the id as an
    expression over ``l`` (``columns``), for the lines of ``l`` that pass ``where``."""
    assert tuple(columns) == LINE_KEY_COLUMNS[1:], tuple(columns)
    body = ",\n       ".join(f"{e} AS {c}" for c, e in columns.items())
    return f"""
SELECT l.x_LineItemId,
       {body}
FROM l
WHERE {where}"""


@dataclass(frozen=True)
class PriceRef:
    """One row of ``price_references``."""

    provider: str
    price_key: str
    region: str | None
    unit: str | None
    currency: str
    unit_price: Decimal
    effective_from: datetime | None
    effective_to: datetime | None
    kind: Kind
    source: str
    source_row: int | None
    fetched_at: datetime
    description: str | None = None

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in COLUMN_NAMES)


@dataclass(frozen=True)
class PriceFormat:
    """A price-reference file format: recognised from its content, read into references.

    ``sniff(path, head)`` gets the file's first 64 KiB (decompressed) and says whether the file is of this
    format; ``read(path)`` yields its references, raising :class:`~billing_audit.errors.InputError` naming the
    file, row and field of anything it cannot read."""

    id: str
    title: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path], Iterator[PriceRef]]


@dataclass(frozen=True)
class PriceNeed:
    """An on-demand price the store's spot lines need and no reference covers yet (one per key, region, unit
    and currency, over the charge periods of the lines that need it)."""

    provider: str
    price_key: str
    region: str | None
    unit: str | None
    currency: str
    first: datetime  # earliest charge period start of the lines that need it
    last: datetime  # latest charge period end
    lines: int
    description: str | None = None  # the spot line's SKU / meter description, for the pull's queries


class PricePuller(Protocol):
    """A provider's ``prices pull``: its options and one step, fetching what ``needs`` asks into ``dest``."""

    name: str  # `billing-audit prices pull <name>`
    help: str
    Options: type[Any]  # a pydantic model, like the export pullers' (billing_audit.pulling)

    def fetch(self, needs: list[PriceNeed], dest: Path, options: Any,
              progress: Callable[[str], None] | None) -> list[Path]:
        """Fetch the references for ``needs`` into files under ``dest`` (of this provider's FORMATS); returns
        them.  Retries transient failures; raises BillingAuditError for what stops the pull."""
        ...
