"""Price references in the store: loading them, and each spot line's on-demand equivalent with its provenance.

The contract with the provider packages is :mod:`billing_audit.prices`; this module never names a provider.

**Loading** (:func:`load_files`): each price file is recognised from its content (the providers' ``FORMATS``
sniff its first 64 KiB) and loaded in one transaction.  A reference is identified by
:data:`~billing_audit.prices.KEY`; against a reference already held with the same key:

- the same price list (same ``fetched_at``) with the same price and period: nothing changes (re-ingesting a
  file changes nothing);
- a newer price list (later ``fetched_at``), or the same list saying something else: it replaces the held one,
  and the load says how many it replaced;
- an older price list: the held (newer) one stays, and the load says how many it kept.

**On-demand equivalents** (:func:`build_spot_od`, run inside the tag run's transaction): every spot line (category
``spot_compute``) has one, from the first of

1. ``export``: the export's own usable on-demand cost (the provider's ``export_od_sql()``; a provider without a
   ``prices`` part: its ``ListCost``, as before price references existed);
2. ``reference``: a price reference of the line's on-demand key (the provider's ``keys_sql()``), region (a
   reference without a region covers any), unit and currency, whose effective period holds the line's charge
   period start; a negotiated price beats a retail one, then the newest price list; cost = price x quantity;
3. ``bill``: the same key, region, unit and currency bought on demand elsewhere in the store (the provider's
   ``is_on_demand_sql()``): unit price = those lines' cost / their quantity;
4. none: ``od_cost`` NULL, and ``reason`` says why.  Never 0, never the spot price itself.

``spot_od`` holds a row for each spot line of 2 to 4, the lines whose equivalent needed working out.  A line of 1 is
its own export's figure, which depends on the line alone: it is read from the line where it is used (the line
groups, as the warehouse engines do), and :func:`od_rows_sql` gives its row beside the stored ones (at 10M lines,
2.6M of 3.0M spot lines: writing their rows cost the tag run 1.6 s of 2.3 s).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb

from billing_audit import registry
from billing_audit.errors import BillingAuditError, InputError
from billing_audit.prices import COLUMN_NAMES, COLUMNS, KEY, LINE_KEY_COLUMNS, PriceFormat, PriceNeed, PriceRef
from billing_audit.sql import lit

SNIFF = 64 << 10
SOURCES = ("export", "reference", "bill")  # the provenance of an on-demand equivalent, in the order they are tried
_DDL_TYPE = {name: typ.replace(" NOT NULL", "") for name, typ, _ in COLUMNS}


# -- the providers' parts -------------------------------------------------------------------------------------------
@functools.cache
def parts() -> tuple[tuple[str, ModuleType], ...]:
    """(provider, its ``prices`` part) of every connector that has one."""
    out = []
    for name in registry.with_part("prices"):
        mod = registry.part(name, "prices")
        out.append((str(getattr(mod, "PROVIDER", name)), mod))
    return tuple(out)


def formats() -> list[tuple[str, PriceFormat]]:
    """Every price-file format, with the provider it prices."""
    return [(prov, f) for prov, mod in parts() for f in getattr(mod, "FORMATS", [])]


def describe_formats() -> str:
    """One line per price-file format, for --help."""
    return "\n".join(f"  {prov:<6} {f.title}" for prov, f in formats())


def sniff(path: Path) -> tuple[str, PriceFormat] | None:
    """The price format a file is of (from its first 64 KiB, decompressed), or None: not a price file."""
    from billing_audit.reader import read_head

    fmts = formats()
    if not fmts:
        return None
    try:
        head = read_head(path, SNIFF)
    except (OSError, EOFError, ValueError):
        return None
    for prov, f in fmts:
        try:
            if f.sniff(path, head):
                return prov, f
        except Exception:  # noqa: BLE001, S112 - a sniff that trips over a file simply does not recognise it
            continue
    return None


def is_price_file(path: Path) -> bool:
    return sniff(path) is not None


def export_od_case(alias: str = "l") -> str:
    """The export's own usable on-demand cost of a line, per provider (their ``export_od_sql()``, written over
    ``l``); a provider without a ``prices`` part: its ``ListCost`` where it is above the line's cost (a list
    price equal to the spot price is the spot price).  Portable SQL: the warehouse engines run it too (they have
    no price references, so this is all they measure savings with)."""
    whens = " ".join(f"WHEN {lit(prov)} THEN ({_over(mod.export_od_sql(), alias)})" for prov, mod in parts())
    listed = f"CASE WHEN {alias}.ListCost > {alias}.EffectiveCost THEN {alias}.ListCost END"
    return f"(CASE {alias}.x_Provider {whens} ELSE {listed} END)" if whens else listed


def _over(sql: str, alias: str) -> str:
    return sql if alias == "l" else sql.replace("l.", f"{alias}.")


# -- loading --------------------------------------------------------------------------------------------------------
@dataclass
class PriceFile:
    file: str
    status: str  # loaded | unchanged | failed
    format: str | None = None
    provider: str | None = None
    rows: int = 0  # references read from the file
    added: int = 0  # references new to the store
    replaced: int = 0  # held references a newer (or differing) list replaced
    kept_newer: int = 0  # references of this file older than the ones held (the held ones stay)
    duplicates: int = 0  # rows of the file repeating a key already in it (the first is used)
    message: str = ""


@dataclass
class PriceLoad:
    files: list[PriceFile] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    repriced: int | None = None  # spot lines whose on-demand equivalent was worked out again (None: not tagged)

    @property
    def refs(self) -> int:
        return sum(f.rows for f in self.files if f.status != "failed")

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def replaced(self) -> int:
        return sum(f.replaced for f in self.files)

    @property
    def loaded(self) -> int:
        return sum(1 for f in self.files if f.status == "loaded")

    def notes(self) -> list[str]:
        out = []
        for f in self.files:
            if f.replaced:
                out.append(f"{f.file}: {f.replaced} price reference(s) of an older price list replaced")
            if f.kept_newer:
                out.append(f"{f.file}: {f.kept_newer} price reference(s) older than those held; the newer ones stay")
            if f.duplicates:
                out.append(f"{f.file}: {f.duplicates} row(s) repeat a price already in the file; the first is used")
        return out

    def summary(self) -> str:
        parts_ = [f"{len([f for f in self.files if f.status != 'failed'])} price file(s) read "
                  f"({self.refs:,} references: {self.added:,} new, {self.replaced:,} replaced)"]
        unchanged = sum(1 for f in self.files if f.status == "unchanged")
        if unchanged:
            parts_.append(f"{unchanged} unchanged")
        if self.errors:
            parts_.append(f"{len(self.errors)} failed")
        if self.repriced is not None:
            parts_.append(f"{self.repriced:,} spot line(s) priced again")
        return ", ".join(parts_)


def _table(refs: list[PriceRef]) -> Any:
    import pyarrow as pa

    types = {"VARCHAR": pa.string(), "DECIMAL(38,12)": pa.decimal128(38, 12), "TIMESTAMP": pa.timestamp("us"),
             "BIGINT": pa.int64()}
    schema = pa.schema([(n, types[_DDL_TYPE[n]]) for n in COLUMN_NAMES])

    def norm(name: str, v: Any) -> Any:
        if isinstance(v, datetime) and v.tzinfo is not None:
            return v.astimezone(UTC).replace(tzinfo=None)
        if name == "unit_price" and v is not None:
            return Decimal(v).quantize(Decimal("0.000000000001"), rounding=ROUND_HALF_EVEN)
        return v

    cols = {n: [norm(n, getattr(r, n)) for r in refs] for n in COLUMN_NAMES}
    return pa.table(cols, schema=schema)


_SAME_KEY = " AND ".join(f"h.{k} IS NOT DISTINCT FROM n.{k}" for k in KEY)
_SAME_PRICE = " AND ".join(f"h.{c} IS NOT DISTINCT FROM n.{c}" for c in ("unit_price", "effective_to"))


def _read(path: Path, fmt: PriceFormat, shown: str) -> list[PriceRef]:
    try:
        refs = list(fmt.read(path))
    except InputError:
        raise
    except (OSError, EOFError) as e:
        raise InputError(shown, f"cannot read the price file: {e}") from None
    except Exception as e:  # noqa: BLE001 - a reader's bug or an input nobody foresaw: this file's error
        raise InputError(shown, f"unexpected error reading the price file ({fmt.title}): "
                                f"{type(e).__name__}: {e}") from None
    for i, r in enumerate(refs, 1):
        if not isinstance(r.unit_price, Decimal) or r.unit_price < 0:
            raise InputError(shown, f"price {r.price_key!r} has no usable unit price ({r.unit_price!r})",
                             row=r.source_row or i)
    return refs


def load_file(con: duckdb.DuckDBPyConnection, path: Path, found: tuple[str, PriceFormat] | None = None,
              shown: str | None = None) -> PriceFile:
    """Load one price file in one transaction (see the module docstring for what replaces what)."""
    shown = shown or str(path)
    found = found or sniff(path)
    if found is None:
        raise InputError(shown, "not a price file of any known format:\n" + describe_formats())
    prov, fmt = found
    refs = _read(path, fmt, shown)
    result = PriceFile(shown, "loaded", fmt.id, prov, rows=len(refs))
    seen: dict[tuple[Any, ...], int] = {}
    unique = []
    for r in refs:
        k = tuple(getattr(r, c) for c in KEY)
        if k in seen:
            result.duplicates += 1
            continue
        seen[k] = 1
        unique.append(r)
    con.register("ba_new_refs", _table(unique))
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE ba_new AS SELECT * FROM ba_new_refs")
        row = con.execute(f"""SELECT
            count(*) FILTER (WHERE h.provider IS NULL),
            count(*) FILTER (WHERE h.provider IS NOT NULL AND (h.fetched_at < n.fetched_at
                             OR (h.fetched_at = n.fetched_at AND NOT ({_SAME_PRICE})))),
            count(*) FILTER (WHERE h.provider IS NOT NULL AND h.fetched_at > n.fetched_at)
            FROM ba_new n LEFT JOIN price_references h ON {_SAME_KEY}""").fetchone()
        assert row is not None
        result.added, result.replaced, result.kept_newer = int(row[0]), int(row[1]), int(row[2])
        # the held references this file replaces, then the file's references not already held as they are
        con.execute(f"""DELETE FROM price_references h WHERE EXISTS (SELECT 1 FROM ba_new n WHERE {_SAME_KEY}
                        AND (h.fetched_at < n.fetched_at OR (h.fetched_at = n.fetched_at AND NOT ({_SAME_PRICE}))))""")
        con.execute(f"""INSERT INTO price_references SELECT {", ".join(COLUMN_NAMES)} FROM ba_new n
                        WHERE NOT EXISTS (SELECT 1 FROM price_references h WHERE {_SAME_KEY})""")
        con.execute("DROP TABLE ba_new")
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    finally:
        con.unregister("ba_new_refs")
    if not result.added and not result.replaced:
        result.status = "unchanged"
    return result


def price_files_under(paths: list[Path]) -> tuple[list[Path], list[InputError]]:
    """The files under ``paths`` (files and folders, recursively; only what is named), sorted."""
    from billing_audit.deliveries import walk

    data, _, errors = walk(paths)
    return data, errors


def load_files(con: duckdb.DuckDBPyConnection, paths: list[Path], *, strict: bool = True,
               progress: Callable[[str, int], None] | None = None) -> PriceLoad:
    """Load the price files under ``paths``, one transaction per file.  ``strict``: a file that is not a price
    file is an error naming it (``prices ingest``); otherwise it is left alone (the caller's export ingest)."""
    from billing_audit.reader import display_name

    out = PriceLoad()
    files, errors = price_files_under(paths)
    out.errors.extend(errors)
    for e in errors:
        out.files.append(PriceFile(e.file, "failed", message=e.reason))
    for f in files:
        shown = display_name(f)
        found = sniff(f)
        if found is None:
            if strict:
                e = InputError(shown, "not a price file of any known format (`billing-audit ingest` reads exports):\n"
                               + describe_formats())
                out.errors.append(e)
                out.files.append(PriceFile(shown, "failed", message=e.reason))
            continue
        try:
            res = load_file(con, f, found, shown)
        except InputError as e:
            out.errors.append(e)
            out.files.append(PriceFile(shown, "failed", found[1].id, found[0], message=e.reason))
            continue
        out.files.append(res)
        if progress:
            progress(shown, res.rows)
    return out


def load_paths(con: duckdb.DuckDBPyConnection, files: list[Path]) -> PriceLoad:
    """Load price files the export ingest set aside (already recognised)."""
    from billing_audit.reader import display_name

    out = PriceLoad()
    for f in files:
        shown = display_name(f)
        try:
            out.files.append(load_file(con, f, None, shown))
        except InputError as e:
            out.errors.append(e)
            out.files.append(PriceFile(shown, "failed", message=e.reason))
    return out


# -- on-demand equivalents ------------------------------------------------------------------------------------------
def keys_sql(lines: str = "line_items") -> str:
    """Every provider's ``keys_sql()`` over its own lines (of the relation ``lines``), as one relation (provider +
    LINE_KEY_COLUMNS)."""
    selects = [
        f"SELECT {lit(prov)} AS provider, CAST(k.x_LineItemId AS VARCHAR) AS x_LineItemId, "
        "CAST(k.price_key AS VARCHAR) AS price_key, CAST(k.region AS VARCHAR) AS region, "
        "CAST(k.unit AS VARCHAR) AS unit, CAST(k.currency AS VARCHAR) AS currency, "
        "CAST(k.quantity AS DECIMAL(38,12)) AS quantity "
        f"FROM (WITH l AS (SELECT * FROM {lines} WHERE x_Provider = {lit(prov)}) {mod.keys_sql()}) k"
        for prov, mod in parts()
    ]
    return " UNION ALL ".join(selects) or (
        "SELECT NULL::VARCHAR AS provider, NULL::VARCHAR AS x_LineItemId, NULL::VARCHAR AS price_key, "
        "NULL::VARCHAR AS region, NULL::VARCHAR AS unit, NULL::VARCHAR AS currency, "
        "NULL::DECIMAL(38,12) AS quantity WHERE FALSE")


def _on_demand_case() -> str:
    whens = " ".join(f"WHEN {lit(prov)} THEN ({mod.is_on_demand_sql()})" for prov, mod in parts())
    return f"(CASE l.x_Provider {whens} ELSE FALSE END)" if whens else "FALSE"


def _has_prices_part_case() -> str:
    provs = ", ".join(lit(p) for p, _ in parts())
    return f"l.x_Provider IN ({provs})" if provs else "FALSE"


def _money(x: Decimal) -> Decimal:
    return x.quantize(Decimal("0.000000000001"), rounding=ROUND_HALF_EVEN)


def spot_ids_sql(cats: str) -> str:
    """The spot lines' x_LineItemId, from the relation ``cats`` (each line's category)."""
    return f"(SELECT x_LineItemId FROM {cats} WHERE category = 'spot_compute')"


def lines_of_sql(lines: str, ids: str) -> str:
    """The lines of the relation ``lines`` whose x_LineItemId is in the relation ``ids``."""
    return f"(SELECT l.* FROM {lines} l SEMI JOIN {ids} i ON i.x_LineItemId = l.x_LineItemId)"


def bill_slices_sql(keys: str = "ba_keys", cats: str = "line_categories", lines: str = "line_items",
                    spot: str | None = None) -> str:
    """The bill's own on-demand prices per slice (provider x billing account x billing month) and key: the cost and
    quantity of the lines bought on demand (not spot compute), from ``keys`` (:func:`keys_sql` over some lines),
    read from the relation ``lines`` (which must hold those lines: a narrower one reads less).  ``spot``: a relation
    of the spot lines' x_LineItemId (default: those of ``cats`` in category spot_compute)."""
    spot = spot or spot_ids_sql(cats)
    return f"""
        SELECT l.x_Provider AS p, l.BillingAccountId AS a, date_trunc('month', l.BillingPeriodStart + INTERVAL 14 DAY)
               AS s, k.provider, k.price_key, k.region, k.unit, k.currency,
               sum(coalesce(l.EffectiveCost, l.BilledCost)) AS cost, sum(k.quantity) AS qty, count(*) AS n,
               min(l.ChargePeriodStart) AS first, max(l.ChargePeriodEnd) AS last
        FROM {keys} k JOIN {lines} l ON l.x_LineItemId = k.x_LineItemId
        WHERE {_on_demand_case()} AND k.quantity > 0 AND coalesce(l.EffectiveCost, l.BilledCost) > 0
          AND l.BillingCurrency = k.currency
          AND l.x_LineItemId NOT IN (SELECT x_LineItemId FROM {spot})
        GROUP BY ALL"""


# what the bill's slices read of a line besides its key (bill_slices_sql)
_BILL_LINE_COLUMNS = ("x_Provider", "BillingAccountId", "BillingPeriodStart", "EffectiveCost", "BilledCost",
                      "BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd")
_KEYS_HEAD = "SELECT l.x_LineItemId,"


def bill_slices_one_pass_sql(lines: str, spot: str) -> str | None:
    """:func:`bill_slices_sql`'s rows (the same columns, sums and tests) made in one pass over the relation
    ``lines``: each provider's ``keys_sql()`` over its lines bought on demand, with the line's own columns the
    slices read carried beside the key, so that no key is joined back to its line by id (at 10M lines that join
    of 6.3M keys to 3.3M on-demand lines spilled 1.4 GB: 4.7 s).  ``spot``: a relation of the spot lines'
    x_LineItemId, left out once over every provider's keys (once per provider, each built its own table of the
    3.0M spot ids, 0.25 s each, where the provider had no line).  None when a provider's ``keys_sql()`` does not
    begin ``SELECT l.x_LineItemId,`` (the columns cannot be added to it): then :func:`bill_slices_sql` over the
    keys does it."""
    selects = []
    extra = ", ".join(f"l.{c} AS ba_{c}" for c in _BILL_LINE_COLUMNS)
    for prov, mod in parts():
        keys = mod.keys_sql().lstrip()
        if not keys.startswith(_KEYS_HEAD):
            return None
        keys = f"SELECT l.x_LineItemId, {extra}," + keys[len(_KEYS_HEAD):]
        bought = (f"SELECT * FROM {lines} l WHERE l.x_Provider = {lit(prov)} AND ({mod.is_on_demand_sql()}) "
                  f"AND coalesce(l.EffectiveCost, l.BilledCost) > 0")
        selects.append(
            f"SELECT k.x_LineItemId AS ba_id, {lit(prov)} AS provider, CAST(k.price_key AS VARCHAR) AS price_key, "
            "CAST(k.region AS VARCHAR) AS region, CAST(k.unit AS VARCHAR) AS unit, "
            "CAST(k.currency AS VARCHAR) AS currency, CAST(k.quantity AS DECIMAL(38,12)) AS quantity, "
            f"{', '.join(f'k.ba_{c}' for c in _BILL_LINE_COLUMNS)} "
            f"FROM (WITH l AS ({bought}) {keys}) k")
    if not selects:
        return None
    return f"""
        SELECT k.ba_x_Provider AS p, k.ba_BillingAccountId AS a,
               date_trunc('month', k.ba_BillingPeriodStart + INTERVAL 14 DAY) AS s, k.provider, k.price_key, k.region,
               k.unit, k.currency, sum(coalesce(k.ba_EffectiveCost, k.ba_BilledCost)) AS cost, sum(k.quantity) AS qty,
               count(*) AS n, min(k.ba_ChargePeriodStart) AS first, max(k.ba_ChargePeriodEnd) AS last
        FROM ({" UNION ALL ".join(selects)}) k
        WHERE k.quantity > 0 AND k.ba_BillingCurrency = k.currency
          AND k.ba_id NOT IN (SELECT x_LineItemId FROM {spot})
        GROUP BY ALL"""


def bill_keys(con: duckdb.DuckDBPyConnection, lines: str, into: str) -> None:
    """:func:`keys_sql` over the relation ``lines`` as temp table ``into``."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {into} AS {keys_sql(lines)}")


def categories_sql(lines: str | None = None, hits: str = "rule_hits") -> str:
    """Each line's category (``line_categories``' x_LineItemId and category, :data:`billing_audit.ddl.LINE_CATEGORY`)
    from the relation ``hits`` (rule_hits' x_LineItemId, rule_id, category), for the lines of the relation ``lines``
    only (it has x_LineItemId; None: every line of ``hits``, e.g. the hits of some lines, already picked), without
    grouping every hit of the store.  Not the view's DISTINCT lists, which pricing never reads: DuckDB computes them
    even where nothing does (two more groupings of every hit, joined back)."""
    from billing_audit.ddl import LINE_CATEGORY

    src = hits if lines is None else f"(SELECT * FROM {hits} SEMI JOIN {lines} USING (x_LineItemId))"
    return f"SELECT x_LineItemId, {LINE_CATEGORY} FROM {src} GROUP BY x_LineItemId"


# The pieces of a spot line's on-demand equivalent, written once over relations the caller names: a local tag run
# (:func:`classify`) and an engine's audit query (:mod:`billing_audit.engines.priced`) run the same SQL.
SPOT_CATEGORY = "c.category = 'spot_compute'"  # a spot line, over <lines> l JOIN <cats> c
# the bill's on-demand unit price per key (:func:`bill_prices`): what :func:`priced_sql` reads as ``bill`` (the
# bill's lines behind a price are said from spot_bill: :func:`line`)
BILL_COLUMNS = [("provider", "VARCHAR"), ("price_key", "VARCHAR"), ("region", "VARCHAR"), ("unit", "VARCHAR"),
                ("currency", "VARCHAR"), ("unit_price", "DECIMAL(38,12)")]
REF_COLUMNS = [(name, _DDL_TYPE[name]) for name in COLUMN_NAMES]  # price_references' columns, as ref_pick_sql reads


def _spot_columns() -> str:
    """What :func:`spot_sql` gives of a spot line ``l``."""
    return f"""l.x_LineItemId, l.x_Provider, l.ChargePeriodStart AS cps, l.ChargePeriodEnd AS cpe,
               l.BillingCurrency AS billing_currency, l.x_ListCostSource AS list_source,
               CASE WHEN {export_od_case()} > 0 THEN CAST({export_od_case()} AS DECIMAL(38,12)) END AS export_od,
               {_has_prices_part_case()} AS has_part"""


def spot_sql(lines: str = "line_items", cats: str = "line_categories", spot: str = SPOT_CATEGORY) -> str:
    """The spot lines (``spot``: the test over ``lines`` l JOIN ``cats`` c), each with its charge period, billing
    currency and the export's own usable on-demand cost (``export_od``, NULL: none)."""
    return f"""
        SELECT {_spot_columns()}
        FROM {lines} l JOIN {cats} c ON c.x_LineItemId = l.x_LineItemId
        WHERE {spot}"""


def spot_keyed_sql(lines: str = "line_items", hits: str = "rule_hits", export: bool | None = None) -> str | None:
    """:func:`spot_sql`'s spot lines of the relation ``lines`` by the categories of ``hits`` (a line whose first
    category is spot compute: a spot hit and none of a category before it), each with its key's columns as
    :func:`keys_sql` gives them (NULL: the line has none), in one pass: the lines picked by two semi and anti
    joins on the hits of their categories (not by grouping every hit), each provider's ``key_parts()`` computed
    on them.  At 10M lines (3.0M spot) 1.8 s, where the spot lines by their grouped categories and then their
    keys joined back by id took 3.0 s, and pricing them then joins no keys.  None when a provider's part has no
    ``key_parts()``: :func:`spot_sql` and :func:`keys_sql` then.  ``export``: False, only the lines without the
    export's own on-demand cost (``export_od`` NULL: those :func:`build_spot_od` stores), True only those with it,
    None every spot line; the test is made before their keys are (10M lines: 0.4M keys made, not 3.0M)."""
    cases: dict[str, list[str]] = {c: [] for c in LINE_KEY_COLUMNS[1:]}
    tests = []
    for prov, mod in parts():
        if not hasattr(mod, "key_parts"):
            return None
        columns, where = mod.key_parts()
        tests.append(f"WHEN {lit(prov)} THEN ({where})")
        for c in cases:
            cases[c].append(f"WHEN {lit(prov)} THEN {columns[c]}")
    keyed = f"(CASE l.x_Provider {' '.join(tests)} ELSE FALSE END)" if tests else "FALSE"
    types = {"quantity": "DECIMAL(38,12)"}
    cols = ", ".join(
        f"CAST(CASE WHEN l.ba_keyed THEN (CASE l.x_Provider {' '.join(w)} END) END AS {types.get(c, 'VARCHAR')}) AS {c}"
        if w else f"NULL::{types.get(c, 'VARCHAR')} AS {c}"
        for c, w in cases.items())
    picked = spot_lines_sql(f"l.*, coalesce({keyed}, FALSE) AS ba_keyed", lines, hits, export)
    return f"""
        SELECT {_spot_columns()}, {cols}
        FROM ({picked}) l"""


def _export_test(export: bool | None, alias: str = "l") -> str:
    """The WHERE clause keeping the lines (alias ``alias``) with (``export`` True) or without (False) the export's
    own usable on-demand cost, as :func:`_spot_columns`' ``export_od`` tests it; none for None."""
    if export is None:
        return ""
    test = f"coalesce({export_od_case(alias)} > 0, FALSE)"
    return f"\n        WHERE {test if export else f'NOT {test}'}"


def _spot_hits(hits: str) -> tuple[str, str]:
    """(the ids of ``hits`` in category spot compute, those in a category before it): a line is a spot line when
    it is in the first and not in the second (:data:`billing_audit.categories.CATEGORIES`' precedence)."""
    from billing_audit.categories import CATEGORIES

    before = ", ".join(lit(c) for c in CATEGORIES[:CATEGORIES.index("spot_compute")])
    return (f"(SELECT x_LineItemId FROM {hits} WHERE category = 'spot_compute')",
            f"(SELECT x_LineItemId FROM {hits} WHERE category IN ({before}))")


def spot_lines_sql(columns: str, lines: str = "line_items", hits: str = "rule_hits", export: bool | None = None) -> str:
    """``columns`` (over alias ``l``) of the spot lines of ``lines`` by the categories of ``hits``, as
    :func:`spot_keyed_sql` picks them (``export`` as there), without their keys."""
    spot, earlier = _spot_hits(hits)
    return f"""
        SELECT {columns} FROM {lines} l
        SEMI JOIN {spot} s ON s.x_LineItemId = l.x_LineItemId
        ANTI JOIN {earlier} h ON h.x_LineItemId = l.x_LineItemId{_export_test(export)}"""


def spot_ids_keyed_sql(hits: str = "rule_hits") -> str:
    """The ids of the lines :func:`spot_keyed_sql` gives over every line: from the hits alone (a hit's line is
    stored: an ingest that removes lines removes their hits)."""
    spot, earlier = _spot_hits(hits)
    return f"(SELECT s.x_LineItemId FROM {spot} s ANTI JOIN {earlier} h ON h.x_LineItemId = s.x_LineItemId)"


def bill_sums_sql(bill: str) -> str:
    """The bill's on-demand lines summed per key over the relation ``bill`` (:func:`bill_slices_sql`'s columns):
    cost, quantity, lines, first and last charge period; :func:`bill_prices` makes them unit prices."""
    key = "provider, price_key, region, unit, currency"
    return (f"SELECT {key}, sum(cost) AS cost, sum(qty) AS qty, sum(n) AS n, min(first) AS first, max(last) AS last "
            f"FROM {bill} GROUP BY {key}")


def bill_prices(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """:func:`bill_sums_sql`'s rows as :data:`BILL_COLUMNS`: unit price = cost / quantity in Python DECIMAL, rounded
    half to even to 12 places (the same wherever the sums were made), sorted (a stable table)."""
    out = [(*r[:5], _money(Decimal(r[5]) / Decimal(r[6]))) for r in rows]
    return sorted(out, key=lambda r: tuple("" if v is None else str(v) for v in r[:5]))


def _times(price: str, qty: str) -> str:
    """``price`` x ``qty`` as DECIMAL(38,12), exact before its one rounding (half away from zero, the
    quantity first taken to 10 places) on every engine.  A price and a quantity under 10^6 (every real one) take
    the small product, DECIMAL(18,12) x DECIMAL(17,10), both 64-bit: taking a DECIMAL(38,12) quantity to 10 places
    and the product to 12 by 128-bit division cost DuckDB 2.2 s per 3M spot lines, this 0.9 s, the same figures.
    Then DECIMAL(20,12) x DECIMAL(17,10) up to a price of 10^8 and a quantity of 10^7 (DECIMAL(38,22) on DuckDB
    and on Spark alike: Spark cuts a wider product's scale to 6), and beyond them the wide product (exact on
    DuckDB, 6 places on Spark)."""
    small = (f"CAST(round(CAST({price} AS DECIMAL(18,12)) * CAST(CAST({qty} AS DECIMAL(18,12)) AS DECIMAL(17,10)), 12) "
             "AS DECIMAL(38,12))")
    narrow = f"CAST({price} AS DECIMAL(20,12)) * CAST({qty} AS DECIMAL(17,10))"
    wide = f"CAST({price} AS DECIMAL(38,12)) * CAST({qty} AS DECIMAL(38,10))"
    return (f"CASE WHEN abs({price}) < 999999 AND abs({qty}) < 999999 THEN {small} "
            f"WHEN abs({price}) < 99999999 AND abs({qty}) < 9999999 THEN CAST({narrow} AS DECIMAL(38,12)) "
            f"ELSE CAST({wide} AS DECIMAL(38,12)) END")


# what ref_pick_sql takes of the reference it picks for a line
_REF_PICKED = "unit_price, kind, source, source_row, fetched_at, description, effective_from, effective_to"


def ref_pick_sql(spot: str = "ba_spot", keys: str | None = "ba_keys", refs: str = "price_references") -> str:
    """Per spot line without the export's price (relation ``spot``, :func:`spot_sql`), the reference of its key
    (``keys``; None: ``spot`` holds the keys, :func:`spot_keyed_sql`) that prices it: region (or none), unit,
    currency and effective period holding the line's charge period start; negotiated before retail, then the
    newest list, the line's own region, the latest period."""
    cols = _REF_PICKED
    src = f"{spot} s" if keys is None else f"{spot} s JOIN {keys} k ON k.x_LineItemId = s.x_LineItemId"
    k = "s" if keys is None else "k"
    return f"""
        SELECT x_LineItemId, {cols} FROM (
          SELECT s.x_LineItemId, {", ".join(f"r.{c}" for c in cols.split(", "))},
                 row_number() OVER (PARTITION BY s.x_LineItemId ORDER BY (r.kind = 'negotiated') DESC,
                   r.fetched_at DESC, (r.region IS NULL), r.effective_from DESC NULLS LAST, r.source, r.source_row) AS rn
          FROM {src}
          JOIN {refs} r ON r.provider = s.x_Provider AND r.price_key = {k}.price_key
            AND (r.region IS NULL OR r.region = {k}.region) AND r.unit IS NOT DISTINCT FROM {k}.unit
            AND r.currency = {k}.currency AND r.unit_price > 0
            AND (r.effective_from IS NULL OR r.effective_from <= s.cps)
            AND (r.effective_to IS NULL OR s.cps < r.effective_to)
          WHERE s.export_od IS NULL AND {k}.quantity > 0 AND {k}.currency = s.billing_currency) t
        WHERE rn = 1"""


def priced_sql(spot: str = "ba_spot", keys: str | None = "ba_keys", ref: str = "ba_ref", bill: str = "ba_bill") -> str:
    """Each spot line (``spot``) with its key (``keys``; None: ``spot`` holds the keys, :func:`spot_keyed_sql`),
    the picked reference (``ref``, :func:`ref_pick_sql`) and the bill's price of its key (``bill``,
    :data:`BILL_COLUMNS`): ``od_source``, the first of export, reference and bill (module docstring), and
    ``od_cost`` from it (NULL: none): the one unit price it takes times the line's quantity (one product per line,
    not one per source)."""
    k = "s" if keys is None else "k"
    key_cols = "" if keys is None else "k.price_key, k.region, k.unit, k.currency, k.quantity, "
    key_join = "" if keys is None else f"LEFT JOIN {keys} k ON k.x_LineItemId = s.x_LineItemId"
    billable = f"{k}.quantity > 0 AND {k}.currency = s.billing_currency"
    src = (f"CASE WHEN s.export_od IS NOT NULL THEN 'export' WHEN r.x_LineItemId IS NOT NULL THEN 'reference' "
           f"WHEN b.provider IS NOT NULL AND {billable} THEN 'bill' END")
    return f"""
        SELECT y.*, CASE WHEN od_source = 'export' THEN export_od ELSE {_times("od_price", "quantity")} END AS od_cost
        FROM (
         SELECT x.*, CASE od_source WHEN 'reference' THEN ref_price WHEN 'bill' THEN bill_price END AS od_price
         FROM (
          SELECT s.*, {key_cols}{src} AS od_source,
                 r.unit_price AS ref_price, r.source AS ref_source, r.source_row AS ref_row, r.kind AS ref_kind,
                 r.fetched_at AS ref_fetched, b.unit_price AS bill_price
          FROM {spot} s
          {key_join}
          LEFT JOIN {ref} r ON r.x_LineItemId = s.x_LineItemId
          LEFT JOIN {bill} b ON {bill_key_match("b", k, "s")}) x) y"""


def classify(con: duckdb.DuckDBPyConnection, lines: str = "line_items", bill: str | None = None,
             cats: str | None = None, keys: str | None = None, run_id: int | None = None,
             spot_lines: str | None = None) -> None:
    """Each spot line's on-demand equivalent and provenance as the temp table ``ba_spot_od`` (spot_od's columns
    but run_id).  Needs ``line_categories`` (a tag run's hits) and ``price_references``.  ``lines``: the relation
    of lines priced (default: every line); ``bill``: a relation of the bill's prices per slice and key
    (:func:`bill_slices_sql`'s columns) covering the whole store (default: made from every line, left as the temp
    table ``ba_bill_slices``); ``cats``: the lines' categories (default :func:`categories_sql` over rule_hits; another relation must
    cover ``lines``); ``keys``: the lines' keys (:func:`bill_keys` over a relation covering ``lines``; default:
    made from ``lines``); ``run_id``: the equivalents are inserted into ``spot_od`` with it instead (one write:
    at 10M lines the temp table of 3.0M rows made and then copied took 1.0 s more); ``spot_lines``: the temp
    table of the spot lines priced with their keys (:func:`spot_keyed_sql`'s columns), made by the caller, with
    ``bill`` (``lines``, ``cats`` and ``keys`` are then not read; the table is dropped).  A spot line's equivalent
    depends on the line, the references and the bill only."""
    if not _has(con, "price_references"):  # a store written before price references (perhaps read-only)
        cols = ", ".join(f"{name} {typ.replace(' NOT NULL', '')}" for name, typ, _ in COLUMNS)
        con.execute(f"CREATE OR REPLACE TEMP TABLE price_references ({cols})")
    if spot_lines is not None:
        if bill is None:
            raise ValueError("classify: spot_lines needs bill")
        _price_spot(con, spot_lines, None, bill, run_id)
        con.execute(f"DROP TABLE IF EXISTS {spot_lines}")
        return
    made_keys = keys is None
    # the spot lines left out of the bill's prices: those of ba_spot, when it holds every spot line the keys
    # have (the keys made from the same lines, or every line priced); else from the categories again
    spot = "(SELECT x_LineItemId FROM ba_spot)" if made_keys or lines == "line_items" else None
    # the bill's slices in one pass over the lines the keys are (or would be) made from, not from the keys
    whole = (bill_slices_one_pass_sql(lines if made_keys else "line_items", spot)
             if bill is None and spot is not None else None)
    # the spot lines to work out (the export prices the rest: not stored) with their keys in one pass, when nothing
    # else needs the keys or the categories
    keyed = (spot_keyed_sql(lines, export=False)
             if cats is None and made_keys and (bill is not None or whole is not None) else None)
    if keyed is not None and whole is not None and lines == "line_items" and not _any_rows(con, "price_references"):
        # Every line priced, the bill's prices made here and no price reference to pick: the spot lines are read
        # once, by the INSERT into spot_od, rather than made into a temp table first (10M lines, 3.0M spot: that
        # table cost 1.4 s to write and 0.4 s to read back); the bill's slices leave them out by their hits.
        slices = bill_slices_one_pass_sql(lines, spot_ids_keyed_sql())
        assert slices is not None  # made above from the same parts
        con.execute(f"CREATE OR REPLACE TEMP TABLE ba_bill_slices AS {slices}")
        _price_spot(con, f"({keyed})", None, "ba_bill_slices", run_id, refs=False)
        return
    if keyed is not None:
        # the spot lines to work out (those the export prices are not stored); the bill's slices leave out
        # every spot line, by their hits
        con.execute(f"CREATE OR REPLACE TEMP TABLE ba_spot AS {keyed}")
        slices = None if whole is None else bill_slices_one_pass_sql(lines, spot_ids_keyed_sql())
    else:
        cats = cats or f"({categories_sql()})"
        con.execute(f"CREATE OR REPLACE TEMP TABLE ba_spot AS {spot_sql(lines, cats)}")
        if keys is None:
            # the keys read below: the spot lines' alone (10M lines: 6.3M keys made, 3.0M read), unless the
            # bill's slices are made from them
            bill_keys(con, lines if bill is None and whole is None else lines_of_sql(lines, "ba_spot"), "ba_keys")
            keys = "ba_keys"
        slices = whole or bill_slices_sql(keys, cats, spot=spot)
    if bill is None:
        con.execute(f"CREATE OR REPLACE TEMP TABLE ba_bill_slices AS {slices}")
        bill = "ba_bill_slices"
    _price_spot(con, "ba_spot", keys, bill, run_id)
    con.execute("DROP TABLE IF EXISTS ba_spot")


def _price_spot(con: duckdb.DuckDBPyConnection, spot: str, keys: str | None, bill: str, run_id: int | None,
                refs: bool = True) -> None:
    """:func:`classify`'s equivalents of the spot lines of the relation ``spot`` (:func:`spot_sql`'s columns,
    with ``keys``; None: :func:`spot_keyed_sql`'s; a temp table, or a subquery read once) at the bill's prices per
    slice ``bill``, for those without the export's own on-demand cost (the module docstring: a line the export
    prices has no row).  ``refs``: False when ``price_references`` holds no row (no line has one: nothing is
    picked, and the spot lines are not read for it)."""
    spot = f"(SELECT * FROM {spot} ba_s WHERE ba_s.export_od IS NULL)"
    bill_table(con, bill, "ba_bill")
    pick = (ref_pick_sql(spot, keys) if refs
            else f"SELECT NULL::VARCHAR AS x_LineItemId, {_REF_PICKED} FROM price_references WHERE FALSE")
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_ref AS {pick}")
    rows = f"""
        SELECT x_LineItemId, x_Provider, od_cost, od_source,
          CASE od_source WHEN 'reference' THEN ref_price WHEN 'bill' THEN bill_price END AS od_unit_price,
          price_key, region, unit, currency, quantity,
          CASE od_source
            WHEN 'export' THEN 'the export: ' || coalesce(list_source, 'ListCost')
            WHEN 'reference' THEN ref_source || coalesce(' row ' || ref_row, '') || ' (' || ref_kind || ' price)'
          END AS price_ref,
          CASE od_source WHEN 'reference' THEN ref_kind WHEN 'bill' THEN 'bill' WHEN 'export' THEN 'export' END
            AS price_kind,
          CASE od_source WHEN 'reference' THEN ref_fetched END AS price_as_of,
          CASE WHEN od_source IS NOT NULL THEN NULL
            WHEN NOT has_part THEN 'the export has no on-demand price for this line (' || coalesce(list_source, '?')
                                   || ') and its provider has no price references'
            WHEN price_key IS NULL THEN 'the export has no on-demand price for this line (' || coalesce(list_source, '?')
                                        || ') and its usage has no known on-demand counterpart'
            WHEN NOT (quantity > 0) THEN 'the line has no usage quantity to price'
            WHEN currency IS DISTINCT FROM billing_currency THEN 'the on-demand price is in ' || coalesce(currency, '?')
                 || ', the line is billed in ' || coalesce(billing_currency, '?')
            ELSE 'no price reference of ' || price_key || coalesce(' in ' || region, '') || ' (' || coalesce(unit, '?')
                 || ', ' || currency || ') covers ' || coalesce(strftime(cps, '%Y-%m-%d %H:%M'), 'its charge period')
                 || ' and the bill holds none bought on demand: run `billing-audit prices pull ' || x_Provider || '`'
          END AS reason
        FROM ({priced_sql(spot, keys, 'ba_ref', 'ba_bill')}) p"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_spot_od AS {rows}" if run_id is None
                else f"INSERT INTO spot_od SELECT *, {int(run_id)} FROM ({rows})")
    for t in ("ba_keys", "ba_bill", "ba_ref"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def _any_rows(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()
    return bool(row and row[0])


def bill_table(con: duckdb.DuckDBPyConnection, bill: str, into: str) -> None:
    """The bill's own on-demand prices (:data:`BILL_COLUMNS`) as the temp table ``into``: per key, the cost and
    quantity of the lines bought on demand, from the relation ``bill`` (:func:`bill_slices_sql`'s columns)."""
    unit_prices = bill_prices(con.execute(bill_sums_sql(bill)).fetchall())
    con.execute(f"CREATE OR REPLACE TEMP TABLE {into} ({', '.join(f'{n} {t}' for n, t in BILL_COLUMNS)})")
    row = f"({', '.join('?' * len(BILL_COLUMNS))})"
    for i in range(0, len(unit_prices), 500):  # one statement per 500 keys (executemany: one per key, 0.2 s per 240)
        part = unit_prices[i:i + 500]
        con.execute(f"INSERT INTO {into} VALUES {', '.join([row] * len(part))}", [v for r in part for v in r])


def bill_key_match(bill: str, key: str, provider: str | None = None) -> str:
    """The join of a relation of the bill's prices or sums (alias ``bill``: provider and the key's columns) to a
    priced key: alias ``key`` with price_key, region, unit and currency, and ``provider`` with x_Provider (default:
    ``key``)."""
    return (f"{bill}.provider = {provider or key}.x_Provider AND {bill}.price_key = {key}.price_key "
            f"AND {bill}.region IS NOT DISTINCT FROM {key}.region AND {bill}.unit IS NOT DISTINCT FROM {key}.unit "
            f"AND {bill}.currency = {key}.currency")


def rebill_sql(od: str, bill: str) -> str:
    """The equivalents (``ba_spot_od``'s columns) of lines priced from the bill (``od``: their rows of spot_od,
    od_source 'bill') at the bill's prices ``bill`` (:func:`bill_table`), for lines whose key is still in it: what
    :func:`classify` makes of them again when the line, its key and the price references are as they were (an
    equivalent from the bill is the key's unit price times the line's quantity, both kept in spot_od) but the
    bill's unit price moved.  A line whose key left the bill is not here: classify says why it is unpriced."""
    return f"""
        SELECT o.x_LineItemId, o.x_Provider, {_times("b.unit_price", "o.quantity")} AS od_cost, 'bill' AS od_source,
               b.unit_price AS od_unit_price, o.price_key, o.region, o.unit, o.currency, o.quantity,
               NULL::VARCHAR AS price_ref, 'bill' AS price_kind, NULL::TIMESTAMP AS price_as_of,
               NULL::VARCHAR AS reason
        FROM {od} o JOIN {bill} b ON {bill_key_match("b", "o")}
        WHERE o.od_source = 'bill'"""


def build_spot_od(con: duckdb.DuckDBPyConnection, run_id: int) -> int:
    """Fill ``spot_od`` for the lines stored now (inside the caller's transaction); returns the spot lines."""
    from billing_audit.ddl import PRICE_TABLES

    for stmt in PRICE_TABLES:
        con.execute(stmt)
    con.execute("DELETE FROM spot_od")
    classify(con, run_id=run_id)
    con.execute("DELETE FROM spot_bill")  # what the next tag run prices with, slice by slice (incremental)
    con.execute("INSERT INTO spot_bill SELECT *, ? FROM ba_bill_slices", [run_id])
    con.execute("DROP TABLE ba_bill_slices")
    row = con.execute("SELECT count(*) FROM spot_od").fetchone()
    return int(row[0]) if row else 0


def export_rows_sql(lines: str = "line_items", hits: str = "rule_hits") -> str:
    """``spot_od``'s rows (its columns, in its order) of the spot lines of the relation ``lines`` that the export
    prices, which the table does not hold (module docstring): as :func:`classify` would make them, from the line
    and its hits (``hits``: rule_hits' columns, run_id the run that tagged the line spot compute)."""
    keyed = spot_keyed_sql(lines, hits, export=True)
    if keyed is None:  # a provider part without key_parts(): the spot lines by their categories, keys joined
        spot = spot_sql(lines, f"({categories_sql(lines, hits)})")
        keyed = (f"SELECT s.*, k.price_key, k.region, k.unit, k.currency, k.quantity FROM ({spot}) s "
                 f"LEFT JOIN ({keys_sql(lines)}) k ON k.x_LineItemId = s.x_LineItemId WHERE s.export_od IS NOT NULL")
    runs = (f"(SELECT x_LineItemId, max(run_id) AS run_id FROM {hits} WHERE category = 'spot_compute' "
            "GROUP BY x_LineItemId)")
    return f"""
        SELECT s.x_LineItemId, s.x_Provider, s.export_od AS od_cost, 'export' AS od_source,
               NULL::DECIMAL(38,12) AS od_unit_price, s.price_key, s.region, s.unit, s.currency, s.quantity,
               'the export: ' || coalesce(s.list_source, 'ListCost') AS price_ref, 'export' AS price_kind,
               NULL::TIMESTAMP AS price_as_of, NULL::VARCHAR AS reason, r.run_id
        FROM ({keyed}) s JOIN {runs} r ON r.x_LineItemId = s.x_LineItemId"""


def od_rows_sql() -> str:
    """Every spot line's on-demand equivalent as ``spot_od``'s rows: the table's, and those of the lines the
    export prices (:func:`export_rows_sql`; one the table holds, as a store tagged before version 5 kept them,
    is not given twice)."""
    return f"""SELECT * FROM spot_od UNION ALL
        SELECT e.* FROM ({export_rows_sql()}) e ANTI JOIN spot_od o ON o.x_LineItemId = e.x_LineItemId"""


def logic_sql() -> str:
    """What the installed connectors price spot lines with (their keys, on-demand tests, export prices), as the SQL
    :func:`classify` runs: part of what a tag run's state is computed from (:func:`billing_audit.tagging.state_key`)."""
    return "\n".join((keys_sql(), _on_demand_case(), _has_prices_part_case(), export_od_case("l")))


def prices_key(con: duckdb.DuckDBPyConnection) -> str:
    """The price references held now, as a fingerprint (count and an order-free hash of every row): a tag run
    records it, and one with other references is not current (``tag`` redoes it; ``reprice`` updates it)."""
    if not _has(con, "price_references"):
        return "0:0"
    row = con.execute("SELECT count(*), coalesce(sum(hash(r)), 0) FROM price_references r").fetchone()
    return f"{row[0]}:{row[1]}" if row else "0:0"


def has_spot_od(con: duckdb.DuckDBPyConnection) -> bool:
    return _has(con, "spot_od")


def reprice(con: duckdb.DuckDBPyConnection) -> int | None:
    """After references changed: the on-demand equivalents and the report's line groups again, in one
    transaction, when the store has a completed tag run of its lines (else None: the next tag run does it)."""
    from billing_audit.rollup import build_groups, completed_tag_run

    run_id = completed_tag_run(con)
    if run_id is None:
        return None
    con.execute("BEGIN TRANSACTION")
    try:
        n = build_spot_od(con, run_id)
        build_groups(con, run_id)
        # the run's state now follows these references: `tag` need not redo it for them
        from billing_audit.ddl import RULE_TABLES

        for stmt in RULE_TABLES:  # a store tagged before tag runs recorded their references
            con.execute(stmt)
        con.execute("UPDATE tag_runs SET prices_key = ? WHERE run_id = ?", [prices_key(con), run_id])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return n


# -- what the pull needs, what is held ------------------------------------------------------------------------------
def needs(con: duckdb.DuckDBPyConnection, provider: str | None = None) -> list[PriceNeed]:
    """The on-demand prices the store's spot lines need: lines without the export's on-demand cost and without a
    covering reference (priced by the bill or not at all), per provider, key, region, unit and currency."""
    from billing_audit.rollup import NO_TAG_RUN, completed_tag_run

    if completed_tag_run(con) is None:
        raise BillingAuditError(NO_TAG_RUN + " (the spot lines are the tag run's)")
    classify(con)
    where = "" if provider is None else f" AND o.x_Provider = {lit(provider)}"
    rows = con.execute(f"""
        SELECT o.x_Provider, o.price_key, o.region, o.unit, o.currency, min(l.ChargePeriodStart),
               max(l.ChargePeriodEnd), count(*), min(coalesce(l.ChargeDescription, l.x_UsageType))
        FROM ba_spot_od o JOIN line_items l ON l.x_LineItemId = o.x_LineItemId
        WHERE (o.od_source IS NULL OR o.od_source = 'bill') AND o.price_key IS NOT NULL
          AND o.quantity > 0 AND o.currency IS NOT DISTINCT FROM l.BillingCurrency{where}
        GROUP BY ALL ORDER BY ALL""").fetchall()
    con.execute("DROP TABLE ba_spot_od")
    con.execute("DROP TABLE IF EXISTS ba_bill_slices")
    return [PriceNeed(provider=r[0], price_key=r[1], region=r[2], unit=r[3], currency=r[4], first=r[5], last=r[6],
                      lines=int(r[7]), description=r[8]) for r in rows]


def references(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The references held, per provider and kind."""
    if not _has(con, "price_references"):
        return []
    cur = con.execute("""SELECT provider, kind, count(*) AS refs, count(DISTINCT price_key) AS keys,
        count(DISTINCT source) AS sources, min(fetched_at) AS oldest, max(fetched_at) AS newest
        FROM price_references GROUP BY ALL ORDER BY provider, kind""")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def coverage(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per provider and currency: the spot lines and their cost, and how much of it has an on-demand equivalent
    from each source (from the last tag run's ``spot_od`` and the lines the export prices: :func:`od_rows_sql`)."""
    if not _has(con, "spot_od"):
        return []
    # the stored rows joined to their lines, and the lines the export prices by themselves (their keys are not
    # needed here: od_rows_sql's rows joined back to their lines ran out of memory at 10M lines)
    exported = spot_lines_sql("l.x_LineItemId, l.x_Provider, l.BillingCurrency, l.EffectiveCost", export=True)
    cur = con.execute(f"""WITH o AS (
          SELECT o.x_Provider, o.od_source, l.BillingCurrency, l.EffectiveCost
          FROM spot_od o JOIN line_items l ON l.x_LineItemId = o.x_LineItemId
          UNION ALL
          SELECT e.x_Provider, 'export', e.BillingCurrency, e.EffectiveCost
          FROM ({exported}) e ANTI JOIN spot_od o ON o.x_LineItemId = e.x_LineItemId)
        SELECT o.x_Provider AS provider, o.BillingCurrency AS currency, count(*) AS spot_lines,
        sum(o.EffectiveCost) AS spot_cost,
        coalesce(sum(o.EffectiveCost) FILTER (WHERE o.od_source = 'export'), 0) AS priced_by_export,
        coalesce(sum(o.EffectiveCost) FILTER (WHERE o.od_source = 'reference'), 0) AS priced_by_reference,
        coalesce(sum(o.EffectiveCost) FILTER (WHERE o.od_source = 'bill'), 0) AS priced_by_bill,
        coalesce(sum(o.EffectiveCost) FILTER (WHERE o.od_source IS NULL), 0) AS unpriced,
        count(*) FILTER (WHERE o.od_source IS NULL) AS unpriced_lines
        FROM o GROUP BY ALL ORDER BY ALL""")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def line(con: duckdb.DuckDBPyConnection, line_item_id: str) -> dict[str, Any] | None:
    """How one spot line's on-demand equivalent was found (its ``spot_od`` row), or None (not a spot line)."""
    if not _has(con, "spot_od"):
        return None
    cur = con.execute("SELECT * FROM spot_od WHERE x_LineItemId = ?", [line_item_id])
    row = cur.fetchone()
    if not row and _has(con, "rule_hits"):  # a spot line the export prices (export_rows_sql)
        one = "(SELECT * FROM {} WHERE x_LineItemId = $id)"
        cur = con.execute(f"SELECT * FROM ({export_rows_sql(one.format('line_items'), one.format('rule_hits'))})",
                          {"id": line_item_id})
        row = cur.fetchone()
    if not row:
        return None
    od = dict(zip([d[0] for d in cur.description], row, strict=True))
    if od["od_source"] == "bill" and od["price_ref"] is None and _has(con, "spot_bill"):
        # a price from the bill says which of the bill's lines it is from, as the last tag run found them
        # (spot_bill); kept per key, not per line, so that a re-delivery that adds on-demand lines of a key at the
        # same unit price rewrites no spot line of the other months
        key = ("(SELECT ?::VARCHAR AS x_Provider, ?::VARCHAR AS price_key, ?::VARCHAR AS region, ?::VARCHAR AS unit, "
               "?::VARCHAR AS currency) o")
        b = con.execute(f"SELECT n, first, last FROM ({bill_sums_sql('spot_bill')}) b, {key} "
                        f"WHERE {bill_key_match('b', 'o')}",
                        [od["x_Provider"], od["price_key"], od["region"], od["unit"], od["currency"]]).fetchone()
        if b is not None:
            od["price_ref"] = bill_ref(od["price_key"], int(b[0]), b[1], b[2])
            od["price_as_of"] = b[2]
    return od


def bill_ref(key: str, n: int, first: datetime, last: datetime) -> str:
    """A bill-priced line's provenance: how many on-demand lines of its key the store holds, and when."""
    return f"the bill: {n} on-demand line(s) of {key} in the store, {first:%Y-%m-%d} to {last:%Y-%m-%d}"


def _has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                      "AND schema_name = 'main' AND table_name = ?", [table]).fetchone()
    return bool(row and row[0])


def ref_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """Every reference held as rows of :data:`REF_COLUMNS`, sorted (none: a store written before references)."""
    if not _has(con, "price_references"):
        return []
    return con.execute(f"SELECT {', '.join(COLUMN_NAMES)} FROM price_references ORDER BY ALL").fetchall()


def iter_refs(con: duckdb.DuckDBPyConnection) -> Iterator[PriceRef]:
    """Every reference held (tests, exports)."""
    for r in ref_rows(con):
        yield PriceRef(*r)
