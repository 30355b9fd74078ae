"""The use cases: what each command does, as functions that return what they did (never print, never exit).

The command line (:mod:`billing_audit.cli`) parses options, makes one call here and prints the result;
a notebook or a script calls the same functions::

    from billing_audit import app

    report = app.ingest("audit.duckdb", ["exports/"])          # IngestReport
    tagged = app.tag("audit.duckdb")                            # TagResult: hits per rule
    result = app.report("audit.duckdb", period="2026-10")       # ReportResult: .report.jobs is a polars frame
    written = app.audit("audit.duckdb", ["exports/"], "audit-2026-10")

Each function opens the store for the time of the call.  Bad input raises
:class:`~billing_audit.errors.BillingAuditError` (the CLI's exit code 2).  Heavy parts (report, HTML,
engines, generators, pulls) are imported when called, so importing this module stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from billing_audit.errors import BillingAuditError
from billing_audit.reader import is_uri
from billing_audit.store import IngestReport, Progress, Store
from billing_audit.store import open as store_open

if TYPE_CHECKING:
    from collections.abc import Iterator

    import polars as pl

    from billing_audit.config import Config
    from billing_audit.engines import EngineOptions
    from billing_audit.prices import PriceNeed, PricePuller
    from billing_audit.pricing import PriceLoad
    from billing_audit.pulling import DryRun, FetchProgress, Message, PullOptions  # pull's (imported when it runs)
    from billing_audit.report import Report
    from billing_audit.rules import Rule, RuleSet
    from billing_audit.search import SearchResult

@contextmanager
def _opened(db: str | Path | Store | None, read_only: bool = True, wait: float | None = None,
            on_wait: Callable[[str], None] | None = None) -> Iterator[Store]:
    """The store at ``db``, opened for the time of the call (read-only unless told), or ``db`` itself when it
    is an open store (:mod:`billing_audit.api`: the notebook's store, left open)."""
    if isinstance(db, Store):
        yield db
        return
    with store_open(db, read_only=read_only, wait=wait, on_wait=on_wait) as store:
        yield store


_PERIOD = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


def check_period(period: str | None) -> None:
    """A billing month is YYYY-MM."""
    if period is not None and not _PERIOD.fullmatch(period):
        raise BillingAuditError(f"--period {period!r}: expected YYYY-MM, e.g. 2026-10")


_DAY = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")


def check_since(since: str | date | None) -> date | None:
    """A first day is YYYY-MM-DD (checked as :func:`check_period` checks a month)."""
    if since is None or isinstance(since, date):
        return since
    try:
        if not _DAY.fullmatch(since):
            raise ValueError(since)
        return date.fromisoformat(since)
    except ValueError:
        raise BillingAuditError(f"--since {since!r}: expected YYYY-MM-DD, e.g. 2026-10-01") from None


# -- the store ----------------------------------------------------------------------------------------------------
def ingest(db: str | Store, paths: Sequence[str | Path], progress: Progress | None = None,
           config_path: str | None = None, *, wait: float | None = None,
           on_wait: Callable[[str], None] | None = None, follow_outside: bool = False) -> IngestReport:
    """Load export files or folders; ``progress(file, rows)`` is called after each file.  The config's
    ``[exports]`` table says which export counts the lines two exports both deliver.  Only files under
    ``paths`` are read unless ``follow_outside`` (symlinks and manifest keys resolving elsewhere are read too)."""
    from billing_audit.config import load_config

    policy = load_config(config_path).overlap_policy()
    with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
        return store.ingest([str(p) for p in paths], progress=progress, overlap=policy, follow_outside=follow_outside)


def _narrow(df: pl.DataFrame, period: str | None, provider: str | None) -> pl.DataFrame:
    import polars as pl

    if period is not None:
        df = df.filter(pl.col("period") == period)
    if provider is not None:
        df = df.filter(pl.col("provider") == provider)
    return df


def summary(db: str | Store, period: str | None = None, provider: str | None = None) -> pl.DataFrame:
    """Lines and cost per provider, billing period and currency (only ``period`` / ``provider`` when given)."""
    check_period(period)
    with _opened(db) as store:
        return _narrow(store.summary(), period, provider)


def owners(db: str | Store, period: str | None = None, provider: str | None = None) -> pl.DataFrame:
    """Which export's delivery holds each provider, billing account and period, and how it was dated."""
    check_period(period)
    with _opened(db) as store:
        return _narrow(store.owners(), period, provider)


@dataclass
class Summary:
    """What the store holds (`billing-audit summary`): per period and per currency, as of when, from which
    deliveries.  Money is Decimal per currency, never summed across currencies."""

    periods: pl.DataFrame  # provider, period, currency, lines, billed_cost, effective_cost, list_cost
    totals: pl.DataFrame  # currency, lines, billed_cost, effective_cost, list_cost
    owners: pl.DataFrame  # which delivery currently owns each provider, billing account and period
    as_of: datetime | None  # the newest delivery's export time (how each is dated: owners' dated_by)
    filters: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (:mod:`billing_audit.jsonout`)."""
        from billing_audit.jsonout import envelope, records

        owners = self.owners.select("provider", "billing_account", "period", "export", "lines", "delivery", "dated",
                                    "dated_by", "ingested_at")
        return envelope("summary", self.filters, as_of=self.as_of, totals=records(self.totals),
                        periods=records(self.periods), owners=records(owners))


def summary_report(db: str | Store, period: str | None = None, provider: str | None = None) -> Summary:
    """The whole summary: :func:`summary`'s rows, the totals per currency, the data's as-of time (the newest
    export time of the deliveries that own the periods shown) and :func:`owners`."""
    check_period(period)
    with _opened(db) as store:
        periods = _narrow(store.summary(), period, provider)
        held = _narrow(store.owners(), period, provider)
    import polars as pl

    money = ["billed_cost", "effective_cost", "list_cost"]
    totals = (periods.group_by("currency").agg(pl.col("lines").sum().cast(pl.Int64), *(pl.col(c).sum() for c in money))
              .sort("currency"))
    as_of = held["dated"].max() if held.height else None
    return Summary(periods, totals, held, as_of if isinstance(as_of, datetime) else None,
                   {"period": period, "provider": provider})


@dataclass
class Explanation:
    line: dict[str, Any]  # the canonical line item
    hits: list[dict[str, Any]]  # rule_id, category, reason, run_id of every rule that matched it
    # a spot line's on-demand equivalent and how it was found (its spot_od row: od_cost, od_source, price_ref,
    # od_unit_price, price_as_of, reason ...); None for a line that is not spot compute (or not tagged yet)
    on_demand: dict[str, Any] | None = None
    # where the report put it (billing_audit.lineage): job and team and what gave them (job_from, team_from:
    # source tag / resource_majority / resource_map / account_teams / job_majority, or None with what was tried)
    attribution: dict[str, Any] | None = None
    category: str | None = None  # the precedence category that counts it (first in rules.CATEGORIES among its hits)
    # a checkpoint re-read or egress line: linked (in a restart window of its job row), counted_as, the interruptions
    # opening the window (start, end, source), the window's periods, or the reason it is unlinked checkpoint I/O
    window: dict[str, Any] | None = None
    # a Kubernetes node's line shared out to its pods' jobs (billing_audit.kubernetes.explain: role, node, parts with
    # job, team, weight, share), a pod's usage record, or a GKE cost allocation row; None for any other line
    kubernetes: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:  # line, hits = explanation (as Store.explain gives them)
        return iter((self.line, self.hits))

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (:mod:`billing_audit.jsonout`): the line's columns (money as decimal strings),
        the rule hits and, for a spot line, how its on-demand equivalent was found."""
        from billing_audit.jsonout import envelope

        return envelope("explain", {"line_item_id": self.line.get("x_LineItemId")}, line=self.line, hits=self.hits,
                        on_demand=self.on_demand, attribution=self.attribution, category=self.category,
                        window=self.window, **({"kubernetes": self.kubernetes} if self.kubernetes else {}))


def explain(db: str | Store, line_item_id: str, config_path: str | None = None) -> Explanation:
    """One line item, every rule that matched it, for a spot line how its on-demand equivalent was found, and
    where the report (with the config at ``config_path``) puts it: job, team, category, restart window."""
    from billing_audit import lineage, pricing
    from billing_audit.config import load_config

    cfg = load_config(config_path)
    with _opened(db) as store:
        line, hits = Store.explain(store, line_item_id)  # the store's own (a notebook Store's explain calls here)
        od = pricing.line(store.con, line_item_id)
        why = lineage.explain_line(store, cfg, line, hits)
    return Explanation(line, hits, od, why["attribution"], why["category"], why["window"], why.get("kubernetes"))


def lines_export(db: str | Store, folder: str | Path, period: str | None = None) -> int:
    """The store's canonical lines as partitioned parquet under ``folder``; the number of lines written."""
    from billing_audit.engines import write_lines

    check_period(period)
    with _opened(db) as store:
        return write_lines(store, Path(folder), period)


# -- rules --------------------------------------------------------------------------------------------------------
def load_rules(rule_dirs: Sequence[str | Path] = ()) -> RuleSet:
    """The built-in pack plus the rules under ``rule_dirs``."""
    from billing_audit.rules import load_rules as load

    return load([Path(d) for d in rule_dirs])


def rules_frame(rule_dirs: Sequence[str | Path] = ()) -> pl.DataFrame:
    """Every loaded rule: id, name, category, severity, providers, title and source."""
    import polars as pl

    ruleset = load_rules(rule_dirs)
    return pl.DataFrame(
        {
            "id": [r.id for r in ruleset.rules],
            "name": [r.name for r in ruleset.rules],
            "category": [r.category for r in ruleset.rules],
            "severity": [r.meta.severity for r in ruleset.rules],
            "providers": [list(r.meta.providers) for r in ruleset.rules],
            "title": [r.meta.title for r in ruleset.rules],
            "source": ["built-in" if r.builtin else str(r.path) for r in ruleset.rules],
        }
    )


def rule(rule_id: str, rule_dirs: Sequence[str | Path] = ()) -> Rule:
    """One rule by id or name."""
    return load_rules(rule_dirs).get(rule_id)


def rule_dict(r: Rule) -> dict[str, Any]:
    """One rule as `rules show --format json` gives it (providers a list, parameters with their defaults)."""
    return {"id": r.id, "name": r.name, "category": r.category, "severity": r.meta.severity,
            "providers": list(r.meta.providers), "title": r.meta.title, "description": r.meta.description,
            "source": "built-in" if r.builtin else str(r.path), "file": str(r.path),
            "params": {n: {"default": p.default, "description": p.description} for n, p in r.meta.params.items()},
            "sql": r.sql}


def check_rules(rule_dirs: Sequence[str | Path] = ()) -> tuple[int, list[str]]:
    """Check the rules (header, SQL safety, binding, case files): (failures, report lines)."""
    from billing_audit.rulecases import check_rules as check

    return check([Path(d) for d in rule_dirs])


def parse_params(values: Sequence[str]) -> dict[str, str]:
    """NAME=VALUE pairs (the CLI's repeatable --param)."""
    out: dict[str, str] = {}
    for v in values:
        if "=" not in v:
            raise BillingAuditError(f"--param {v!r}: expected NAME=VALUE")
        k, _, val = v.partition("=")
        out[k.strip()] = val
    return out


def typed_params(rules: Sequence[Rule], raw: dict[str, str]) -> dict[str, Any]:
    """Each raw parameter converted to the type its rule declares; a name no selected rule has is an error."""
    from billing_audit.rules import coerce_param

    typed: dict[str, Any] = {}
    for name, value in raw.items():
        owner = next((r for r in rules if name in r.meta.params), None)
        if owner is None:
            raise BillingAuditError(f"--param {name}: no selected rule has a parameter called {name!r}")
        typed[name] = coerce_param(owner, name, value)
    return typed


# -- engine runs --------------------------------------------------------------------------------------------------
@dataclass
class EngineRun:
    """One stored run of an engine: what it read and what came back."""

    run_id: int
    engine: str
    source: str
    rows: int  # aggregate rows that came back
    bytes_processed: int | None = None  # what the engine says it read, where it says
    reused: bool = False  # an earlier run with the same source, period, basis, config and rules


def engine_run(store: Any, run_id: int, reused: bool = False) -> EngineRun:
    """The stored run ``run_id``."""
    row = store.con.execute(
        "SELECT r.engine, r.source, r.bytes_processed, (SELECT count(*) FROM engine_results e WHERE e.run_id = r.run_id) "
        "FROM engine_runs r WHERE r.run_id = ?", [run_id]).fetchone()
    engine, source, scanned, n = row
    return EngineRun(run_id, engine, source, int(n), scanned, reused)


def engine_rule_counts(store: Any, run_id: int) -> dict[str, int]:
    """Lines each rule matched in engine run ``run_id``."""
    rows = store.con.execute("SELECT rule_id, n FROM engine_results WHERE run_id = ? AND kind = 'rule'", [run_id]).fetchall()
    return {str(rid): int(n) for rid, n in rows}


# -- tag ----------------------------------------------------------------------------------------------------------
@dataclass
class TagResult:
    engine: str  # "duckdb": tagged in the store (rule_hits); otherwise the rules ran on that engine
    run_id: int  # the tag run, or the engine run
    rules: list[Rule]  # the rules that ran
    rows: list[tuple[Rule, int]]  # (rule, lines it matched), in report order
    hits: int
    scans: int | None = None  # local: scans of line_items
    engine_run: EngineRun | None = None
    failed: list[BillingAuditError] = field(default_factory=list)  # user rules that failed: skipped, others stored
    unchanged: bool = False  # local: nothing changed since tag run run_id, so nothing was redone (force: re-tag)
    slices: int = 0  # with unchanged: the slices that run's state covers
    incremental: str | None = None  # local: what an incremental run redid (None: everything, or nothing)

    def unchanged_message(self) -> str:
        from billing_audit.tagging import unchanged_message

        return unchanged_message(self.run_id, self.slices)


def tag(db: str | Store, rule_dirs: Sequence[str | Path] = (), select: Sequence[str] = (), exclude: Sequence[str] = (),
        params: Sequence[str] | dict[str, str] = (), config_path: str | None = None, period: str | None = None,
        engine: str = "duckdb", engine_options: EngineOptions | None = None, *, wait: float | None = None,
        on_wait: Callable[[str], None] | None = None, force: bool = False) -> TagResult:
    """Run the rules over the store (hits in rule_hits), or on ``engine`` (hit counts and aggregates come back).

    ``params`` are NAME=VALUE strings (or a dict), converted to the types the rules declare.  Locally, when
    nothing changed since the last tag run (lines, rules, parameters, checkpoint config, price references) nothing
    is redone and the result is ``unchanged``; ``force`` re-tags all the same.
    """
    from billing_audit.config import load_config

    ruleset = load_rules(rule_dirs)
    chosen = ruleset.select(list(select), list(exclude))
    raw = dict(params) if isinstance(params, dict) else parse_params(params)
    typed = typed_params(chosen, raw)
    cfg = load_config(config_path)
    check_period(period)
    if engine == "duckdb" and period:
        raise BillingAuditError("--period: local tagging covers every line in the store; --period is for --engine "
                                "spark, bigquery or athena")
    if engine != "duckdb":  # the rules (and the aggregation) run on the engine; hit counts come back
        from billing_audit.engines import run_engine
        from billing_audit.store import checkpoint_params

        checkpoint = cfg.checkpoint_settings()
        merged = {**checkpoint_params(chosen, checkpoint), **typed}
        with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
            run_id = run_engine(store, engine, chosen, cfg, period, "effective", merged,
                                checkpoint, options=engine_options)
            run = engine_run(store, run_id)
            counts = engine_rule_counts(store, run_id)
        return TagResult(engine, run_id, chosen, [(r, counts.get(r.id, 0)) for r in chosen], sum(counts.values()),
                         engine_run=run)
    with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
        result = store.tag(chosen, typed, checkpoint=cfg.checkpoint_settings(), force=force)
    by_id = {r.id: r for r in chosen}
    rows = [(by_id[rid], int(n)) for rid, n in result.hits_by_rule.items()]
    return TagResult(engine, result.run_id, chosen, rows, int(result.hits), scans=result.scans,
                     failed=list(result.failed), unchanged=result.unchanged, slices=result.slices,
                     incremental=result.plan.summary() if result.plan is not None else None)


# -- report and export --------------------------------------------------------------------------------------------
@dataclass
class ReportResult:
    report: Report
    engine_run: EngineRun | None = None  # the engine run the report reads, when not duckdb
    as_of: datetime | None = None  # the data's as-of time (:func:`data_as_of`), shown in the HTML title


def _engine_report(store: Any, cfg: Config, period: str | None, basis: str, engine: str,
                   options: EngineOptions | None, reuse: bool) -> ReportResult:
    """The report with the work done on ``engine``: the latest matching engine run when ``reuse``, else a new one."""
    from billing_audit.engines import expected_source, options_from_flat, pipeline, run_engine
    from billing_audit.pricing import prices_key
    from billing_audit.report import build_report
    from billing_audit.rules import load_rules as load
    from billing_audit.store import checkpoint_params

    opts = options or options_from_flat(engine)
    rules = load().rules
    checkpoint = cfg.checkpoint_settings()
    params = checkpoint_params(rules, checkpoint)
    source = expected_source(store, engine, opts)

    def one(b: str, p: str | None) -> tuple[int, bool]:
        key = pipeline.config_key(cfg, rules, params, prices_key(store.con))
        found = pipeline.latest_run(store.con, engine, p, b, key, source) if reuse else None
        if found is not None:
            return found, True
        return run_engine(store, engine, rules, cfg, p, b, params, checkpoint, options=opts), False

    # One computation per period: over all periods, one run per period the store holds (when it holds several),
    # summed like the local report.  Savings are measured at effective cost whatever the basis shown: another basis
    # needs the effective run too.
    from billing_audit.report import store_periods

    periods = store_periods(store) if period is None and store._has_table("slices") else []
    if len(periods) > 1:
        runs: dict[str, int] = {}
        savings: dict[str, int] = {}
        reused = True
        for p in periods:
            runs[p], was = one(basis, p)
            if basis != "effective":
                savings[p] = one("effective", p)[0]
            reused = reused and was
        run = engine_run(store, runs[periods[-1]], reused=reused)
        return ReportResult(build_report(store, cfg, None, basis, engine_run=runs,
                                         savings_run=savings or None), run)
    savings_run = one("effective", period)[0] if basis != "effective" else None
    run_id, reused = one(basis, period)
    run = engine_run(store, run_id, reused=reused)
    return ReportResult(build_report(store, cfg, period, basis, engine_run=run_id, savings_run=savings_run), run)


def report(db: str | Store, config_path: str | None = None, period: str | None = None, basis: str = "effective",
           engine: str = "duckdb", engine_options: EngineOptions | None = None, *, wait: float | None = None,
           on_wait: Callable[[str], None] | None = None, rules_fired: bool = True) -> ReportResult:
    """Interruption overhead per job and team.  On another engine, an earlier run with the same source,
    period, basis, config and rules is reused; otherwise the engine runs the rules and the aggregation.
    ``rules_fired`` False: the report's rules fired are left out (None; only the HTML shows them)."""
    from billing_audit.config import load_config
    from billing_audit.report import build_report

    check_period(period)
    cfg = load_config(config_path)
    if engine != "duckdb":  # the engine run is stored: a write; the store must exist when the engine reads its lines
        from billing_audit.engines import engine as get_engine
        from billing_audit.engines import options_from_flat

        if get_engine(engine).reads_store(engine_options or options_from_flat(engine)):
            require_store(db)
        with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
            result = _engine_report(store, cfg, period, basis, engine, engine_options, reuse=True)
            period_warning(store, period, result.report)
            result.as_of = data_as_of(store, period)
            return result
    with _opened(db) as store:
        result = ReportResult(build_report(store, cfg, period, basis, rules_fired=rules_fired),
                              as_of=data_as_of(store, period))
        period_warning(store, period, result.report)
        return result


def data_as_of(store: Store, period: str | None = None) -> datetime | None:
    """The newest export time of the deliveries that own ``period`` (all periods when None), as
    :func:`summary_report` finds it; None when the store holds none."""
    row = store.con.execute(
        "SELECT max(d.version) FROM slices s JOIN deliveries d USING (ingest_id) "
        "WHERE $period IS NULL OR strftime(s.BillingPeriodStart, '%Y-%m') = $period", {"period": period}).fetchone()
    newest = row[0] if row else None
    return newest if isinstance(newest, datetime) else None


def period_warning(store: Any, period: str | None, rep: Report) -> None:
    """A period the store holds no lines for is said (in ``rep.warnings``), with the periods it does hold."""
    from billing_audit.report import store_periods

    if period is None:
        return
    held = store_periods(store)
    if period not in held:
        holds = f"the store holds {', '.join(held)}" if held else "the store holds no lines"
        rep.warnings.append(f"no lines for {period}; {holds}")


def require_store(db: str | Path | Store | None) -> None:
    """The store must exist (a read, or a run that only adds to an existing store)."""
    from billing_audit.store import resolve_db

    if isinstance(db, Store):
        return
    path = resolve_db(db)
    if not path.exists():
        raise BillingAuditError(f"no store at {path}: run `billing-audit ingest` first")


def export(db: str | Store, out_file: str | Path | None, by: str = "team", fmt: str = "csv", config_path: str | None = None,
           period: str | None = None, basis: str = "effective") -> pl.DataFrame:
    """Write the finance file (per team or job, every billing period unless ``period``); returns its rows.
    ``out_file=None`` writes nothing (:func:`export_text` gives the text for stdout; parquet has none)."""
    from billing_audit import outputs
    from billing_audit.config import load_config
    from billing_audit.report import build_report, store_periods

    check_period(period)
    cfg = load_config(config_path)
    if out_file is None and fmt == "parquet":
        raise BillingAuditError("--out -: parquet is binary and is not written to stdout; give a file name, "
                                "or --format csv or json")
    with _opened(db) as store:
        periods = [period] if period else store_periods(store)
        reports = [build_report(store, cfg, p, basis) for p in periods]
        totals = store_totals(store, periods, basis)
    df = outputs.export_frame(reports, by)
    if out_file is not None:
        check_out_folder(Path(out_file))
        outputs.write_export(df, fmt, Path(out_file))
        out = Path(out_file)
        outputs.write_export(outputs.export_totals(df, totals), fmt, out.with_name(out.stem + ".totals" + out.suffix))
    return df


def store_totals(store: Any, periods: Sequence[str], basis: str = "effective") -> dict[tuple[str, str], Decimal]:
    """The store's own total cost per billing period and currency (on `basis`), straight from its lines: what the
    export's rows must add up to."""
    from billing_audit.rollup import COST_BASES, period_filter

    out: dict[tuple[str, str], Decimal] = {}
    for p in periods:
        rows = store.con.execute(
            f"SELECT coalesce(BillingCurrency, '?'), sum(coalesce({COST_BASES[basis]}, 0)) FROM line_items l "
            f"WHERE {period_filter(p, 'l.BillingPeriodStart')} GROUP BY 1").fetchall()
        out.update({(p, c): v for c, v in rows})
    return out


def export_text(df: pl.DataFrame, fmt: str) -> str:
    """The finance file as text (csv or json), as :func:`export` would write it."""
    from billing_audit import outputs

    if fmt == "parquet":
        raise BillingAuditError("parquet is binary: write it to a file")
    return outputs.export_text(df, fmt)


def render_report(report: Report, fmt: str, as_of: datetime | None = None) -> str:
    """The report as text: json, csv (the job table), markdown, html or table (plain text of the rich tables)."""
    import os

    from billing_audit import outputs

    if fmt == "json":
        return outputs.report_json(report)
    if fmt == "csv":
        from billing_audit import inert

        return inert.csv_text(outputs.finance_rows(report, "job"))
    if fmt == "markdown":
        return outputs.markdown(report)
    if fmt == "html":
        from billing_audit.html import render_html

        return render_html(report, as_of)
    if fmt == "table":
        from rich.console import Console

        with open(os.devnull, "w") as devnull:
            from billing_audit.report_table import render

            buf = Console(record=True, width=200, file=devnull)
            for part in render([report], width=200):  # the terminal's table: top rows, amounts in full
                buf.print(part)
            return buf.export_text()
    raise BillingAuditError(f"--format {fmt!r}: expected table, json, csv, markdown or html")


FAIL_ON = ("over_budget", "switch")


def failing_rows(rep: Report, fail_on: Sequence[str]) -> list[str]:
    """The job rows `fail_on` matches (``over_budget``: a budget broken; ``switch``: switch_to_on_demand), one
    line each, naming the row and why: what ``--fail-on`` lists on stderr before exiting 1."""
    bad = [f for f in fail_on if f not in FAIL_ON]
    if bad:
        raise BillingAuditError(f"--fail-on {bad[0]!r}: choose {' or '.join(FAIL_ON)}")
    out = []
    for r in rep.job_rows:  # the rows the JSON and the frames show (no polars needed)
        who = f"{r['job']} ({r['team']}, {r['provider']}, {r['currency']})"
        if "over_budget" in fail_on and r["over_budget"]:
            out.append(f"over_budget: {who}: {'; '.join(r['budget_breaches'])}")
        if "switch" in fail_on and r["recommendation"] == "switch_to_on_demand":
            out.append(f"switch: {who}: {'; '.join(r['reasons'])}")
    return out


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8); a folder that does not exist is an error (a typo, not a new folder)."""
    p = Path(path)
    check_out_folder(p)
    p.write_text(text, encoding="utf-8")
    return p


def check_out_folder(path: Path) -> None:
    """--out FILE into a folder that does not exist is refused, never created."""
    if not path.parent.is_dir():
        raise BillingAuditError(f"--out {path}: no folder {path.parent}; create it first")


# -- audit --------------------------------------------------------------------------------------------------------
AUDIT_FILES = ("report.html", "report.json", "jobs.csv", "teams.csv")


@dataclass
class AuditResult:
    ingest: IngestReport
    report: Report
    folder: Path
    files: list[Path] = field(default_factory=list)  # what was written, in AUDIT_FILES order
    engine_run: EngineRun | None = None
    tagged: Any = None  # the tag step's tagging.TagResult (local engine); .unchanged: nothing was redone


def _missing(paths: Sequence[str | Path]) -> None:
    """Refuse a local path that does not exist (a lake URI is the engine's to list)."""
    missing = [str(p) for p in paths if not is_uri(str(p)) and not Path(p).exists()]
    if missing:
        raise BillingAuditError(f"no such file or folder: {', '.join(missing)} (nothing was audited)")


def audit_dry_run(paths: Sequence[str | Path], engine: str, engine_options: EngineOptions | None = None) -> str:
    """What ``audit PATHS --engine ENGINE`` would read (an engine that reads the export files itself, as
    spark --source raw): the deliveries, kept or superseded, and their sizes; nothing is written."""
    from billing_audit.engines import engine as get_engine
    from billing_audit.engines import options_from_flat

    _missing(paths)
    if engine == "duckdb":
        raise BillingAuditError("--dry-run: only for an engine that reads the export files itself "
                                "(--engine spark --source raw)")
    eng = get_engine(engine)
    opts = engine_options or options_from_flat(engine)
    text = eng.dry_run(eng.with_paths(opts, list(paths))) if eng.reads_paths(opts) else None
    if text is None:
        raise BillingAuditError(f"--dry-run: --engine {engine} with these options reads no export files "
                                "(--engine spark --source raw does)")
    return text


def _warm(tags: bool) -> list[Any] | None:
    """What :func:`audit` needs after the ingest, readied beside it: the report's modules, and the built-in rules
    with the tagging module (when it tags locally)."""
    import billing_audit.html
    import billing_audit.report  # noqa: F401

    if not tags:
        return None
    import billing_audit.tagging  # noqa: F401
    from billing_audit.rules import load_rules

    return load_rules().rules


def audit(db: str | Store, paths: Sequence[str | Path], out_dir: str | Path = "audit-report", config_path: str | None = None,
          period: str | None = None, basis: str = "effective", engine: str = "duckdb",
          engine_options: EngineOptions | None = None, progress: Progress | None = None,
          on_ingested: Callable[[IngestReport], None] | None = None, *, wait: float | None = None,
          on_wait: Callable[[str], None] | None = None, follow_outside: bool = False,
          force: bool = False) -> AuditResult:
    """The monthly audit: ingest ``paths``, tag, report, and write report.html, report.json, jobs.csv and
    teams.csv to ``out_dir``.  A file that fails to ingest is in ``result.ingest.errors``; the rest is audited.
    ``on_ingested`` is called with the ingest's report before the tagging starts; ``follow_outside`` as for
    :func:`ingest`.  The tag step redoes nothing when nothing changed since the last tag run (``result.tagged``
    says so) unless ``force``."""
    from concurrent.futures import ThreadPoolExecutor

    from billing_audit import inert, outputs
    from billing_audit.config import load_config

    check_period(period)
    _missing(paths)
    cfg = load_config(config_path)
    reads_paths = False
    if engine != "duckdb":  # an engine that reads the export files itself (spark --source raw): no local ingest
        from billing_audit.engines import engine as get_engine
        from billing_audit.engines import options_from_flat

        eng = get_engine(engine)
        opts = engine_options or options_from_flat(engine)
        if eng.reads_paths(opts):
            reads_paths, engine_options = True, eng.with_paths(opts, list(paths))
    uris = [str(p) for p in paths if is_uri(str(p))]
    if uris and not reads_paths:
        raise BillingAuditError(f"{uris[0]}: a lake URI: only --engine spark --source raw reads the exports where "
                                "they are; local ingest reads local files (copy them here first, or `billing-audit "
                                "pull` them); nothing was audited")
    # the store opened once for the ingest, the tagging and the report (each open of a large store costs)
    with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store, \
            ThreadPoolExecutor(1, thread_name_prefix="ba-warm") as pool:
        # the rule pack parsed and the report's modules imported while DuckDB ingests (single-threaded Python
        # work that would otherwise wait for the ingest, then hold up the tagging and the report)
        pack = pool.submit(_warm, engine == "duckdb")
        ingested = IngestReport() if reads_paths else ingest(store, paths, progress, config_path,
                                                             follow_outside=follow_outside)
        rules = pack.result()
        from billing_audit.html import render_html
        from billing_audit.report import build_report

        if on_ingested:
            on_ingested(ingested)
        run: EngineRun | None = None
        tagged = None
        if engine != "duckdb":  # rules, attribution and aggregation on the engine; always a fresh run
            res = _engine_report(store, cfg, period, basis, engine, engine_options, reuse=False)
            rep, run = res.report, res.engine_run
        else:
            tagged = store.tag(rules, checkpoint=cfg.checkpoint_settings(), force=force)
            rep = build_report(store, cfg, period, basis)
        as_of = data_as_of(store, period)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(outputs.report_json(rep), encoding="utf-8")
    (folder / "report.html").write_text(render_html(rep, as_of), encoding="utf-8")
    with open(folder / "jobs.csv", "w", newline="", encoding="utf-8") as f:
        inert.write_csv(outputs.finance_rows(rep, "job"), f)
    with open(folder / "teams.csv", "w", newline="", encoding="utf-8") as f:
        inert.write_csv(outputs.finance_rows(rep, "team"), f)
    return AuditResult(ingested, rep, folder, [folder / n for n in AUDIT_FILES], run, tagged)


# -- search -------------------------------------------------------------------------------------------------------
@dataclass
class SearchOutcome:
    result: SearchResult
    saved_rule: Path | None = None  # the rule file written (save_rule)
    over: list[str] = field(default_factory=list)  # currencies whose matched total is above fail_above
    threshold: Decimal | None = None


def parse_amount(value: str | None) -> Decimal | None:
    """The --fail-above amount."""
    if value is None:
        return None
    try:
        return Decimal(value)
    except InvalidOperation:
        raise BillingAuditError(f"--fail-above {value!r}: expected an amount such as 10 or 12.50") from None


def search(db: str | Store, query: str, *, period: str | None = None, since: str | date | None = None,
           provider: str | None = None, limit: int | None = 50, lines: bool = False, exact: bool = False,
           fail_above: str | Decimal | None = None) -> SearchOutcome:
    """Search the bills for words (``limit=None``: every match, as :func:`save_search_rule` needs);
    ``fail_above`` reports the currencies whose matched total is above it.  ``since`` is a date or YYYY-MM-DD."""
    from billing_audit.search import search as run_search

    check_period(period)
    since = check_since(since)
    threshold = fail_above if isinstance(fail_above, Decimal) else parse_amount(fail_above)
    with _opened(db) as store:
        result = run_search(store, query, exact=exact, period=period, since=since, provider=provider,
                            limit=limit, lines=lines)
    return SearchOutcome(result, threshold=threshold, over=result.over(threshold) if threshold is not None else [])


@dataclass
class FeeCheck:
    """``search --fees-without-events``: the reconciliation, and the currencies whose disputable total is above
    ``threshold``."""

    reconciliation: Any  # billing_audit.reconcile.Reconciliation
    over: list[str] = field(default_factory=list)
    threshold: Decimal | None = None

    def to_dict(self, filters: dict[str, Any]) -> dict[str, Any]:
        from billing_audit.jsonout import envelope

        doc = self.reconciliation.to_dict()
        return envelope("fees_without_events", filters, period=doc["period"], events_held=doc["events_held"],
                        providers_reconciled=doc["providers_reconciled"], totals=doc["totals"],
                        fees_without_events=doc["fees_without_events"], not_reconciled=doc["not_reconciled"])


def fees_without_events(db: str | Store, *, period: str | None = None, provider: str | None = None,
                        fail_above: str | Decimal | None = None) -> FeeCheck:
    """The restart-fee lines no interruption event accounts for (billing_audit.reconcile), of ``provider`` when
    given; ``fail_above`` reports the currencies whose disputable total is above it."""
    from billing_audit.reconcile import reconcile

    check_period(period)
    threshold = fail_above if isinstance(fail_above, Decimal) else parse_amount(fail_above)
    with _opened(db) as store:
        rec = reconcile(store, period)
    if provider is not None:
        rec.fees = [f for f in rec.fees if f.provider == provider]
        rec.providers = [p for p in rec.providers if p == provider]
        rec.not_reconciled = [n for n in rec.not_reconciled if n["provider"] == provider]
        rec.without_fee = [i for i in rec.without_fee if i.provider == provider]
    return FeeCheck(rec, rec.over(threshold) if threshold is not None else [], threshold)


def check_save_rule(save_rule: str | Path, force: bool = False) -> Path:
    """The rule file ``--save-rule`` may write: an existing file only with ``force`` (never replaced silently)."""
    path = Path(save_rule)
    if path.exists() and not force:
        raise BillingAuditError(f"--save-rule {path}: the file exists; give --force to overwrite it "
                                "(nothing was written)")
    return path


def save_search_rule(outcome: SearchOutcome, save_rule: str | Path, rule_id: str | None = None,
                     category: str = "custom", force: bool = False) -> Path:
    """Write the rule file that tags exactly the lines ``outcome`` found; its id from ``rule_id`` or the file name.
    An existing file is an error unless ``force``."""
    from billing_audit.search import rule_text

    path = check_save_rule(save_rule, force)
    rid = rule_id or (m.group(0) if (m := re.match(r"[A-Z]{2,5}[0-9]{3,4}", path.name)) else None)
    if not rid:
        raise BillingAuditError(f"--save-rule {save_rule}: name the file after a rule id (e.g. SR100_spot_restart.sql) "
                                "or give --rule-id")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rule_text(outcome.result, rid, category), encoding="utf-8")
    outcome.saved_rule = path
    return path


# -- generate -----------------------------------------------------------------------------------------------------
@dataclass
class Generated:
    provider: str
    rows: int
    folder: str
    files: list[Path]
    seconds: float

    @property
    def size(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def generate(provider: str, rows: int, out_dir: str, seed: int = 0, rows_per_file: int | None = None) -> Generated:
    """Write a synthetic month of ``provider``'s export (only that provider's generator is loaded)."""
    import time

    from billing_audit.generate import generate as run

    started = time.perf_counter()
    files = run(provider, rows, out_dir, seed=seed, rows_per_file=rows_per_file)
    return Generated(provider, rows, out_dir, files, time.perf_counter() - started)


# -- pull ---------------------------------------------------------------------------------------------------------
@dataclass
class PullResult:
    dry_run: DryRun | None = None  # with options.dry_run: what would be fetched (nothing was)
    ingest: IngestReport | None = None  # what the ingest of the fetched files did (None: nothing to ingest)
    failed: bool = False  # a delivery could not be fetched, or a file not ingested: exit 2
    error: str | None = None  # the error the pull ends with, after the ingest


def pull(source: str, options: PullOptions, db: str, *, say: Callable[[Message], None] | None = None,
         progress: FetchProgress | None = None, ingest_progress: Progress | None = None, wait: float | None = None,
         on_wait: Callable[[str], None] | None = None) -> PullResult:
    """Fetch what changed from connector ``source`` (its ``PULLER.Options``), then ingest it into ``db``.

    ``say`` gets the connector's messages as they come (after planning, after fetching); ``progress``
    draws the download, ``ingest_progress(file, rows)`` the ingest.  The store is opened only when
    there is something to ingest."""
    from billing_audit.pulling import puller

    tell = say or (lambda m: None)
    p = puller(source)
    plan = p.plan(options)
    for m in plan.messages:
        tell(m)
    if options.dry_run:
        return PullResult(dry_run=plan.dry_run())
    fetched = p.fetch(plan, progress)
    for m in fetched.messages:
        tell(m)
    report = None
    if fetched.ready:
        with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
            report = p.ingest(store, fetched, ingest_progress)
    return PullResult(ingest=report, failed=fetched.failed or bool(report is not None and report.failed),
                      error=fetched.error)


# -- price references ---------------------------------------------------------------------------------------------
def prices_ingest(db: str | Store, paths: Sequence[str | Path], *, wait: float | None = None,
                  on_wait: Callable[[str], None] | None = None) -> PriceLoad:
    """Load price-reference files (or folders of them) into ``db``, one transaction per file; a file that is not
    a price file is an error naming it.  The store's spot lines are priced again when it has a current tag run."""
    from billing_audit import pricing

    with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
        load = pricing.load_files(store.con, [Path(p) for p in paths])
        if load.added or load.replaced:
            load.repriced = pricing.reprice(store.con)
        return load


@dataclass
class PricePull:
    provider: str
    needs: list[PriceNeed]  # what the spot lines needed (empty: nothing was fetched)
    files: list[Path] = field(default_factory=list)  # what the puller wrote
    load: PriceLoad | None = None  # what loading them did


def prices_cache(db: str | Store, provider: str) -> Path:
    """Where ``prices pull`` keeps what it fetched: beside the store, ``billing-audit-cache/prices/<provider>``."""
    from billing_audit.store import resolve_db

    return (db.path if isinstance(db, Store) else resolve_db(db)).resolve().parent / "billing-audit-cache" / "prices" / provider


def prices_needs(db: str | Store, provider: str | None = None) -> list[PriceNeed]:
    """The on-demand prices the store's spot lines need (no usable export price, no covering reference)."""
    from billing_audit import pricing

    with _opened(db) as store:
        return pricing.needs(store.con, provider)


def prices_pull(db: str | Store, provider: str, options: Any, *, puller: PricePuller | None = None,
                progress: Callable[[str], None] | None = None, wait: float | None = None,
                on_wait: Callable[[str], None] | None = None) -> PricePull:
    """Fetch the references the store's spot lines of ``provider`` need through its ``prices_pull`` part (or
    ``puller``) into the cache beside the store (``options.cache`` when the puller has one), then load them
    exactly as ``prices ingest`` does.  Nothing needed: nothing is fetched."""
    from billing_audit import pricing, registry

    if puller is None:
        if not registry.has_part(provider, "prices_pull"):
            have = ", ".join(registry.with_part("prices_pull")) or "none"
            raise BillingAuditError(f"connector {provider!r} cannot pull price references (those that can: {have}); "
                                    "save its price files and run `billing-audit prices ingest FILE`")
        puller = registry.part(provider, "prices_pull").PULLER
    assert puller is not None
    needs = prices_needs(db, provider)
    result = PricePull(provider, needs)
    if not needs:
        return result
    cache = getattr(options, "cache", None)
    dest = Path(cache) if cache else prices_cache(db, provider)
    dest.mkdir(parents=True, exist_ok=True)
    result.files = list(puller.fetch(needs, dest, options, progress))
    with _opened(db, read_only=False, wait=wait, on_wait=on_wait) as store:
        result.load = pricing.load_files(store.con, result.files) if result.files else pricing.PriceLoad()
        if result.load.added or result.load.replaced:
            result.load.repriced = pricing.reprice(store.con)
    return result


@dataclass
class PriceListing:
    references: list[dict[str, Any]]  # per provider and kind: refs, keys, sources, oldest, newest
    coverage: list[dict[str, Any]]  # per provider and currency: spot cost, priced by source, unpriced


def prices_list(db: str | Store) -> PriceListing:
    """The references held, and how much of the store's spot cost has an on-demand price from each source."""
    from billing_audit import pricing

    with _opened(db) as store:
        return PriceListing(pricing.references(store.con), pricing.coverage(store.con))


def validate(paths: Sequence[str | Path]) -> list[Any]:
    """Describe and check export files without touching any store (:mod:`billing_audit.validate`)."""
    from billing_audit.validate import validate as run

    return run(list(paths))


def validation_json(results: Sequence[Any], filters: dict[str, Any] | None = None) -> dict[str, Any]:
    """`validate --format json`'s document (:mod:`billing_audit.jsonout`)."""
    from billing_audit.validate import to_json

    return to_json(results, filters)


def validation_summary(results: Sequence[Any]) -> dict[str, int]:
    from billing_audit.validate import summary as count

    return count(results)
