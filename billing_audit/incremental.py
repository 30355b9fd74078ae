"""Incremental tagging by slice: a tag run redoes only the slices whose lines changed since the last one.

A *slice* is a provider x billing account x billing month (the store's ``slices``: which delivery of which export
holds how many of its lines).  Each tag run records the slices its state was computed from (``tag_slices``) and
the key of everything else it was computed from (:func:`billing_audit.tagging.state_key`: the rules, their
parameters, the checkpoint config, the code).  The next run with the same key redoes:

- **rule hits** of the rules that are *line-local* only for the lines of the changed slices: a rule the fused scan
  runs (:func:`billing_audit.tagging._fusable`: by its parsed tree a plain filter over ``line_items``, no join,
  aggregate, window or subquery) decides each line from that line alone.  A fused rule that reads
  ``checkpoint_resources`` (the checkpoint storage the whole store names) is line-local only while that set is
  the same as the last run's, and one that reads the clock or a random source never is; every other rule (one
  the fused scan cannot run, every user rule: they run bounded over the whole store) runs over every line, and
  its hits are replaced whole;
- **on-demand equivalents** (``spot_od``) for the spot lines of the changed slices and of every slice holding a
  line whose hits moved, and for every spot line priced from the bill (or not priced) by a key whose price in the
  bill moved (an equivalent from the export or a price reference never reads the bill): a spot line can be
  priced by on-demand lines of other slices (the bill's own prices, kept per slice in ``spot_bill`` and re-read
  for those slices only); all of them when the price references changed;
- **line groups** for the changed slices and for every slice holding a line whose rule hits (of the rules run
  whole) or on-demand equivalent changed; the keys table is merged;
- **the search index** for the changed slices' providers and months (its rows sum lines across accounts).
- **checkpoint resources**: ``checkpoint_resources`` is made from ``checkpoint_slices`` (the same per slice), whose
  changed slices' rows alone are made again.

When every slice changed, the key differs, or the last run's state is not there as it left it, everything is
rebuilt as a first run would.  The result is the same as a full rebuild's (tests/core/test_incremental.py proves it
on random sequences of ingests, re-deliveries and rule changes); only the run ids on kept rows are older.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    from billing_audit.rules import Rule

PERIOD = "date_trunc('month', {t}.BillingPeriodStart + INTERVAL 14 DAY)"
_TABLES = ("tag_slices", "slices", "line_groups", "line_group_keys", "line_groups_meta", "search_index",
           "search_texts", "spot_od", "spot_bill", "checkpoint_slices")


def checkpoint_resources(con: duckdb.DuckDBPyConnection, by_slice: str, p: Plan | None) -> None:
    """The temp table ``checkpoint_resources`` (the checkpoint storage the whole store names) from the store's
    ``checkpoint_slices`` (the same per slice: ``by_slice``, :func:`billing_audit.tagging.checkpoint_sql`): with a
    plan, the changed slices' rows are made again and the others kept (the checkpoint config is in the state key:
    the same as the last run's); without, every slice's."""
    if p is None:
        con.execute(f"CREATE OR REPLACE TABLE checkpoint_slices AS {by_slice}")
    else:
        con.execute("""DELETE FROM checkpoint_slices USING ba_changed c WHERE c.p = checkpoint_slices.x_Provider
            AND c.a IS NOT DISTINCT FROM checkpoint_slices.BillingAccountId
            AND c.s IS NOT DISTINCT FROM checkpoint_slices.BillingPeriodStart""")
        con.execute(f"INSERT INTO checkpoint_slices SELECT * FROM ({by_slice} AND {p.where})")
    con.execute("CREATE OR REPLACE TEMP TABLE checkpoint_resources AS "
                "SELECT DISTINCT x_Provider, ResourceId FROM checkpoint_slices")


def checkpoint_key(con: duckdb.DuckDBPyConnection) -> str:
    """What ``checkpoint_resources`` (made by :func:`checkpoint_resources`) holds, as a fingerprint."""
    row = con.execute("SELECT count(*), coalesce(sum(hash(x_Provider, ResourceId)), 0) FROM checkpoint_resources"
                      ).fetchone()
    return f"{row[0]}:{row[1]}" if row else "0:0"


def reads_checkpoint(rule: Rule) -> bool:
    from sqlglot import exp

    return rule.tree is not None and any(t.name.lower() == "checkpoint_resources" for t in rule.tree.find_all(exp.Table))


def drop_gone(con: duckdb.DuckDBPyConnection, everywhere: bool = False) -> int:
    """After an ingest removed lines (inside its transaction): drop the ``rule_hits`` and ``spot_od`` rows of the
    lines that are gone, from the ids the ingest noted in the temp table ``ba_gone`` (the lines it removed).  A
    removed id can still be in the store: a line's id is its provider, its file's fingerprint (12 hex digits) and
    its row (reader.MappedFile), so a re-delivery carrying an unchanged file brings the same ids back; only the
    lines of files with the same fingerprint (ingest_log) can share one, and only those are checked (every line,
    for an id of another shape).  ``everywhere`` (an overlap between exports removed lines too, which ``ba_gone``
    does not hold): every row whose line is not in the store.  Returns the gone lines noted (-1: everywhere)."""
    if everywhere:
        for t in ("rule_hits", "spot_od"):
            if _has(con, t):  # NOT EXISTS, not NOT IN: an anti-join without NULL handling
                con.execute(f"DELETE FROM {t} WHERE NOT EXISTS (SELECT 1 FROM line_items l "
                            f"WHERE l.x_LineItemId = {t}.x_LineItemId)")
        return -1
    if not _one(con, "SELECT count(*) FROM ba_gone")[0]:
        return 0
    # the 12 characters before an id's last '-' (by strpos on the reversed id: a regular expression took 0.26 s
    # per 1M ids, this 0.06 s)
    con.execute("CREATE OR REPLACE TEMP TABLE ba_gone_fp AS SELECT DISTINCT CASE WHEN contains(x_LineItemId, '-') "
                "THEN right(left(x_LineItemId, length(x_LineItemId) - strpos(reverse(x_LineItemId), '-')), 12) "
                "ELSE '' END AS fp FROM ba_gone")
    shaped, = _one(con, "SELECT count(*) = count(*) FILTER (WHERE fp IN (SELECT left(fingerprint, 12) "
                        "FROM ingest_log)) FROM ba_gone_fp")
    where = "TRUE"
    if shaped:  # the ingests holding a file of one of those fingerprints, as literals (storage prunes by them)
        ids = [int(r[0]) for r in con.execute("SELECT DISTINCT ingest_id FROM ingest_log WHERE left(fingerprint, 12) "
                                              "IN (SELECT fp FROM ba_gone_fp) ORDER BY 1").fetchall()]
        where = f"x_IngestId IN ({', '.join(map(str, ids))})"
    con.execute(f"DELETE FROM ba_gone WHERE x_LineItemId IN (SELECT x_LineItemId FROM line_items WHERE {where})")
    con.execute("DROP TABLE ba_gone_fp")
    bounds = id_bounds(con, "ba_gone")
    for t in ("rule_hits", "spot_od"):
        if _has(con, t):
            con.execute(f"DELETE FROM {t} USING ba_gone g WHERE g.x_LineItemId = {t}.x_LineItemId "
                        f"AND {IN_IDS.format(t=t)}", bounds)
    n, = _one(con, "SELECT count(*) FROM ba_gone")
    return int(str(n))


def _has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(_one(con, "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                          "AND schema_name = 'main' AND table_name = ?", [table])[0])


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> tuple[object, ...]:
    row = con.execute(sql, params or []).fetchone()
    assert row is not None
    return tuple(row)


# A condition on line ids implied by a join to some lines, added so that storage skips the row groups outside them:
# a line's id is its provider, its file's fingerprint and its row, and rule_hits and spot_od are written in the lines'
# order, so the hits of one delivery's lines sit in row groups of their own (a re-delivery of one month of a 12 x
# 1M-line store: its hits removed 0.31 -> 0.12 s).  The bounds are bound as values: storage prunes by constants,
# not by a subquery's result.  Any relation's own ids are within its bounds, so the condition changes no result.
IN_IDS = "{t}.x_LineItemId BETWEEN $id_lo AND $id_hi"


def id_bounds(con: duckdb.DuckDBPyConnection, relation: str) -> dict[str, object]:
    """The smallest and largest line id of ``relation`` (x_LineItemId) as the parameters of :data:`IN_IDS` (both
    NULL when it is empty: the condition then holds for no line, as the join it goes with)."""
    lo, hi = _one(con, f"SELECT min(x_LineItemId), max(x_LineItemId) FROM {relation}")
    return {"id_lo": lo, "id_hi": hi}


def _where(con: duckdb.DuckDBPyConnection, table: str, t: str, accounts: bool = True) -> str:
    """The lines (alias ``t``) of the slices in temp table ``table`` (p, a, s; without ``accounts``: of every
    account of those providers' months).  The slices' deliveries as literals first, so storage prunes by them."""
    acct = "AND c.a IS NOT DISTINCT FROM s.BillingAccountId " if accounts else ""
    ids = [int(r[0]) for r in con.execute(
        f"SELECT DISTINCT s.ingest_id FROM slices s JOIN {table} c ON c.p = s.x_Provider {acct}"
        "AND c.s IS NOT DISTINCT FROM s.BillingPeriodStart ORDER BY 1").fetchall()]
    if not ids:
        return "FALSE"
    deliveries = f"{t}.x_IngestId IN ({', '.join(map(str, ids))})"
    # every slice those deliveries hold is one of the table's (a re-delivery of the slices asked for): the
    # deliveries alone pick the lines (each line is in its delivery's slice row: the plan checks they add up).
    # The test per line costs a join DuckDB materialises with every column the caller reads (1M lines of a
    # 12-month store: ~2 s of the groups, spilled); the literals alone prune by row group
    other, = _one(con, f"SELECT count(*) FROM slices s WHERE s.ingest_id IN ({', '.join(map(str, ids))}) AND NOT EXISTS "
                       f"(SELECT 1 FROM {table} c WHERE c.p = s.x_Provider {acct}"
                       "AND c.s IS NOT DISTINCT FROM s.BillingPeriodStart)")
    if not other:
        return deliveries
    acct = f"AND c.a IS NOT DISTINCT FROM {t}.BillingAccountId " if accounts else ""
    return (f"{deliveries} AND EXISTS (SELECT 1 FROM {table} c WHERE "
            f"c.p = {t}.x_Provider {acct}AND c.s IS NOT DISTINCT FROM {PERIOD.format(t=t)})")


@dataclass
class Plan:
    """What the run redoes: the slices whose lines changed since run ``last_run``."""

    last_run: int
    slices: int  # slices in the store now
    changed: int  # slices whose lines changed (added, replaced, gone)
    lines: int  # lines in the changed slices now
    checkpoint_was: str | None  # what checkpoint_resources held for the last run (incremental.checkpoint_key)
    where: str  # the changed slices' lines, over alias line_items
    prices_same: bool = True  # the price references are those the last run priced with
    checkpoint_same: bool = False  # checkpoint_resources holds what it held for the last run (set once made)
    regrouped: int = 0  # slices whose groups were rebuilt (the changed ones, and those whose hits or prices moved)

    @property
    def source(self) -> str:
        return f"(SELECT * FROM line_items WHERE {self.where}) AS line_items"

    def summary(self) -> str:
        return (f"{self.changed:,} of {self.slices:,} slices changed since tag run {self.last_run} "
                f"({self.lines:,} lines re-tagged; groups of {self.regrouped:,} slices rebuilt)")

    def snapshot(self, con: duckdb.DuckDBPyConnection, local_ids: list[str]) -> None:
        """Before the hits change: the hits of the rules run whole."""
        con.execute("CREATE OR REPLACE TEMP TABLE ba_old_hits AS SELECT x_LineItemId, rule_id, category FROM "
                    "rule_hits WHERE NOT list_contains($l, rule_id)", {"l": local_ids or [""]})

    def finish(self, con: duckdb.DuckDBPyConnection, run_id: int, local_ids: list[str]) -> None:
        """After the hits: spot_od, then the groups, keys and search index of the slices that need it."""
        from billing_audit.errors import BillingAuditError
        from billing_audit.rollup import GROUPS_VERSION, groups_sql, keys_sql, several_periods
        from billing_audit.search import index_sql

        # lines outside the changed slices whose hits of the rules run whole moved (their category or signal may)
        con.execute("""CREATE OR REPLACE TEMP TABLE ba_touched AS
            SELECT DISTINCT x_LineItemId FROM ((SELECT x_LineItemId, rule_id, category FROM ba_old_hits
                                       EXCEPT ALL SELECT x_LineItemId, rule_id, category FROM rule_hits
                                       WHERE NOT list_contains($l, rule_id))
                                      UNION ALL
                                      (SELECT x_LineItemId, rule_id, category FROM rule_hits
                                       WHERE NOT list_contains($l, rule_id)
                                       EXCEPT ALL SELECT x_LineItemId, rule_id, category FROM ba_old_hits))""",
                    {"l": local_ids or [""]})
        _slices_of(con, "ba_pslices", "ba_touched")
        self._price(con, run_id)
        _slices_of(con, "ba_gslices", "ba_touched_od", base="ba_pslices")
        self.regrouped = int(str(_one(con, "SELECT count(*) FROM ba_gslices")[0]))
        con.execute("""DELETE FROM line_groups USING line_group_keys k, ba_gslices d
            WHERE k.h = line_groups.h AND d.p = k.provider AND d.a IS NOT DISTINCT FROM k.BillingAccountId
              AND d.s IS NOT DISTINCT FROM date_trunc('month', line_groups.bps + INTERVAL 14 DAY)""")
        ordered = several_periods(con, "ba_gslices", "s")  # the rebuilt groups appended in period order
        if self.prices_same and self.regrouped == int(str(_one(con, "SELECT count(*) FROM ba_pslices")[0])):
            # the slices grouped are those priced (ba_gslices holds ba_pslices): their lines and hits as _price
            # read them, and their equivalents from what it just priced (spot_od's rows of this run cover every
            # spot line of the priced slices), not from the store-wide spot_od
            con.execute("CREATE OR REPLACE TEMP VIEW ba_glines AS SELECT * FROM ba_plines")
            groups = groups_sql("ba_phits", f"(SELECT x_LineItemId, od_cost FROM spot_od WHERE run_id = {int(run_id)})",
                                lines="ba_glines", by_period=ordered)
        else:
            lines = f"(SELECT * FROM line_items l WHERE {_where(con, 'ba_gslices', 'l')})"
            con.execute(f"CREATE OR REPLACE TEMP VIEW ba_glines AS SELECT * FROM {lines}")
            groups = groups_sql("(SELECT * FROM rule_hits SEMI JOIN ba_glines g USING (x_LineItemId))",
                                "(SELECT x_LineItemId, od_cost FROM spot_od SEMI JOIN ba_glines g USING (x_LineItemId))",
                                lines="ba_glines", by_period=ordered)
        con.execute(f"INSERT INTO line_groups {groups}")
        cols = "provider, currency, ResourceId, ResourceName, SubAccountId, BillingAccountId, Tags"
        con.execute(f"""CREATE OR REPLACE TABLE line_group_keys AS
            SELECT h, {", ".join(f"any_value({c}) AS {c}" for c in cols.split(", "))},
                   min(h2_lo) AS h2_lo, max(h2_hi) AS h2_hi
            FROM (SELECT * FROM line_group_keys WHERE h IN (SELECT h FROM line_groups)
                  UNION ALL {keys_sql('ba_glines')}) GROUP BY h""")
        if _one(con, "SELECT count(*) FROM line_group_keys WHERE h2_lo <> h2_hi")[0]:
            raise BillingAuditError("two different attribution keys hashed alike; please report this "
                                    "(the store is unchanged)")
        # the search index by provider and month (its rows sum lines across accounts)
        con.execute("CREATE OR REPLACE TEMP TABLE ba_months AS SELECT DISTINCT p, NULL::VARCHAR AS a, s FROM ba_changed")
        months = f"(SELECT * FROM line_items l WHERE {_where(con, 'ba_months', 'l', accounts=False)})"
        con.execute(f"CREATE OR REPLACE TEMP VIEW ba_slines AS SELECT * FROM {months}")
        con.execute("""DELETE FROM search_index USING ba_months m WHERE m.p = search_index.provider
            AND m.s IS NOT DISTINCT FROM date_trunc('month', search_index.bps + INTERVAL 14 DAY)""")
        (_, texts_sql), (_, index_rows_sql) = index_sql("ba_slines")
        con.execute(f"INSERT INTO search_index {index_rows_sql}")
        con.execute("DELETE FROM search_texts WHERE h NOT IN (SELECT h FROM search_index)")
        con.execute(f"INSERT INTO search_texts SELECT * FROM ({texts_sql}) WHERE h NOT IN (SELECT h FROM search_texts)")
        con.execute("CREATE OR REPLACE TABLE line_groups_meta AS SELECT ?::BIGINT AS run_id, "
                    f"(SELECT count(*) FROM line_items) AS lines, {GROUPS_VERSION} AS version", [run_id])
        for v in ("ba_glines", "ba_slines", "ba_rlines", "ba_plines", "ba_reclass", "ba_rkeys", "ba_rcats"):
            con.execute(f"DROP VIEW IF EXISTS {v}")
        for t in ("ba_old_hits", "ba_touched", "ba_touched_od", "ba_spot_od", "ba_gslices", "ba_pslices",
                  "ba_months", "ba_changed", "ba_dirty_lines", "ba_keys_d", "ba_bill_old", "ba_bill_keys",
                  "ba_bill_slices", "ba_cats", "ba_pids", "ba_phits", "ba_extra", "ba_keys_x", "ba_moved", "ba_rebill",
                  "ba_bill_now"):
            con.execute(f"DROP TABLE IF EXISTS {t}")

    def _price(self, con: duckdb.DuckDBPyConnection, run_id: int) -> None:
        """The on-demand equivalents (``spot_od``) and the bill's prices per slice (``spot_bill``): the bill of the
        slices in ``ba_pslices`` read again, and the spot lines priced again that are in those slices or priced by a
        key whose bill price moved (all of them when the price references changed); ``ba_touched_od``: the lines
        outside the priced slices whose equivalent moved."""
        from billing_audit import pricing

        if self.prices_same:
            pricing.bill_table(con, "spot_bill", "ba_bill_old")  # the bill's unit prices before, and after
            con.execute("""DELETE FROM spot_bill USING ba_pslices d WHERE d.p = spot_bill.p
                AND d.a IS NOT DISTINCT FROM spot_bill.a AND d.s IS NOT DISTINCT FROM spot_bill.s""")
            con.execute("CREATE OR REPLACE TEMP VIEW ba_plines AS SELECT * FROM line_items l WHERE "
                        f"{_where(con, 'ba_pslices', 'l')}")
            # the priced slices' lines, their hits (as this run left them) and keys: computed once, read again by
            # the bill, the pricing and the groups (finish)
            con.execute("CREATE OR REPLACE TEMP TABLE ba_pids AS SELECT x_LineItemId FROM ba_plines")
            con.execute("CREATE OR REPLACE TEMP TABLE ba_phits AS SELECT x_LineItemId, rule_id, category "
                        f"FROM rule_hits SEMI JOIN ba_pids USING (x_LineItemId) WHERE {IN_IDS.format(t='rule_hits')}",
                        id_bounds(con, "ba_pids"))
            # (the spot lines to work out: those the export prices have no row in spot_od)
            keyed = pricing.spot_keyed_sql("ba_plines", "ba_phits", export=False)
            slices = pricing.bill_slices_one_pass_sql("ba_plines", pricing.spot_ids_keyed_sql("ba_phits"))
            if keyed is not None and slices is not None:
                # the slices' spot lines with their keys in one pass by their hits (pricing.spot_keyed_sql: no
                # categories grouped, no keys joined back), and the bill's slices in one pass over their lines
                # (pricing.bill_slices_one_pass_sql), those spot lines left out
                con.execute(f"CREATE OR REPLACE TEMP TABLE ba_spot AS {keyed}")
            else:
                keyed = None
                con.execute(f"CREATE OR REPLACE TEMP TABLE ba_cats AS {pricing.categories_sql(hits='ba_phits')}")
                spot = pricing.spot_ids_sql("ba_cats")
                # the bill's slices in one pass over the slices' lines, then the keys pricing reads: the spot
                # lines' alone
                slices = pricing.bill_slices_one_pass_sql("ba_plines", spot)
                pricing.bill_keys(con, "ba_plines" if slices is None else pricing.lines_of_sql("ba_plines", spot),
                                  "ba_keys_d")
                slices = slices or pricing.bill_slices_sql("ba_keys_d", "ba_cats", lines="ba_plines")
            con.execute(f"INSERT INTO spot_bill SELECT *, {int(run_id)} FROM ({slices})")
            pricing.bill_table(con, "spot_bill", "ba_bill_now")
            # the keys whose bill unit price moved (or that came or went), and the spot lines to price again: a
            # spot line's equivalent reads of the bill its key's unit price alone (the bill's lines behind it are
            # said by pricing.line, from spot_bill), so more on-demand lines at the same price re-price nothing
            price = "provider, price_key, region, unit, currency, unit_price"
            con.execute(f"""CREATE OR REPLACE TEMP TABLE ba_bill_keys AS SELECT DISTINCT provider, price_key, region,
                unit, currency FROM ((SELECT {price} FROM ba_bill_old EXCEPT SELECT {price} FROM ba_bill_now)
                                     UNION ALL (SELECT {price} FROM ba_bill_now EXCEPT SELECT {price} FROM ba_bill_old))""")
            # a line priced from its export or a price reference never read the bill (pricing.classify tries those
            # first, and neither moved: same lines, same references), so a moved bill price re-prices only the
            # lines priced from the bill or not priced at all.  Outside the priced slices a line's hits did not
            # move (a line whose hits moved put its slice in them: ba_touched), so one in spot_od is still a spot
            # line (spot_od holds exactly the lines of category spot_compute the export does not price after every
            # run; a line's export price is the line's own, so those unchanged lines need no price again)
            con.execute(f"""CREATE OR REPLACE TEMP TABLE ba_moved AS
                SELECT o.x_LineItemId, o.x_Provider, o.od_source, o.price_key, o.region, o.unit, o.currency, o.quantity,
                       o.od_cost AS was
                FROM spot_od o JOIN ba_bill_keys b ON {pricing.bill_key_match("b", "o")}
                WHERE (o.od_source IS NULL OR o.od_source = 'bill')
                  AND NOT EXISTS (SELECT 1 FROM ba_pids p WHERE p.x_LineItemId = o.x_LineItemId)""")
            # of those, a line priced from the bill whose key is still in it is its key's new unit price times
            # its quantity (pricing.rebill_sql, from spot_od alone), its row updated in place below (392k rows all
            # over spot_od: 0.9 s updated, 2.0 s deleted, inserted and checkpointed); the rest (unpriced, or
            # their key left the bill) are priced again from their lines (ba_extra)
            con.execute(f"CREATE OR REPLACE TEMP TABLE ba_rebill AS {pricing.rebill_sql('ba_moved', 'ba_bill_now')}")
            con.execute("CREATE OR REPLACE TEMP TABLE ba_extra AS SELECT x_LineItemId FROM ba_moved "
                        "ANTI JOIN ba_rebill USING (x_LineItemId)")
            # views over the tables made above, not copies of them: the tag run's temp tables share the store's
            # memory limit (a copy of a million ids and keys made the rest of the run spill)
            con.execute("CREATE OR REPLACE TEMP VIEW ba_reclass AS SELECT x_LineItemId FROM ba_pids "
                        "UNION ALL SELECT x_LineItemId FROM ba_extra")
            # the rows of the lines priced again are deleted first; those outside the priced slices are kept to
            # compare (the priced slices are regrouped whatever moved in them: only the lines outside are compared)
            outside = "x_LineItemId IN (SELECT x_LineItemId FROM ba_extra)"
            _drop_od(con, "ba_reclass", outside)
            extra_n = _one(con, "SELECT count(*) FROM ba_extra")[0]
            if keyed is not None:  # the lines to price again outside the slices join the keyed spot lines
                if extra_n:
                    extra = pricing.spot_keyed_sql(pricing.lines_of_sql("line_items", "ba_extra"),
                                                   "(SELECT x_LineItemId, 'spot_compute' AS category FROM ba_extra)")
                    con.execute(f"INSERT INTO ba_spot {extra}")
                pricing.classify(con, bill="spot_bill", run_id=run_id, spot_lines="ba_spot")
            else:
                lines, keys, cats = "ba_plines", "ba_keys_d", "ba_cats"
                if extra_n:
                    # read twice (the lines, then their keys): materialised once, with every column, it took longer
                    extra = pricing.lines_of_sql("line_items", "ba_extra")
                    con.execute(f"CREATE OR REPLACE TEMP VIEW ba_rlines AS SELECT * FROM ba_plines UNION ALL "
                                f"SELECT * FROM {extra}")
                    pricing.bill_keys(con, extra, "ba_keys_x")
                    con.execute("CREATE OR REPLACE TEMP VIEW ba_rkeys AS SELECT * FROM ba_keys_d UNION ALL "
                                "SELECT * FROM ba_keys_x")
                    con.execute("CREATE OR REPLACE TEMP VIEW ba_rcats AS SELECT x_LineItemId, category FROM ba_cats "
                                "UNION ALL SELECT x_LineItemId, 'spot_compute' FROM ba_extra")
                    lines, keys, cats = "ba_rlines", "ba_rkeys", "ba_rcats"
                pricing.classify(con, lines, "spot_bill", cats, keys=keys, run_id=run_id)
            rebill = True
        else:  # other price references: every spot line again
            outside = "TRUE"
            _drop_od(con, None, outside)
            pricing.classify(con, run_id=run_id)
            con.execute("DELETE FROM spot_bill")
            con.execute(f"INSERT INTO spot_bill SELECT *, {int(run_id)} FROM ba_bill_slices")
            rebill = False
        # classify wrote the new equivalents into spot_od (not into a temp table then copied): those of the lines
        # outside the priced slices against what they were
        con.execute(f"""CREATE OR REPLACE TEMP TABLE ba_touched_od AS
            SELECT coalesce(o.x_LineItemId, n.x_LineItemId) AS x_LineItemId
            FROM ba_od_was o
            FULL JOIN (SELECT x_LineItemId, od_cost FROM spot_od WHERE {outside}) n ON n.x_LineItemId = o.x_LineItemId
            WHERE o.od_cost IS DISTINCT FROM n.od_cost OR o.x_LineItemId IS NULL OR n.x_LineItemId IS NULL""")
        con.execute("DROP TABLE ba_od_was")
        if rebill:  # what moves in a bill-priced line's row when only its key's bill price moved
            con.execute("INSERT INTO ba_touched_od SELECT r.x_LineItemId FROM ba_rebill r JOIN ba_moved m "
                        "USING (x_LineItemId) WHERE r.od_cost IS DISTINCT FROM m.was")
            con.execute("""UPDATE spot_od SET od_cost = r.od_cost, od_unit_price = r.od_unit_price, run_id = ?
                FROM ba_rebill r WHERE r.x_LineItemId = spot_od.x_LineItemId""", [run_id])


def _drop_od(con: duckdb.DuckDBPyConnection, gone: str | None, outside: str) -> None:
    """Before lines are priced again: their rows of ``spot_od`` (the lines of the relation ``gone``, the delete
    pruned by their bounds, :data:`IN_IDS`; None: every row) deleted, those of the lines ``outside`` (some of them)
    kept first in the temp table ``ba_od_was`` (x_LineItemId, od_cost) to compare.
    Deleted before the new rows are written, not after: a delete that skips this run's rows read them too (at 1M
    re-priced lines 0.31 s against 0.16 s).  The rows of lines that are gone went with them (drop_gone)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_od_was AS SELECT x_LineItemId, od_cost FROM spot_od WHERE {outside}")
    if gone is None:
        con.execute("DELETE FROM spot_od")
    else:
        con.execute(f"DELETE FROM spot_od WHERE x_LineItemId IN (SELECT x_LineItemId FROM {gone}) "
                    f"AND {IN_IDS.format(t='spot_od')}", id_bounds(con, gone))


def _slices_of(con: duckdb.DuckDBPyConnection, into: str, lines: str, base: str = "ba_changed") -> None:
    """Temp table ``into``: the slices of ``base`` and those holding a line of the temp table ``lines``."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {into} AS SELECT p, a, s FROM {base}")
    if _one(con, f"SELECT count(*) FROM {lines}")[0]:
        con.execute(f"""INSERT INTO {into} SELECT DISTINCT l.x_Provider, l.BillingAccountId, {PERIOD.format(t="l")}
            FROM line_items l SEMI JOIN {lines} t ON t.x_LineItemId = l.x_LineItemId
            EXCEPT SELECT p, a, s FROM {into}""")


def plan(con: duckdb.DuckDBPyConnection, key: str) -> Plan | None:
    """What to redo, when the last tag run's state (same ``key``) is there as it left it and some slices did not
    change; None: rebuild everything."""
    from billing_audit.rollup import GROUPS_VERSION

    have = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        f"AND table_name IN ({', '.join(repr(t) for t in _TABLES)})").fetchall()}
    if len(have) < len(_TABLES):
        return None
    last = con.execute("SELECT run_id, state_key, checkpoint_key, prices_key FROM tag_runs ORDER BY run_id DESC LIMIT 1"
                       ).fetchone()
    if last is None or last[1] != key:
        return None
    run = int(last[0])
    meta = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = "
                                      "current_database() AND table_name = 'line_groups_meta'").fetchall()}
    if not {"run_id", "lines", "version"} <= meta:
        return None
    m_run, m_lines, m_version = _one(con, "SELECT max(run_id), max(lines), max(version) FROM line_groups_meta")
    kept, kept_runs, kept_lo = _one(con, "SELECT coalesce(sum(rows), 0), count(DISTINCT run_id), min(run_id) "
                                         "FROM tag_slices")
    now_rows, now_lines = _one(con, "SELECT (SELECT coalesce(sum(rows), 0) FROM slices), "
                                    "(SELECT count(*) FROM line_items)")
    if (m_run != run or m_version is None or int(str(m_version)) < GROUPS_VERSION or m_lines != kept
            or kept_runs != 1 or kept_lo != run or now_rows != now_lines):
        return None  # the state is not the one the last run left, or lines are not all in slices
    con.execute("""CREATE OR REPLACE TEMP TABLE ba_changed AS SELECT DISTINCT p, a, s FROM (
        (SELECT x_Provider AS p, BillingAccountId AS a, BillingPeriodStart AS s, ingest_id, rows FROM slices
         EXCEPT ALL SELECT x_Provider, BillingAccountId, BillingPeriodStart, ingest_id, rows FROM tag_slices)
        UNION ALL
        (SELECT x_Provider, BillingAccountId, BillingPeriodStart, ingest_id, rows FROM tag_slices
         EXCEPT ALL SELECT x_Provider, BillingAccountId, BillingPeriodStart, ingest_id, rows FROM slices))""")
    changed, = _one(con, "SELECT count(*) FROM ba_changed")
    slices, = _one(con, "SELECT count(*) FROM (SELECT DISTINCT x_Provider, BillingAccountId, BillingPeriodStart "
                        "FROM slices)")
    if int(str(changed)) >= int(str(slices)):  # every slice changed: a full build is the cheaper
        con.execute("DROP TABLE ba_changed")
        return None
    where = _where(con, "ba_changed", "line_items")
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_dirty_lines AS SELECT x_LineItemId FROM line_items WHERE {where}")
    n, = _one(con, "SELECT count(*) FROM ba_dirty_lines")
    from billing_audit.pricing import prices_key

    return Plan(run, int(str(slices)), int(str(changed)), int(str(n)), None if last[2] is None else str(last[2]),
                where, prices_same=last[3] == prices_key(con))


@functools.cache
def _volatile_nodes() -> tuple[type[Any], ...]:
    from sqlglot import exp

    return (exp.CurrentDate, exp.CurrentTime, exp.CurrentTimestamp, exp.CurrentDatetime, exp.Rand)


_VOLATILE_NAMES = re.compile(r"^(now|today|random|setseed|uuid|gen_random_uuid|uuidv[47]|nextval|currval|"
                             r"current_\w+|get_current_\w+|transaction_timestamp|epoch_ms_now)$", re.IGNORECASE)


def volatile(rule: Rule) -> bool:
    """The rule reads the clock or a random source: its hits may differ run to run, whatever the line."""
    from sqlglot import exp

    if rule.tree is None:
        return True
    return any(isinstance(n, _volatile_nodes()) or (isinstance(n, exp.Anonymous) and _VOLATILE_NAMES.match(str(n.name)))
               for n in rule.tree.walk())


def line_local(rule: Rule, p: Plan) -> bool:
    """A fused rule's hit on a line depends on that line alone (unless it reads the clock or a random source);
    one reading ``checkpoint_resources`` also on what that holds, which must be what it held for the last run."""
    return not volatile(rule) and (p.checkpoint_same or not reads_checkpoint(rule))


def record_slices(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """The slices this run's state was computed from."""
    con.execute("DELETE FROM tag_slices")
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                   "AND schema_name = 'main' AND table_name = 'slices'").fetchone() != (0,):
        con.execute("INSERT INTO tag_slices SELECT x_Provider, BillingAccountId, BillingPeriodStart, ingest_id, rows, ? "
                    "FROM slices", [run_id])
