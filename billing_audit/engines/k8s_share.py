"""Kubernetes node sharing inside an engine's audit query: :mod:`billing_audit.kubernetes`'s steps, as they are.

The local report shares a spot node's lines out to its pods' jobs (:func:`billing_audit.kubernetes.steps`).  An
engine runs the same steps, translated (:mod:`billing_audit.engines.portable`), over its own groups; what it needs
beside them, all here:

- **keys as fine as the local ones on Kubernetes nodes**: an engine groups by the job and team tags it extracts,
  not by the tag map (Spark cannot group by a map), so two keys of a node that differ only in other tags would be
  one group and be split as one (their rounding remainders differ).  A line of a node with pods or GKE
  cost-allocation rows, and a pod record, also carries ``tag_key``, its tag map as one text
  (:func:`billing_audit.kubernetes.tags_text`), so those groups are the local ones; ``k8s_labelled`` says the key is
  a GKE cost-allocation row (the local key's ``Tags['k8s-namespace']``);
- a pod record's key found by its key columns (locally: by its hash);
- the groups always carry the effective cost (the parts' weights), whatever the cost basis;
- the interruption shares (``ba_k8s_events``) come back with the aggregates (kind ``k8s``, in 1e-12 units) and land
  as the report's ``ba_k8s_events``, so interruption events of a shared node are shared as locally.

Exactness: amounts are split in 1e-12 units.  DuckDB holds them as HUGEINT; Spark as DECIMAL(38,0)
(:func:`billing_audit.engines.portable.to_engine`), whose integer division (``DIV``) is exact and truncates toward
zero as HUGEINT's does, into a BIGINT.  So on Spark a shared line's amount, times a part's weight, in 1e-24 units,
must stay below 1e38 (amount x weight < 1e14, e.g. 1,000,000 x 100,000,000 of a currency) and a part's share below
9.2e18 units (9.2 million of a currency): past that Spark stops the run with an overflow (ANSI), it never rounds.
Ties between parts of equal weight are broken by the keys' resource, accounts and tag text (not the engine's key
numbers), NULLS FIRST written out, so the remainder goes to the same part on every engine.

Engines that share (:data:`ENGINES`): DuckDB's engine (``--engine duckdb``) and Spark (over canonical lines and
``--source raw``: the same steps, translated, give the local report byte for byte on the EKS and GKE fixtures,
tests/engines/test_engine_k8s.py and test_engine_spark_raw.py).  BigQuery and Athena do not: the tag
text has no translation there yet (BigQuery holds tags as an array of structs, Trino's ``map_entries`` rows have
no field names) and Trino's integer division of decimals rounds, so the report warns on them as before.
"""

from __future__ import annotations

import duckdb

from billing_audit.kubernetes import ENGINES, LABELLED, KeySql, steps, tags_text
from billing_audit.rollup import period_filter

KIND = "k8s"
# the key columns the engine adds (name, expression over line_items l LEFT JOIN k8s_nodes kn)
KEY_COLUMNS = [
    ("k8s_labelled", f"coalesce(l.Tags['{LABELLED}'] IS NOT NULL, FALSE)"),
    ("tag_key", f"CASE WHEN kn.node IS NOT NULL OR l.x_SplitParentId IS NOT NULL THEN {tags_text('l.Tags')} END"),
]
NODES_JOIN = " LEFT JOIN k8s_nodes kn ON kn.provider = l.x_Provider AND kn.node = l.ResourceId"


def shares(engine: str) -> bool:
    """Whether `engine`'s audit query shares Kubernetes nodes out."""
    return engine in ENGINES


def nodes_sql(period: str | None) -> str:
    """The Kubernetes nodes of the period: the parents pod records name, the resources of GKE cost-allocation rows
    (one row each: the lines' join to them adds no line)."""
    pf = period_filter(period, "l.BillingPeriodStart")
    return f"""
SELECT l.x_Provider AS provider, l.x_SplitParentId AS node FROM line_items l
WHERE l.x_SplitParentId IS NOT NULL AND {pf}
UNION
SELECT l.x_Provider AS provider, l.ResourceId AS node FROM line_items l
WHERE l.ResourceId IS NOT NULL AND l.Tags['{LABELLED}'] IS NOT NULL AND {pf}"""


def keys(key: list[str], exprs: list[str], table: str) -> KeySql:
    """How the sharing reads the engine's keys (`table`, columns `key` computed as `exprs` from the lines)."""
    match = " AND ".join(f"k.{c} IS NOT DISTINCT FROM {e}" for c, e in zip(key, exprs, strict=True))
    return KeySql(labelled="k.k8s_labelled", tags="k.tag_key",
                  pods=f"line_items l{NODES_JOIN} JOIN {table} k ON {match}", pod_key="k.h")


def share_steps(groups: str, table: str, period: str | None, gcols: list[str], ks: KeySql) -> list[tuple[str, str]]:
    """:func:`billing_audit.kubernetes.steps` over the engine's groups (pod records: the canonical columns)."""
    return steps(groups, table, period, gcols, True, ks)


RESULT = {"ResourceId": "node", "s": "hs", "account": "account", "n": "CAST(units AS BIGINT)"}


def load(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """An engine run's interruption shares as the report's ``ba_k8s_events`` (none: the table is not made)."""
    con.execute("DROP TABLE IF EXISTS ba_k8s_events")
    row = con.execute(f"SELECT count(*) FROM engine_results WHERE run_id = {int(run_id)} AND kind = '{KIND}'").fetchone()
    if row and row[0]:
        con.execute(f"""CREATE TEMP TABLE ba_k8s_events AS
SELECT provider, currency, ResourceId AS node, s AS hs, job, team, account, CAST(n AS HUGEINT) AS units
FROM engine_results WHERE run_id = {int(run_id)} AND kind = '{KIND}'""")
