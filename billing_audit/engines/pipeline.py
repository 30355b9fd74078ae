"""The whole audit as one query an engine runs where the lines are, returning only aggregates.

Over a relation ``line_items`` in the canonical (FOCUS + x_) schema, one query:

1. ``checkpoint_resources`` and every rule (translated by :mod:`billing_audit.engines.portable`) give the
   rule hits; each line's category is its hits' first in precedence order;
2. the lines are grouped by what attribution looks at (the same step as the local report's groups,
   with the job and team tags extracted because not every engine can group by a map);
3. attribution and the aggregates of :mod:`billing_audit.rollup` run on the groups.

What comes back is five small result sets in one (a ``kind`` column tells them apart): per job, team,
provider, currency, day and category (``agg``); spot hours per job (``hours``); each spot resource's run
(``res``); the restart-window lines per charge period (``win``: fees, signals, checkpoint re-reads and egress,
their period in ``s``/``e``); hits per rule (``rule``).  They land in the local store (:func:`store_results`) and the report
layer reads them exactly as it reads the local engine's.

Spot savings: an engine that runs the steps one by one (Spark) prices the spot lines as a local tag run does, from
the export, the store's price references and the bill's on-demand lines (``priced``:
:mod:`billing_audit.engines.priced`, a few steps after ``ranks``); the one-statement engines (BigQuery, Athena)
measure them with the export's own on-demand cost only (:func:`billing_audit.rollup.export_od`, the providers'
``export_od_sql()``), so what the export leaves unpriced stays unpriced there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from billing_audit import rollup
from billing_audit.config import Config
from billing_audit.ddl import RESULT_TABLES
from billing_audit.engines import k8s_share
from billing_audit.engines import priced as engine_prices
from billing_audit.engines.portable import NotPortable, to_engine
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule
from billing_audit.tagging import _bind, _renamed, checkpoint_sql

KEY = ["provider", "currency", "ResourceId", "ResourceName", "SubAccountId", "BillingAccountId", "tag_job", "tag_team"]
RESULT_COLUMNS = [
    ("kind", "VARCHAR"), ("job", "VARCHAR"), ("team", "VARCHAR"), ("provider", "VARCHAR"), ("currency", "VARCHAR"),
    ("day", "DATE"), ("category", "VARCHAR"), ("signal", "BOOLEAN"), ("n", "BIGINT"),
    ("cost", "DECIMAL(38,12)"), ("list_cost", "DECIMAL(38,12)"), ("fee_n", "DECIMAL(38,12)"), ("priced", "BIGINT"),
    ("spot_hours", "DECIMAL(38,12)"), ("ResourceId", "VARCHAR"), ("s", "TIMESTAMP"), ("e", "TIMESTAMP"), ("rule_id", "VARCHAR"),
    ("unpriced", "DECIMAL(38,12)"),  # these last: older stores get them by ALTER TABLE ... ADD COLUMN
    ("od_cost", "DECIMAL(38,12)"),  # the spot lines' on-demand equivalent, as the export gives it (rollup.export_od)
    ("account", "VARCHAR"),  # the billing account (agg, res, win): export --by team,account
]


class RuleNotPortable(NotPortable):
    def __init__(self, rule: Rule, engine: str, why: str) -> None:
        super().__init__(f"{rule.path}: rule {rule.id} cannot run on {engine}: {why}")
        self.rule = rule


def _rule_sql(rule: Rule, engine: str, params: dict[str, Any]) -> str:
    values = {k: v for k, v in _bind(rule, params).items()}
    try:
        return to_engine(_renamed(rule), engine, values)
    except NotPortable as e:
        raise RuleNotPortable(rule, engine, str(e)) from None


def check_rules(rules: Sequence[Rule], engine: str, params: dict[str, Any] | None = None) -> dict[str, str]:
    """Each rule's SQL for `engine`; the first rule that cannot run there raises RuleNotPortable."""
    return {r.id: _rule_sql(r, engine, params or {}) for r in rules}


def pipeline_parts(rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
                   checkpoint: dict[str, Any] | None = None, k8s: bool = False,
                   priced: bool = False) -> list[tuple[str, str]]:
    """The audit query's steps (name, DuckDB SELECT); the last, ``result``, is what comes back.  ``k8s``: share
    Kubernetes nodes' lines out to their pods' jobs in the query (:mod:`billing_audit.engines.k8s_share`).
    ``priced``: the spot lines priced as locally (:mod:`billing_audit.engines.priced`: for an engine that runs the
    steps one by one and gives the driver's tables back); else by the export's own on-demand cost only."""
    if basis not in rollup.COST_BASES:
        raise BillingAuditError(f"--cost-basis {basis!r}: choose effective, billed or list")
    hits = " UNION ALL ".join(
        f"SELECT DISTINCT CAST(x_LineItemId AS VARCHAR) AS x_LineItemId, '{r.id}' AS rule_id, "
        f"'{r.category}' AS category FROM ({_renamed(r).sql(dialect='duckdb')}) AS rule_output "
        "WHERE x_LineItemId IS NOT NULL"
        for r in rules
    ) or "SELECT CAST(NULL AS VARCHAR) AS x_LineItemId, CAST(NULL AS VARCHAR) AS rule_id, " \
         "CAST(NULL AS VARCHAR) AS category WHERE FALSE"
    pf = rollup.period_filter(period, "l.BillingPeriodStart")
    job = rollup.first_tag(rollup.job_tag_keys(cfg), "l.Tags")
    team = rollup.first_tag(rollup.team_tag_keys(cfg), "l.Tags")
    g0_cols = ["provider", "currency", "ResourceId", "ResourceName", "SubAccountId", "BillingAccountId",
               "tag_job", "tag_team", *(c for c, _ in rollup.GROUP_COLUMNS)]
    g0_exprs = [
        "l.x_Provider", "COALESCE(l.BillingCurrency, '?')", "l.ResourceId", "l.ResourceName", "l.SubAccountId",
        "l.BillingAccountId", job, team, *(e for _, e in rollup.GROUP_COLUMNS),
    ]
    key = KEY + [c for c, _ in k8s_share.KEY_COLUMNS] * k8s
    g0_cols[len(KEY):len(KEY)] = key[len(KEY):]
    g0_exprs[len(KEY):len(KEY)] = [e for _, e in k8s_share.KEY_COLUMNS] * k8s
    same = " AND ".join(f"k.{c} IS NOT DISTINCT FROM g0.{c}" for c in key)
    bases = () if basis == "list" else (basis,)  # list cost is summed anyway
    if k8s and basis != "effective":  # the pods' weights
        bases = ("effective", *bases)
    cost_pick = "" if basis == "list" else f" g0.{basis} AS {basis},"
    priced_pick = "" if basis == "list" else (f", g0.priced_{basis} AS priced_{basis}, "
                                              f"g0.unpriced_{basis} AS unpriced_{basis}")
    if k8s and basis != "effective":
        cost_pick += " g0.effective AS effective,"
    ctes: list[tuple[str, str]] = [
        ("checkpoint_resources", checkpoint_sql(checkpoint)),
        ("hits", hits),
        ("ranks", rollup.ranks_sql("hits")),
        *([("k8s_nodes", k8s_share.nodes_sql(period))] if k8s else []),
        *(engine_prices.steps() if priced else []),
        ("g0", f"""
SELECT {", ".join(f"{e} AS {c}" for e, c in zip(g0_exprs, g0_cols, strict=True))},
       {rollup.measures(bases, engine_prices.OD if priced else None)}
FROM line_items l LEFT JOIN ranks c ON c.x_LineItemId = l.x_LineItemId{k8s_share.NODES_JOIN * k8s}\
{engine_prices.JOIN if priced else ""}
WHERE {pf}
GROUP BY {", ".join(g0_exprs)}"""),
        ("line_group_keys", f"""
SELECT ROW_NUMBER() OVER (ORDER BY {", ".join(key)}) AS h, {", ".join(key)}
FROM (SELECT DISTINCT {", ".join(key)} FROM g0) d"""),
        ("line_groups", f"""
SELECT k.h AS h, g0.bps AS bps, g0.day AS day, g0.rank AS rank, g0.signal AS signal, g0.cps AS cps, g0.cpe AS cpe,
       g0.n AS n,{cost_pick} g0.list AS list, g0.fee_n AS fee_n, g0.hours AS hours, g0.od AS od{priced_pick}
FROM g0 JOIN line_group_keys k ON {same}"""),
    ]
    ks = k8s_share.keys(key, g0_exprs[:len(key)], "line_group_keys")
    ctes += rollup.attribution_ctes(cfg, "line_groups", "line_group_keys", period, tags_extracted=True,
                                    labelled=ks.labelled if k8s else None)
    gcols = ["h", *(c for c, _ in rollup.GROUP_COLUMNS), "n", *bases, "list", "fee_n", "hours", "od",
             *(f"{p}_{b}" for b in bases if b == basis for p in ("priced", "unpriced"))]
    ctes += k8s_share.share_steps("line_groups", "line_group_keys", period, gcols, ks) if k8s else []
    ctes += rollup.aggregate_steps("ba_split_groups" if k8s else "line_groups", "line_group_keys", period, basis,
                                   split=k8s)
    ctes.append(("fired", f"""
SELECT h.rule_id AS rule_id, h.category AS category, COUNT(*) AS n
FROM hits h JOIN line_items l ON l.x_LineItemId = h.x_LineItemId
WHERE {pf} GROUP BY h.rule_id, h.category"""))

    def row(kind: str, values: dict[str, str]) -> str:
        cols = [f"'{kind}' AS kind"]
        for name, typ in RESULT_COLUMNS[1:]:
            cols.append(f"{values[name]} AS {name}" if name in values else f"CAST(NULL AS {typ}) AS {name}")
        return "SELECT " + ", ".join(cols)

    base = {c: c for c in ("job", "team", "provider", "currency")}
    final = " UNION ALL ".join([
        row("agg", base | {c: c for c in ("day", "category", "signal", "n", "cost", "list_cost", "fee_n")}
            | {"priced": "CAST(priced AS BIGINT)", "unpriced": "CAST(unpriced AS DECIMAL(38,12))",
               "od_cost": "CAST(od_cost AS DECIMAL(38,12))", "account": "account"}) + " FROM ba_agg",
        row("hours", base | {"spot_hours": "spot_hours"}) + " FROM ba_spot_hours",
        row("res", base | {"ResourceId": "ResourceId", "s": "s", "e": "e", "account": "account"}) + " FROM ba_spot_res",
        row("win", base | {c: c for c in ("category", "signal", "n", "cost", "fee_n", "s", "e", "account")})
        + " FROM ba_win",
        row("rule", {"rule_id": "rule_id", "category": "category", "n": "n"}) + " FROM fired",
        *([row(k8s_share.KIND, base | k8s_share.RESULT) + " FROM ba_k8s_events"] if k8s else []),
    ])
    return [*ctes, ("result", final)]


def pipeline_sql(rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
                 checkpoint: dict[str, Any] | None = None, k8s: bool = False) -> str:
    """The audit query as one DuckDB statement (rules as written, $params still to bind); see to_engine."""
    parts = pipeline_parts(rules, cfg, period, basis, checkpoint, k8s)
    return "WITH " + ",\n".join(f"{n} AS ({b})" for n, b in parts[:-1]) + "\n" + parts[-1][1]


def bound_values(rules: Sequence[Rule], params: dict[str, Any] | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for r in rules:
        values.update(_bind(r, params or {}))
    return values


def engine_sql(engine: str, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
               params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None) -> str:
    """The audit query for `engine`; a rule that cannot run there raises RuleNotPortable (at load time)."""
    check_rules(rules, engine, params)  # names the rule that does not translate
    sql = pipeline_sql(rules, cfg, period, basis, checkpoint, k8s_share.shares(engine))
    return to_engine(sql, engine, bound_values(rules, params))


def engine_steps(engine: str, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
                 params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None,
                 priced: bool = False) -> list[tuple[str, str]]:
    """The steps as `engine` SQL, for engines that run them as views one at a time (``priced``: see
    :func:`pipeline_parts`; the engine then makes each of ``engine_prices.DRIVER_STEPS`` a table on the driver)."""
    check_rules(rules, engine, params)
    values = bound_values(rules, params)
    parts = pipeline_parts(rules, cfg, period, basis, checkpoint, k8s_share.shares(engine), priced)
    return [(n, to_engine(sql, engine, values)) for n, sql in parts]


@dataclass
class EngineRun:
    engine: str
    source: str
    period: str | None
    basis: str
    sql: str
    config_key: str
    bytes_processed: int | None = None


def config_key(cfg: Config, rules: Sequence[Rule], params: dict[str, Any] | None, prices: str = "") -> str:
    """What makes two engine runs comparable: the attribution and exports config, the rules and their parameters,
    and the price references the run was given (``prices``: :func:`billing_audit.pricing.prices_key`)."""
    blob = json.dumps({"groups": rollup.GROUPS_VERSION,
                       "attribution": dataclasses.asdict(cfg.attribution), "map": cfg.resource_rows,
                       "exports": dataclasses.asdict(cfg.exports),  # which export keeps lines two deliver (raw)
                       "rules": [(r.id, r.sql) for r in rules], "params": params or {},
                       "prices": prices}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def store_results(con: duckdb.DuckDBPyConnection, run: EngineRun, rows: Iterable[Sequence[Any]]) -> int:
    """Land an engine's aggregates in the local store (one transaction); returns the engine run id."""
    cols = ", ".join(f"{n} {t}" for n, t in RESULT_COLUMNS)
    for stmt in RESULT_TABLES.format(cols=cols).split(";"):
        if stmt.strip():
            con.execute(stmt)
    con.execute("ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS account VARCHAR")  # stores of older versions
    con.execute("BEGIN TRANSACTION")
    try:
        row = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM engine_runs").fetchone()
        run_id = int(row[0]) if row else 1
        con.execute("INSERT INTO engine_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, run.engine, run.source, run.period or "all", run.basis, run.config_key,
                     datetime.now(UTC).replace(tzinfo=None), run.bytes_processed, run.sql])
        data = [[run_id, *r] for r in rows]
        if data:
            con.executemany(f"INSERT INTO engine_results VALUES ({', '.join('?' * (len(RESULT_COLUMNS) + 1))})", data)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return run_id


def latest_run(con: duckdb.DuckDBPyConnection, engine: str, period: str | None, basis: str, key: str,
               source: str | None) -> int | None:
    """The newest stored run of `engine` over `source` with the same period, basis, config and rules."""
    if source is None:
        return None
    try:
        row = con.execute("SELECT max(run_id) FROM engine_runs WHERE engine = ? AND period = ? AND basis = ? "
                          "AND config_key = ? AND source = ?", [engine, period or "all", basis, key, source]).fetchone()
    except duckdb.CatalogException:
        return None
    return int(row[0]) if row and row[0] is not None else None


def load_run(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """The run's aggregates as the report's temp tables (ba_agg, ba_spot_hours, ba_spot_res, ba_fired)."""
    sel = {
        "ba_agg": "job, team, provider, currency, day, category, signal, n, cost, list_cost, fee_n, priced, "
                  "coalesce(unpriced, 0) AS unpriced, "
                  # runs of older versions have no od_cost: their list cost was the on-demand equivalent
                  "CASE WHEN od_cost IS NOT NULL THEN od_cost WHEN category = 'spot_compute' AND priced > 0 "
                  "THEN list_cost END AS od_cost, account",
        "ba_spot_hours": "job, team, provider, currency, spot_hours",
        "ba_spot_res": "job, team, provider, currency, ResourceId, s, e, account",
        "ba_win": "job, team, provider, currency, category, signal, s, e, n, cost, fee_n, account",
        "ba_fired": "rule_id, category, n AS lines",
    }
    kinds = {"ba_agg": "agg", "ba_spot_hours": "hours", "ba_spot_res": "res", "ba_win": "win", "ba_fired": "rule"}
    # a local report's shares prepared earlier on `con` do not apply; the run's own interruption shares do
    for t in ("ba_k8s_weights", "ba_split_groups"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    k8s_share.load(con, run_id)
    con.execute("ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS unpriced DECIMAL(38,12)")  # runs of older versions
    con.execute("ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS od_cost DECIMAL(38,12)")
    con.execute("ALTER TABLE engine_results ADD COLUMN IF NOT EXISTS account VARCHAR")
    for table, cols in sel.items():
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {cols} FROM engine_results "
                    f"WHERE run_id = {int(run_id)} AND kind = '{kinds[table]}'")
