"""`billing-audit rules list|show|test`."""

from __future__ import annotations

import sys

import click

from billing_audit.cli.console import echo, print_frame, say
from billing_audit.cli.options import bom_option, format_option, handle_errors, rules_option


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
@bom_option
@handle_errors
def rules_list(rule_dirs: tuple[str, ...], fmt: str) -> None:
    """Every loaded rule: id, name, category, severity, providers and source.

    JSON: schema_version, generated_at, filters (the --rules folders) and the rules, each rule's
    providers a list.

    \b
    Examples:
      billing-audit rules list --rules team-rules/ --format csv
      billing-audit rules list --format json | jq '.rules[].id'
    """

    from billing_audit import app, jsonout

    df = app.rules_frame(rule_dirs)
    if fmt == "json":
        click.echo(jsonout.dumps(jsonout.envelope("rules", {"rules": list(rule_dirs)}, rules=jsonout.records(df))))
        return
    print_frame(df.with_columns(df["providers"].list.join(",")) if fmt == "table" else df, "rules", fmt)


@rules.command("show")
@click.argument("rule_id")
@rules_option
@format_option("text", "json")
@handle_errors
def rules_show(rule_id: str, rule_dirs: tuple[str, ...], fmt: str) -> None:
    """One rule's header, parameters and query.

    \b
    Examples:
      billing-audit rules show restart_fee.interrupted_spot
      billing-audit rules show BA010 --format json
    """

    from billing_audit import app, jsonout

    r = app.rule(rule_id, rule_dirs)
    if fmt == "json":
        click.echo(jsonout.dumps(jsonout.envelope("rule", {"rule_id": rule_id, "rules": list(rule_dirs)},
                                                  rule=app.rule_dict(r))))
        return
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
    Examples:
      billing-audit rules test --rules team-rules/
      billing-audit rules test --rules team-rules/SR100_spot_restart.sql
    """

    from billing_audit import app

    failures, lines = app.check_rules(rule_dirs)
    for line in lines:
        echo(line)
    if failures:
        say(f"{failures} rule check(s) failed")
        sys.exit(1)


COMMANDS = (rules,)
