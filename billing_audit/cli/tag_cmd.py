"""`billing-audit tag`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from billing_audit.cli.console import print_run, say
from billing_audit.cli.options import (
    config_option,
    db_option,
    engine_options,
    engine_settings,
    handle_errors,
    period_option,
    quiet_option,
    rules_option,
    wait_option,
)

if TYPE_CHECKING:
    from billing_audit import app


@click.command()
@db_option
@rules_option
@click.option("--select", "select", multiple=True, help="Run only rules with this id, name or category; repeatable.")
@click.option("--exclude", "exclude", multiple=True, help="Skip rules with this id, name or category; repeatable.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Set a rule parameter; repeatable.")
@config_option("Config file (checkpoint tags and storage); default ./billing-audit.toml when present.")
@quiet_option("No summary line.")
@period_option("Other engines: only this billing month (BigQuery and Athena need it).")
@engine_options
@wait_option
@click.option("--force", is_flag=True, help="Re-tag even when nothing changed since the last tag run.")
@handle_errors
def tag(db: str, rule_dirs: tuple[str, ...], select: tuple[str, ...], exclude: tuple[str, ...],
        params: tuple[str, ...], config_path: str | None, quiet: bool, period: str | None,
        engine_opts: dict[str, Any], wait: float, force: bool) -> None:
    """Run the rules over the store and record what they match in rule_hits.

    Re-tagging replaces the earlier hits of the rules that run: never duplicates.
    When nothing changed since the last tag run (the lines, the rules and their
    parameters, the checkpoint config, the price references) nothing is redone,
    and it says so; --force re-tags all the same.

    \b
    Examples:
      billing-audit tag                                  # the built-in pack
      billing-audit tag --select restart_fee             # one category
      billing-audit tag --force                          # re-tag though nothing changed
      billing-audit tag --rules team-rules/ --param min_cost=0.01
      billing-audit tag --engine spark --spark-lines s3a://billing/lines/
      BILLING_AUDIT_LOCK_TIMEOUT=60 billing-audit tag   # wait up to 60 s for readers
    """

    from billing_audit import app

    engine, options = engine_settings(engine_opts)
    result = app.tag(db, rule_dirs, select, exclude, params, config_path, period, engine, options,
                     wait=wait, on_wait=say, force=force)
    if result.unchanged:
        say(result.unchanged_message())
    if result.engine_run is not None:
        print_run(result.engine_run)
    if not quiet:
        _print_table(result, engine)
        if result.incremental:
            say(f"incremental: {result.incremental}")
    for e in result.failed:  # always said, and exit 2: the other rules' hits are stored
        say(f"error: rule skipped: {e}")
    if result.failed:
        say(f"{len(result.failed)} rule(s) failed and were skipped; the other rules' hits are stored")
        sys.exit(2)


def _print_table(result: app.TagResult, engine: str) -> None:
    from rich.table import Table

    from billing_audit.cli.console import out
    from billing_audit.inert import text

    table = Table(title=text(f"{'tag' if engine == 'duckdb' else engine} run {result.run_id}"))
    table.add_column("rule")
    table.add_column("category")
    table.add_column("lines", justify="right")
    for rule, n in result.rows:
        table.add_row(text(f"{rule.id} {rule.name}"), text(rule.category), f"{n:,}")
    out.print(table)
    if engine == "duckdb" and result.unchanged:
        say(f"{result.hits:,} hits from {len(result.rows)} rules, as tag run {result.run_id} recorded them")
    elif engine == "duckdb":
        say(f"{result.hits:,} hits from {len(result.rows)} rules in {result.scans} scan(s) of line_items")
    else:
        say(f"{result.hits:,} hits from {len(result.rules)} rules on {engine}; "
            f"aggregates stored as engine run {result.run_id}")


COMMANDS = (tag,)
