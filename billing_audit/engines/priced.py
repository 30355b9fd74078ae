"""Spot lines priced on an engine exactly as a local tag run prices them (:mod:`billing_audit.pricing`).

The audit query gets five steps after ``ranks`` (the lines' categories), all :mod:`billing_audit.pricing`'s own SQL:

1. ``ba_keys``: every provider's on-demand key of each line (``keys_sql``);
2. ``ba_spot``: the spot lines with the export's own on-demand cost (``spot_sql``);
3. ``od_bill``: the bill's on-demand lines summed per key on the engine (``bill_sums_sql`` over ``bill_slices_sql``),
   brought to the driver, where :func:`billing_audit.pricing.bill_prices` makes them unit prices (Python DECIMAL,
   the local rounding) and the engine gets them back as a small table (:data:`DRIVER_STEPS`);
4. ``ba_ref``: the reference that prices each line (``ref_pick_sql``) from ``od_refs``, the store's price references
   sent to the engine as a small table (:func:`tables`);
5. ``spot_od``: each spot line's on-demand cost from the export, the reference or the bill, in the local order
   (``priced_sql``), which the lines' groups sum as the local report's groups sum ``spot_od``.
"""

from __future__ import annotations

from typing import Any

import duckdb

from billing_audit import pricing, rollup

# steps whose rows the engine brings to the driver, which makes them the table of that name (columns, rows)
DRIVER_STEPS = {"od_bill"}
JOIN = " LEFT JOIN spot_od o ON o.x_LineItemId = l.x_LineItemId"  # what the lines' groups join
OD = "o.od_cost"  # ... and sum as the spot lines' on-demand equivalent


def steps() -> list[tuple[str, str]]:
    """The pricing steps (DuckDB SQL over ``line_items`` and ``ranks``; ``od_refs`` is :func:`tables`')."""
    spot = f"c.rank = {rollup.SPOT_RANK}"
    slices = pricing.bill_slices_sql("ba_keys", lines="line_items", spot="ba_spot")
    return [
        ("ba_keys", pricing.keys_sql("line_items")),
        ("ba_spot", pricing.spot_sql("line_items", "ranks", spot)),
        ("od_bill", pricing.bill_sums_sql(f"({slices}) AS bs")),
        ("ba_ref", pricing.ref_pick_sql("ba_spot", "ba_keys", "od_refs")),
        ("spot_od", f"SELECT x_LineItemId, od_cost FROM ({pricing.priced_sql('ba_spot', 'ba_keys', 'ba_ref', 'od_bill')}) p"),
    ]


def driver_table(name: str, rows: list[tuple[Any, ...]]) -> tuple[list[tuple[str, str]], list[tuple[Any, ...]]]:
    """A driver step's rows (:data:`DRIVER_STEPS`) as the table the engine gets back: its columns (name, DuckDB
    type) and rows."""
    if name != "od_bill":
        raise KeyError(name)
    return pricing.BILL_COLUMNS, pricing.bill_prices(rows)


def tables(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[list[tuple[str, str]], list[tuple[Any, ...]]]]:
    """The tables the engine needs from the store before the query: ``od_refs``, the price references held."""
    return {"od_refs": (pricing.REF_COLUMNS, pricing.ref_rows(con))}
