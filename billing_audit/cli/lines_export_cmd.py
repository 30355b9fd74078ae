"""`billing-audit lines-export`."""

from __future__ import annotations

import click

from billing_audit.cli.console import note
from billing_audit.cli.options import db_option, handle_errors, period_option


@click.command("lines-export")
@click.argument("folder", type=click.Path(file_okay=False))
@db_option
@period_option()
@handle_errors
def lines_export(folder: str, db: str, period: str | None) -> None:
    """Write the store's canonical line items as parquet partitioned by provider and billing period.

    For Spark (`--engine spark --spark-lines FOLDER`) or any parquet reader.  A folder this
    command wrote before is replaced whole; another non-empty folder is refused.  Reads the
    store read-only; no store at --db is an error (exit 2).

    \b
    Examples:
      billing-audit lines-export lines/ --period 2026-10
      billing-audit tag --engine spark --spark-lines lines/
      billing-audit lines-export lines/ --db audit.duckdb
    """

    from billing_audit import app

    n = app.lines_export(db, folder, period)
    note(f"wrote {n:,} line items to {folder}")


COMMANDS = (lines_export,)
