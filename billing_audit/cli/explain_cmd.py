"""`billing-audit explain`."""

from __future__ import annotations

from typing import Any

import click

from billing_audit.cli.console import echo
from billing_audit.cli.options import config_option, db_option, format_option, handle_errors

SHOWN = ("ChargeDescription", "x_UsageType", "ServiceName", "ResourceId", "SubAccountId", "ChargePeriodStart",
         "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "PricingCategory", "Tags")


@click.command()
@click.argument("line_item_id")
@db_option
@config_option()
@format_option("text", "json")
@handle_errors
def explain(line_item_id: str, db: str, config_path: str | None, fmt: str) -> None:
    """Show one line item, every rule that matched it and why, and where it came from; for a spot line,
    how its on-demand equivalent was found (the export, a price reference or the bill; which price, as of when);
    which job and team the report gives it and why (the tag, the resource's majority tag, the resource-map row or
    the account_teams entry), the category that counts it and, for a checkpoint re-read or egress line, the
    restart window (the interruption opening it) that makes it interruption overhead, or that it is not.

    Read-only; no store at --db is an error (exit 2).

    \b
    Examples:
      billing-audit explain aws-96bc1426b7e8-13 --db demo.duckdb
      billing-audit explain aws-96bc1426b7e8-13 --db demo.duckdb --config billing-audit.toml --format json

    JSON: schema_version, generated_at, filters, the line's every column (money as exact
    decimal strings), its rule hits, on_demand, attribution (job, team, job_from, team_from),
    category and window (null unless a checkpoint re-read or egress line), and for a Kubernetes node's line,
    a pod's record or a GKE cost allocation row, kubernetes (role, node, parts: job, team, weight, share).
    """

    from billing_audit import app, jsonout

    found = app.explain(db, line_item_id, config_path)
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
    od = found.on_demand
    if od is not None:
        echo(on_demand_text(od, line.get("BillingCurrency")))
    for text in placement_text(found.attribution, found.category, found.window):
        echo(text)
    for text in kubernetes_text(found.kubernetes):
        echo(text)


def kubernetes_text(k: dict[str, Any] | None) -> list[str]:
    """A Kubernetes node's line shared out to its pods' jobs (each part's job, team, share), or what a pod record or
    a GKE cost allocation row is."""
    if k is None:
        return []
    out = [f"  kubernetes         {k['reason']}"]
    for p in k.get("parts", []):
        who = "unallocated node share (the line's own attribution)" if p["unallocated_node_share"] else "pod part"
        share = "n/a" if p["share"] is None else f"{p['share']:.6f}"
        rest = "; takes the rounding remainder" if p["gets_rounding_remainder"] else ""
        out.append(f"    {p['job']} / {p['team']}: share {share} (weight {p['weight']:.4f}), {who}{rest}")
    return out


def _source(f: dict[str, Any], what: str) -> str:
    """What gave a job or team its value, in words."""
    s = f.get("source")
    if s == "tag":
        return f"the line's own tag {f['key']}={f['value']}"
    if s == "resource_majority":
        return f"the {what} tag most lines of resource {f['resource']} carry ({f['lines']} of {f['of']} lines)"
    if s == "resource_map":
        return f"resource-map row {f['row']} ({f['pattern']}) of {f['file']}"
    if s == "account_teams":
        return f"account_teams entry {f['account']} (the line's {f['column']})"
    if s == "job_majority":
        return f"the team most lines of job {f['job']} carry ({f['lines']} of {f['of']} lines)"
    return "nothing: tried " + "; ".join(f.get("tried", []))


def placement_text(attr: dict[str, Any] | None, category: str | None, window: dict[str, Any] | None) -> list[str]:
    """Where the report puts the line: job, team and why; its category; its restart window."""
    out = []
    if attr is not None and attr.get("job_from") is None:
        out.append(f"  attribution: n/a ({attr.get('reason')})")
    elif attr is not None:
        where = f" in {attr['period']}" if attr.get("period") else ""
        out.append(f"  job                {attr['job']}{where}, from {_source(attr['job_from'], 'job')}")
        out.append(f"  team               {attr['team']}, from {_source(attr['team_from'], 'team')}")
    if category is None:
        out.append("  category           none: no rule counts it (other cost)")
    else:
        counted = {"restart_fee": "; billed interruption overhead (restart_fees)",
                   "other_compute_charge": "; billed interruption overhead (other_compute_charges)"}.get(category, "")
        out.append(f"  category           {category} (the first in precedence order among its hits){counted}")
    if window is not None:
        if window["linked"]:
            opened = ", ".join(f"{i['start']:%Y-%m-%d %H:%M} ({i['source']})" if i["start"] is not None
                               else f"the stop of a churned spot resource at {i['end']:%Y-%m-%d %H:%M} ({i['source']})"
                               for i in window["interruptions"])
            out.append(f"  restart window     yes: interruption overhead ({window['counted_as']}); the window "
                       f"({window['periods']} periods after the interruption's) opened by the interruption at "
                       f"{opened}")
        else:
            out.append(f"  restart window     no: {window['reason']} ({window['counted_as']})")
    return out


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
