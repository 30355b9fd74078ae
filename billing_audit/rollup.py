"""The report's heavy work: lines grouped once, then attributed and aggregated on small tables.

A report needs, per line: the resource, accounts and tags that attribution looks at, the day,
the category, and (for spot compute) the charge period.  Millions of lines share far fewer of
those combinations, so the work is done in three steps:

1. **Groups** (``line_groups``, ``line_group_keys``): one scan of ``line_items`` grouped by an
   *attribution key* (provider, currency, resource id and name, sub and billing account, the whole
   tag map), billing period, day, category and interruption signal; spot compute also by charge
   period.  The key is carried as a 64-bit hash with the key's columns kept once per hash in
   ``line_group_keys``; a second hash over the columns in reverse order proves there is no
   collision (a collision, never seen in practice, stops the report with a message rather than
   merging two keys).  Groups depend only on the lines and the rule hits, not on the config, so
   ``tag`` builds them once and ``report``/``export`` start from them; they are current only while the
   lines' signature is the last tag run's, and the next tag run rebuilds the changed slices' groups
   (:mod:`billing_audit.incremental`).
2. **Attribution** (``ba_attr``), on the distinct keys: the key's job and team tag, else the tag
   most of the resource's lines carry, else the first matching resource-map row, else the account
   map; a job's team is the team most of its lines carry (ties: alphabetical).
3. **Aggregates** (``ba_agg`` per job, team, provider, currency, day, category and billing account;
   ``ba_spot_hours`` per job; ``ba_spot_res`` per spot resource): small whatever the bill's size.

The attribution and aggregate SQL sticks to constructs every engine shares (CASE, COALESCE,
ROW_NUMBER, explicit GROUP BY), so other engines can run the same steps.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from billing_audit.categories import CATEGORIES
from billing_audit.errors import BillingAuditError
from billing_audit.sql import lit

if TYPE_CHECKING:
    from billing_audit.config import Config

UNATTRIBUTED = "(unattributed)"
COST_BASES = {"effective": "EffectiveCost", "billed": "BilledCost", "list": "ListCost"}
COUNTABLE_UNIT = r"restart|interrupt|eviction|preemption|count|each|event|occurrence|^1$|^$"
# the units that count hours, lower case and trimmed: h, hr(s), hour(s), each also after "1 " (exact names, an IN
# list: a regular expression per spot line took 0.3 s of the line groups at 10M)
HOUR_WORDS = ("hr", "hrs", "hour", "hours")
HOUR_UNITS = tuple(f"{one}{w}" for one in ("", "1 ") for w in ("h", *HOUR_WORDS))
# units that count hours in tens or hundreds (Azure's "10 Hours", "100 Hours"): the quantity scaled by the number
HOUR_MULTIPLES = {n: tuple(f"{n} {w}" for w in HOUR_WORDS) for n in (10, 100)}
CATEGORY_RANK = "CASE category " + " ".join(f"WHEN '{c}' THEN {i + 1}" for i, c in enumerate(CATEGORIES)) + " END"
SPOT_RANK = CATEGORIES.index("spot_compute") + 1
FEE_RANK = CATEGORIES.index("restart_fee") + 1
# what restart windows look at by charge period: the fees, checkpoint re-reads and egress (and signal lines)
WINDOW_RANKS = tuple(CATEGORIES.index(c) + 1 for c in ("restart_fee", "storage_reread", "checkpoint_egress"))
# 2: the charge period is kept for the restart-window lines too; 3: "10 Hours" / "100 Hours" scale the spot hours;
# 4: the search index's description and usage type are in search_texts (older groups and indexes are rebuilt)
GROUPS_VERSION = 4

KEY_COLUMNS = ["x_Provider", "BillingCurrency", "ResourceId", "ResourceName", "SubAccountId", "BillingAccountId", "Tags"]
KEY_HASH = "hash(" + ", ".join(f"l.{c}" for c in KEY_COLUMNS) + ")"
KEY_HASH2 = "hash(" + ", ".join(f"l.{c}" for c in reversed(KEY_COLUMNS)) + ")"



SIGNAL_HIT = "CASE WHEN category = 'interruption_signal' THEN 1 ELSE 0 END"  # a hit's signal flag, as 1 or 0


def ranks_sql(hits: str) -> str:
    """Each tagged line's category as its precedence rank (1 = first in CATEGORIES) and its signal flag,
    from a relation of (x_LineItemId, category) hits; the same SELECT locally and on every engine."""
    return (f"SELECT x_LineItemId, MIN({CATEGORY_RANK}) AS rank, MAX({SIGNAL_HIT}) = 1 AS signal "
            f"FROM {hits} GROUP BY x_LineItemId")


RANKS_SQL = f"({ranks_sql('rule_hits')})"


def _span(t: str = "l") -> str:
    return f"date_diff('second', {t}.ChargePeriodStart, {t}.ChargePeriodEnd) / 3600.0"


SPOT = f"c.rank = {SPOT_RANK}"  # over line_items l LEFT JOIN <ranks> c
FEE = f"c.rank = {FEE_RANK}"
TIMED = f"({SPOT} OR c.rank IN ({', '.join(map(str, WINDOW_RANKS))}) OR COALESCE(c.signal, FALSE))"

# What a group is besides its attribution key, over line_items l LEFT JOIN <ranks> c: billing period, day,
# category rank, interruption signal, and the charge period for spot compute (spot hours, churn) and for the lines
# restart windows place in time: fees, signals, checkpoint re-reads and egress (the same locally and on engines).
GROUP_COLUMNS = [
    ("bps", "l.BillingPeriodStart"),
    ("day", "CAST(l.ChargePeriodStart AS DATE)"),
    ("rank", "c.rank"),
    ("signal", "COALESCE(c.signal, FALSE)"),
    ("cps", f"CASE WHEN {TIMED} THEN l.ChargePeriodStart END"),
    ("cpe", f"CASE WHEN {TIMED} THEN l.ChargePeriodEnd END"),
]


def export_od() -> str:
    """A spot line's on-demand equivalent as the export itself gives it (the providers' ``export_od_sql()``; see
    :mod:`billing_audit.pricing`): what the warehouse engines measure savings with (they hold no price references).
    Locally, ``spot_od`` (filled at tag time from the export, the price references and the bill) is used."""
    from billing_audit.pricing import export_od_case

    case = export_od_case("l")
    return f"CASE WHEN {case} > 0 THEN {case} END"


def measures(bases: tuple[str, ...], od: str | None = None) -> str:
    """What each group sums, the same on every engine: lines; cost for each basis in `bases` (effective,
    billed) and list cost; restarts counted by fee lines; the largest spot usage in hours (capped at the
    charge period's length, DECIMAL so that engines add it up alike; a unit of "10 Hours" or "100 Hours"
    scales the quantity by its number); the spot lines' on-demand equivalent
    (``od``: an expression over ``l`` and what it is joined to, NULL where the line has none; default: the
    export's own, :func:`export_od`), the spot lines that have one, and the spot cost of those that have not."""
    od = od or export_od()
    whens = []
    for unit, qty in (("PricingUnit", "PricingQuantity"), ("ConsumedUnit", "ConsumedQuantity")):
        low = f"lower(trim(coalesce(l.{unit}, '')))"
        whens.append(f"WHEN {low} IN ({', '.join(map(lit, HOUR_UNITS))}) THEN CAST(l.{qty} AS DOUBLE)")
        whens += [f"WHEN {low} IN ({', '.join(map(lit, names))}) THEN CAST(l.{qty} AS DOUBLE) * {n}"
                  for n, names in HOUR_MULTIPLES.items()]
    hours = f"CASE {' '.join(whens)} ELSE {_span()} END"
    parts = ["count(*) AS n"]
    parts += [f"sum(coalesce(l.{COST_BASES[b]}, 0)) AS {b}" for b in bases]
    parts += [
        "sum(coalesce(l.ListCost, 0)) AS list",
        f"sum(CASE WHEN {FEE} THEN CASE WHEN regexp_matches(lower(coalesce(l.ConsumedUnit, '')), '{COUNTABLE_UNIT}') "
        "THEN coalesce(l.ConsumedQuantity, 1) ELSE 1 END END) AS fee_n",
        f"max(CAST(CASE WHEN {SPOT} AND l.ChargePeriodStart IS NOT NULL AND l.ChargePeriodEnd IS NOT NULL "
        f"THEN least({_span()}, {hours}) END AS DECIMAL(38,12))) AS hours",
        # the on-demand equivalent of the priced spot lines (NULL: no spot line of the group has one)
        f"sum(CASE WHEN {SPOT} THEN CAST({od} AS DECIMAL(38,12)) END) AS od",
    ]
    parts += [f"sum(CASE WHEN {SPOT} AND ({od}) IS NOT NULL THEN 1 ELSE 0 END) AS priced_{b}" for b in bases]
    # spot cost with no on-demand equivalent: kept out of the savings, reported beside them
    parts += [f"sum(CASE WHEN {SPOT} AND ({od}) IS NULL THEN coalesce(l.{COST_BASES[b]}, 0) ELSE 0 END) "
              f"AS unpriced_{b}" for b in bases]
    return ",\n       ".join(parts)


def lookup_sql(hits: str, od: str | None) -> str:
    """Each tagged line's rank and signal (:func:`ranks_sql`) from the relation ``hits``, with its on-demand
    equivalent ``od_cost`` from the relation ``od`` (x_LineItemId, od_cost: spot_od's rows; None: no od_cost
    column) in the same grouping: a union of both grouped once by line, not two relations each joined to every
    line (10M lines, 4.1M hits, 3.0M spot lines: the groups 9.4 -> 7.1 s under 600 MB, the same rows).  A line
    of ``od`` has a hit (spot_od holds the spot lines alone); one without would have no rank, as when joined."""
    if od is None:
        return f"({ranks_sql(hits)})"
    return (f"(SELECT x_LineItemId, MIN(r) AS rank, MAX(s) = 1 AS signal, MAX(od_cost) AS od_cost FROM ("
            f"SELECT x_LineItemId, {CATEGORY_RANK} AS r, {SIGNAL_HIT} AS s, NULL::DECIMAL(38,12) AS od_cost FROM {hits} "
            f"UNION ALL SELECT x_LineItemId, NULL, NULL, CAST(od_cost AS DECIMAL(38,12)) FROM {od}) "
            "GROUP BY x_LineItemId)")


def groups_sql(hits: str = "rule_hits", od: str | None = "spot_od", lines: str = "line_items",
               by_period: bool = False) -> str:
    """Step 1 (DuckDB): the lines grouped by key hash, billing period, day, category and spot charge period;
    the categories from the relation ``hits`` (x_LineItemId, category) and the spot lines' on-demand equivalents
    from the relation ``od`` (x_LineItemId, od_cost: spot_od or some of its rows; None, a store tagged before
    it: the export's), both by :func:`lookup_sql`; a spot line without a row there is one the export prices
    (spot_od holds those it does not: :mod:`billing_audit.pricing`), its own figure taken.  ``lines``: the
    relation of lines grouped (default all; :mod:`billing_audit.incremental`: some slices').  ``by_period``: the
    groups in billing-period order, so that a report of one period reads that period's row groups alone (DuckDB
    skips a row group whose min/max ``bps`` is outside the period: :func:`period_filter`)."""
    # the key is hashed before the joins, so that the rows the joins carry (and spill, past the memory limit) hold
    # the hash rather than the tag map and the resource and account names: 10M lines, 24 s -> 7.7 s under 600 MB
    narrow = f"(SELECT {KEY_HASH} AS ba_h, l.* EXCLUDE (Tags) FROM {lines} l)"
    return f"""
SELECT l.ba_h AS h, {", ".join(f"{e} AS {c}" for c, e in GROUP_COLUMNS)},
       {measures(("effective", "billed"), f"coalesce(c.od_cost, {export_od()})" if od is not None else None)}
FROM {narrow} l LEFT JOIN {lookup_sql(hits, od)} c ON c.x_LineItemId = l.x_LineItemId
GROUP BY 1, 2, 3, 4, 5, 6, 7{" ORDER BY 2" if by_period else ""}"""


def several_periods(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> bool:
    """Whether ``relation`` holds more than one billing period start in ``column``: the groups are then written
    in period order (one period's groups, as one delivery writes them, need no sort)."""
    row = con.execute(f"SELECT count(DISTINCT {column}) > 1 FROM {relation}").fetchone()
    return bool(row and row[0])


KEYS_SQL = f"""
SELECT {KEY_HASH} AS h, any_value(l.x_Provider) AS provider, coalesce(any_value(l.BillingCurrency), '?') AS currency,
       any_value(l.ResourceId) AS ResourceId, any_value(l.ResourceName) AS ResourceName,
       any_value(l.SubAccountId) AS SubAccountId, any_value(l.BillingAccountId) AS BillingAccountId,
       any_value(l.Tags) AS Tags, min({KEY_HASH2}) AS h2_lo, max({KEY_HASH2}) AS h2_hi
FROM line_items l GROUP BY 1"""


def build_groups(con: duckdb.DuckDBPyConnection, run_id: int, temp: bool = False) -> tuple[str, str]:
    """Write step 1's tables (as the store's ``line_groups``/``line_group_keys``, or as temp tables when
    ``temp``); returns their names.  Call inside the caller's transaction."""
    groups, keys = ("ba_line_groups", "ba_line_group_keys") if temp else ("line_groups", "line_group_keys")
    kind = "TEMP TABLE" if temp else "TABLE"
    con.execute(f"CREATE OR REPLACE {kind} {keys} AS {KEYS_SQL}")
    row = con.execute(f"SELECT count(*) FROM {keys} WHERE h2_lo <> h2_hi").fetchone()
    if row and row[0]:
        raise BillingAuditError("two different attribution keys hashed alike; please report this (the store is unchanged)")
    from billing_audit.pricing import has_spot_od

    ordered = not temp and several_periods(con, "line_items", "BillingPeriodStart")
    con.execute(f"CREATE OR REPLACE {kind} {groups} AS {groups_sql(od='spot_od' if has_spot_od(con) else None, by_period=ordered)}")
    if not temp:
        from billing_audit.search import index_sql

        for name, sql in index_sql():  # the search index, valid exactly as long as the groups
            con.execute(f"CREATE OR REPLACE TABLE {name} AS {sql}")
        con.execute("CREATE OR REPLACE TABLE line_groups_meta AS SELECT ?::BIGINT AS run_id, "
                    f"(SELECT count(*) FROM line_items) AS lines, {GROUPS_VERSION} AS version", [run_id])
    return groups, keys


def keys_sql(lines: str = "line_items") -> str:
    """:data:`KEYS_SQL` over the relation ``lines``."""
    return KEYS_SQL.replace("FROM line_items l", f"FROM {lines} l")


def lines_signature(con: duckdb.DuckDBPyConnection) -> str:
    """What the lines stored now are, cheaply: how many, and which delivery holds how many lines of each slice
    (every ingest that changes the lines changes ``slices``; nothing scans ``line_items``).  A tag run records
    it; a report needs the latest tag run's to equal the store's."""
    row = con.execute("SELECT count(*) FROM line_items").fetchone()
    n = int(row[0]) if row else 0
    has_slices = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'slices'").fetchone()
    digest = 0
    if has_slices and has_slices[0]:
        row = con.execute("SELECT hash(list((ingest_id, x_Provider, BillingAccountId, BillingPeriodStart, rows, export) "
                          "ORDER BY ALL)) FROM slices").fetchone()
        digest = int(row[0]) if row and row[0] is not None else 0
    return f"{n}:{digest}"


NO_TAG_RUN = "no completed tag run of the lines in the store: run `billing-audit tag`"


def completed_tag_run(con: duckdb.DuckDBPyConnection) -> int | None:
    """The latest tag run, when it completed over exactly the lines stored now (else None: report nothing).

    A tag run writes its hits, its ``tag_runs`` row (with the lines' signature), the line groups and the search
    index in one transaction, so a run that failed or was killed left no row; an ingest that changed the lines
    since changes the signature."""
    have = con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'tag_runs' AND column_name = 'lines_sig'").fetchone()
    if not have or not have[0]:
        return None
    row = con.execute("SELECT run_id, lines_sig FROM tag_runs ORDER BY run_id DESC LIMIT 1").fetchone()
    if row is None or row[1] != lines_signature(con):
        return None
    return int(row[0])


def drop_groups(con: duckdb.DuckDBPyConnection) -> None:
    """The groups and the search index, gone (nothing reads them once the lines changed: :func:`current_groups`
    checks the lines' signature; ingest keeps them so that the next tag run redoes only the changed slices)."""
    for t in ("line_groups", "line_group_keys", "line_groups_meta", "search_index", "search_texts"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


# current_groups's answer per read-only connection: nothing can change the store under one (a writer cannot open
# it while a reader has it open), and a report asks twice (its aggregates, its fee reconciliation)
_CURRENT: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, tuple[str, str] | None] = weakref.WeakKeyDictionary()


def current_groups(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    """The stored groups, when they were built by the last tag run over exactly the lines stored now."""
    if con in _CURRENT:
        return _CURRENT[con]
    found = _current_groups(con)
    row = con.execute("SELECT current_setting('access_mode')").fetchone()
    if row and row[0] == "read_only":
        _CURRENT[con] = found
    return found


def _current_groups(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    have = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
        "AND table_name IN ('line_groups', 'line_group_keys', 'line_groups_meta', 'tag_runs')").fetchall()}
    if len(have) < 4:
        return None
    if completed_tag_run(con) is None:  # the lines changed since (ingest keeps the groups for the next tag run)
        return None
    cols = {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND table_name = 'line_groups'").fetchall()}
    if "od" not in cols:  # built by an older version: rebuild on the fly
        return None
    meta = {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND table_name = 'line_groups_meta'").fetchall()}
    if "version" not in meta:
        return None
    row = con.execute("SELECT max(version) FROM line_groups_meta").fetchone()
    if not row or row[0] is None or int(row[0]) < GROUPS_VERSION:
        return None
    row = con.execute("SELECT (SELECT run_id FROM line_groups_meta) = (SELECT max(run_id) FROM tag_runs) "
                      "AND (SELECT lines FROM line_groups_meta) = (SELECT count(*) FROM line_items)").fetchone()
    return ("line_groups", "line_group_keys") if row and row[0] else None


# -- steps 2 and 3: portable SQL over the groups --------------------------------------------------------------

def like_pattern(pattern: str) -> str:
    """A resource-map pattern (* and ?) as a LIKE pattern with \\ escapes."""
    out = []
    for ch in pattern:
        if ch in "%_\\":
            out.append("\\" + ch)
        elif ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        else:
            out.append(ch)
    return "".join(out)


def first_tag(keys: list[str], tags: str = "k.Tags") -> str:
    """The first non-blank value among the tag keys, trimmed and lower-cased (tag keys are stored lower-case)."""
    def one(k: str) -> str:
        v = f"NULLIF(TRIM({tags}[{lit(k.lower())}]), '')"
        return f"CASE WHEN {v} NOT LIKE '{NO_NAMESPACE}' THEN {v} END" if k in NAMESPACE_KEYS else v

    parts = [one(k) for k in keys]
    if not parts:
        return "CAST(NULL AS VARCHAR)"
    return f"LOWER({parts[0] if len(parts) == 1 else 'COALESCE(' + ', '.join(parts) + ')'})"


# where the bills put a pod's Kubernetes namespace: EKS split cost allocation data (``aws:eks:namespace``; CUR 2.0
# keeps the ``aws_`` prefix in resource_tags), GKE cost allocation (``k8s-namespace``)
NAMESPACE_KEYS = ("aws_eks_namespace", "aws:eks:namespace", "k8s-namespace")
# namespace values that name no tenant: GKE's unallocated and system-overhead rows
NO_NAMESPACE = "kube:%"


def label_spellings(key: str) -> list[str]:
    """A Kubernetes pod label key as the bills spell it in the tag map: itself (EKS imported labels, ``user_``
    dropped), with non-alphanumerics as ``_`` (the CUR column-name spelling), and GKE's ``k8s-label/<key>``."""
    k = key.strip().lower()
    out = [k, re.sub(r"[^a-z0-9]+", "_", k).strip("_"), f"k8s-label/{k}"]
    return list(dict.fromkeys(x for x in out if x))


def job_tag_keys(cfg: Config) -> list[str]:
    """The tag keys that name a line's job, first match wins: the config's job keys as GKE pod labels (more
    specific than the project's labels GKE rows inherit), as tags (EKS pod labels among them), then the training
    operators' labels (``kubernetes_job_label_keys``)."""
    a = cfg.attribution
    keys = [f"k8s-label/{k.lower()}" for k in a.job_tag_keys] + [k.lower() for k in a.job_tag_keys]
    for k in a.kubernetes_job_label_keys:
        keys += label_spellings(k)
    return list(dict.fromkeys(keys))


def team_tag_keys(cfg: Config) -> list[str]:
    """The tag keys that name a line's team: the config's team keys as GKE pod labels, as tags, then (unless
    ``kubernetes_namespace_team = false``) the pod's namespace."""
    a = cfg.attribution
    keys = [f"k8s-label/{k.lower()}" for k in a.team_tag_keys] + [k.lower() for k in a.team_tag_keys]
    if a.kubernetes_namespace_team:
        keys += NAMESPACE_KEYS
    return list(dict.fromkeys(keys))


def period_bounds(period: str) -> tuple[str, str]:
    """The billing period starts that belong to month `period` (YYYY-MM): a period belongs to the month it
    mostly covers, i.e. [first of the month - 14 days, first of the next month - 14 days)."""
    from datetime import date, timedelta

    try:
        y, m = (int(x) for x in period.split("-"))
        first = date(y, m, 1)
    except ValueError:
        raise BillingAuditError(f"--period {period!r}: expected YYYY-MM") from None
    nxt = date(y + 1, 1, 1) if m == 12 else date(y, m + 1, 1)
    return (str(first - timedelta(days=14)), str(nxt - timedelta(days=14)))


def period_filter(period: str | None, column: str = "g.bps") -> str:
    """Billing month `period` as a range on the billing period start, which storage can prune by."""
    if period is None:
        return "TRUE"
    lo, hi = period_bounds(period)
    return f"{column} >= TIMESTAMP '{lo} 00:00:00' AND {column} < TIMESTAMP '{hi} 00:00:00'"


def _mode(value: str, part: str, source: str) -> str:
    """The value most of `source`'s lines carry per `part` (ties: the alphabetically first), skipping NULLs."""
    return f"""SELECT {part}, {value} FROM (
    SELECT {part}, {value}, ROW_NUMBER() OVER (PARTITION BY {part} ORDER BY SUM(n) DESC, {value}) AS rn
    FROM {source} WHERE {value} IS NOT NULL GROUP BY {part}, {value}) t
  WHERE rn = 1"""


def attribution_ctes(cfg: Config, groups: str, keys: str, period: str | None,
                     tags_extracted: bool = False, labelled: str | None = None) -> list[tuple[str, str]]:
    """Step 2 as named CTEs, the last (``ba_attr``) giving (h, job, team) for every key with lines in the
    period.  `tags_extracted`: the keys carry tag_job/tag_team already (engines that cannot group by a map);
    `labelled`: then, what says the key is a node's GKE cost-allocation row (None: the keys do not say)."""
    a = cfg.attribution
    accounts = " ".join(f"WHEN {lit(k)} THEN {lit(v.strip().lower())}" for k, v in a.account_teams.items())

    def acc(col: str) -> str:
        return f"CASE {col} {accounts} END" if accounts else "CAST(NULL AS VARCHAR)"

    def mapped(field: str) -> str:  # the first matching row decides, even when its field is blank
        whens = []
        for r in cfg.resource_rows:
            pat = lit(like_pattern(r["resource"]))
            whens.append(f"WHEN k.ResourceId LIKE {pat} ESCAPE '\\' OR k.ResourceName LIKE {pat} ESCAPE '\\' "
                         f"THEN {lit(r[field].strip().lower() or None)}")
        return ("CASE " + " ".join(whens) + " END") if whens else "CAST(NULL AS VARCHAR)"

    # a node's rows split by GKE cost allocation (billing_audit.kubernetes); engines' keys carry no tag map
    pod = (labelled or "FALSE") if tags_extracted else "k.Tags['k8s-namespace'] IS NOT NULL"
    job, team = (("k.tag_job", "k.tag_team") if tags_extracted
                 else (first_tag(job_tag_keys(cfg)), first_tag(team_tag_keys(cfg))))
    return [
        ("keyed", f"""
  SELECT k.h, k.provider, k.currency, k.ResourceId, k.ResourceName, k.SubAccountId, k.BillingAccountId,
         {job} AS tag_job, {team} AS tag_team, p.n, {pod} AS pod
  FROM {keys} k JOIN (SELECT g.h, SUM(g.n) AS n FROM {groups} g WHERE {period_filter(period)} GROUP BY g.h) p
    ON p.h = k.h"""),
        # a resource's usual tags speak for its untagged lines; a GKE node's pod rows do not speak for the node
        ("res_job", _mode("tag_job", "provider, ResourceId", "(SELECT * FROM keyed WHERE NOT pod) kn")),
        ("res_team", _mode("tag_team", "provider, ResourceId", "(SELECT * FROM keyed WHERE NOT pod) kn")),
        ("lined", f"""
  SELECT k.h, k.n, COALESCE(k.tag_job, rj.tag_job, {mapped("job")}) AS line_job,
         COALESCE(k.tag_team, rt.tag_team, {mapped("team")}, {acc("k.SubAccountId")}, {acc("k.BillingAccountId")})
           AS line_team
  FROM keyed k
  LEFT JOIN res_job rj ON rj.provider = k.provider AND rj.ResourceId = k.ResourceId
  LEFT JOIN res_team rt ON rt.provider = k.provider AND rt.ResourceId = k.ResourceId"""),
        ("job_team", _mode("line_team", "line_job", "(SELECT * FROM lined WHERE line_job IS NOT NULL) lj")),
        ("ba_attr", f"""
SELECT k.h, COALESCE(k.line_job, '{UNATTRIBUTED}') AS job,
       COALESCE(CASE WHEN k.line_job IS NOT NULL THEN jt.line_team END, k.line_team, '{UNATTRIBUTED}') AS team
FROM lined k LEFT JOIN job_team jt ON jt.line_job = k.line_job"""),
    ]


def with_ctes(ctes: list[tuple[str, str]]) -> str:
    """The CTEs but the last, then the last one's query."""
    head = ",\n".join(f"{name} AS ({body})" for name, body in ctes[:-1])
    return (f"WITH {head}\n" if head else "") + ctes[-1][1]


def aggregate_steps(groups: str, keys: str, period: str | None, basis: str,
                    split: bool = False, sources_only: bool = False) -> list[tuple[str, str]]:
    """Step 3: ba_agg, ba_spot_hours, ba_spot_res and ba_win (the restart-window lines by charge period: fees,
    signals, checkpoint re-reads and egress) from the groups and ``ba_attr``.  ``split``: the groups are
    :mod:`billing_audit.kubernetes`'s (a node's lines in parts: attribution by ``ah``, a job's parts of one
    charge period add up their spot hours).  ``sources_only``: a period prepared for its interruptions alone
    (the previous period of a report): ba_agg holds only what a job row's interruption source is chosen by (its
    lines and fee count, with and without signal, per job row), and ba_win only the lines that can be
    interruptions (restart fees and signals: no checkpoint re-reads or egress, which link with interruptions
    and are not ones)."""
    if basis not in COST_BASES:
        raise BillingAuditError(f"--cost-basis {basis!r}: choose effective, billed or list")
    cost = basis
    priced = "0" if basis == "list" else f"g.priced_{basis}"
    unpriced = "0" if basis == "list" else f"g.unpriced_{basis}"
    cat = "CASE g.rank " + " ".join(f"WHEN {i + 1} THEN '{c}'" for i, c in enumerate(CATEGORIES)) + " END"
    window_ranks = (FEE_RANK,) if sources_only else WINDOW_RANKS
    run_key = "g.h, g.ah" if split else "g.h"
    joined = (f"{groups} g JOIN ba_attr t ON t.h = g.{'ah' if split else 'h'} JOIN {keys} k ON k.h = g.h "
              f"WHERE {period_filter(period)}")
    # split: each operand DECIMAL(37,12), so that their sum is DECIMAL(38,12) on Spark too (two DECIMAL(38,12) add
    # up to DECIMAL(38,11) there: the 12th place of a shared hour rounded away)
    hm = ("CAST(coalesce(MAX(CASE WHEN NOT g.split THEN g.hours END), 0) AS DECIMAL(37,12)) "
          "+ CAST(coalesce(SUM(CASE WHEN g.split THEN g.hours END), 0) AS DECIMAL(37,12))" if split else "MAX(g.hours)")
    agg = (f"""
SELECT t.job AS job, t.team AS team, k.provider AS provider, k.currency AS currency, g.signal AS signal,
       SUM(g.n) AS n, SUM(g.fee_n) AS fee_n
FROM {joined}
GROUP BY t.job, t.team, k.provider, k.currency, g.signal""" if sources_only else f"""
SELECT t.job AS job, t.team AS team, k.provider AS provider, k.currency AS currency, g.day AS day,
       {cat} AS category, g.signal AS signal, SUM(g.n) AS n, SUM(g.{cost}) AS cost, SUM(g.list) AS list_cost,
       SUM(g.fee_n) AS fee_n, SUM({priced}) AS priced, SUM({unpriced}) AS unpriced, SUM(g.od) AS od_cost,
       k.BillingAccountId AS account
FROM {joined}
GROUP BY t.job, t.team, k.provider, k.currency, g.day, g.rank, g.signal, k.BillingAccountId""")
    return [
        ("ba_agg", agg),
        ("ba_spot_hours", f"""
SELECT job, team, provider, currency, SUM(hm) AS spot_hours FROM (
  SELECT t.job AS job, t.team AS team, k.provider AS provider, k.currency AS currency, {hm} AS hm
  FROM {joined} AND g.rank = {SPOT_RANK} AND g.cps IS NOT NULL AND g.cpe IS NOT NULL
  GROUP BY t.job, t.team, k.provider, k.currency, g.cps, g.cpe) s
GROUP BY job, team, provider, currency"""),
        # each group's run first (by its hash, a few thousand: cheaper to group than by the row's texts)
        ("ba_spot_res", f"""
SELECT t.job AS job, t.team AS team, k.provider AS provider, k.currency AS currency, k.ResourceId AS ResourceId,
       MIN(g.s) AS s, MAX(g.e) AS e, MIN(k.BillingAccountId) AS account
FROM (SELECT {run_key}, MIN(g.cps) AS s, MAX(g.cpe) AS e FROM {groups} g
      WHERE {period_filter(period)} AND g.rank = {SPOT_RANK} GROUP BY {run_key}) g
  JOIN ba_attr t ON t.h = g.{'ah' if split else 'h'} JOIN {keys} k ON k.h = g.h
WHERE k.ResourceId IS NOT NULL AND t.job <> '{UNATTRIBUTED}'
GROUP BY t.job, t.team, k.provider, k.currency, k.ResourceId"""),
        ("ba_win", f"""
SELECT t.job AS job, t.team AS team, k.provider AS provider, k.currency AS currency, {cat} AS category,
       g.signal AS signal, g.cps AS s, g.cpe AS e, SUM(g.n) AS n, SUM(g.{cost}) AS cost, SUM(g.fee_n) AS fee_n,
       k.BillingAccountId AS account
FROM {joined} AND (g.rank IN ({", ".join(map(str, window_ranks))}) OR g.signal)
GROUP BY t.job, t.team, k.provider, k.currency, g.rank, g.signal, g.cps, g.cpe, k.BillingAccountId"""),
    ]


def prepare(con: duckdb.DuckDBPyConnection, cfg: Config, period: str | None, basis: str,
            skip: Sequence[str] = (), sources_only: bool = False, current: tuple[str, str] | None = None) -> bool:
    """Steps 1-3 as temp tables on `con`; step 1 from the stored groups when current; the step-3 tables named in
    ``skip`` are not made (e.g. ``ba_spot_hours`` for a period whose interruptions alone are wanted);
    ``sources_only``: ba_agg as :func:`aggregate_steps` makes it then; ``current``: the stored groups as
    :func:`current_groups` found them current on `con` (a report of several periods looks once; None: looked
    up here).  Returns whether the stored groups were used."""
    stored = current or current_groups(con)
    groups, keys = stored or build_groups(con, 0, temp=True)
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_attr AS {with_ctes(attribution_ctes(cfg, groups, keys, period))}")
    from billing_audit import kubernetes

    split = kubernetes.build(con, groups, keys, period)  # Kubernetes nodes' lines shared out to their pods
    for name, sql in aggregate_steps(split or groups, keys, period, basis, split=split is not None,
                                     sources_only=sources_only):
        if name in skip:
            continue
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")
    if not stored:
        con.execute("DROP TABLE IF EXISTS ba_line_groups")
        con.execute("DROP TABLE IF EXISTS ba_line_group_keys")
    return stored is not None
