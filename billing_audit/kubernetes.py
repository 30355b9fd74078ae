"""Kubernetes pods on shared nodes: the node's lines shared out to the pods' jobs by the bill's own split.

Several jobs' pods share a spot node, so the node's tags say nothing about the job.  The bills say how the
node was shared, per charge period (hour):

- **Split lines** (AWS split cost allocation data for EKS, CUR 2.0): a pod's usage records carry
  ``x_SplitParentId`` (the node's instance id) and ``x_SplitCost`` (split cost + unused cost, AWS spreading the
  node's unused cost over its pods in proportion to their split usage).  Their money is never added: the
  node's own line stays the money truth, the pods' records only weigh it.
- **Labelled lines** (GKE cost allocation, the detailed billing export): the node's spot rows are already split
  by namespace and pod labels (``k8s-namespace``, ``k8s-label/<key>``); they add up to the node's cost and are
  attributed by their own labels.  Their cost in the hour weighs the node's other lines (a preemption fee).

The **parts** of a node in an hour are its pods' attribution keys with a weight each.  A line of the node in that
hour that is not itself a part (the node's spot line, its restart fee, a checkpoint re-read billed to it) is
shared: part p gets ``amount x w_p / max(sum w, node's own spot cost)``; what the pods do not cover (their
weights add up to less than the node's own spot cost) stays with the node's own attribution, the *unallocated
node share*.  Amounts are split exactly (in 1e-12 units, HUGEINT): the rounding remainder goes to the node's
unallocated share, else to the part of the largest weight, so the parts add up to the line to the last digit.
The line count and the priced-line counts go to that same part; money, spot hours, the on-demand equivalent and
the restart count are shared (a job that had 60% of a node interrupted once counts 0.6 interruptions, so the
report's totals count the node's interruption once).  A line whose charge period spans several hours (a daily fee)
is shared by the parts' weights summed over its hours (the node's own spot cost in an hour without pods: its
unallocated share).  Interruption events (``ba_k8s_events``): an event of a node in an hour it was shared counts
for each job row by that hour's shares, so the job rows add up to the node's count.

Locally, and inside the audit query of the engines in :data:`ENGINES` (:mod:`billing_audit.engines.k8s_share`:
the same steps, translated); BigQuery and Athena do not share nodes out (see README).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import duckdb

from billing_audit.rollup import KEY_HASH, SPOT_RANK, period_filter

# the measures of a group that are shared by weight (the rest: line counts, go whole to the anchor part)
SHARED = ("effective", "billed", "list", "fee_n", "hours", "od", "unpriced_effective", "unpriced_billed")
COUNTED = ("n", "priced_effective", "priced_billed")
# GKE cost allocation's namespace label on a node's split rows
LABELLED = "k8s-namespace"
# the engines whose audit query shares nodes out as here (billing_audit.engines.k8s_share)
ENGINES = ("duckdb", "spark")
UNIT = "1000000000000"  # 1e12: DECIMAL(38,12) amounts as exact integers
# the end of a line's charge period in whole hours (a line without an end, or within one hour: its start hour + 1)
SPAN_END = ("greatest(date_trunc('hour', g.cps) + INTERVAL 1 HOUR, coalesce(date_trunc('hour', g.cpe - INTERVAL 1 MICROSECOND) "
            "+ INTERVAL 1 HOUR, g.cps))")


def _units(x: str) -> str:
    return f"CAST(CAST({x} AS DECIMAL(38,12)) * {UNIT} AS HUGEINT)"


def _back(u: str) -> str:
    # DECIMAL(25,0) x DECIMAL(12,12) is DECIMAL(38,12) on Spark too (a wider operand would cost it scale)
    return f"CAST(CAST({u} AS DECIMAL(25,0)) * CAST(0.000000000001 AS DECIMAL(12,12)) AS DECIMAL(38,12))"


def has_split_columns(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'line_items' AND column_name = 'x_SplitParentId'").fetchone()
    return bool(row and row[0])


def pod_record_warnings(store: Any, period: str | None, engine: bool) -> list[str]:
    """What the report cannot vouch for about the period's pod records (split cost allocation data), from one
    scan of them:

    - pod records that carry billed or effective cost of their own: the report adds their cost as billed beside
      the node's line that their weights share out, so it would be counted twice.  AWS documents the pod's cost
      in the split columns, not in ``line_item_unblended_cost`` (see README); a record that has it anyway is
      named here, how many and how much per currency, never silently added;
    - on a run of an engine that does not share nodes out (``engine``: not in :data:`ENGINES`): it attributes pod
      records by their labels but leaves a node's own lines with the node, so the figures that sharing moves
      differ from a local report: said, with how many records."""
    con = store.con
    if not store._has_table("line_items") or not has_split_columns(con):
        return []
    own = "x_SplitParentId <> coalesce(ResourceId, '') AND (coalesce(BilledCost, 0) <> 0 OR coalesce(EffectiveCost, 0) <> 0)"
    rows = con.execute(f"""SELECT coalesce(BillingCurrency, '?'), count(*), count(*) FILTER (WHERE {own}),
        sum(coalesce(BilledCost, 0)) FILTER (WHERE {own}), sum(coalesce(EffectiveCost, 0)) FILTER (WHERE {own})
        FROM line_items l
        WHERE x_SplitParentId IS NOT NULL AND {period_filter(period, 'l.BillingPeriodStart')}
        GROUP BY ALL ORDER BY 1""").fetchall()
    out = []
    held = ", ".join(f"{int(n)} in {cur}" for cur, n, *_ in rows if n)
    if engine and held:
        out.append(f"kubernetes: the lines hold pod records of shared nodes (split cost allocation data: {held}); the "
                   "engine does not share a node's lines out to its pods' jobs (the local report does), so each "
                   "node's spot cost, restart fees, checkpoint re-reads, spot hours, on-demand equivalent and "
                   "interruptions stay with the node's own attribution (often the unattributed row), and the per-job "
                   "savings, overhead and estimates follow; the totals are unchanged. Run the report locally for "
                   "Kubernetes attribution")
    out += [f"kubernetes: {n} pod record(s) of split cost allocation data carry cost of their own ({cur}: billed "
            f"{billed:.2f}, effective {eff:.2f}); their node's line already holds that cost, so it is counted in "
            "the totals twice: check the export (a pod record's line_item_unblended_cost is expected to be 0)"
            for cur, _, n, billed, eff in rows if n]
    return out


@dataclass(frozen=True)
class KeySql:
    """How the sharing reads the groups' keys (alias ``k``) and finds a pod record's key: locally from the key's
    tag map; on an engine from columns the engine extracts from it (it cannot group by a map)."""

    labelled: str  # the key is a node's row split by GKE cost allocation
    tags: str  # the key's tag map as one text (tie-breaks: the same on every engine)
    pods: str  # the FROM clause of the pod records (line_items l, and the keys as k when the key is looked up)
    pod_key: str  # a pod record's key


def tags_text(tags: str) -> str:
    """A tag map as one text, the same on DuckDB and Spark: its ``key<US>value`` entries in byte order, joined by
    <RS> (NULL: no map); part of the order that breaks ties between parts of equal weight."""
    return (f"array_to_string(list_sort(list_transform(map_entries({tags}), lambda e: e.key || chr(31) || "
            f"coalesce(e.value, ''))), chr(30))")


LOCAL = KeySql(labelled=f"k.Tags['{LABELLED}'] IS NOT NULL", tags=tags_text("k.Tags"), pods="line_items l",
               pod_key=KEY_HASH)


def _order(keys: KeySql) -> str:
    """A key's place among a node's keys (ties of weight): its resource, accounts and tags, not its hash (an
    engine numbers its keys otherwise), so every engine picks the same part."""
    cols = ["k.ResourceId", "k.ResourceName", "k.SubAccountId", "k.BillingAccountId", keys.tags]
    return " || chr(29) || ".join(f"coalesce({c}, '')" for c in cols)


def parts_sql(groups: str, keys: str, period: str | None, split_columns: bool, ks: KeySql = LOCAL) -> str:
    """Each node's parts per hour: (provider, currency, node, hs, ph = the part's key, w, pod, po = the key's
    order for ties)."""
    pods = f"""
  SELECT l.x_Provider AS provider, coalesce(l.BillingCurrency, '?') AS currency, l.x_SplitParentId AS node,
         date_trunc('hour', l.ChargePeriodStart) AS hs, {ks.pod_key} AS ph, sum(coalesce(l.x_SplitCost, 0)) AS w,
         TRUE AS pod
  FROM {ks.pods}
  WHERE l.x_SplitParentId IS NOT NULL AND l.x_SplitParentId <> coalesce(l.ResourceId, '')
    AND l.ChargePeriodStart IS NOT NULL AND {period_filter(period, 'l.BillingPeriodStart')}
  GROUP BY ALL
  UNION ALL""" if split_columns else ""
    return f"""SELECT q.*, {_order(ks)} AS po FROM ({pods}
  SELECT k.provider, k.currency, k.ResourceId AS node, date_trunc('hour', g.cps) AS hs, g.h AS ph,
         sum(coalesce(g.effective, 0)) AS w, FALSE AS pod
  FROM {groups} g JOIN {keys} k ON k.h = g.h
  WHERE g.rank = {SPOT_RANK} AND g.cps IS NOT NULL AND k.ResourceId IS NOT NULL
    AND {ks.labelled} AND {period_filter(period)}
  GROUP BY ALL) q JOIN {keys} k ON k.h = q.ph"""


def steps(groups: str, keys: str, period: str | None, gcols: list[str], split_columns: bool,
          ks: KeySql = LOCAL) -> list[tuple[str, str]]:
    """The sharing as named steps (DuckDB SQL every engine that shares runs as it is, translated): ``ba_k8s_parts``,
    ``ba_k8s_own``, ``ba_k8s_weights``, ``ba_k8s_events`` and ``ba_split_groups`` (the groups, whose columns are
    `gcols`, with the shared lines in parts, each row carrying ``ah``, the key attribution reads, and ``split``).
    Over ``ba_attr`` and the groups; with no parts, ``ba_split_groups`` holds the groups as they are."""
    node = "provider, currency, node, hs"
    out = [("ba_k8s_parts", parts_sql(groups, keys, period, split_columns, ks))]
    # the node's own spot cost per hour (its lines that are not parts, every hour of a node with parts in the
    # period), against which the parts' weights are set; a line over several hours weighs each of them; its key
    # of the largest cost (ties: the key's order) speaks for what no pod covers
    out.append(("ba_k8s_own", f"""
WITH rows AS (
  SELECT k.provider, k.currency, k.ResourceId AS node, date_trunc('hour', g.cps) AS hs, coalesce(g.effective, 0) AS e,
         g.h, {_order(ks)} AS po, k.BillingAccountId AS account
  FROM {groups} g JOIN {keys} k ON k.h = g.h
  WHERE g.rank = {SPOT_RANK} AND g.cps IS NOT NULL AND {period_filter(period)}
    AND EXISTS (SELECT 1 FROM ba_k8s_parts p WHERE p.provider = k.provider AND p.currency = k.currency
                AND p.node = k.ResourceId)
    AND NOT EXISTS (SELECT 1 FROM ba_k8s_parts p WHERE p.ph = g.h AND p.provider = k.provider
                    AND p.currency = k.currency AND p.node = k.ResourceId AND p.hs = date_trunc('hour', g.cps))),
ranked AS (
  SELECT r.*, row_number() OVER (PARTITION BY {node} ORDER BY r.e DESC, r.po ASC NULLS FIRST, r.h) AS rn FROM rows r)
SELECT {node}, sum(e) AS amt, max(CASE WHEN rn = 1 THEN h END) AS oh, min(account) AS account
FROM ranked GROUP BY {node}"""))
    out.append(("ba_k8s_weights", f"""
WITH sets AS (SELECT {node}, sum(w) AS tot FROM ba_k8s_parts GROUP BY {node}),
own AS (SELECT o.* FROM ba_k8s_own o JOIN sets s USING ({node})),
sized AS (SELECT s.*, greatest(s.tot, coalesce(o.amt, 0)) AS denom FROM sets s LEFT JOIN own o USING ({node}))
SELECT p.provider, p.currency, p.node, p.hs, p.ph, p.po, p.w, z.denom,
       row_number() OVER (PARTITION BY p.provider, p.currency, p.node, p.hs ORDER BY p.w DESC, p.po ASC NULLS FIRST,
                          p.ph) = 1 AND z.tot >= z.denom AS anchor
FROM ba_k8s_parts p JOIN sized z USING ({node}) WHERE z.denom > 0
UNION ALL  -- what the pods do not cover: the node's unallocated share (ph NULL: the line's own key)
SELECT provider, currency, node, hs, NULL, NULL, denom - tot, denom, TRUE FROM sized WHERE denom > tot AND denom > 0"""))
    # an interruption event of a node in an hour it was shared: each job row's share of it (in 1e-12 units, the
    # remainder to the anchor part, so the shares add up to one event); what no pod covers: the node's own key
    out.append(("ba_k8s_events", f"""
WITH cut AS (
  SELECT w.*, CAST({UNIT} AS HUGEINT) * {_units('w.w')} // {_units('w.denom')} AS u FROM ba_k8s_weights w),
fixed AS (
  SELECT c.*, c.u + CASE WHEN c.anchor THEN CAST({UNIT} AS HUGEINT) - sum(c.u) OVER (PARTITION BY {node}) ELSE 0 END
         AS units
  FROM cut c)
SELECT f.provider, f.currency, f.node, f.hs, a.job, a.team, o.account, sum(f.units) AS units
FROM fixed f JOIN (SELECT provider, currency, ResourceId AS node, min(BillingAccountId) AS account FROM {keys}
                   WHERE ResourceId IS NOT NULL GROUP BY provider, currency, ResourceId) o USING (provider, currency, node)
LEFT JOIN ba_k8s_own n USING ({node})
JOIN ba_attr a ON a.h = coalesce(f.ph, n.oh)
GROUP BY f.provider, f.currency, f.node, f.hs, a.job, a.team, o.account"""))
    keep = [c for c in gcols if c not in SHARED and c not in COUNTED and c != "h"]
    measured = [m for m in SHARED if m in gcols]
    shared = []
    for m in measured:
        part = f"{_units('t.' + m)} * {_units('w.w')} // {_units('w.denom')}"
        rest = f"{_units('t.' + m)} - sum({part}) OVER (PARTITION BY t.tid)"
        shared.append(f"{_back(f'{part} + CASE WHEN w.anchor THEN {rest} ELSE 0 END')} AS {m}")
    counted = [f"CASE WHEN w.anchor THEN t.{c} ELSE 0 END AS {c}" for c in COUNTED if c in gcols]
    # a pod record's spot hours are its node's: not counted again
    plain = [f"CAST({'CASE WHEN pk.ph IS NULL THEN g.hours END' if m == 'hours' else 'g.' + m} AS DECIMAL(38,12)) "
             f"AS {m}" for m in measured] + [f"g.{c}" for c in COUNTED if c in gcols]
    same = " AND ".join(["t.h = g.h", "t.signal = g.signal", "t.cps = g.cps"] + [
        f"t.{c} IS NOT DISTINCT FROM g.{c}" for c in ("bps", "day", "rank", "cpe")])
    out.append(("ba_split_groups", f"""
WITH targets AS (
  SELECT g.*, k.provider, k.currency, k.ResourceId AS node, date_trunc('hour', g.cps) AS hs,
         row_number() OVER (ORDER BY g.h, g.bps, g.day, g.rank, g.signal, g.cps, g.cpe) AS tid
  FROM {groups} g JOIN {keys} k ON k.h = g.h
  WHERE g.cps IS NOT NULL AND {period_filter(period)}
    AND EXISTS (SELECT 1 FROM ba_k8s_weights w WHERE w.provider = k.provider AND w.currency = k.currency
                AND w.node = k.ResourceId AND w.hs >= date_trunc('hour', g.cps) AND w.hs < {SPAN_END})
    AND NOT EXISTS (SELECT 1 FROM ba_k8s_parts p WHERE p.ph = g.h AND p.provider = k.provider
                    AND p.currency = k.currency AND p.node = k.ResourceId AND p.hs = date_trunc('hour', g.cps))
),
-- the hours of each line's charge period (a daily fee: 24), each weighed as the node was shared in it
hours AS (
  SELECT t.tid, t.provider, t.currency, t.node, unnest(generate_series(t.hs, {SPAN_END.replace('g.', 't.')} - INTERVAL 1 HOUR,
         INTERVAL 1 HOUR)) AS hs
  FROM targets t
),
denoms AS (
  SELECT x.tid, sum(coalesce(d.denom, o.amt, 0)) AS denom
  FROM hours x
  LEFT JOIN (SELECT DISTINCT provider, currency, node, hs, denom FROM ba_k8s_weights) d
    ON d.provider = x.provider AND d.currency = x.currency AND d.node = x.node AND d.hs = x.hs
  LEFT JOIN ba_k8s_own o ON o.provider = x.provider AND o.currency = x.currency AND o.node = x.node AND o.hs = x.hs
  GROUP BY x.tid
),
pw AS (
  SELECT x.tid, w.ph, w.po, sum(w.w) AS w FROM hours x JOIN ba_k8s_weights w
    ON w.provider = x.provider AND w.currency = x.currency AND w.node = x.node AND w.hs = x.hs AND w.ph IS NOT NULL
  GROUP BY x.tid, w.ph, w.po
),
pt AS (SELECT tid, sum(w) AS tot FROM pw GROUP BY tid),
tw AS (  -- each line's parts over its hours, and what no pod covers (ph NULL); the anchor takes the remainder
  SELECT pw.tid, pw.ph, pw.w, d.denom,
         row_number() OVER (PARTITION BY pw.tid ORDER BY pw.w DESC, pw.po ASC NULLS FIRST, pw.ph) = 1
           AND pt.tot >= d.denom AS anchor
  FROM pw JOIN denoms d ON d.tid = pw.tid JOIN pt ON pt.tid = pw.tid
  UNION ALL
  SELECT d.tid, NULL, d.denom - coalesce(pt.tot, 0), d.denom, TRUE FROM denoms d LEFT JOIN pt ON pt.tid = d.tid
  WHERE d.denom > coalesce(pt.tot, 0)
)
SELECT g.h, g.h AS ah, FALSE AS split, {", ".join(f"g.{c}" for c in keep)}, {", ".join(plain)}
FROM {groups} g LEFT JOIN (SELECT DISTINCT ph FROM ba_k8s_parts WHERE pod) pk ON pk.ph = g.h
WHERE {period_filter(period)} AND NOT EXISTS (SELECT 1 FROM targets t WHERE {same})
UNION ALL
SELECT t.h, coalesce(w.ph, t.h) AS ah, TRUE AS split, {", ".join(f"t.{c}" for c in keep)}, {", ".join(shared)},
       {", ".join(counted)}
FROM targets t JOIN tw w ON w.tid = t.tid"""))
    return out


def build(con: duckdb.DuckDBPyConnection, groups: str, keys: str, period: str | None) -> str | None:
    """:func:`steps` as temp tables on `con`; the name of the last (``ba_split_groups``), or None when no node in
    the period has parts (the groups are then used as they are)."""
    for t in ("ba_k8s_weights", "ba_split_groups", "ba_k8s_own", "ba_k8s_events"):  # another period's, prepared earlier on this connection
        con.execute(f"DROP TABLE IF EXISTS {t}")
    gcols = [r[0] for r in con.execute(f"DESCRIBE {groups}").fetchall()]
    (name, parts), *rest = steps(groups, keys, period, gcols, has_split_columns(con))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {parts}")
    row = con.execute(f"SELECT count(*) FROM {name}").fetchone()
    if not row or not row[0]:
        return None
    for name, sql in rest:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")
    return "ba_split_groups"


def explain(con: duckdb.DuckDBPyConnection, line: dict[str, Any], h: int) -> dict[str, Any] | None:
    """How the prepared period (:func:`build`) shares the line out, for ``explain``: None when the line is no
    Kubernetes node's, no pod's record and no labelled row."""
    from billing_audit.rollup import UNATTRIBUTED

    parent, rid = line.get("x_SplitParentId"), line.get("ResourceId")
    if parent is not None and parent != rid:
        return {"role": "pod_record", "node": parent, "weight": line.get("x_SplitCost"),
                "reason": f"a pod's usage record on node {parent} (split cost allocation data): its split and unused "
                          "cost weigh the node's lines in that hour; it adds no money of its own"}
    held = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'ba_k8s_weights'").fetchone()
    start = line.get("ChargePeriodStart")
    if not held or not held[0] or rid is None or start is None:
        return None
    key = [line.get("x_Provider"), line.get("BillingCurrency") or "?", rid, start]
    where = "provider = ? AND currency = ? AND node = ? AND hs = date_trunc('hour', CAST(? AS TIMESTAMP))"
    if con.execute(f"SELECT count(*) FROM ba_k8s_parts WHERE {where} AND ph = ?", [*key, h]).fetchone() != (0,):
        return {"role": "labelled_row", "node": rid,
                "reason": f"a row of node {rid} split by the bill's Kubernetes cost allocation: attributed by its own "
                          "labels; its cost weighs the node's other lines in that hour"}
    end = line.get("ChargePeriodEnd")
    if end is not None and end - start.replace(minute=0, second=0, microsecond=0) > timedelta(hours=1):
        return _explain_span(con, line, h, key[:3], start, end)
    rows = con.execute(f"""SELECT coalesce(a.job, '{UNATTRIBUTED}'), coalesce(a.team, '{UNATTRIBUTED}'), w.ph IS NULL,
        w.w, w.denom, w.anchor FROM ba_k8s_weights w LEFT JOIN ba_attr a ON a.h = coalesce(w.ph, ?)
        WHERE {where.replace('provider', 'w.provider').replace('currency', 'w.currency').replace('node', 'w.node')
               .replace('hs', 'w.hs')} ORDER BY w.w DESC, w.ph""", [h, *key]).fetchall()
    if not rows or (line.get("ChargePeriodStart") is None):
        return None
    parts = [{"job": job, "team": team, "unallocated_node_share": bool(rest), "weight": w,
              "share": (Decimal(w) / Decimal(d)) if d else None, "gets_rounding_remainder": bool(anchor)}
             for job, team, rest, w, d, anchor in rows]
    return {"role": "shared_node_line", "node": rid, "hour": f"{start:%Y-%m-%d %H:00}", "parts": parts,
            "reason": f"a line of Kubernetes node {rid} in the hour {start:%Y-%m-%d %H:00}: shared out to the pods that "
                      "ran on it by the bill's split (the node's own attribution keeps what no pod covers)"}


def _explain_span(con: duckdb.DuckDBPyConnection, line: dict[str, Any], h: int, node: list[Any], start: Any,
                  end: Any) -> dict[str, Any] | None:
    """:func:`explain` of a line over several hours (a daily fee): its parts' weights summed over its hours, the
    node's own spot cost in hours without pods its unallocated share (as :func:`build` shares it)."""
    from billing_audit.rollup import UNATTRIBUTED

    span = SPAN_END.replace("g.cps", "CAST(? AS TIMESTAMP)").replace("g.cpe", "CAST(? AS TIMESTAMP)")
    got = con.execute(f"""
WITH hrs AS (SELECT unnest(generate_series(date_trunc('hour', CAST(? AS TIMESTAMP)), {span} - INTERVAL 1 HOUR,
                                           INTERVAL 1 HOUR)) AS hs),
w AS (SELECT * FROM ba_k8s_weights WHERE provider = ? AND currency = ? AND node = ?),
o AS (SELECT * FROM ba_k8s_own WHERE provider = ? AND currency = ? AND node = ?),
d AS (SELECT sum(coalesce(x.denom, o.amt, 0)) AS denom FROM hrs
      LEFT JOIN (SELECT DISTINCT hs, denom FROM w) x USING (hs) LEFT JOIN o USING (hs)),
p AS (SELECT w.ph, sum(w.w) AS w FROM w JOIN hrs USING (hs) WHERE w.ph IS NOT NULL GROUP BY w.ph)
SELECT coalesce(a.job, '{UNATTRIBUTED}'), coalesce(a.team, '{UNATTRIBUTED}'), p.ph, p.w, d.denom
FROM p CROSS JOIN d LEFT JOIN ba_attr a ON a.h = p.ph ORDER BY p.w DESC, p.ph""",
        [start, start, end, start, *node, *node]).fetchall()  # SPAN_END: cps, cpe, cps
    if not got:
        return None
    denom = Decimal(got[0][4] or 0)
    tot = sum((Decimal(r[3]) for r in got), Decimal(0))
    parts = [{"job": job, "team": team, "unallocated_node_share": False, "weight": w,
              "share": Decimal(w) / denom if denom else None, "gets_rounding_remainder": i == 0 and tot >= denom}
             for i, (job, team, _, w, _) in enumerate(got)]
    if denom > tot:
        own = con.execute(f"SELECT coalesce(job, '{UNATTRIBUTED}'), coalesce(team, '{UNATTRIBUTED}') FROM ba_attr "
                          "WHERE h = ?", [h]).fetchone() or (UNATTRIBUTED, UNATTRIBUTED)
        parts.append({"job": own[0], "team": own[1], "unallocated_node_share": True, "weight": denom - tot,
                      "share": (denom - tot) / denom, "gets_rounding_remainder": True})
        parts.sort(key=lambda p: -p["weight"])
    rid = line.get("ResourceId")
    period = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}"
    return {"role": "shared_node_line", "node": rid, "hour": f"{start:%Y-%m-%d %H:00}", "parts": parts,
            "reason": f"a line of Kubernetes node {rid} charged {period}: shared out to the pods that ran on it by "
                      "the bill's split summed over the hours of its charge period (the node's own attribution keeps "
                      "what no pod covers)"}
