"""Attribute the hidden interruption overhead to training jobs and teams.

The store does the per-line work in SQL (attribution, categories, sums); polars
holds the small per-job, per-team and per-day results and shapes the outputs.
Nothing here re-reads exports.

Definitions (the README repeats them):

- A line's cost is counted once, under its precedence category (``line_categories``).
- ``interruptions``: restart-fee quantity where the fee's unit counts restarts (else
  one per fee line); else lines that signal an interruption; else inferred from spot
  resource churn; ``interruptions_source`` says which.
- The job's spot hourly cost is spot compute cost / spot hours, where spot hours sum,
  over each distinct charge period of the job's spot lines, the largest usage in hours
  of a line in that period (capped at the period's length).
- ``recompute_cost_estimate`` = interruptions x checkpoint interval / 2 x hourly cost;
  ``restart_idle_cost_estimate`` = interruptions x restart minutes x hourly cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import duckdb
import polars as pl

from billing_audit.config import Config
from billing_audit.errors import BillingAuditError
from billing_audit.rollup import COST_BASES, NO_TAG_RUN, UNATTRIBUTED, completed_tag_run, prepare
from billing_audit.store import PERIOD, Store

MONEY_FIELDS = [
    "spot_compute_cost",
    "on_demand_equivalent_cost",
    "gross_spot_savings",
    "restart_fees",
    "other_compute_charges",
    "storage_reread_cost",
    "checkpoint_egress_cost",
    "recompute_cost_estimate",
    "restart_idle_cost_estimate",
    "hidden_overhead_total",
    "net_spot_savings",
]
JOB_FIELDS = [
    "job", "team", "provider", "currency", "interruptions", "interruptions_source",
    *MONEY_FIELDS[:3], *MONEY_FIELDS[3:], "savings_eroded_pct", "recommendation", "reasons",
]
JOB_EXTRA = ["total_cost", "lines", "spot_hours", "spot_hourly_cost", "spot_unpriced_cost", "spot_cost_priced"]
# measured only over the spot lines with an on-demand equivalent; NULL (n/a) for a job with none
SAVINGS_FIELDS = ("on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings")


@dataclass
class Report:
    period: str
    cost_basis: str
    jobs: pl.DataFrame
    teams: pl.DataFrame
    daily: pl.DataFrame
    totals: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    rules_fired: pl.DataFrame | None = None
    files: pl.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape: money rounded to 4 decimals, as numbers."""
        return {
            "period": self.period,
            "cost_basis": self.cost_basis,
            "jobs": _records(self.jobs),
            "teams": _records(self.teams),
            "daily": _records(self.daily),
            "totals": _records(self.totals),
            "warnings": list(self.warnings),  # what the report cannot vouch for (stale hits, a period not held)
        }


def _round(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v.quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN))
    if isinstance(v, float):
        return round(v, 4)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


def _records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return [{k: _round(v) for k, v in row.items()} for row in df.iter_rows(named=True)]


# Each spot resource's run (when it started and stopped), and the resources that stopped while their
# job ran on with another taking over within 6 hours: the churn that infers interruptions.
CHURN_CTES = """churn AS (
  SELECT a.job, a.team, a.provider, a.currency, CAST(a.e AS DATE) AS day, count(*) AS n
  FROM ba_spot_res a
  WHERE a.e < (SELECT max(z.e) FROM ba_spot_res z WHERE z.job = a.job AND z.provider = a.provider AND z.currency = a.currency)
    AND EXISTS (SELECT 1 FROM ba_spot_res b WHERE b.job = a.job AND b.provider = a.provider AND b.currency = a.currency
                AND b.ResourceId <> a.ResourceId AND b.s >= a.e - INTERVAL 1 HOUR AND b.s <= a.e + INTERVAL 6 HOUR)
  GROUP BY ALL
)"""

JOB_SQL = f"""
WITH {CHURN_CTES},
agg AS (
  SELECT job, team, provider, currency, sum(n) AS lines, sum(cost) AS total_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'spot_compute'), 0) AS spot_compute_cost,
    sum(od_cost) FILTER (WHERE category = 'spot_compute') AS on_demand_equivalent_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'restart_fee'), 0) AS restart_fees,
    coalesce(sum(cost) FILTER (WHERE category = 'other_compute_charge'), 0) AS other_compute_charges,
    coalesce(sum(cost) FILTER (WHERE category = 'storage_reread'), 0) AS storage_reread_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'checkpoint_egress'), 0) AS checkpoint_egress_cost,
    sum(fee_n) AS fee_count,
    coalesce(sum(n) FILTER (WHERE signal), 0) AS signal_count,
    sum(priced) AS priced_spot_lines,
    coalesce(sum(unpriced) FILTER (WHERE category = 'spot_compute'), 0) AS spot_unpriced_cost
  FROM ba_agg GROUP BY ALL
)
SELECT agg.*, coalesce(sh.spot_hours, 0) AS spot_hours,
       coalesce((SELECT sum(n) FROM churn c WHERE c.job = agg.job AND c.team = agg.team AND c.provider = agg.provider
                 AND c.currency = agg.currency), 0) AS churn_count
FROM agg LEFT JOIN ba_spot_hours sh USING (job, team, provider, currency)
"""


def _interruptions(row: dict[str, Any]) -> tuple[Decimal, str]:
    if row["fee_count"]:
        return Decimal(row["fee_count"]), "fee_lines"
    if row["signal_count"]:
        return Decimal(row["signal_count"]), "signals"
    if row["churn_count"]:
        return Decimal(row["churn_count"]), "inferred"
    return Decimal(0), "none"


def _recommend(row: dict[str, Any], cfg: Config) -> tuple[str, list[str]]:
    b = cfg.budgets
    spot, od, overhead = row["spot_compute_cost"], row["on_demand_equivalent_cost"], row["hidden_overhead_total"]
    cur = row["currency"]
    switch: list[str] = []
    review: list[str] = []
    if spot == 0:
        if overhead > 0:
            return "review", [f"no spot compute is attributed here, but {overhead:.2f} {cur} of interruption overhead is"]
        return "keep_spot", ["no spot compute and no interruption overhead"]
    unpriced = row["spot_unpriced_cost"]
    if od is None:
        # no spot line has an on-demand equivalent (the export's, a price reference's or the bill's)
        review.append(f"no on-demand price is known for this job's spot usage ({unpriced:.2f} {cur} of spot cost has "
                      f"no on-demand price in the export, the price references or the bill), so its spot savings "
                      f"cannot be measured: add price references (`billing-audit prices pull {row['provider']}`)")
    elif unpriced:
        review.append(f"{unpriced:.2f} {cur} of spot cost has no on-demand price (neither in the export nor in the "
                      "price references), so it is left out of the measured savings")
    spot -= unpriced  # the comparisons below are over the priced spot lines only
    if spot == 0 or od is None:
        pass
    elif spot + overhead >= od:
        switch.append(f"spot cost plus overhead ({spot + overhead:.2f} {cur}) is at least the on-demand "
                      f"equivalent ({od:.2f} {cur})")
    elif spot + overhead >= od * Decimal("0.8"):
        review.append(f"spot cost plus overhead ({spot + overhead:.2f} {cur}) is within 20% of the on-demand "
                      f"equivalent ({od:.2f} {cur})")
    pct = row["savings_eroded_pct"]
    if b.max_savings_erosion_pct is not None and pct is not None:
        if pct > b.max_savings_erosion_pct:
            switch.append(f"overhead erodes {pct:.1f}% of spot savings (budget {b.max_savings_erosion_pct:g}%)")
        elif pct >= 0.8 * b.max_savings_erosion_pct:
            review.append(f"overhead erodes {pct:.1f}% of spot savings, near the {b.max_savings_erosion_pct:g}% budget")
    fees = row["restart_fees"]
    if b.interruption_fees_per_job is not None and row["job"] != UNATTRIBUTED:
        if fees > b.interruption_fees_per_job:
            switch.append(f"restart fees {fees:.2f} {cur} exceed the budget of {b.interruption_fees_per_job:.2f} per job")
        elif fees >= b.interruption_fees_per_job * Decimal("0.8"):
            review.append(f"restart fees {fees:.2f} {cur} are near the budget of {b.interruption_fees_per_job:.2f} per job")
    if switch:
        return "switch_to_on_demand", switch + review
    if review:
        return "review", review
    saved = row["net_spot_savings"]
    return "keep_spot", [f"spot still saves {saved:.2f} {cur} after {overhead:.2f} {cur} of overhead"]


def _money(x: Decimal) -> Decimal:
    return x.quantize(Decimal("0.000000000001"))


def build_report(store: Store, cfg: Config, period: str | None = None, cost_basis: str = "effective",
                 engine_run: int | None = None) -> Report:
    """The per-job, per-team, per-day and total interruption overhead; from the aggregates an engine
    returned (`engine_run`, see billing_audit.engines) instead of the local lines when given."""
    if cost_basis not in COST_BASES:
        raise BillingAuditError(f"--cost-basis {cost_basis!r}: choose effective, billed or list")
    con = store.con
    if engine_run is not None:
        from billing_audit.engines.pipeline import load_run

        load_run(con, engine_run)
        return _build(store, cfg, period, cost_basis, [], store.sql(
            "SELECT rule_id, category, CAST(sum(lines) AS BIGINT) AS lines FROM ba_fired GROUP BY ALL ORDER BY rule_id"))
    if completed_tag_run(con) is None:  # never tagged, a tag run that failed or was killed, or lines changed since
        raise BillingAuditError(NO_TAG_RUN + " (or `billing-audit audit`)")
    if not store._has_table("line_categories"):  # stores tagged before the view existed
        from billing_audit.ddl import LINE_CATEGORY_VIEW

        con.execute(LINE_CATEGORY_VIEW.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW")
                    if store.read_only else LINE_CATEGORY_VIEW)
    prepare(con, cfg, period, cost_basis)
    return _build(store, cfg, period, cost_basis, [], _rules_fired(store, period))


def _build(store: Store, cfg: Config, period: str | None, cost_basis: str, warnings: list[str],
           rules_fired: pl.DataFrame) -> Report:
    """The report from the aggregate temp tables (ba_agg, ba_spot_hours, ba_spot_res)."""
    con = store.con
    rows = [dict(zip([d[0] for d in cur.description], r, strict=True))
            for cur in [con.execute(JOB_SQL)] for r in cur.fetchall()]
    jobs = []
    for row in rows:
        interruptions, source = _interruptions(row)
        hours = Decimal(str(round(row["spot_hours"], 6)))
        rate = _money(row["spot_compute_cost"] / hours) if hours > 0 else Decimal(0)
        interval, restart = cfg.job_minutes(row["job"])
        est = cfg.estimates.enabled and row["job"] != UNATTRIBUTED
        recompute = _money(interruptions * Decimal(str(interval)) / 2 / 60 * rate) if est else None
        idle = _money(interruptions * Decimal(str(restart)) / 60 * rate) if est else None
        # savings over the priced spot lines only: spot cost without an on-demand equivalent is not a loss of
        # savings, and a job with no priced spot line has no measured savings at all (n/a, never 0 or a loss)
        od = row["on_demand_equivalent_cost"]
        priced_spot = row["spot_compute_cost"] - row["spot_unpriced_cost"]
        gross = None if od is None else od - priced_spot
        overhead = (row["restart_fees"] + row["other_compute_charges"] + row["storage_reread_cost"]
                    + row["checkpoint_egress_cost"] + (recompute or 0) + (idle or 0))
        out = {
            "job": row["job"], "team": row["team"], "provider": row["provider"], "currency": row["currency"],
            "interruptions": interruptions, "interruptions_source": source,
            "spot_compute_cost": row["spot_compute_cost"],
            "on_demand_equivalent_cost": row["on_demand_equivalent_cost"],
            "gross_spot_savings": gross,
            "restart_fees": row["restart_fees"], "other_compute_charges": row["other_compute_charges"],
            "storage_reread_cost": row["storage_reread_cost"], "checkpoint_egress_cost": row["checkpoint_egress_cost"],
            "recompute_cost_estimate": recompute, "restart_idle_cost_estimate": idle,
            "hidden_overhead_total": overhead, "net_spot_savings": None if gross is None else gross - overhead,
            "savings_eroded_pct": float(overhead / gross * 100) if gross is not None and gross > 0 else None,
            "total_cost": row["total_cost"], "lines": row["lines"], "spot_hours": float(hours), "spot_hourly_cost": rate,
            "priced_spot_lines": row["priced_spot_lines"], "spot_unpriced_cost": row["spot_unpriced_cost"],
            "spot_cost_priced": priced_spot,
        }
        out["recommendation"], out["reasons"] = _recommend(out, cfg)
        jobs.append(out)
    jobs_df = _frame(jobs, JOB_FIELDS + JOB_EXTRA).sort(
        ["hidden_overhead_total", "job", "team", "provider", "currency"],
        descending=[True, False, False, False, False], nulls_last=True,
    )
    totals = _totals(con, jobs_df)
    from billing_audit import registry

    warnings = [*warnings, *coverage_warnings(jobs_df, totals, registry.with_part("prices_pull"))]
    return Report(
        period=period or "all",
        cost_basis=cost_basis,
        jobs=jobs_df,
        teams=_teams(jobs_df),
        daily=_daily(con, jobs_df),
        totals=totals,
        warnings=warnings,
        rules_fired=rules_fired,
        files=store.sql(
            "SELECT file, format, provider, periods, rows, status FROM ingest_log ORDER BY ingest_id, file"
        ),
    )


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pl.DataFrame:
    money = set(MONEY_FIELDS) | {"total_cost", "spot_hourly_cost", "spot_unpriced_cost", "spot_cost_priced"}
    schema: dict[str, Any] = {}
    for c in columns:
        if c in money or c == "interruptions":
            schema[c] = pl.Decimal(38, 12)
        elif c in ("savings_eroded_pct", "spot_hours"):
            schema[c] = pl.Float64
        elif c == "lines":
            schema[c] = pl.Int64
        elif c == "reasons":
            schema[c] = pl.List(pl.String)
        else:
            schema[c] = pl.String
    return pl.DataFrame([{c: r.get(c) for c in columns} for r in rows], schema=schema, orient="row")


TEAM_SUMS = ["interruptions", *MONEY_FIELDS, "total_cost"]
COVERAGE_SUMS = ["spot_cost_priced", "spot_unpriced_cost"]


def _sums() -> list[pl.Expr]:
    """Each money field summed; the savings fields only over the jobs whose savings are measured (NULL when
    none is), and the overhead they erode over those same jobs."""
    measured = pl.col("gross_spot_savings").is_not_null()
    out = [pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).otherwise(None).alias(c)
           if c in SAVINGS_FIELDS else pl.col(c).sum() for c in TEAM_SUMS]
    out.append(pl.col("hidden_overhead_total").filter(measured).sum().alias("ba_measured_overhead"))
    return out


def _eroded() -> pl.Expr:
    return (pl.when(pl.col("gross_spot_savings") > 0)
            .then(pl.col("ba_measured_overhead").cast(pl.Float64) / pl.col("gross_spot_savings").cast(pl.Float64) * 100)
            .otherwise(None).alias("savings_eroded_pct"))


def _teams(jobs: pl.DataFrame) -> pl.DataFrame:
    df = jobs.group_by(["team", "currency"]).agg(_sums() + [pl.col("job").n_unique().alias("jobs")])
    df = df.with_columns(_eroded()).drop("ba_measured_overhead")
    return df.sort(["hidden_overhead_total", "team", "currency"], descending=[True, False, False])


def _totals(con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame) -> pl.DataFrame:
    """Per currency; with the savings coverage: the spot cost whose savings are measured, the spot cost without
    an on-demand price, and the share measured (``savings_coverage_pct``)."""
    df = jobs.group_by("currency").agg(
        _sums() + [pl.col(c).sum() for c in COVERAGE_SUMS]
        + [pl.col("lines").sum(),
           pl.col("total_cost").filter(pl.col("job") == UNATTRIBUTED).sum().alias("unattributed_cost")]
    )
    spot = pl.col("spot_cost_priced") + pl.col("spot_unpriced_cost")
    df = df.with_columns(
        _eroded(),
        pl.when(spot > 0).then(pl.col("spot_cost_priced").cast(pl.Float64) / spot.cast(pl.Float64) * 100)
        .otherwise(None).alias("savings_coverage_pct"),
    ).drop("ba_measured_overhead")
    return df.sort("currency")


def coverage_warnings(jobs: pl.DataFrame, totals: pl.DataFrame, pullable: tuple[str, ...] = ()) -> list[str]:
    """Per currency with unpriced spot cost: how much of it the savings are measured for, and what to run."""
    out = []
    for t in totals.iter_rows(named=True):
        if not t["spot_unpriced_cost"]:
            continue
        cur = t["currency"]
        provs = sorted({r["provider"] for r in jobs.filter((pl.col("currency") == cur)
                                                           & (pl.col("spot_unpriced_cost") > 0)).iter_rows(named=True)})
        cov = t["savings_coverage_pct"] or 0.0
        todo = [f"`billing-audit prices pull {p}`" for p in provs if p in pullable]
        other = [p for p in provs if p not in pullable]
        hint = " or ".join(todo)
        if other:
            hint = (hint + " or " if hint else "") + f"`billing-audit prices ingest FILE` ({', '.join(other)})"
        out.append(f"savings measured for {_pct(cov)} of {cur} spot cost; {_pct(100 - cov)} unpriced: run {hint}")
    return out


def _pct(x: float) -> str:
    """A share as a whole percent, never rounded to 0% or 100% when it is not."""
    r = round(x)
    if r == 0 and x > 0:
        return "<1%"
    if r == 100 and x < 100:
        return ">99%"
    return f"{r}%"


def _daily(con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame) -> pl.DataFrame:
    """Per job and day: interruptions (from the job's source) and overhead; spikes over 3x the median day."""
    rows = con.execute(
        f"""
        WITH d AS (
          SELECT job, provider, currency, day,
            sum(fee_n) AS fees,
            coalesce(sum(n) FILTER (WHERE signal), 0) AS signals,
            coalesce(sum(cost) FILTER (WHERE category IN ('restart_fee', 'other_compute_charge', 'storage_reread',
                                                          'checkpoint_egress')), 0) AS overhead,
            bool_or(category = 'spot_compute') AS ran
          FROM ba_agg WHERE day IS NOT NULL AND job <> '{UNATTRIBUTED}' GROUP BY ALL
        ),
        {CHURN_CTES}
        SELECT d.*, coalesce(c.n, 0) AS churn FROM d
        LEFT JOIN (SELECT job, provider, currency, day, sum(n) AS n FROM churn GROUP BY ALL) c
          USING (job, provider, currency, day)
        ORDER BY job, provider, currency, day
        """
    ).fetchall()
    source = {(r["job"], r["provider"], r["currency"]): r["interruptions_source"] for r in jobs.iter_rows(named=True)}
    out: list[dict[str, Any]] = []
    for job, provider, currency, day, fees, signals, overhead, ran, churn in rows:
        src = source.get((job, provider, currency), "none")
        n = {"fee_lines": fees or 0, "signals": signals, "inferred": churn}.get(src, 0)
        out.append({"job": job, "provider": provider, "currency": currency, "day": day,
                    "interruptions": Decimal(n), "overhead": overhead, "ran": bool(ran)})
    df = pl.DataFrame(out, schema={"job": pl.String, "provider": pl.String, "currency": pl.String, "day": pl.Date,
                                   "interruptions": pl.Decimal(38, 12), "overhead": pl.Decimal(38, 12),
                                   "ran": pl.Boolean}, orient="row")
    if df.is_empty():
        return df.drop("ran").with_columns(pl.lit(False).alias("spike"))
    median = (df.filter(pl.col("ran") | (pl.col("interruptions") > 0))
              .group_by(["job", "provider", "currency"])
              .agg(pl.col("interruptions").cast(pl.Float64).median().alias("median")))
    df = df.join(median, on=["job", "provider", "currency"], how="left")
    df = df.with_columns(
        (pl.col("interruptions").cast(pl.Float64) > 3 * pl.max_horizontal(pl.col("median").fill_null(0), pl.lit(1.0)))
        .alias("spike")
    )
    return df.drop(["ran", "median"])


def _rules_fired(store: Store, period: str | None) -> pl.DataFrame:
    if period is None:
        return store.sql("SELECT rule_id, category, count(*) AS lines FROM rule_hits GROUP BY ALL ORDER BY rule_id")
    return store.sql(
        "SELECT h.rule_id, h.category, count(*) AS lines FROM rule_hits h JOIN line_items l USING (x_LineItemId) "
        f"WHERE strftime({PERIOD.replace('BillingPeriodStart', 'l.BillingPeriodStart')}, '%Y-%m') = $period "
        "GROUP BY ALL ORDER BY rule_id",
        {"period": period},
    )


def store_periods(store: Store) -> list[str]:
    """Billing months present in the store, oldest first (from the slices ingest keeps: no scan of the lines;
    a slice's BillingPeriodStart is already its month)."""
    rows = store.con.execute("SELECT DISTINCT strftime(BillingPeriodStart, '%Y-%m') AS p FROM slices WHERE rows > 0 "
                             "ORDER BY p").fetchall()
    return [r[0] for r in rows if r[0]]
