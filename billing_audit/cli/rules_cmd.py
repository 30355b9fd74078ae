"""`billing-audit rules list|show|test`."""

from __future__ import annotations

import sys

import click

from billing_audit import app
from billing_audit.cli.console import echo, print_frame, say
from billing_audit.cli.options import format_option, handle_errors, rules_option


@click.group()
def rules() -> None:
    """List, show and test rule files.

    \b
    Examples:
      billing-audit rules list
      billing-audit rules show BA010
      billing-audit rules test --rules team-rules/
    """


@rules.command("list")
@rules_option
@format_option("table", "csv", "json")
@handle_errors
def rules_list(rule_dirs: tuple[str, ...], fmt: str) -> None:
    """Every loaded rule: id, name, category, severity, providers and source.

    \b
    Example:
      billing-audit rules list --rules team-rules/ --format csv
    """
    print_frame(app.rules_frame(rule_dirs), "rules", fmt)


@rules.command("show")
@click.argument("rule_id")
@rules_option
@handle_errors
def rules_show(rule_id: str, rule_dirs: tuple[str, ...]) -> None:
    """One rule's header, parameters and query.

    \b
    Example:
      billing-audit rules show restart_fee.interrupted_spot
    """
    r = app.rule(rule_id, rule_dirs)
    echo(f"{r.id}  {r.name}  [{r.category}, {r.meta.severity}]  providers: {', '.join(r.meta.providers)}")
    echo(f"{r.meta.title}\nfile: {r.path}")
    if r.meta.description:
        echo("\n" + r.meta.description.strip())
    if r.meta.params:
        echo("\nparameters:")
        for name, p in r.meta.params.items():
            echo(f"  {name} = {p.default!r}  {p.description}")
    echo("\n" + r.sql)


@rules.command("test")
@rules_option
@handle_errors
def rules_test(rule_dirs: tuple[str, ...]) -> None:
    """Check rules: header, SQL safety, binding against the store schema, and case files.

    A case file beside a rule (BA100_x.sql -> BA100_x.cases.yaml) lists rows that
    must match and rows that must not; they are run on a scratch store.

    \b
    Example:
      billing-audit rules test --rules team-rules/
    """
    failures, lines = app.check_rules(rule_dirs)
    for line in lines:
        echo(line)
    if failures:
        say(f"{failures} rule check(s) failed")
        sys.exit(1)


COMMANDS = (rules,)
