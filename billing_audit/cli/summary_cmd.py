"""`billing-audit summary`."""

from __future__ import annotations

import click

from billing_audit.cli.console import echo, print_frame
from billing_audit.cli.options import (
    ConnectorChoice,
    bom_option,
    db_option,
    format_option,
    handle_errors,
    period_option,
)


@click.command()
@db_option
@period_option("Only this billing month.")
@click.option("--provider", type=ConnectorChoice(None), help="Only this provider.")
@format_option("table", "csv", "json")
@click.option("--exports", "by_export", is_flag=True,
              help="Only which export's delivery holds each provider, billing account and period (every column).")
@bom_option
@handle_errors
def summary(db: str, period: str | None, provider: str | None, fmt: str, by_export: bool) -> None:
    """Lines and cost in the store per provider, billing period and currency, the totals per currency, the
    data's as-of time (the newest export time of the deliveries shown) and which export's delivery
    currently owns each period.  Read-only; no store at --db is an error (exit 2), never a new empty store.

    --format csv gives the per-period rows; --format json every part, money as exact decimal strings
    (schema_version, generated_at, filters, as_of, totals, periods, owners).

    \b
    Examples:
      billing-audit summary --period 2026-10 --provider aws
      billing-audit summary --format csv --bom > totals.csv
      billing-audit summary --db typo.duckdb             # exit 2: no store at typo.duckdb
      billing-audit summary --exports --format json      # which delivery owns each period
    """

    from billing_audit import app, jsonout

    if by_export:
        held = app.owners(db, period, provider)
        if fmt == "json":
            click.echo(jsonout.dumps(jsonout.envelope("owners", {"period": period, "provider": provider},
                                                      owners=jsonout.records(held))))
        else:
            print_frame(held, "deliveries in the store", fmt)
        return
    found = app.summary_report(db, period, provider)
    if fmt == "json":
        click.echo(jsonout.dumps(found.to_dict()))
        return
    if fmt == "csv":
        print_frame(found.periods, "", "csv")
        return
    print_frame(found.periods, "line items in the store", fmt)
    print_frame(found.totals, "totals per currency (never summed across currencies)", fmt)
    owners = found.owners.select("provider", "billing_account", "period", "export", "lines", "dated", "dated_by")
    print_frame(owners, "which export's delivery holds each period (--exports: every column)", fmt)
    echo(f"data as of {found.as_of:%Y-%m-%d %H:%M:%S} (the newest delivery shown)" if found.as_of
         else "no deliveries in the store" + (" for these filters" if period or provider else ""))


COMMANDS = (summary,)
