"""Attribute the hidden interruption overhead to training jobs and teams.

The store does the per-line work in SQL (attribution, categories, sums); the small per-job, per-team and per-day
results are rows of exact Decimals, summed and sorted here, from which every output is made: the JSON straight from
the rows, the other formats from polars frames of them (``Report.jobs`` etc., made on first use, so the JSON report
never imports polars).  Nothing here re-reads exports.

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
- Re-reads and egress are overhead only inside a restart window of the job row (``window_ctes``; windows of the
  previous billing period's interruptions too, ``_carry``); outside, ``checkpoint_io_unlinked``.
- By billing account (``_account_rows``, for ``export --by team,account``): each job row split by the account of
  its lines, its estimates shared by the account's interruptions; the parts sum to the job row exactly.
- One computation per period: all periods = the sum of the per-period rows (``_combine``); savings come from
  ``measured_savings`` only; advice and budgets in ``_recommend``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import duckdb

from billing_audit import kubernetes
from billing_audit.config import Config
from billing_audit.errors import BillingAuditError
from billing_audit.jsonout import envelope, money, plain
from billing_audit.rollup import (
    COST_BASES,
    NO_TAG_RUN,
    UNATTRIBUTED,
    completed_tag_run,
    current_groups,
    period_filter,
    prepare,
)
from billing_audit.sql import lit
from billing_audit.store import PERIOD, Store, has_relation

if TYPE_CHECKING:
    import polars as pl

MONEY_FIELDS = [
    "spot_compute_cost",
    "on_demand_equivalent_cost",
    "gross_spot_savings",
    "restart_fees",
    "other_compute_charges",
    "storage_reread_cost",
    "checkpoint_egress_cost",
    "billed_interruption_overhead",
    "recompute_cost_estimate",
    "restart_idle_cost_estimate",
    "estimated_interruption_overhead",
    "hidden_overhead_total",
    "checkpoint_io_unlinked",
    "net_spot_savings",
]
JOB_FIELDS = [
    "job", "team", "provider", "currency", "interruptions", "interruptions_source",
    *MONEY_FIELDS[:3], *MONEY_FIELDS[3:], "savings_eroded_pct", "recommendation", "over_budget", "budget_breaches",
    "reasons",
]
JOB_EXTRA = ["total_cost", "lines", "spot_hours", "spot_hourly_cost", "spot_unpriced_cost", "spot_cost_priced"]
# The finance columns, in this order in every CSV and export (report --format csv, audit's jobs.csv and teams.csv,
# export): after the row's keys (period, then job/team/provider/currency as the file is grouped).
FINANCE_COLUMNS = [
    "interruptions", "restart_fees", "other_compute_charges", "storage_reread_cost", "checkpoint_egress_cost",
    "billed_interruption_overhead", "recompute_cost_estimate", "restart_idle_cost_estimate",
    "estimated_interruption_overhead", "hidden_overhead_total", "checkpoint_io_unlinked", "spot_compute_cost",
    "on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings", "total_cost",
]


TEAM_SUMS = ["interruptions", *MONEY_FIELDS, "total_cost"]
COVERAGE_SUMS = ["spot_cost_priced", "spot_unpriced_cost"]
ACCOUNT_KEY = ["job", "team", "provider", "currency", "account"]
ACCOUNT_COLUMNS = [*ACCOUNT_KEY, *FINANCE_COLUMNS]
# The columns of each table of a report, in order (the JSON's keys, the frames' columns).
JOB_COLUMNS = [*JOB_FIELDS, *JOB_EXTRA]
TEAM_COLUMNS = ["team", "currency", *TEAM_SUMS, "jobs", "savings_eroded_pct"]
TOTAL_COLUMNS = ["currency", *TEAM_SUMS, *COVERAGE_SUMS, "lines", "unattributed_cost", "savings_eroded_pct",
                 "savings_coverage_pct"]
DAILY_COLUMNS = ["job", "provider", "currency", "day", "interruptions", "overhead", "spot_cost", "on_demand_cost",
                 "spot_unpriced_cost", "spike"]
FILE_COLUMNS = ["file", "format", "provider", "periods", "rows", "status"]
DECIMAL_COLUMNS = {*MONEY_FIELDS, "interruptions", "total_cost", "spot_hourly_cost", "spot_unpriced_cost",
                   "spot_cost_priced", "unattributed_cost", "overhead", "spot_cost", "on_demand_cost"}
FLOAT_COLUMNS = {"savings_eroded_pct", "savings_coverage_pct", "spot_hours"}
INT_COLUMNS = {"lines", "rows", "jobs"}
LIST_COLUMNS = {"reasons", "budget_breaches"}
BOOL_COLUMNS = {"over_budget", "spike"}
TEXT_COLUMNS = {"job", "team", "provider", "currency", "interruptions_source", "recommendation", "account", "file",
                "format", "periods", "status"}


class _Table:
    """A table of a :class:`Report` as a polars frame: made from the table's rows (``rows``, the columns
    ``columns``) on first use and kept.  Setting a frame makes its rows the table's (its columns too): the JSON
    and every other output then show that frame."""

    def __init__(self, rows: str, columns: list[str]):
        self.rows, self.columns = rows, columns

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def _get(self, obj: Report) -> pl.DataFrame | None:
        frames = obj._frames
        if self.name not in frames:
            rows = getattr(obj, self.rows)
            frames[self.name] = None if rows is None else frame(rows, obj._columns.get(self.name, self.columns))
        found: pl.DataFrame | None = frames[self.name]
        return found

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Table: ...
    @overload
    def __get__(self, obj: Report, objtype: type | None = None) -> pl.DataFrame: ...

    def __get__(self, obj: Report | None, objtype: type | None = None) -> pl.DataFrame | _Table:
        if obj is None:
            return self
        df = self._get(obj)
        assert df is not None, self.name  # the four tables always have rows
        return df

    def __set__(self, obj: Report, df: pl.DataFrame | None) -> None:
        setattr(obj, self.rows, None if df is None else df.to_dicts())
        obj._frames[self.name] = df
        if df is not None:
            obj._columns[self.name] = list(df.columns)


class _OptionalTable(_Table):
    """A table a report may not have (None): the files ingested, the rows by billing account."""

    @overload  # type: ignore[override]
    def __get__(self, obj: None, objtype: type | None = None) -> _OptionalTable: ...
    @overload
    def __get__(self, obj: Report, objtype: type | None = None) -> pl.DataFrame | None: ...

    def __get__(self, obj: Report | None, objtype: type | None = None) -> pl.DataFrame | None | _OptionalTable:
        return self if obj is None else self._get(obj)


@dataclass
class Report:
    """A report: its tables as rows (exact Decimals; ``job_rows`` etc.), and as polars frames made from them on
    first use (``jobs``, ``teams``, ``daily``, ``totals``, ``files``, ``accounts``)."""

    period: str
    cost_basis: str
    job_rows: list[dict[str, Any]]
    team_rows: list[dict[str, Any]]
    daily_rows: list[dict[str, Any]]
    total_rows: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    rules_fired: pl.DataFrame | None = None
    file_rows: list[dict[str, Any]] | None = None
    # the job rows by billing account (ACCOUNT_COLUMNS): export --by ...account
    account_rows: list[dict[str, Any]] | None = None

    engine: str = "duckdb"  # what computed the aggregates (an engine run's engine, else the local store)
    # restart fees against the interruption events held (billing_audit.reconcile; its JSON); None: not reconciled
    fee_reconciliation: dict[str, Any] | None = None
    _frames: dict[str, Any] = field(init=False, default_factory=dict, repr=False, compare=False)
    _columns: dict[str, list[str]] = field(init=False, default_factory=dict, repr=False, compare=False)

    jobs = _Table("job_rows", JOB_COLUMNS)
    teams = _Table("team_rows", TEAM_COLUMNS)
    daily = _Table("daily_rows", DAILY_COLUMNS)
    totals = _Table("total_rows", TOTAL_COLUMNS)
    files = _OptionalTable("file_rows", FILE_COLUMNS)
    accounts = _OptionalTable("account_rows", ACCOUNT_COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (:mod:`billing_audit.jsonout`): the envelope (``kind: "report"``, ``filters``: the
        period asked for or null, the cost basis, the engine), then the rows.  Money is an exact decimal string
        (``jsonout.money``), counts are integers (``interruptions``, ``lines``, ``jobs``), percentages and hours
        numbers, n/a null (the row's ``reasons`` say why a saving is not measured)."""
        filters = {"period": None if self.period == "all" else self.period, "cost_basis": self.cost_basis,
                   "engine": self.engine}
        doc = envelope("report", filters, period=self.period, cost_basis=self.cost_basis,
                       warnings=list(self.warnings))  # what the report cannot vouch for (stale hits, a period not held)
        # the rows are JSON values already (json_rows): not walked again by envelope's plain
        doc.update(totals=self._json("totals", self.total_rows, TOTAL_COLUMNS),
                   jobs=self._json("jobs", self.job_rows, JOB_COLUMNS),
                   teams=self._json("teams", self.team_rows, TEAM_COLUMNS),
                   daily=self._json("daily", self.daily_rows, DAILY_COLUMNS))
        doc["fee_reconciliation"] = plain(self.fee_reconciliation)
        return doc

    def _json(self, name: str, rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
        return json_rows(rows, self._columns.get(name, columns))


COUNT_FIELDS = {"interruptions", "lines", "jobs", "fee_count", "signal_count", "churn_count"}
RATIO_PLACES = 4  # percentages and hours: numbers, to 4 decimals (money is never rounded)


def _value(key: str, v: Any) -> Any:
    """One field as the JSON has it: money an exact decimal string, a count an integer (a restart fee quantity
    that is not whole stays exact, as a decimal string), a percentage or hours a number, dates ISO 8601."""
    if isinstance(v, Decimal):
        if key in COUNT_FIELDS:
            return int(v) if v == v.to_integral_value() else format(v.normalize(), "f")
        return money(v)
    if isinstance(v, float):
        return round(v, RATIO_PLACES)
    return plain(v)


def _cell(key: str, v: Any) -> Any:
    """A cell of a report table as its column's type has it (what its frame holds): Decimal columns Decimal,
    counts int, percentages and hours float."""
    if v is None:
        return None
    if key in DECIMAL_COLUMNS:
        return v if isinstance(v, Decimal) else Decimal(str(v))
    if key in FLOAT_COLUMNS:
        return float(v)
    if key in INT_COLUMNS:
        return int(v)
    return v


def _json_cell(key: str) -> Callable[[Any], Any] | None:
    """What makes a (non-null) cell of column `key` its JSON value: ``_value(key, _cell(key, v))``, straight for
    the common columns; None: the cell is its JSON value already (text and flags)."""
    if key in TEXT_COLUMNS or key in BOOL_COLUMNS:
        return None
    if key in DECIMAL_COLUMNS and key not in COUNT_FIELDS:
        return lambda v: money(v if isinstance(v, Decimal) else Decimal(str(v)))
    return lambda v: _value(key, _cell(key, v))


def json_rows(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """Report rows (jobs, teams, totals, daily) as JSON objects of `columns` (:func:`_value`), as their frames
    have them (:func:`_cell`): the JSON and the frames show the same values."""
    cells = [(c, _json_cell(c)) for c in columns]
    out = []
    for r in rows:
        row = {}
        for c, f in cells:
            v = r.get(c)
            row[c] = v if f is None or v is None else f(v)
        out.append(row)
    return out


def json_records(df: pl.DataFrame) -> list[dict[str, Any]]:
    """A frame of report rows (finance rows: export --format json) as JSON objects (:func:`_value`).
    Text, whole-number and flag columns are as JSON has them already: their cells skip the conversion."""
    import polars as pl

    same = [c for c, t in df.schema.items() if t == pl.String or t == pl.Boolean or t.is_integer()]
    convert = [c for c in df.columns if c not in same]
    rows = []
    for row in df.iter_rows(named=True):
        for k in convert:
            row[k] = _value(k, row[k])
        rows.append(row)
    return rows


def frame(rows: list[dict[str, Any]], columns: list[str]) -> pl.DataFrame:
    """Report rows as a polars frame of `columns`, typed by column (Decimal(38, 12) for money and counts that
    may be fractional, Float64 for percentages and hours, lists of text for reasons and breaches)."""
    import polars as pl

    schema: dict[str, Any] = {}
    for c in columns:
        if c in DECIMAL_COLUMNS:
            schema[c] = pl.Decimal(38, 12)
        elif c in FLOAT_COLUMNS:
            schema[c] = pl.Float64
        elif c in INT_COLUMNS:
            schema[c] = pl.UInt32 if c == "jobs" else pl.Int64
        elif c in LIST_COLUMNS:
            schema[c] = pl.List(pl.String)
        elif c in BOOL_COLUMNS:
            schema[c] = pl.Boolean
        elif c == "day":
            schema[c] = pl.Date
        else:
            schema[c] = pl.String
    return pl.DataFrame([[_cell(c, r.get(c)) for c in columns] for r in rows], schema=schema, orient="row")


# Each spot resource's run (when it started and stopped), and the resources that stopped while their
# job ran on with another taking over within 6 hours: the churn that infers interruptions (one at each stop).
STOPPED_CTE = """stopped AS (
  SELECT a.job, a.team, a.provider, a.currency, a.e, a.account
  FROM ba_spot_res a
  WHERE a.e < (SELECT max(z.e) FROM ba_spot_res z WHERE z.job = a.job AND z.provider = a.provider AND z.currency = a.currency)
    AND EXISTS (SELECT 1 FROM ba_spot_res b WHERE b.job = a.job AND b.provider = a.provider AND b.currency = a.currency
                AND b.ResourceId <> a.ResourceId AND b.s >= a.e - INTERVAL 1 HOUR AND b.s <= a.e + INTERVAL 6 HOUR)
)"""
CHURN_CTES = STOPPED_CTE + """,
churn AS (SELECT job, team, provider, currency, CAST(e AS DATE) AS day, count(*) AS n FROM stopped GROUP BY ALL)"""
ROW_KEY = "job, team, provider, currency"
PREV_EVENTS = "ba_prev_ev"  # the previous billing period's interruptions (job row, ts, te), see _carry


def _window_periods(cfg: Config, job: str, length: str) -> str:
    """N, the charge periods after an interruption's that its restart window holds, for a checkpoint line of job
    ``job`` and charge period length ``length`` (microseconds): the job's own, else by the line's granularity."""
    e = cfg.estimates
    overrides = cfg.window_overrides()
    default = (f"CASE WHEN {length} <= 3600000000 THEN {int(e.restart_window_hourly_periods)} "
               f"ELSE {int(e.restart_window_daily_periods)} END")
    return (f"CASE {job} " + " ".join(f"WHEN {lit(j)} THEN {int(n)}" for j, n in overrides.items())
            + f" ELSE {default} END") if overrides else default


def window_conditions(cfg: Config) -> tuple[str, str]:
    """The restart-window test of a checkpoint group ``ck`` (charge period [s, e), length L): linked by an
    interruption ``ev`` of the same job row whose charge period [ts, te) overlaps [s - N x L, e), and by one of
    the previous billing period's (``pv``, PREV_EVENTS: same job, provider and currency; the team too for the
    unattributed row).  In whole microseconds (``ck`` of :func:`_link_ctes` carries ``e_us``, ``l`` = L and
    ``lo`` = s - N x L; interval arithmetic per pair cost twice as much).  One definition, used by
    :func:`window_ctes` and by ``explain``."""
    same = " AND ".join(f"ev.{c} = ck.{c}" for c in ("job", "team", "provider", "currency"))
    this = f"{same} AND ck.lo < epoch_us(ev.te) AND ck.e_us > coalesce(epoch_us(ev.ts), epoch_us(ev.te) - ck.l)"
    prev = (f"pv.job = ck.job AND pv.provider = ck.provider AND pv.currency = ck.currency "
            f"AND (pv.team = ck.team OR ck.job <> '{UNATTRIBUTED}') "
            "AND ck.lo < epoch_us(pv.te) AND ck.e_us > coalesce(epoch_us(pv.ts), epoch_us(pv.te) - ck.l)")
    return this, prev


SRC_CTE = f"""src AS (
  SELECT {ROW_KEY},
    CASE WHEN coalesce(sum(fee_n), 0) <> 0 THEN 'fee_lines'
         WHEN coalesce(sum(n) FILTER (WHERE signal), 0) <> 0 THEN 'signals' ELSE 'inferred' END AS source
  FROM ba_agg GROUP BY ALL
)"""
EV_CTE = f"""ev AS (
  SELECT w.job, w.team, w.provider, w.currency, w.s AS ts, w.e AS te FROM ba_win w JOIN src USING ({ROW_KEY})
  WHERE src.source = 'fee_lines' AND w.category = 'restart_fee' AND coalesce(w.fee_n, 0) <> 0
    AND w.s IS NOT NULL AND w.e IS NOT NULL
  UNION ALL
  SELECT w.job, w.team, w.provider, w.currency, w.s, w.e FROM ba_win w JOIN src USING ({ROW_KEY})
  WHERE src.source = 'signals' AND w.signal AND w.s IS NOT NULL AND w.e IS NOT NULL
  UNION ALL
  SELECT st.job, st.team, st.provider, st.currency, CAST(NULL AS TIMESTAMP), st.e FROM stopped st JOIN src USING ({ROW_KEY})
  WHERE src.source = 'inferred'
)"""


def _link_ctes(cfg: Config) -> str:
    """``ck`` and ``lk`` of :func:`window_ctes` (after ``ev``): ``lk`` is the groups linked with this period's
    interruptions, then those linked only with the previous period's (a semi join each: one test per pair)."""
    this, prev = window_conditions(cfg)
    length = "(epoch_us(w.e) - epoch_us(w.s))"
    row = "ck.job, ck.team, ck.provider, ck.currency, ck.category, CAST(ck.s AS DATE) AS day, ck.cost, ck.account"
    return f"""ck AS (
  SELECT w.job, w.team, w.provider, w.currency, w.category, w.s, w.e, w.cost, w.account,
         epoch_us(w.e) AS e_us, {length} AS l, epoch_us(w.s) - {length} * ({_window_periods(cfg, "w.job", length)}) AS lo
  FROM ba_win w
  WHERE w.category IN ('storage_reread', 'checkpoint_egress') AND w.s IS NOT NULL AND w.e IS NOT NULL AND w.e > w.s
),
lk AS (
  SELECT {row} FROM ck SEMI JOIN ev ON {this}
  UNION ALL
  SELECT {row} FROM (SELECT * FROM ck ANTI JOIN ev ON {this}) ck SEMI JOIN {PREV_EVENTS} pv ON {prev}
)"""


def window_ctes(cfg: Config) -> str:
    """Restart windows, after CHURN_CTES: ``src`` (each job row's interruption source, as _interruptions picks
    it), ``ev`` (its interruptions' charge periods from that source: fee lines, signal lines, or the stop of a
    churned resource, a moment that ends the charge period holding it), ``lk`` (the checkpoint re-read and egress
    groups inside a window: a checkpoint line of charge period [s, e) and length L is linked when an interruption
    of the same job row, provider and currency has its charge period [ts, te) overlapping [s - N x L, e), i.e. the
    line's period is the interruption's or one of the N after it)."""
    return f"{SRC_CTE},\n{EV_CTE},\n{_link_ctes(cfg)}"


# What the job rows, the daily rows and the account rows of a prepared period read: computed once, by _windows.
FROM_WINDOWS = "stopped AS (SELECT * FROM ba_stopped), churn AS (SELECT * FROM ba_churn), lk AS (SELECT * FROM ba_lk)"


def _windows(con: duckdb.DuckDBPyConnection, cfg: Config, links: bool = True) -> None:
    """The churn and restart windows of the period prepared on `con`, once, as temp tables: ``ba_stopped`` (the
    churned stops), ``ba_churn`` (per job row and day), ``ba_src`` (each job row's interruption source), ``ba_ev``
    (its interruptions, what _carry hands to the next period) and, unless not ``links``, ``ba_lk`` (the linked
    checkpoint re-reads and egress, against PREV_EVENTS as set now)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_stopped AS WITH {STOPPED_CTE} SELECT * FROM stopped")
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_src AS WITH {SRC_CTE} SELECT * FROM src")
    con.execute("CREATE OR REPLACE TEMP TABLE ba_ev AS WITH stopped AS (SELECT * FROM ba_stopped), "
                f"src AS (SELECT * FROM ba_src), {EV_CTE} SELECT * FROM ev")
    if links:
        con.execute("CREATE OR REPLACE TEMP TABLE ba_churn AS SELECT job, team, provider, currency, "
                    "CAST(e AS DATE) AS day, count(*) AS n FROM ba_stopped GROUP BY ALL")
        con.execute(f"CREATE OR REPLACE TEMP TABLE ba_lk AS WITH ev AS (SELECT * FROM ba_ev), {_link_ctes(cfg)} "
                    "SELECT * FROM lk")


def _no_prev(con: duckdb.DuckDBPyConnection) -> None:
    """No previous period's interruptions to link with (the first period, or a report of one engine run)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {PREV_EVENTS} (job VARCHAR, team VARCHAR, provider VARCHAR, "
                "currency VARCHAR, ts TIMESTAMP, te TIMESTAMP)")


def _carry(con: duckdb.DuckDBPyConnection) -> None:
    """The interruptions of the period prepared on `con` (its own, from its own source: ``ba_ev`` of _windows) as
    the next period's PREV_EVENTS: a restart at 23:00 on the last day of a month links the re-read at 00:00 on
    the 1st."""
    con.execute("CREATE OR REPLACE TEMP TABLE ba_next_ev AS SELECT job, team, provider, currency, ts, te FROM ba_ev")
    con.execute(f"DROP TABLE IF EXISTS {PREV_EVENTS}")
    con.execute(f"ALTER TABLE ba_next_ev RENAME TO {PREV_EVENTS}")


PREV_SKIP = ("ba_spot_hours",)  # what the previous period's interruptions do not need


def prepare_period(store: Store, cfg: Config, period: str | None, basis: str,
                   current: tuple[str, str] | None = None) -> None:
    """The aggregates of `period` on the store's connection (rollup.prepare), with PREV_EVENTS set to the
    previous billing period's interruptions when the store holds that period (else empty): what a report of
    one period computes, and what ``explain`` places a line with.  ``current``: the stored groups, current
    (rollup.current_groups, when the caller looked; None: each prepare looks)."""
    con = store.con
    _no_prev(con)
    if period is not None and previous_period(period) in store_periods(store):
        prepare(con, cfg, previous_period(period), basis, skip=PREV_SKIP, sources_only=True,  # its interruptions
                current=current)
        _windows(con, cfg, links=False)
        _carry(con)
    prepare(con, cfg, period, basis, current=current)
    _windows(con, cfg)


def previous_period(period: str) -> str:
    """The billing month before `period` (YYYY-MM)."""
    try:
        y, m = (int(x) for x in period.split("-"))
    except ValueError:
        raise BillingAuditError(f"--period {period!r}: expected YYYY-MM") from None
    return f"{y - 1}-12" if m == 1 else f"{y}-{m - 1:02d}"


def job_sql(cfg: Config) -> str:
    """One row per job, team, provider and currency from the aggregates: the categories' sums, re-reads and egress
    split into linked (in a restart window: interruption overhead) and unlinked (ordinary checkpointing)."""
    return f"""
WITH {FROM_WINDOWS},
linked AS (
  SELECT {ROW_KEY},
    coalesce(sum(cost) FILTER (WHERE category = 'storage_reread'), 0) AS reread_linked,
    coalesce(sum(cost) FILTER (WHERE category = 'checkpoint_egress'), 0) AS egress_linked
  FROM lk GROUP BY ALL
),
agg AS (
  SELECT {ROW_KEY}, sum(n) AS lines, sum(cost) AS total_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'spot_compute'), 0) AS spot_compute_cost,
    sum(od_cost) FILTER (WHERE category = 'spot_compute') AS on_demand_equivalent_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'restart_fee'), 0) AS restart_fees,
    coalesce(sum(cost) FILTER (WHERE category = 'other_compute_charge'), 0) AS other_compute_charges,
    coalesce(sum(cost) FILTER (WHERE category = 'storage_reread'), 0) AS reread_all,
    coalesce(sum(cost) FILTER (WHERE category = 'checkpoint_egress'), 0) AS egress_all,
    sum(fee_n) AS fee_count,
    coalesce(sum(n) FILTER (WHERE signal), 0) AS signal_count,
    sum(priced) AS priced_spot_lines,
    coalesce(sum(unpriced) FILTER (WHERE category = 'spot_compute'), 0) AS spot_unpriced_cost
  FROM ba_agg GROUP BY ALL
)
SELECT agg.* EXCLUDE (reread_all, egress_all),
       coalesce(lnk.reread_linked, 0) AS storage_reread_cost, coalesce(lnk.egress_linked, 0) AS checkpoint_egress_cost,
       agg.reread_all + agg.egress_all - coalesce(lnk.reread_linked, 0) - coalesce(lnk.egress_linked, 0)
         AS checkpoint_io_unlinked,
       coalesce(sh.spot_hours, 0) AS spot_hours,
       coalesce((SELECT sum(n) FROM churn c WHERE c.job = agg.job AND c.team = agg.team AND c.provider = agg.provider
                 AND c.currency = agg.currency), 0) AS churn_count
FROM agg LEFT JOIN ba_spot_hours sh USING ({ROW_KEY}) LEFT JOIN linked lnk USING ({ROW_KEY})
"""


def account_sql(cfg: Config) -> str:
    """Per job row and billing account: the sums a job row is made of, with the interruptions of each source
    (fee quantity, signal lines, churned resources) to share the row's estimates by."""
    return f"""
WITH {FROM_WINDOWS},
linked AS (
  SELECT {ROW_KEY}, account,
    coalesce(sum(cost) FILTER (WHERE category = 'storage_reread'), 0) AS reread_linked,
    coalesce(sum(cost) FILTER (WHERE category = 'checkpoint_egress'), 0) AS egress_linked
  FROM lk GROUP BY ALL
),
ch AS (SELECT {ROW_KEY}, account, count(*) AS churn_count FROM stopped GROUP BY ALL),
agg AS (
  SELECT {ROW_KEY}, account, sum(cost) AS total_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'spot_compute'), 0) AS spot_compute_cost,
    sum(od_cost) FILTER (WHERE category = 'spot_compute') AS on_demand_equivalent_cost,
    coalesce(sum(cost) FILTER (WHERE category = 'restart_fee'), 0) AS restart_fees,
    coalesce(sum(cost) FILTER (WHERE category = 'other_compute_charge'), 0) AS other_compute_charges,
    coalesce(sum(cost) FILTER (WHERE category IN ('storage_reread', 'checkpoint_egress')), 0) AS ckpt_all,
    coalesce(sum(fee_n), 0) AS fee_count,
    coalesce(sum(n) FILTER (WHERE signal), 0) AS signal_count,
    coalesce(sum(unpriced) FILTER (WHERE category = 'spot_compute'), 0) AS spot_unpriced_cost
  FROM ba_agg GROUP BY ALL
)
SELECT agg.* EXCLUDE (ckpt_all),
       coalesce(lnk.reread_linked, 0) AS storage_reread_cost, coalesce(lnk.egress_linked, 0) AS checkpoint_egress_cost,
       agg.ckpt_all - coalesce(lnk.reread_linked, 0) - coalesce(lnk.egress_linked, 0) AS checkpoint_io_unlinked,
       coalesce(ch.churn_count, 0) AS churn_count
FROM agg LEFT JOIN linked lnk ON {" AND ".join(f"lnk.{c} IS NOT DISTINCT FROM agg.{c}" for c in ACCOUNT_KEY)}
LEFT JOIN ch ON {" AND ".join(f"ch.{c} IS NOT DISTINCT FROM agg.{c}" for c in ACCOUNT_KEY)}
ORDER BY {ROW_KEY}, account NULLS LAST
"""


ACCOUNT_SUMS = ["spot_compute_cost", "spot_unpriced_cost", "restart_fees", "other_compute_charges",
                "storage_reread_cost", "checkpoint_egress_cost", "checkpoint_io_unlinked", "total_cost"]


def _account_rows(con: duckdb.DuckDBPyConnection, cfg: Config, jobs: list[dict[str, Any]],
                  events: dict[tuple[Any, ...], Decimal]) -> list[dict[str, Any]]:
    """The job rows of the aggregates on `con` split by billing account, every finance column summing back to its
    job row exactly: sums straight from the lines; the job's interruptions counted per account from the job's own
    source; its estimates shared by those interruptions (the last account of the row takes the remainder, so the
    parts add up to the cent and below); savings and overhead derived per account as per job.  `events`: the
    interruption events counted (:func:`event_counts`, once for the job rows and these)."""
    cur = con.execute(account_sql(cfg))
    names = [d[0] for d in cur.description]
    parts: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        parts.setdefault((row["job"], row["team"], row["provider"], row["currency"]), []).append(row)
    out: list[dict[str, Any]] = []
    for rows_ in parts.values():
        for r in rows_:
            r["event_count"] = events.get(tuple(r[c] for c in ACCOUNT_KEY), Decimal(0))
    for job in jobs:
        rows = parts.get((job["job"], job["team"], job["provider"], job["currency"]), [])
        field = {"events": "event_count", "fee_lines": "fee_count", "signals": "signal_count",
                 "inferred": "churn_count"}.get(job["interruptions_source"])
        counts = [Decimal(r[field] or 0) if field else Decimal(0) for r in rows]
        shares = _shares(job["interruptions"], counts)
        for est in ("recompute_cost_estimate", "restart_idle_cost_estimate"):
            total = job[est]
            split: list[Decimal | None] = list(_split(total, shares)) if total is not None else [None] * len(rows)
            for part, v in zip(rows, split, strict=True):
                part[est] = v
        for part, n in zip(rows, counts, strict=True):
            part["interruptions"] = n
            out.append(_finance(part))
    return out


def _shares(total: Decimal, counts: list[Decimal]) -> list[Decimal]:
    """Each part's share of `total` (equal shares when nothing is counted per part)."""
    if not counts:
        return []
    if total and sum(counts, Decimal(0)) == total:
        return [c / total for c in counts]
    return [Decimal(1) / len(counts)] * len(counts)


def _split(total: Decimal, shares: list[Decimal]) -> list[Decimal]:
    """`total` in parts by `shares`, each to 12 places, the last the remainder: the parts add up to `total`."""
    got = [_money(total * s) for s in shares[:-1]]
    return [*got, total - sum(got, Decimal(0))] if shares else []


def _finance(r: dict[str, Any]) -> dict[str, Any]:
    """An account row's derived finance columns, by the job row's formulas (see _derive)."""
    gross = measured_savings(r)
    billed = (r["restart_fees"] + r["other_compute_charges"] + r["storage_reread_cost"] + r["checkpoint_egress_cost"])
    estimated = _nsum([r["recompute_cost_estimate"], r["restart_idle_cost_estimate"]])
    overhead = billed + (estimated or 0)
    r.update({"gross_spot_savings": gross, "billed_interruption_overhead": billed,
              "estimated_interruption_overhead": estimated, "hidden_overhead_total": overhead,
              "net_spot_savings": None if gross is None else gross - overhead})
    return r


def event_counts(con: duckdb.DuckDBPyConnection) -> dict[tuple[Any, ...], Decimal]:
    """Interruptions observed in the interruption events (billing_audit.events) per job row and billing account of
    the prepared aggregates: events of one resource less than reconcile.CLUSTER_GAP apart are one interruption; one
    counts for a job row when its resource is the row's spot resource and its time falls in the resource's run
    (from reconcile.MATCH_BEFORE before its first charge period to as long after its last).  An interruption of a
    Kubernetes node in an hour its pods shared it (billing_audit.kubernetes) is shared out like the node's lines:
    each job row counts its part of it, the parts adding up to one."""
    from billing_audit.events import INTERRUPTING
    from billing_audit.reconcile import CLUSTER_GAP, MATCH_BEFORE

    if not has_relation(con, "interruption_events"):
        return {}
    shared = con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'ba_k8s_events'"
                         ).fetchone()
    k8s = bool(shared and shared[0])
    on_node = ("EXISTS (SELECT 1 FROM ba_k8s_events s WHERE s.provider = it.provider AND lower(s.node) = it.rid "
               "AND s.hs = date_trunc('hour', it.time))")
    gap, before = int(CLUSTER_GAP.total_seconds()), int(MATCH_BEFORE.total_seconds())
    nodes = """
UNION ALL
SELECT s.job, s.team, s.provider, s.currency, s.account, sum(s.units) AS n, TRUE
FROM it JOIN ba_k8s_events s ON s.provider = it.provider AND lower(s.node) = it.rid AND s.hs = date_trunc('hour', it.time)
GROUP BY ALL""" if k8s else ""
    rows = con.execute(f"""
WITH e AS (SELECT provider, lower(resource_id) AS rid, time,
                  lag(time) OVER (PARTITION BY provider, lower(resource_id) ORDER BY time) AS prev
           FROM interruption_events WHERE kind IN ({", ".join(lit(k) for k in INTERRUPTING)})),
it AS (SELECT provider, rid, time FROM e WHERE prev IS NULL OR time - prev > INTERVAL {gap} SECOND)
SELECT r.job, r.team, r.provider, r.currency, r.account, CAST(count(*) AS HUGEINT) AS n, FALSE
FROM ba_spot_res r JOIN it ON it.provider = r.provider AND it.rid = lower(r.ResourceId)
  AND it.time >= r.s - INTERVAL {before} SECOND AND it.time < r.e + INTERVAL {before} SECOND
  AND NOT {on_node if k8s else "FALSE"}
GROUP BY ALL{nodes}""").fetchall()
    out: dict[tuple[Any, ...], Decimal] = {}
    for r in rows:  # a node's shares are in 1e-12 units (billing_audit.kubernetes)
        n = Decimal(int(r[5])) / Decimal(10 ** 12) if r[6] else Decimal(int(r[5]))
        out[tuple(r[:5])] = out.get(tuple(r[:5]), Decimal(0)) + n
    return out


def _row_events(counts: dict[tuple[Any, ...], Decimal], row: dict[str, Any]) -> Decimal:
    key = (row["job"], row["team"], row["provider"], row["currency"])
    return sum((n for k, n in counts.items() if k[:4] == key), Decimal(0))


def _interruptions(row: dict[str, Any]) -> tuple[Decimal, str]:
    if row.get("event_count"):
        return Decimal(row["event_count"]), "events"
    if row["fee_count"]:
        return Decimal(row["fee_count"]), "fee_lines"
    if row["signal_count"]:
        return Decimal(row["signal_count"]), "signals"
    if row["churn_count"]:
        return Decimal(row["churn_count"]), "inferred"
    return Decimal(0), "none"


def _budget_breaches(row: dict[str, Any], cfg: Config) -> tuple[list[str], list[str]]:
    """(breaches, near): each budget the row breaks, naming the budget and by how much; those within 20% of it."""
    if row["job"] == UNATTRIBUTED:
        return [], []
    lim, name = cfg.budgets.for_currency(row["currency"])
    cur = row["currency"]
    breaches: list[str] = []
    near: list[str] = []
    fees, cap = row["restart_fees"], lim.interruption_fees_per_job
    if cap is not None:
        if fees > cap:
            breaches.append(f"{name}.interruption_fees_per_job: restart fees {fees:.2f} {cur} exceed {cap:.2f} "
                            f"{cur} by {fees - cap:.2f} {cur}")
        elif fees >= cap * Decimal("0.8") and fees > 0:
            near.append(f"restart fees {fees:.2f} {cur} are near {name}.interruption_fees_per_job ({cap:.2f} {cur})")
    pct, top = row["savings_eroded_pct"], lim.max_savings_erosion_pct
    if top is not None and pct is not None:
        if pct > top:
            breaches.append(f"{name}.max_savings_erosion_pct: overhead erodes {pct:.1f}% of spot savings, over "
                            f"{top:g}% by {pct - top:.1f} points")
        elif pct >= 0.8 * top:
            near.append(f"overhead erodes {pct:.1f}% of spot savings, near the {top:g}% budget ({name})")
    return breaches, near


def _recommend(row: dict[str, Any], cfg: Config) -> tuple[str, list[str]]:
    """The advice, from measured figures only; sets ``over_budget`` and ``budget_breaches`` on the row.

    ``switch_to_on_demand`` only when on demand would have been cheaper: spot cost (priced lines) + overhead >=
    the on-demand equivalent; a broken budget is ``over_budget`` (its own flag, naming the budget and by how
    much), not a switch.  ``n/a``: no spot usage; ``attribute``: the unattributed row; ``review``: savings
    that cannot be measured, within 20% of on demand, or near a budget."""
    cur = row["currency"]
    spot, od, overhead = row["spot_compute_cost"], row["on_demand_equivalent_cost"], row["hidden_overhead_total"]
    breaches, near = _budget_breaches(row, cfg)
    if row.get("period_breaches") is not None:  # a row over several periods: the periods' own budget checks
        breaches, near = row["period_breaches"], []
    row["over_budget"], row["budget_breaches"] = bool(breaches), breaches
    if row["job"] == UNATTRIBUTED:
        return "attribute", [f"{row['total_cost']:.2f} {cur} is attributed to no job: tag its resources, or map them "
                             "to a job and team in the resource map (attribution.resource_map)"]
    if spot == 0:
        if overhead > 0:
            return "review", [f"no spot compute is attributed here, but {overhead:.2f} {cur} of interruption overhead is"]
        return "n/a", ["no spot usage: nothing to keep on spot or switch"]
    switch: list[str] = []
    review: list[str] = []
    unpriced = row["spot_unpriced_cost"] or Decimal(0)
    gross = row["gross_spot_savings"]
    if od is None or gross is None:
        # no spot line has an on-demand equivalent (the export's, a price reference's or the bill's)
        review.append(f"no on-demand price is known for this job's spot usage ({unpriced:.2f} {cur} of spot cost has "
                      f"no on-demand price in the export, the price references or the bill), so its spot savings "
                      f"cannot be measured: add price references (`billing-audit prices pull {row['provider']}`)")
    elif unpriced:
        review.append(f"{unpriced:.2f} {cur} of spot cost has no on-demand price (neither in the export nor in the "
                      "price references), so it is left out of the measured savings")
    priced = spot - unpriced  # the comparisons below are over the priced spot lines only
    if priced == 0 or od is None or gross is None:
        pass
    elif priced + overhead >= od:
        switch.append(f"spot cost plus overhead ({priced + overhead:.2f} {cur}) is at least the on-demand "
                      f"equivalent ({od:.2f} {cur})")
    elif priced + overhead >= od * Decimal("0.8"):
        review.append(f"spot cost plus overhead ({priced + overhead:.2f} {cur}) is within 20% of the on-demand "
                      f"equivalent ({od:.2f} {cur})")
    review += near
    flags = [f"over budget: {b}" for b in breaches]
    if switch:
        return "switch_to_on_demand", switch + flags + review
    if review:
        return "review", flags + review
    saved = row["net_spot_savings"]
    return "keep_spot", flags + [f"spot still saves {saved:.2f} {cur} after {overhead:.2f} {cur} of overhead"]


def _money(x: Decimal) -> Decimal:
    return x.quantize(Decimal("0.000000000001"))


def build_report(store: Store, cfg: Config, period: str | None = None, cost_basis: str = "effective",
                 engine_run: int | dict[str, int] | None = None,
                 savings_run: int | dict[str, int] | None = None, rules_fired: bool = True) -> Report:
    """The per-job, per-team, per-day and total interruption overhead; from the aggregates an engine
    returned (`engine_run`, see billing_audit.engines) instead of the local lines when given.

    One computation per billing period: a report over all periods (`period` None) is the sum of the per-period
    rows (estimates included), so it equals ``export`` summed over its periods.

    Savings always compare like with like: the effective cost of spot against its on-demand equivalent.  Another
    `cost_basis` changes the cost the components and totals are shown in; the savings, erosion and advice stay
    the effective ones (on an engine, from `savings_run`: the same run at effective cost).  `engine_run` may be
    one run per billing period ({period: run_id}): a report over all periods then sums them as it does locally.
    `rules_fired` False: ``Report.rules_fired`` is None (only the HTML shows it, and on the local store it reads
    every rule hit of the store, whatever the period)."""
    if cost_basis not in COST_BASES:
        raise BillingAuditError(f"--cost-basis {cost_basis!r}: choose effective, billed or list")
    warnings: list[str] = []
    effective = effective_accounts = None
    if cost_basis != "effective":
        if engine_run is None or savings_run is not None:
            eff = _compute(store, cfg, period, "effective", savings_run, fired=False)  # its rows only
            effective, effective_accounts = eff[0], eff[3]
            warnings.append(f"--cost-basis {cost_basis}: the components and totals are {cost_basis} cost; savings, "
                            "erosion and advice are measured at effective cost against the on-demand equivalent "
                            f"({cost_basis} cost cannot measure them like with like)")
        else:
            warnings.append(f"--cost-basis {cost_basis}: no effective-cost run beside this engine run, so the savings "
                            f"are {cost_basis} cost against the on-demand equivalent, not effective cost")
    rows, daily, fired, accounts = _compute(store, cfg, period, cost_basis, engine_run, fired=rules_fired)
    if isinstance(engine_run, int) and period is None:
        warnings += _summed_budgets(store, cfg, engine_run, rows)
    unshared = engine_run is not None and _engine_name(store, engine_run) not in kubernetes.ENGINES
    warnings += kubernetes.pod_record_warnings(store, period, engine=unshared)
    rep = _report(store, cfg, period, cost_basis, rows, daily, warnings, fired, effective)
    rep.account_rows = _with_savings(accounts, effective_accounts)
    rep.engine = _engine_name(store, engine_run)
    rep.fee_reconciliation = _reconciliation(store, period, rep.warnings, engine_run is not None)
    return rep


def _reconciliation(store: Store, period: str | None, warnings: list[str], engine: bool) -> dict[str, Any] | None:
    """The fee reconciliation of the report's period from the store's own lines (an engine run's report too, when
    the store holds the tagged lines); None, with a warning, when it does not."""
    from billing_audit.reconcile import reconcile

    if engine and not store._has_table("line_categories"):
        warnings.append("fee reconciliation: not done: it reads the restart-fee lines from the local store, and this "
                        "store holds only the engine's aggregates (ingest and tag the bill locally to reconcile)")
        return None
    try:
        return reconcile(store, period).to_dict()
    except BillingAuditError as e:
        warnings.append(f"fee reconciliation: {e}")
        return None


def _summed_budgets(store: Store, cfg: Config, run_id: int, rows: list[dict[str, Any]]) -> list[str]:
    """An engine run over every period as one (``--source raw``, a warehouse table in place: no per-period runs)
    whose lines fall in several months: its jobs' budgets are checked on the months' sum, not each month's own as
    the local report checks them (budgets are per month).  Where that sum breaks or nears a budget (`rows`: the
    run's job rows), said, with how to check a month."""
    flagged = [r["job"] for r in rows if any(_budget_breaches(_derive(dict(r), cfg), cfg))]
    if not flagged:
        return []
    months = [str(r[0]) for r in store.con.execute(
        "SELECT DISTINCT strftime(day, '%Y-%m') FROM engine_results WHERE run_id = ? AND kind = 'agg' "
        "AND day IS NOT NULL ORDER BY 1", [int(run_id)]).fetchall()]
    if len(months) < 2:
        return []
    return [f"budgets: this engine run covers {len(months)} months as one ({months[0]} to {months[-1]}), so the "
            f"budgets (per month) of {len(flagged)} job row(s) it flags ({', '.join(sorted(set(flagged))[:5])}) were "
            "checked on the months' sum, where the local report checks each month's own: run it with "
            "`--period YYYY-MM` for a month's checks"]


def _engine_name(store: Store, engine_run: int | dict[str, int] | None) -> str:
    """The engine whose run the report is computed from (the JSON's ``filters.engine``); duckdb: the local store."""
    if engine_run is None:
        return "duckdb"
    run = next(iter(engine_run.values()), None) if isinstance(engine_run, dict) else engine_run
    found = store.con.execute("SELECT engine FROM engine_runs WHERE run_id = ?", [int(run)]).fetchone() \
        if run is not None else None
    return str(found[0]) if found else "duckdb"


Computed: TypeAlias = "tuple[list[dict[str, Any]], list[dict[str, Any]], pl.DataFrame | None, list[dict[str, Any]]]"


def _compute(store: Store, cfg: Config, period: str | None, basis: str,
             engine_run: int | dict[str, int] | None,
             carried: bool = False, fired: bool = True) -> Computed:
    """(job rows, daily rows, rules fired, job rows by billing account) on `basis`: of the engine run, of `period`, or of every period summed.

    Restart windows cross billing periods: a period's re-reads and egress also link with the previous period's
    interruptions (PREV_EVENTS, from that period computed alone), for one period and all periods alike.
    `carried`: PREV_EVENTS is already set (an engine run of a period inside a report of several)."""
    con = store.con
    if not carried:
        _no_prev(con)
    if isinstance(engine_run, dict):  # one engine run per period: their rows summed, as locally
        run_jobs: list[dict[str, Any]] = []
        run_daily: list[dict[str, Any]] = []
        run_accounts: list[dict[str, Any]] = []
        fired_runs: list[pl.DataFrame] = []
        for p, run in sorted(engine_run.items()):
            rows, d, f, a = _compute(store, cfg, p, basis, run, carried=True)
            _carry(con)
            run_accounts += a
            for r in rows:
                r["period_breaches"] = [f"{p}: {b}" for b in _derive(dict(r), cfg)["budget_breaches"]]
            run_jobs += rows
            run_daily += d
            if f is not None:  # an engine run's always is
                fired_runs.append(f)
        import polars as pl

        all_fired = (pl.concat(fired_runs).group_by(["rule_id", "category"]).agg(pl.col("lines").sum()).sort("rule_id")
                     if fired_runs else store.sql("SELECT NULL AS rule_id, NULL AS category, 0 AS lines WHERE FALSE"))
        return _combine(run_jobs, cfg), run_daily, all_fired, _combine_accounts(run_accounts)
    if engine_run is not None:
        from billing_audit.engines.pipeline import load_run

        load_run(con, engine_run)
        _windows(con, cfg)
        events = event_counts(con)
        run_rows = _job_rows(con, cfg, events)
        return run_rows, _daily_rows(con, cfg), store.sql(
            "SELECT rule_id, category, CAST(sum(lines) AS BIGINT) AS lines FROM ba_fired GROUP BY ALL ORDER BY rule_id"
        ), _account_rows(con, cfg, run_rows, events)
    # the stored groups, looked up once for every period prepared (they are current only after a completed tag run)
    stored = current_groups(con)
    if stored is None and completed_tag_run(con) is None:  # never tagged, a tag run that failed or was killed,
        raise BillingAuditError(NO_TAG_RUN + " (or `billing-audit audit`)")  # or lines changed since
    if not store._has_table("line_categories"):  # stores tagged before the view existed
        from billing_audit.ddl import LINE_CATEGORY_VIEW

        con.execute(LINE_CATEGORY_VIEW.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW")
                    if store.read_only else LINE_CATEGORY_VIEW)
    periods = store_periods(store) if period is None else [period]
    if period is None and len(periods) > 1:
        jobs: list[dict[str, Any]] = []
        daily: list[dict[str, Any]] = []
        accounts: list[dict[str, Any]] = []
        for p in periods:
            prepare(con, cfg, p, basis, current=stored)
            _windows(con, cfg)
            events = event_counts(con)
            mine = _job_rows(con, cfg, events)
            accounts += _account_rows(con, cfg, mine, events)
            for r in mine:
                checked = _derive(dict(r), cfg)  # budgets are per month: each period checks its own
                r["period_breaches"] = [f"{p}: {b}" for b in checked["budget_breaches"]]
                jobs.append(r)
            daily += _daily_rows(con, cfg)
            _carry(con)
        return _combine(jobs, cfg), daily, _rules_fired(store, None) if fired else None, _combine_accounts(accounts)
    prepare_period(store, cfg, period, basis, current=stored)
    events = event_counts(con)
    one = _job_rows(con, cfg, events)
    return one, _daily_rows(con, cfg), _rules_fired(store, period) if fired else None, _account_rows(con, cfg, one,
                                                                                                    events)


def measured_savings(row: dict[str, Any]) -> Decimal | None:
    """Gross spot savings, measured: the on-demand equivalent of the priced spot lines less their effective spot
    cost; None (n/a) when no spot line has an on-demand price.  The one place every output takes it from."""
    od: Decimal | None = row.get("on_demand_equivalent_cost")
    if od is None:
        return None
    spot: Decimal = row["spot_compute_cost"]
    return od - (spot - (row.get("spot_unpriced_cost") or Decimal(0)))


def _nsum(values: list[Any]) -> Any:
    """A sum over rows where some figures are n/a: the sum of the measured ones; n/a when none is."""
    got = [v for v in values if v is not None]
    return sum(got[1:], got[0]) if got else None


# what a job row is made of (summed when rows of several periods combine); the rest is derived from them
BASE_SUMS = ["interruptions", "spot_compute_cost", "on_demand_equivalent_cost", "spot_unpriced_cost", "restart_fees",
             "other_compute_charges", "storage_reread_cost", "checkpoint_egress_cost", "checkpoint_io_unlinked",
             "recompute_cost_estimate", "restart_idle_cost_estimate", "total_cost", "lines", "priced_spot_lines"]
SOURCES = ["events", "fee_lines", "signals", "inferred"]


def _job_rows(con: duckdb.DuckDBPyConnection, cfg: Config,
              counts: dict[tuple[Any, ...], Decimal]) -> list[dict[str, Any]]:
    """The job rows of the aggregates prepared on `con` (one period, or one engine run); `counts`: their
    interruption events (:func:`event_counts`)."""
    rows = [dict(zip([d[0] for d in cur.description], r, strict=True))
            for cur in [con.execute(job_sql(cfg))] for r in cur.fetchall()]
    jobs = []
    for row in rows:
        row["event_count"] = _row_events(counts, row)
        interruptions, source = _interruptions(row)
        hours = Decimal(str(round(row["spot_hours"], 6)))
        rate = _money(row["spot_compute_cost"] / hours) if hours > 0 else Decimal(0)
        interval, restart = cfg.job_minutes(row["job"])
        est = cfg.estimates.enabled and row["job"] != UNATTRIBUTED
        recompute = _money(interruptions * Decimal(str(interval)) / 2 / 60 * rate) if est else None
        idle = _money(interruptions * Decimal(str(restart)) / 60 * rate) if est else None
        jobs.append({
            "job": row["job"], "team": row["team"], "provider": row["provider"], "currency": row["currency"],
            "interruptions": interruptions, "interruptions_source": source,
            "spot_compute_cost": row["spot_compute_cost"],
            "on_demand_equivalent_cost": row["on_demand_equivalent_cost"],
            "restart_fees": row["restart_fees"], "other_compute_charges": row["other_compute_charges"],
            "storage_reread_cost": row["storage_reread_cost"], "checkpoint_egress_cost": row["checkpoint_egress_cost"],
            "checkpoint_io_unlinked": row["checkpoint_io_unlinked"],
            "recompute_cost_estimate": recompute, "restart_idle_cost_estimate": idle,
            "total_cost": row["total_cost"], "lines": row["lines"], "spot_hours": hours,
            "priced_spot_lines": row["priced_spot_lines"], "spot_unpriced_cost": row["spot_unpriced_cost"],
        })
    return jobs


def _combine(rows: list[dict[str, Any]], cfg: Config) -> list[dict[str, Any]]:
    """Rows of several periods as one row per job, team, provider and currency: every figure the sum of the
    periods' (estimates as each period worked them out); the source names each source that counted."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["job"], r["team"], r["provider"], r["currency"]), []).append(r)
    out = []
    for (job, team, provider, currency), rs in groups.items():
        row: dict[str, Any] = {"job": job, "team": team, "provider": provider, "currency": currency}
        for c in BASE_SUMS:
            row[c] = _nsum([r[c] for r in rs])
        row["spot_hours"] = sum((r["spot_hours"] for r in rs), Decimal(0))
        row["period_breaches"] = [b for r in rs for b in r.get("period_breaches", [])]
        used = {r["interruptions_source"] for r in rs}
        row["interruptions_source"] = "+".join(x for x in SOURCES if x in used) or "none"
        out.append(row)
    return out


def _derive(row: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """The figures made from a row's sums: rate, savings, overhead (billed, estimated, total), erosion, advice."""
    hours = row["spot_hours"]
    row["spot_hourly_cost"] = _money(row["spot_compute_cost"] / hours) if hours > 0 else Decimal(0)
    row["spot_hours"] = float(hours)
    gross = measured_savings(row)
    billed = (row["restart_fees"] + row["other_compute_charges"] + row["storage_reread_cost"]
              + row["checkpoint_egress_cost"])
    est = [row["recompute_cost_estimate"], row["restart_idle_cost_estimate"]]
    estimated = _nsum(est)
    overhead = billed + (estimated or 0)
    row.update({
        "spot_cost_priced": row["spot_compute_cost"] - (row["spot_unpriced_cost"] or Decimal(0)),
        "gross_spot_savings": gross, "billed_interruption_overhead": billed,
        "estimated_interruption_overhead": estimated, "hidden_overhead_total": overhead,
        "net_spot_savings": None if gross is None else gross - overhead,
        "savings_eroded_pct": float(overhead / gross * 100) if gross is not None and gross > 0 else None,
    })
    row["recommendation"], row["reasons"] = _recommend(row, cfg)
    return row


# what a report on another cost basis takes from the effective-cost rows: the measured savings and what follows
SAVINGS_FIELDS = ["on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings", "savings_eroded_pct",
                  "recommendation", "reasons", "over_budget", "budget_breaches"]


def _report(store: Store, cfg: Config, period: str | None, cost_basis: str, rows: list[dict[str, Any]],
            daily: list[dict[str, Any]], warnings: list[str], rules_fired: pl.DataFrame | None,
            effective: list[dict[str, Any]] | None = None) -> Report:
    jobs = [_derive(r, cfg) for r in rows]
    if effective is not None:
        eff = {(r["job"], r["team"], r["provider"], r["currency"]): _derive(r, cfg) for r in effective}
        for r in jobs:
            e = eff.get((r["job"], r["team"], r["provider"], r["currency"]))
            for c in SAVINGS_FIELDS:
                r[c] = e[c] if e is not None else ([] if c in ("reasons", "budget_breaches") else None)
    daily_rows = _daily(daily)
    _spike_what_if(jobs, daily_rows)
    jobs.sort(key=lambda r: (_last(r["hidden_overhead_total"], descending=True),
                             *(_last(r[c]) for c in ("job", "team", "provider", "currency"))))
    totals = _total_rows(jobs)
    from billing_audit import registry

    warnings = [*warnings, *coverage_warnings(jobs, totals, registry.with_part("prices_pull"))]
    cur = store.con.execute(f"SELECT {', '.join(FILE_COLUMNS)} FROM ingest_log ORDER BY ingest_id, file")
    return Report(
        period=period or "all",
        cost_basis=cost_basis,
        job_rows=jobs,
        team_rows=_team_rows(jobs),
        daily_rows=daily_rows,
        total_rows=totals,
        warnings=warnings,
        rules_fired=rules_fired,
        file_rows=[dict(zip(FILE_COLUMNS, r, strict=True)) for r in cur.fetchall()],
    )


def _first(v: Any) -> tuple[bool, Any]:
    """A sort key, ascending with None first (polars' default order)."""
    return (v is not None, v)


def _last(v: Any, descending: bool = False) -> tuple[bool, Any]:
    """A sort key with None last, ascending or (a number) descending."""
    return (v is None, _neg(v) if descending else v)


def _neg(v: Any) -> Any:
    return None if v is None else -v


def _combine_accounts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Account rows of several periods summed per job row and account (n/a rows left out of each sum)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in ACCOUNT_KEY), []).append(r)
    return [{**dict(zip(ACCOUNT_KEY, k, strict=True)),
             **{c: _nsum([r[c] for r in rs]) for c in FINANCE_COLUMNS}} for k, rs in groups.items()]


ACCOUNT_SAVINGS = ["on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings"]


def _with_savings(rows: list[dict[str, Any]], effective: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The account rows; on another cost basis with the effective rows' savings (as the job rows)."""
    if effective is not None:
        eff = {tuple(r[c] for c in ACCOUNT_KEY): r for r in effective}
        for r in rows:
            e = eff.get(tuple(r[c] for c in ACCOUNT_KEY))
            for c in ACCOUNT_SAVINGS:
                r[c] = e[c] if e is not None else None
    return rows


def _group(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return groups


def _dsum(values: Any) -> Decimal:
    """A sum of amounts, n/a ones left out (0 when none is measured)."""
    return sum((v for v in values if v is not None), Decimal(0))


def _sums(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], Decimal]:
    """Each figure of TEAM_SUMS summed (n/a rows left out; n/a when none is measured), and the overhead of the
    rows whose savings are measured: what their measured savings are eroded by (a job without measured savings
    erodes nothing measured)."""
    return ({c: _nsum([r[c] for r in rows]) for c in TEAM_SUMS},
            _dsum(r["hidden_overhead_total"] for r in rows if r["gross_spot_savings"] is not None))


def _eroded(measured_overhead: Decimal, gross: Decimal | None) -> float | None:
    return float(measured_overhead) / float(gross) * 100 if gross is not None and gross > 0 else None


def _team_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per team and currency: the job rows' sums, the jobs counted, the erosion; biggest overhead first."""
    out = []
    for (team, currency), rows in _group(jobs, ("team", "currency")).items():
        sums, measured = _sums(rows)
        out.append({"team": team, "currency": currency, **sums, "jobs": len({r["job"] for r in rows}),
                    "savings_eroded_pct": _eroded(measured, sums["gross_spot_savings"])})
    out.sort(key=lambda r: (_first(_neg(r["hidden_overhead_total"])), _first(r["team"]), _first(r["currency"])))
    return out


def _total_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per currency; with the savings coverage: the spot cost whose savings are measured, the spot cost without
    an on-demand price, and the share measured (``savings_coverage_pct``)."""
    out = []
    for (currency,), rows in _group(jobs, ("currency",)).items():
        sums, measured = _sums(rows)
        priced = _dsum(r["spot_cost_priced"] for r in rows)
        unpriced = _dsum(r["spot_unpriced_cost"] for r in rows)
        spot = priced + unpriced
        out.append({"currency": currency, **sums, "spot_cost_priced": priced, "spot_unpriced_cost": unpriced,
                    "lines": sum(int(r["lines"]) for r in rows if r["lines"] is not None),
                    "unattributed_cost": _dsum(r["total_cost"] for r in rows if r["job"] == UNATTRIBUTED),
                    "savings_eroded_pct": _eroded(measured, sums["gross_spot_savings"]),
                    "savings_coverage_pct": float(priced) / float(spot) * 100 if spot > 0 else None})
    out.sort(key=lambda r: _first(r["currency"]))
    return out


def coverage_warnings(jobs: list[dict[str, Any]], totals: list[dict[str, Any]],
                      pullable: tuple[str, ...] = ()) -> list[str]:
    """Per currency with unpriced spot cost: how much of it the savings are measured for, and what to run (a
    currency whose only unpriced spot cost is a credit, below zero, needs nothing)."""
    out = []
    for t in totals:
        cur = t["currency"]
        provs = sorted({r["provider"] for r in jobs if cur is not None and r["currency"] == cur
                        and r["spot_unpriced_cost"] is not None and r["spot_unpriced_cost"] > 0})
        if not t["spot_unpriced_cost"] or t["spot_unpriced_cost"] <= 0 or not provs:
            continue
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


def _daily_rows(con: duckdb.DuckDBPyConnection, cfg: Config) -> list[dict[str, Any]]:
    """Per job and day of the prepared aggregates: interruptions (from the job row's source), billed overhead
    (fees, other compute charges, re-reads and egress in a restart window), spot cost and its on-demand price."""
    rows = con.execute(
        f"""
        WITH {FROM_WINDOWS}, src AS (SELECT * FROM ba_src),
        d AS (
          SELECT job, team, provider, currency, day,
            sum(fee_n) AS fees,
            coalesce(sum(n) FILTER (WHERE signal), 0) AS signals,
            coalesce(sum(cost) FILTER (WHERE category IN ('restart_fee', 'other_compute_charge')), 0) AS overhead,
            coalesce(sum(cost - unpriced) FILTER (WHERE category = 'spot_compute'), 0) AS spot,
            coalesce(sum(od_cost) FILTER (WHERE category = 'spot_compute'), 0) AS od,
            coalesce(sum(unpriced) FILTER (WHERE category = 'spot_compute'), 0) AS unpriced,
            bool_or(category = 'spot_compute') AS ran
          FROM ba_agg WHERE day IS NOT NULL AND job <> '{UNATTRIBUTED}' GROUP BY ALL
        )
        SELECT d.job, d.provider, d.currency, d.day, d.fees, d.signals, d.overhead + coalesce(l.cost, 0), d.ran,
               coalesce(c.n, 0) AS churn, src.source, d.spot, d.od, d.unpriced FROM d
        JOIN src USING ({ROW_KEY})
        LEFT JOIN (SELECT {ROW_KEY}, day, sum(n) AS n FROM churn GROUP BY ALL) c USING ({ROW_KEY}, day)
        LEFT JOIN (SELECT {ROW_KEY}, day, sum(cost) AS cost FROM lk GROUP BY ALL) l USING ({ROW_KEY}, day)
        ORDER BY d.job, d.provider, d.currency, d.day
        """
    ).fetchall()
    out: list[dict[str, Any]] = []
    for job, provider, currency, day, fees, signals, overhead, ran, churn, src, spot, od, unpriced in rows:
        n = {"fee_lines": fees or 0, "signals": signals, "inferred": churn}.get(src, 0)
        out.append({"job": job, "provider": provider, "currency": currency, "day": day,
                    "interruptions": Decimal(n), "overhead": overhead, "spot_cost": spot, "on_demand_cost": od,
                    "spot_unpriced_cost": unpriced, "ran": bool(ran)})
    return out


DAILY_KEY = ("job", "provider", "currency", "day")
DAILY_SUMS = ("interruptions", "overhead", "spot_cost", "on_demand_cost", "spot_unpriced_cost")


def _spike_what_if(jobs: list[dict[str, Any]], daily: list[dict[str, Any]]) -> None:
    """For a job whose interruptions spiked (the daily flag): what switching to on demand from the first spike day
    on would have cost (the on-demand equivalent of its spot lines from that day), against what spot cost from
    then (spot cost + the billed overhead of those days).  Added to the job's reasons."""
    days = _group(daily, ("job", "provider", "currency"))
    for row in jobs:
        mine = days.get((row["job"], row["provider"], row["currency"]), [])
        spiked = [d["day"] for d in mine if d["spike"]]
        if not spiked:
            continue
        day = min(spiked)
        after = [d for d in mine if d["day"] >= day]
        od = _dsum(d["on_demand_cost"] for d in after)
        priced = _dsum(d["spot_cost"] for d in after)
        spot = priced + _dsum(d["overhead"] for d in after)
        unpriced = _dsum(d["spot_unpriced_cost"] for d in after)
        cur = row["currency"]
        if priced == 0 and unpriced > 0:
            row["reasons"].append(f"interruptions spiked on {day}: what switching to on demand from then would have "
                                  "cost cannot be measured (no on-demand price for its spot lines)")
            continue
        verdict = (f"on demand would have saved {spot - od:.2f} {cur}" if od < spot
                   else f"spot was still {od - spot:.2f} {cur} cheaper")
        row["reasons"].append(f"interruptions spiked on {day}: switching to on demand from then would have cost "
                              f"{od:.2f} {cur} against {spot:.2f} {cur} on spot with its billed overhead ({verdict})")


def _median(values: list[float]) -> float:
    """The median (of an even count, the mean of the middle two), as statistics.median has it: that module
    imports fractions, 16 ms of every report's start for one median."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _daily(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per job and day (summed over periods): interruptions, overhead, spot cost and its on-demand price; spikes
    over 3x the median day (of the days the job ran or was interrupted; at least 1)."""
    days: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = (r["job"], r["provider"], r["currency"], r["day"])
        day = days.get(key)
        if day is None:
            days[key] = {**dict(zip(DAILY_KEY, key, strict=True)),
                         **{c: Decimal(0) if r[c] is None else r[c] for c in DAILY_SUMS}, "ran": r["ran"]}
            continue
        for c in DAILY_SUMS:
            if r[c] is not None:
                day[c] += r[c]
        day["ran"] = day["ran"] or r["ran"]
    out = [days[k] for k in sorted(days, key=lambda k: tuple(_first(v) for v in k))]
    for mine in _group(out, ("job", "provider", "currency")).values():
        counted = [float(d["interruptions"]) for d in mine if d["ran"] or d["interruptions"] > 0]
        bar = 3 * max(_median(counted) if counted else 0.0, 1.0)
        for d in mine:
            del d["ran"]
            d["spike"] = float(d["interruptions"]) > bar
    return out


def _rules_fired(store: Store, period: str | None) -> pl.DataFrame:
    if period is None:
        return store.sql("SELECT rule_id, category, count(*) AS lines FROM rule_hits GROUP BY ALL ORDER BY rule_id")
    in_period = (f"{period_filter(period, 'l.BillingPeriodStart')} "  # the range lets storage skip other months
                 f"AND strftime({PERIOD.replace('BillingPeriodStart', 'l.BillingPeriodStart')}, '%Y-%m') = $period")
    # the hits read between the period's smallest and largest line id: implied by the join, and storage skips the
    # row groups of hits outside it (a file's ids share its fingerprint, and hits are written in the lines'
    # order): a month of a 12 x 1M-line store, 0.26-0.34 -> 0.17 s.  The bounds are looked up first and bound as
    # values, because storage prunes by constants, not by a subquery's result.
    lo, hi = store.con.execute(f"SELECT min(x_LineItemId), max(x_LineItemId) FROM line_items l WHERE {in_period}",
                               {"period": period}).fetchone() or (None, None)
    return store.sql(
        "SELECT h.rule_id, h.category, count(*) AS lines FROM rule_hits h JOIN line_items l USING (x_LineItemId) "
        f"WHERE {in_period} AND h.x_LineItemId BETWEEN $lo AND $hi GROUP BY ALL ORDER BY rule_id",
        {"period": period, "lo": lo, "hi": hi},
    )


def store_periods(store: Store) -> list[str]:
    """Billing months present in the store, oldest first (from the slices ingest keeps: no scan of the lines;
    a slice's BillingPeriodStart is already its month)."""
    rows = store.con.execute("SELECT DISTINCT strftime(BillingPeriodStart, '%Y-%m') AS p FROM slices WHERE rows > 0 "
                             "ORDER BY p").fetchall()
    return [r[0] for r in rows if r[0]]
