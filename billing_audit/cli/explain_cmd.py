"""`billing-audit explain`."""

from __future__ import annotations

import click

from billing_audit import app, jsonout
from billing_audit.cli.console import echo
from billing_audit.cli.options import db_option, format_option, handle_errors

SHOWN = ("ChargeDescription", "x_UsageType", "ServiceName", "ResourceId", "SubAccountId", "ChargePeriodStart",
         "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "PricingCategory", "Tags")


@click.command()
@click.argument("line_item_id")
@db_option
@format_option("text", "json")
@handle_errors
def explain(line_item_id: str, db: str, fmt: str) -> None:
    """Show one line item, every rule that matched it and why, and where it came from.

    Read-only; no store at --db is an error (exit 2).

    \b
    Examples:
      billing-audit explain aws-1b57f7bf1241-7
      billing-audit explain aws-1b57f7bf1241-7 --db audit.duckdb --format json

    JSON: schema_version, generated_at, filters, the line's every column (money as exact
    decimal strings) and its rule hits.
    """
    found = app.explain(db, line_item_id)
    if fmt == "json":
        click.echo(jsonout.dumps(found.to_dict()))
        return
    line = found.line
    echo(f"{line_item_id}: {line.get('x_SourceFile')} row {line.get('x_SourceRow')} ({line.get('x_SourceFormat')})")
    for key in SHOWN:
        echo(f"  {key:<18} {line.get(key)}")
    if not found.hits:
        echo("no rule matched this line (run `billing-audit tag` after ingesting)")
    for h in found.hits:
        echo(f"  matched {h['rule_id']} [{h['category']}]: {h['reason']}")


COMMANDS = (explain,)
