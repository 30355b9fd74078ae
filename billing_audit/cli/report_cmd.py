"""`billing-audit report`, `export` and `audit`: what the store says about interruptions, as tables and files."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from billing_audit.cli.console import Bars, live, note, print_ingest, print_report, print_run, say
from billing_audit.cli.ingest_cmd import follow_outside_option
from billing_audit.cli.options import (
    LazyChoice,
    basis_option,
    bom_option,
    config_option,
    db_option,
    engine_options,
    engine_settings,
    format_option,
    handle_errors,
    period_option,
    quiet_option,
    wait_option,
)

if TYPE_CHECKING:
    from billing_audit.store import IngestReport

def _fail_on_choices() -> tuple[str, ...]:
    from billing_audit import app

    return app.FAIL_ON


fail_on_option = click.option(
    "--fail-on", "fail_on", multiple=True, type=LazyChoice(_fail_on_choices),
    help="Exit 1 when a job row is over_budget (a budget broken) or gets switch_to_on_demand, listing the rows "
         "on stderr (repeatable).")


table_options = [
    click.option("--by", "by", type=click.Choice(["job", "team", "provider", "account"]), default="job",
                 show_default=True,
                 help="Table rows: per job, per team (the report's team rows), the job rows summed per "
                      "provider, or split by billing account as export --by team,provider,account has them and "
                      "summed per account; each per currency."),
    click.option("--top", "top", type=click.IntRange(min=1), default=15, show_default=True,
                 help="Table: the N rows with the biggest overhead (rows with no overhead and no spot cost "
                      "are left out; the line below the table says how many)."),
    click.option("--all", "all_rows", is_flag=True, help="Table: every row, zeros and unattributed ones too."),
]


def table_option(f: Any) -> Any:
    for opt in reversed(table_options):
        f = opt(f)
    return f


def _per_period(db: str, config_path: str | None, period: str | None, basis: str, rep: Any,
                engine_run: Any) -> list[Any]:
    """The reports the table shows: one per period the store holds (a period column) when no --period was
    given and the store holds several, else the report itself.  Each is `report --period P`, so the table's
    rows are the JSON's of that period."""

    from billing_audit import app

    if period is not None or engine_run is not None:
        return [rep]
    from billing_audit.report import store_periods
    from billing_audit.store import open as store_open

    with store_open(db, read_only=True) as store:
        periods = store_periods(store) if store._has_table("slices") else []
    if len(periods) <= 1:
        return [rep]
    return [app.report(db, config_path, p, basis).report for p in periods]


def _print_table(db: str, config_path: str | None, period: str | None, basis: str, result: Any, by: str,
                 top: int, all_rows: bool) -> None:
    for w in result.report.warnings:
        say(f"warning: {w}")
    reports = _per_period(db, config_path, period, basis, result.report, result.engine_run)
    print_report(reports, by, None if all_rows else top, warn=False)


def _fail(rep: Any, fail_on: tuple[str, ...]) -> None:
    from billing_audit import app

    rows = app.failing_rows(rep, fail_on)
    for line in rows:
        say(line)
    if rows:
        sys.exit(1)


@click.command()
@db_option
@config_option()
@period_option()
@format_option("table", "json", "csv", "markdown", "html")
@click.option("--out", "out_file", type=click.Path(dir_okay=False),
              help="Write to this file instead of stdout (- is stdout); its folder must exist.")
@basis_option
@fail_on_option
@table_option
@engine_options
@wait_option
@bom_option
@handle_errors
def report(db: str, config_path: str | None, period: str | None, fmt: str, out_file: str | None, cost_basis: str,
           fail_on: tuple[str, ...], by: str, top: int, all_rows: bool, engine_opts: dict[str, Any],
           wait: float) -> None:
    """Interruption overhead per training job and team, biggest overhead first.

    Reads the store and the rule hits (run `billing-audit tag` first), read-only: side by side with
    other readers.  The table shows the --top 15 rows with overhead or spot cost (--all: every row),
    one (unattributed) row per currency, and one row per period when the store holds several and no
    --period is given; it fits the terminal (COLUMNS) by leaving out low-priority columns, never by
    cutting an amount.  No store at --db is an error (exit 2); a --period the store holds no lines for is
    a warning on stderr (and in the JSON's warnings).  --wait: other engines store their run.

    \b
    Examples:
      billing-audit report --period 2026-10
      billing-audit report --by team --top 5
      billing-audit report --by provider --all
      billing-audit report --by account --period 2026-10
      billing-audit report --format json --out report.json
      billing-audit report --format csv --out - | head -3
      billing-audit report --format html --out report.html --cost-basis billed
      billing-audit report --engine spark --spark-master spark://head:7077
      billing-audit report --period 2026-10 --fail-on over_budget   # exit 1 listing rows over a budget
    """

    from billing_audit import app

    engine, options = engine_settings(engine_opts)
    result = app.report(db, config_path, period, cost_basis, engine, options, wait=wait, on_wait=say,
                        rules_fired=fmt == "html")  # only the HTML shows them (they read every hit in the store)
    if out_file == "-":
        out_file = None
    if result.engine_run is not None:
        print_run(result.engine_run)
    if fmt == "table" and out_file is None:
        _print_table(db, config_path, period, cost_basis, result, by, top, all_rows)
        _fail(result.report, fail_on)
        return
    for w in result.report.warnings:
        say(f"warning: {w}")
    text = app.render_report(result.report, fmt, result.as_of)
    if out_file:
        app.write_text(out_file, text)
        note(f"wrote {out_file}")
    else:
        click.echo(text, nl=False)  # each format is inert already (billing_audit.inert)
    _fail(result.report, fail_on)


@click.command()
@db_option
@config_option()
@period_option()
@click.option("--by", type=click.Choice(["team", "job", "team,provider", "team,account", "team,provider,account"]),
              default="team", show_default=True,
              help="One row per period x team (or job, or team and provider, and/or billing account) x currency.")
@format_option("csv", "parquet", "json")
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="File to write (its folder must exist); - writes csv or json to stdout.")
@basis_option
@bom_option
@handle_errors
def export(db: str, config_path: str | None, period: str | None, by: str, fmt: str, out_file: str,
           cost_basis: str) -> None:
    """The finance file: per-team (or per-job) interruption surcharges.

    One row per billing period x team (or job) x currency with every component and
    the total; a file beside it (NAME.totals.EXT) sums the rows per period and currency and
    shows the store's own total cost beside them (ties: true).  CSV is plain RFC 4180; text cells that start with = + - @ are
    prefixed with ' so a tag value cannot become a spreadsheet formula.

    \b
    Examples:
      billing-audit export --by team --format csv --out surcharges-2026-10.csv --period 2026-10
      billing-audit export --by job --format parquet --out jobs.parquet
      billing-audit export --format json --out - | jq length
    """

    from billing_audit import app

    if out_file == "-":
        df = app.export(db, None, by, fmt, config_path, period, cost_basis)
        click.echo(app.export_text(df, fmt), nl=False)
        return
    df = app.export(db, out_file, by, fmt, config_path, period, cost_basis)
    note(f"wrote {out_file} ({df.height} rows)")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@config_option()
@period_option()
@click.option("--out", "out_dir", default="audit-report", show_default=True, type=click.Path(file_okay=False),
              help="Folder for report.html, report.json, jobs.csv and teams.csv.")
@basis_option
@fail_on_option
@table_option
@quiet_option("No progress bar or table.")
@engine_options
@wait_option
@bom_option
@follow_outside_option
@click.option("--force", is_flag=True, help="Re-tag even when nothing changed since the last tag run.")
@click.option("--dry-run", is_flag=True,
              help="With --engine spark --source raw: list the deliveries it would read, kept or superseded, and "
                   "their sizes; nothing is audited or written.")
@handle_errors
def audit(paths: tuple[str, ...], db: str, config_path: str | None, period: str | None, out_dir: str,
          cost_basis: str, fail_on: tuple[str, ...], by: str, top: int, all_rows: bool, quiet: bool,
          engine_opts: dict[str, Any], wait: float, follow_outside: bool, force: bool, dry_run: bool) -> None:
    """The monthly audit in one command: ingest PATHS, tag, report, write four files.

    Writes report.html, report.json, jobs.csv and teams.csv to --out and prints
    the job table.  Exits 2 if a file failed to ingest (the rest is still audited), and
    if a PATH does not exist (nothing is audited).

    \b
    Examples:
      billing-audit audit fixtures/ --db demo.duckdb --out demo-report
      billing-audit audit exports/2026-10/ --period 2026-10 --config billing-audit.toml
      billing-audit audit fixtures/ --engine spark --out spark-report
      billing-audit audit lake/exports/ --engine spark --source raw --dry-run
      billing-audit audit exports/2026-10/ --wait 120    # wait for readers to close the store
    """

    from billing_audit import app

    engine, options = engine_settings(engine_opts)
    if dry_run:
        click.echo(app.audit_dry_run(paths, engine, options))
        return
    with Bars() as bars:
        def ingested(r: IngestReport) -> None:
            bars.stop()
            print_ingest(r, quiet)

        result = app.audit(db, paths, out_dir, config_path, period, cost_basis, engine, options,
                           progress=bars.ingest if not quiet and live() else None, on_ingested=ingested,
                           wait=wait, on_wait=bars.say, follow_outside=follow_outside, force=force)
    if result.tagged is not None and result.tagged.unchanged:
        from billing_audit.tagging import unchanged_message

        say(unchanged_message(result.tagged.run_id, result.tagged.slices))
    elif result.tagged is not None and result.tagged.plan is not None and not quiet:
        say(f"incremental: {result.tagged.plan.summary()}")
    if result.engine_run is not None:
        print_run(result.engine_run)
    if not quiet:
        _print_table(db, config_path, period, cost_basis, result, by, top, all_rows)
    else:  # no table, but the warnings still
        for w in result.report.warnings:
            say(f"warning: {w}")
    note(f"wrote {result.folder}/{', '.join(f.name for f in result.files)}")
    if result.ingest.failed:
        sys.exit(2)
    _fail(result.report, fail_on)


COMMANDS = (report, export, audit)
