"""`billing-audit search`."""

from __future__ import annotations

import sys

import click

from billing_audit.cli.console import note, print_frame, say
from billing_audit.cli.options import (
    ConnectorChoice,
    bom_option,
    db_option,
    format_option,
    handle_errors,
    period_option,
    since_option,
)


@click.command()
@click.argument("query", required=False)
@db_option
@period_option()
@since_option
@click.option("--provider", type=ConnectorChoice(None), help="Only this provider.")
@format_option("table", "json", "csv")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many rows; the output says how many more matched.")
@click.option("--lines", "show_lines", is_flag=True, help="List the line items (id, source file and row), not groups.")
@click.option("--exact", is_flag=True, help="Match the words as typed, without word families.")
@click.option("--fail-above", type=str, metavar="AMOUNT",
              help="Exit 1 when the matched total in any currency is above AMOUNT.")
@click.option("--fees-without-events", "fees_check", is_flag=True,
              help="Instead of words: the restart-fee lines no interruption event accounts for (what to dispute); "
                   "--fail-above then applies to their disputable total per currency.")
@click.option("--save-rule", type=click.Path(dir_okay=False), metavar="FILE.sql",
              help="Write a rule file that tags exactly the lines found.")
@click.option("--rule-id", help="Id of the saved rule (default: the start of FILE's name, e.g. SR100_x.sql).")
@click.option("--category", default="custom", show_default=True, help="Category of the saved rule.")
@click.option("--force", is_flag=True, help="--save-rule: overwrite the rule file if it exists.")
@bom_option
@handle_errors
def search(query: str | None, db: str, period: str | None, since: str | None, provider: str | None, fmt: str,
           limit: int, show_lines: bool, exact: bool, fail_above: str | None, fees_check: bool, save_rule: str | None,
           rule_id: str | None, category: str, force: bool) -> None:
    """Search the bills for words, e.g. whether you are charged per restart.

    Searches descriptions, usage types, operations, meters, services and resource
    names, case- and accent-insensitively; every word must match.  Word families
    make a word mean the same across providers (--exact turns them off):
    interrupt ~ interruption ~ evict ~ eviction ~ preempt ~ preemption ~ preemptible ~ reclaim;
    restart ~ recovery ~ relaunch ~ resume ~ "preemption overhead";
    spot ~ preemptible ~ low priority;
    egress ~ bandwidth ~ "data transfer out" ~ out-bytes ~ inter-region;
    re-read ~ retrieval ~ "read operations" ~ "get and all other requests" ~ "class b operations";
    storage ~ blob ~ bucket ~ "data stored" (the table: billing_audit/search.py FAMILIES).
    Read-only; no store at --db is an error (exit 2).

    \b
    Examples:
      billing-audit search "spot restart"
      billing-audit search interrupt --provider azure --period 2026-10 --format json
      billing-audit search "spot restart" --fail-above 10 --format json   # daily automation
      billing-audit search restart --format csv | head -1                 # a closed pipe exits 0
      billing-audit search "spot restart" --save-rule team-rules/SR100_spot_restart.sql
      billing-audit search egress --since 2026-10-01 --format csv --bom > egress.csv
      billing-audit search --fees-without-events --fail-above 0 --format json  # fees no event accounts for

    JSON: schema_version, generated_at, the filters, "matched" (groups and lines in all) and
    "left_out" (what --limit did not list); money as exact decimal strings.  --save-rule never
    replaces an existing file unless --force (exit 2, naming the file).

    --fees-without-events (no QUERY): the restart-fee lines of --period (and --provider) that the interruption
    events in the store do not account for, with line id, resource, charge period, billed and disputable amounts
    (README "Fee reconciliation"); exit 1 with --fail-above when a currency's disputable total is above it.
    """

    from billing_audit import app, inert, jsonout

    if fees_check:
        _fees_without_events(query, db, period, since, provider, fmt, fail_above, bool(save_rule or show_lines or exact))
        return
    if query is None:
        raise click.UsageError("give a QUERY (the words to search for), or --fees-without-events")
    if save_rule:
        app.check_save_rule(save_rule, force)  # before the search: nothing is run for a file that cannot be written
    found = app.search(db, query, period=period, since=since, provider=provider,
                       limit=None if save_rule else limit, lines=show_lines, exact=exact, fail_above=fail_above)
    result = found.result
    if fmt == "json":
        click.echo(jsonout.dumps(result.to_dict()))
    elif fmt == "csv":
        df = result.lines if show_lines and result.lines is not None else result.groups
        df = df.with_columns(df["accounts"].list.join(";")) if "accounts" in df.columns else df
        click.echo(inert.csv_text(df), nl=False)
    else:
        terms = "; ".join(f"{w}: {' | '.join(alts)}" for w, alts in result.terms)
        note(f"searching for every word of {query!r} ({terms})")
        if show_lines and result.lines is not None:
            print_frame(result.lines, "matching line items", "table")
        else:
            print_frame(result.groups.with_columns(result.groups["accounts"].list.join(", ")), "matches", "table")
        print_frame(result.totals, "totals per currency", "table")
        left = result.left_out()
        if not save_rule and any(left.values()):
            shown = " and ".join(f"{n:,} more {k}" for k, n in left.items() if n)
            say(f"{shown} matched than --limit {limit} lists (give a larger --limit to see them)")
    if save_rule:
        path = app.save_search_rule(found, save_rule, rule_id, category, force)
        note(f"wrote {path}: `billing-audit rules test --rules {path.parent}` checks it")
    if found.over:
        say(f"matched total above {found.threshold} in {', '.join(found.over)}")
        sys.exit(1)


def _fees_without_events(query: str | None, db: str, period: str | None, since: str | None, provider: str | None,
                         fmt: str, fail_above: str | None, other: bool) -> None:
    from billing_audit import app, inert, jsonout

    if query is not None or since or other:
        raise click.UsageError("--fees-without-events takes no QUERY, --since, --lines, --exact or --save-rule "
                               "(it lists fee lines, not words; --period and --provider narrow it)")
    check = app.fees_without_events(db, period=period, provider=provider, fail_above=fail_above)
    rec = check.reconciliation
    doc = check.to_dict({"period": period, "provider": provider, "fail_above": fail_above})
    if fmt == "json":
        click.echo(jsonout.dumps(doc))
    elif fmt == "csv":
        import polars as pl

        cols = ["line_id", "provider", "resource_id", "charge_period_start", "charge_period_end", "restarts_billed",
                "interruptions_observed", "restarts_unmatched", "billed_cost", "disputable_amount", "currency", "status",
                "source"]
        rows = [{c: None if f[c] is None else str(f[c]) for c in cols} for f in doc["fees_without_events"]]
        df = pl.DataFrame(rows, schema={c: pl.Utf8 for c in cols})
        click.echo(inert.csv_text(df), nl=False)
    else:
        if not rec.providers:
            say("no interruption events in the store: nothing to reconcile the restart fees with "
                "(ingest the providers' event logs beside the bills)")
        from billing_audit.cli.console import print_reconciliation

        print_reconciliation(rec.to_dict(), full=True)
        if rec.providers and not rec.fees_without_events:
            note("every restart fee of the providers reconciled has a matching interruption")
    if check.over:
        say(f"disputable restart fees above {check.threshold} in {', '.join(check.over)}")
        sys.exit(1)


COMMANDS = (search,)
