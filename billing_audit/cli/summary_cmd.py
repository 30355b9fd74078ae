"""`billing-audit summary`."""

from __future__ import annotations

import click

from billing_audit import app
from billing_audit.cli.console import print_frame
from billing_audit.cli.options import db_option, format_option, handle_errors


@click.command()
@db_option
@format_option("table", "csv", "json")
@click.option("--exports", "by_export", is_flag=True,
              help="Which export's delivery holds each provider, billing account and period (the table shows both).")
@handle_errors
def summary(db: str, fmt: str, by_export: bool) -> None:
    """Lines and cost in the store per provider, billing period and currency, and which export's delivery
    holds each period.  Read-only; no store at --db is an error (exit 2), never a new empty store.

    \b
    Examples:
      billing-audit summary --format csv > totals.csv
      billing-audit summary --db typo.duckdb             # exit 2: no store at typo.duckdb
      billing-audit summary --exports --format json      # which delivery owns each period
    """
    if by_export:
        print_frame(app.owners(db), "deliveries in the store", fmt)
        return
    print_frame(app.summary(db), "line items in the store", fmt)
    if fmt == "table":
        owners = app.owners(db).select("provider", "billing_account", "period", "export", "lines", "dated", "dated_by")
        print_frame(owners, "which export's delivery holds each period (--exports: every column)", fmt)


COMMANDS = (summary,)
