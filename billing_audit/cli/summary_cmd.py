"""`billing-audit summary`."""

from __future__ import annotations

import click

from billing_audit import app
from billing_audit.cli.console import print_frame
from billing_audit.cli.options import db_option, format_option, handle_errors


@click.command()
@db_option
@format_option("table", "csv", "json")
@handle_errors
def summary(db: str, fmt: str) -> None:
    """Lines and cost in the store per provider, billing period and currency.

    \b
    Example:
      billing-audit summary --format csv > totals.csv
    """
    print_frame(app.summary(db), "line items in the store", fmt)


COMMANDS = (summary,)
