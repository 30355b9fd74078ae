"""The ``billing-audit`` command: thin click commands over the library."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import billing_audit
from billing_audit.errors import BillingAuditError
from billing_audit.formats import describe_formats
from billing_audit.store import DEFAULT_DB, IngestReport

F = TypeVar("F", bound=Callable[..., Any])

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db",
        envvar="BILLING_AUDIT_DB",
        default=DEFAULT_DB,
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Store file (env BILLING_AUDIT_DB).",
    )(f)


def handle_errors(f: F) -> F:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return f(*args, **kwargs)
        except BillingAuditError as e:
            if ctx.find_root().params.get("debug"):
                raise
            err.print(f"error: {e}", markup=False)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(billing_audit.__version__, prog_name="billing-audit")
def main(debug: bool) -> None:
    """Audit what interrupted spot GPU training really costs, from cloud billing exports.

    \b
    Examples:
      billing-audit ingest exports/              # load every export file under exports/
      billing-audit summary                      # lines and cost per provider, period, currency
      billing-audit audit fixtures/              # ingest, then summarise (the bundled demo)
    """


INGEST_HELP = f"""Load billing export files or folders into the store.

Each file's format is recognised from its own header or schema:

\b
{describe_formats()}

\b
Folders are searched recursively.  Manifests (AWS *-Manifest.json, Azure
manifest.json/_manifest.json) group files into deliveries; without one, the
data files of a folder are one delivery.  A delivery replaces any older
delivery of the same provider, billing account and billing period, so
ingesting every snapshot of a month counts the month once; re-ingesting an
unchanged delivery does nothing.  A bad file is reported with its row and
column, lands nothing, and the other files still load (exit code 2).

\b
Examples:
  billing-audit ingest cur/my-report/year=2026/month=10/
  billing-audit --debug ingest export.csv.gz --db audit.duckdb
"""


def _run_ingest(db: str, paths: tuple[str, ...], quiet: bool) -> IngestReport:
    show = not quiet and err.is_terminal
    with billing_audit.open(db) as store:
        if not show:
            return store.ingest(list(paths))
        with Progress(
            TextColumn("[bold]ingest"),
            BarColumn(),
            TextColumn("{task.fields[rows]:,} rows · {task.fields[file]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task("ingest", total=None, rows=0, file="")
            total = 0

            def tick(file: str, rows: int) -> None:
                nonlocal total
                total += rows
                bar.update(task, advance=1, rows=total, file=file[-60:])

            return store.ingest(list(paths), progress=tick)


def _print_ingest(report: IngestReport, quiet: bool) -> None:
    for e in report.errors:
        err.print(f"error: {e}", markup=False)
    if quiet and not report.errors:
        return
    parts = [f"{report.count('ingested')} file(s) ingested ({report.rows:,} lines)"]
    if report.count("unchanged"):
        parts.append(f"{report.count('unchanged')} unchanged")
    if report.count("superseded"):
        parts.append(f"{report.count('superseded')} superseded by a newer delivery")
    if report.replaced_rows:
        parts.append(f"{report.replaced_rows:,} lines of older deliveries replaced")
    if report.failed:
        parts.append(f"{report.failed} file(s) failed")
    err.print(", ".join(parts), markup=False)


@main.command(help=INGEST_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@handle_errors
def ingest(paths: tuple[str, ...], db: str, quiet: bool) -> None:
    report = _run_ingest(db, paths, quiet)
    _print_ingest(report, quiet)
    if report.failed:
        sys.exit(2)


def _print_frame(df: pl.DataFrame, title: str, fmt: str) -> None:
    if fmt == "csv":
        click.echo(df.write_csv(), nl=False)
        return
    if fmt == "json":
        click.echo(df.write_json())
        return
    table = Table(title=title, show_lines=False)
    for c in df.columns:
        table.add_column(c, justify="right" if df[c].dtype.is_numeric() else "left")
    for row in df.iter_rows():
        table.add_row(*("" if v is None else f"{v:,.2f}" if hasattr(v, "as_tuple") else str(v) for v in row))
    out.print(table)


format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)


@main.command()
@db_option
@format_option
@handle_errors
def summary(db: str, fmt: str) -> None:
    """Lines and cost in the store per provider, billing period and currency.

    \b
    Example:
      billing-audit summary --format csv > totals.csv
    """
    with billing_audit.open(db) as store:
        _print_frame(store.summary(), "line items in the store", fmt)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@format_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@handle_errors
def audit(paths: tuple[str, ...], db: str, fmt: str, quiet: bool) -> None:
    """Ingest the exports under PATHS, then report on the store.

    \b
    Example:
      billing-audit audit fixtures/ --db demo.duckdb
    """
    report = _run_ingest(db, paths, quiet)
    _print_ingest(report, quiet)
    with billing_audit.open(db) as store:
        _print_frame(store.summary(), "line items in the store", fmt)
    if report.failed:
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
