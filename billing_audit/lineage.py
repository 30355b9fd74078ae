"""Why one line landed where the report put it: its job and team (and which tag, resource majority, resource-map
row or account map gave them), its precedence category, and for a checkpoint re-read or egress line, the restart
window it falls in (or that it is unlinked checkpoint I/O).

Nothing here re-implements the report: the line's period is prepared exactly as ``report`` prepares it
(:func:`billing_audit.rollup.prepare`), the attribution is :func:`billing_audit.rollup.attribution_ctes` run for
the line's attribution key (with the intermediate columns of the same CTEs read back to say why), and the window
test is the condition of :func:`billing_audit.report.window_ctes` itself, applied to the line's own charge period.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb

from billing_audit.categories import CATEGORIES
from billing_audit.config import Config
from billing_audit.errors import BillingAuditError
from billing_audit.report import CHURN_CTES, PREV_EVENTS, prepare_period, store_periods, window_conditions, window_ctes
from billing_audit.rollup import (
    KEY_HASH,
    NO_TAG_RUN,
    UNATTRIBUTED,
    attribution_ctes,
    build_groups,
    completed_tag_run,
    current_groups,
    job_tag_keys,
    like_pattern,
    period_bounds,
    team_tag_keys,
    with_ctes,
)
from billing_audit.sql import lit
from billing_audit.store import Store

CHECKPOINT = ("storage_reread", "checkpoint_egress")
OVERHEAD = {"restart_fee": "restart_fees", "other_compute_charge": "other_compute_charges"}


def precedence(hits: list[dict[str, Any]]) -> str | None:
    """The category that counts a line: the first in CATEGORIES order among its hits (None: no hit)."""
    got = {h["category"] for h in hits}
    return next((c for c in CATEGORIES if c in got), None)


def line_period(store: Store, bps: Any) -> str | None:
    """The period the report computes the line in: None when the store holds one period (the report then runs
    over all lines at once), else the month whose bounds (rollup.period_bounds) hold its billing period start."""
    periods = store_periods(store)
    if len(periods) <= 1 or bps is None:
        return None
    day = str(bps)[:10]
    for p in periods:
        lo, hi = period_bounds(p)
        if lo <= day < hi:
            return p
    return None


def explain_line(store: Store, cfg: Config, line: dict[str, Any], hits: list[dict[str, Any]]) -> dict[str, Any]:
    """{"attribution", "category", "window"} for one line (see the module doc); attribution and window are None
    with ``reason`` when the store has no completed tag run of its lines."""
    category = precedence(hits)
    con = store.con
    if completed_tag_run(con) is None:
        return {"attribution": {"job": None, "team": None, "reason": NO_TAG_RUN}, "category": category,
                "window": None}
    period = line_period(store, line.get("BillingPeriodStart"))
    prepare_period(store, cfg, period, "effective")  # ba_attr, ba_agg, ba_win, ba_spot_res, the previous period's
    # interruptions: the report's own tables
    row = con.execute(f"SELECT {KEY_HASH} FROM line_items l WHERE l.x_LineItemId = ?",
                      [line["x_LineItemId"]]).fetchone()
    assert row is not None
    h = row[0]
    bps = line.get("BillingPeriodStart")
    month = period or (f"{bps + timedelta(days=14):%Y-%m}" if isinstance(bps, datetime) else None)
    attr = _attribution(con, cfg, h, period, month)
    window = None
    if category in CHECKPOINT:
        window = _window(con, cfg, attr, line, category)
    from billing_audit import kubernetes

    shared = kubernetes.explain(con, line, h)
    out = {"attribution": attr, "category": category, "window": window}
    if shared is not None:  # a Kubernetes node's line goes to its pods' jobs in parts, not to one job
        out["kubernetes"] = shared
    return out


def _attribution(con: duckdb.DuckDBPyConnection, cfg: Config, h: int, period: str | None,
                 month: str | None) -> dict[str, Any]:
    """The line's job and team from rollup's attribution CTEs over ``period`` (None: every line, as a report of a
    store holding one period computes it); ``month`` is the billing month shown."""
    a = cfg.attribution
    jkeys, tkeys = job_tag_keys(cfg), team_tag_keys(cfg)
    stored = current_groups(con)
    groups, keys = stored or build_groups(con, 0, temp=True)
    try:
        ctes = attribution_ctes(cfg, groups, keys, period)
        maprow = " ".join(
            f"WHEN k.ResourceId LIKE {lit(like_pattern(r['resource']))} ESCAPE '\\' "
            f"OR k.ResourceName LIKE {lit(like_pattern(r['resource']))} ESCAPE '\\' THEN {i}"
            for i, r in enumerate(cfg.resource_rows, start=1))
        maprow_sql = f"CASE {maprow} END" if maprow else "CAST(NULL AS INTEGER)"
        job_keys = ", ".join(f"NULLIF(TRIM(kk.Tags[{lit(t.lower())}]), '')" for t in jkeys) or "NULL"
        team_keys = ", ".join(f"NULLIF(TRIM(kk.Tags[{lit(t.lower())}]), '')" for t in tkeys) or "NULL"
        final = f"""
SELECT t.job, t.team, k.provider, k.currency, k.ResourceId, k.ResourceName, k.SubAccountId, k.BillingAccountId,
       k.tag_job, k.tag_team, rj.tag_job AS res_job, rt.tag_team AS res_team, {maprow_sql} AS map_row,
       l.line_job, l.line_team, jt.line_team AS job_team,
       (SELECT SUM(x.n) FROM keyed x WHERE x.provider = k.provider AND x.ResourceId = k.ResourceId) AS res_n,
       (SELECT SUM(x.n) FROM keyed x WHERE x.provider = k.provider AND x.ResourceId = k.ResourceId
          AND x.tag_job = rj.tag_job) AS res_job_n,
       (SELECT SUM(x.n) FROM keyed x WHERE x.provider = k.provider AND x.ResourceId = k.ResourceId
          AND x.tag_team = rt.tag_team) AS res_team_n,
       (SELECT SUM(x.n) FROM lined x WHERE x.line_job = l.line_job) AS job_n,
       (SELECT SUM(x.n) FROM lined x WHERE x.line_job = l.line_job AND x.line_team = jt.line_team) AS job_team_n,
       (SELECT [{job_keys}] FROM {keys} kk WHERE kk.h = k.h) AS job_tags,
       (SELECT [{team_keys}] FROM {keys} kk WHERE kk.h = k.h) AS team_tags
FROM keyed k JOIN ba_attr t ON t.h = k.h JOIN lined l ON l.h = k.h
LEFT JOIN res_job rj ON rj.provider = k.provider AND rj.ResourceId = k.ResourceId
LEFT JOIN res_team rt ON rt.provider = k.provider AND rt.ResourceId = k.ResourceId
LEFT JOIN job_team jt ON jt.line_job = l.line_job
WHERE k.h = {int(h)}"""
        cur = con.execute(with_ctes([*ctes, ("q", final)]))
        names = [d[0] for d in cur.description]
        got = cur.fetchone()
        rep = con.execute("SELECT job, team FROM ba_attr WHERE h = ?", [h]).fetchone()
    finally:
        if not stored:
            con.execute("DROP TABLE IF EXISTS ba_line_groups")
            con.execute("DROP TABLE IF EXISTS ba_line_group_keys")
    if got is None or rep is None:
        return {"job": UNATTRIBUTED, "team": UNATTRIBUTED, "reason": "the line has no attribution key in its period"}
    r = dict(zip(names, got, strict=True))
    if (r["job"], r["team"]) != tuple(rep):  # the same SQL twice: cannot differ
        raise BillingAuditError(f"internal: explain attributes the line to {r['job']}/{r['team']}, the report "
                                f"to {rep[0]}/{rep[1]}")
    res = r["ResourceId"]
    tried_job: list[str] = []
    job_from: dict[str, Any]
    if r["tag_job"] is not None:
        key = jkeys[[v is not None for v in r["job_tags"]].index(True)]
        job_from = {"source": "tag", "key": key.lower(), "value": r["tag_job"]}
    else:
        tried_job.append(f"no job tag ({', '.join(a.job_tag_keys)})")
        if a.kubernetes_job_label_keys:
            tried_job.append(f"no Kubernetes job label ({', '.join(a.kubernetes_job_label_keys)})")
        if r["res_job"] is not None:
            job_from = {"source": "resource_majority", "resource": res, "value": r["res_job"],
                        "lines": int(r["res_job_n"]), "of": int(r["res_n"])}
        else:
            tried_job.append(f"no line of resource {res} carries one" if res is not None else "no resource id")
            job_from = _map_from(cfg, r, "job", tried_job)
    team_from: dict[str, Any]
    tried_team: list[str] = []
    if r["line_job"] is not None and r["job_team"] is not None:
        team_from = {"source": "job_majority", "job": r["line_job"], "value": r["job_team"],
                     "lines": int(r["job_team_n"]), "of": int(r["job_n"])}
    else:
        if r["line_job"] is not None:
            tried_team.append(f"no line of job {r['line_job']} has a team")
        team_from = _team_chain(cfg, r, tried_team)
    return {"job": r["job"], "team": r["team"], "period": month, "provider": r["provider"],
            "currency": r["currency"], "job_from": job_from, "team_from": team_from}


def _map_from(cfg: Config, r: dict[str, Any], field: str, tried: list[str]) -> dict[str, Any]:
    """The first matching resource-map row decides (rollup's ``mapped``), even when its field is blank."""
    i = r["map_row"]
    if i is not None:
        row = cfg.resource_rows[i - 1]
        value = row[field].strip().lower() or None
        if value is not None:
            return {"source": "resource_map", "file": cfg.attribution.resource_map, "row": i,
                    "pattern": row["resource"], "value": value}
        tried.append(f"resource-map row {i} ({row['resource']}) matches but gives no {field}")
    elif cfg.resource_rows:
        tried.append(f"no resource-map row matches {r['ResourceId'] or r['ResourceName']} "
                     f"({len(cfg.resource_rows)} rows)")
    else:
        tried.append("no resource map (attribution.resource_map)")
    return {"source": None, "tried": tried}


def _team_chain(cfg: Config, r: dict[str, Any], tried: list[str]) -> dict[str, Any]:
    """The line's own team: its tag, its resource's majority, the map row, then the account map."""
    a = cfg.attribution
    tkeys = team_tag_keys(cfg)
    if r["tag_team"] is not None:
        key = tkeys[[v is not None for v in r["team_tags"]].index(True)]
        return {"source": "tag", "key": key.lower(), "value": r["tag_team"]}
    tried.append(f"no team tag ({', '.join(a.team_tag_keys)})")
    if a.kubernetes_namespace_team:
        tried.append("no Kubernetes namespace")
    if r["res_team"] is not None:
        return {"source": "resource_majority", "resource": r["ResourceId"], "value": r["res_team"],
                "lines": int(r["res_team_n"]), "of": int(r["res_n"])}
    tried.append(f"no line of resource {r['ResourceId']} carries one" if r["ResourceId"] is not None
                 else "no resource id")
    got = _map_from(cfg, r, "team", tried)
    if got["source"] is not None:
        return got
    for col, what in (("SubAccountId", "sub-account"), ("BillingAccountId", "billing account")):
        acct = r[col]
        if acct is not None and acct in a.account_teams and a.account_teams[acct].strip():
            return {"source": "account_teams", "account": acct, "column": col,
                    "value": a.account_teams[acct].strip().lower()}
        tried.append(f"{what} {acct} is not in account_teams" if acct is not None else f"no {what}")
    return {"source": None, "tried": tried}


def _window(con: duckdb.DuckDBPyConnection, cfg: Config, attr: dict[str, Any], line: dict[str, Any],
            category: str) -> dict[str, Any]:
    """Whether the report counts a checkpoint line as interruption overhead: the interruptions of its job row
    whose restart window holds the line's charge period (report.window_ctes), earliest first."""
    s, e = line.get("ChargePeriodStart"), line.get("ChargePeriodEnd")
    linked_as = "storage_reread_cost" if category == "storage_reread" else "checkpoint_egress_cost"
    out: dict[str, Any] = {"linked": False, "counted_as": "checkpoint_io_unlinked", "interruptions": [],
                           "source": None, "periods": None}
    if s is None or e is None or e <= s:
        out["reason"] = "unlinked checkpoint I/O: the line has no charge period to place in a restart window"
        return out
    key = [attr["job"], attr["team"], attr["provider"], attr["currency"]]
    cond, prev = window_conditions(cfg)
    overrides = cfg.window_overrides()
    e_ = cfg.estimates
    periods = overrides.get(attr["job"], e_.restart_window_hourly_periods if (e - s).total_seconds() <= 3600
                            else e_.restart_window_daily_periods)
    out["periods"] = int(periods)
    rows = con.execute(f"""
WITH {CHURN_CTES},
{window_ctes(cfg)},
me AS (SELECT * FROM ck WHERE job = ? AND team = ? AND provider = ? AND currency = ? AND category = ?
       AND s = ? AND e = ?)
SELECT DISTINCT ev.ts, ev.te, FALSE AS before FROM me ck JOIN ev ON {cond}
UNION
SELECT DISTINCT pv.ts, pv.te, TRUE AS before FROM me ck JOIN {PREV_EVENTS} pv ON {prev}
ORDER BY 2, 1""", [*key, category, s, e]).fetchall()
    source = con.execute(f"""
WITH {CHURN_CTES},
{window_ctes(cfg)}
SELECT source FROM src WHERE job = ? AND team = ? AND provider = ? AND currency = ?""", key).fetchone()
    out["source"] = source[0] if source else None
    if not rows:
        if attr["job"] == UNATTRIBUTED:
            why = "the line is attributed to no job, so no interruption of its job opens a window"
        else:
            why = (f"no interruption of {attr['job']} ({attr['team']}, {attr['provider']}, {attr['currency']}; "
                   f"interruptions from {out['source']}) opens a restart window holding its charge period "
                   f"({out['periods']} periods after the interruption's)")
        out["reason"] = "unlinked checkpoint I/O: " + why
        return out
    out.update(linked=True, counted_as=linked_as,
               interruptions=[{"start": ts, "end": te, "source": out["source"], "previous_period": before}
                              for ts, te, before in rows])
    return out
