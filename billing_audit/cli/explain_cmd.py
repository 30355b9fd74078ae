"""`billing-audit explain`."""

from __future__ import annotations

from typing import Any

import click

from billing_audit import app
from billing_audit.cli.console import echo
from billing_audit.cli.options import db_option, handle_errors

SHOWN = ("ChargeDescription", "x_UsageType", "ServiceName", "ResourceId", "SubAccountId", "ChargePeriodStart",
         "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "PricingCategory", "Tags")


@click.command()
@click.argument("line_item_id")
@db_option
@handle_errors
def explain(line_item_id: str, db: str) -> None:
    """Show one line item, every rule that matched it and why, and where it came from; for a spot line,
    how its on-demand equivalent was found (the export, a price reference or the bill; which price, as of when).

    Read-only; no store at --db is an error (exit 2).

    \b
    Examples:
      billing-audit explain aws-1b57f7bf1241-7
      billing-audit explain aws-1b57f7bf1241-7 --db audit.duckdb
    """
    found = app.explain(db, line_item_id)
    line = found.line
    echo(f"{line_item_id}: {line.get('x_SourceFile')} row {line.get('x_SourceRow')} ({line.get('x_SourceFormat')})")
    for key in SHOWN:
        echo(f"  {key:<18} {line.get(key)}")
    if not found.hits:
        echo("no rule matched this line (run `billing-audit tag` after ingesting)")
    for h in found.hits:
        echo(f"  matched {h['rule_id']} [{h['category']}]: {h['reason']}")
    od = found.on_demand
    if od is not None:
        echo(on_demand_text(od, line.get("BillingCurrency")))


def on_demand_text(od: dict[str, Any], currency: str | None) -> str:
    """How a spot line's on-demand equivalent was found: the source, the price key, the price, as of when."""
    key = f"{od.get('price_key')} in {od.get('region')} ({od.get('unit')}, {od.get('currency')})" \
        if od.get("price_key") else "no on-demand counterpart key"
    if od.get("od_cost") is None:
        return f"  on-demand equivalent: n/a ({od.get('reason')})\n  price key          {key}"
    lines = [f"  on-demand equivalent: {od['od_cost']:.4f} {currency} from {od['od_source']}: {od.get('price_ref')}"]
    if od.get("od_unit_price") is not None:
        lines.append(f"  price key          {key}: {od['od_unit_price']:f} per {od.get('unit')} x "
                     f"{od.get('quantity'):f}")
    else:
        lines.append(f"  price key          {key}")
    if od.get("price_as_of") is not None:
        lines.append(f"  price as of        {od['price_as_of']:%Y-%m-%d %H:%M}")
    return "\n".join(lines)


COMMANDS = (explain,)
