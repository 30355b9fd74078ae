"""The README documents every command and every built-in rule (sqlite-utils' test_docs idea)."""

from __future__ import annotations

import re

import click

from billing_audit.cli import main
from billing_audit.rules import CATEGORIES, load_rules
from support import ROOT

README = (ROOT / "README.md").read_text()


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out += _commands(cmd, full + " ")
        else:
            out.append(full)
    return out


def test_every_command_is_in_the_readme() -> None:
    missing = [c for c in _commands(main) if f"billing-audit {c}" not in README]
    assert not missing, f"commands not shown in README.md: {missing}"


def test_every_builtin_rule_and_category_is_in_the_readme() -> None:
    for rule in load_rules().rules:
        assert rule.id in README and rule.name in README, rule.id
    for cat in CATEGORIES:
        assert f"`{cat}`" in README, cat


def _every_command(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The top level, every group and every command (pull's subcommands are built when asked for)."""
    out = [prefix]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += _every_command(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_every_help_has_an_examples_block() -> None:
    from click.testing import CliRunner

    paths = _every_command(main)
    assert ("pull", "gcp") in paths and ("rules", "show") in paths and () in paths
    for path in paths:
        r = CliRunner().invoke(main, [*path, "--help"], terminal_width=200)
        assert r.exit_code == 0, (path, r.output)
        after = r.output.split("Examples:", 1)
        assert len(after) == 2, f"billing-audit {' '.join(path)} --help has no Examples block"
        block = after[1].split("\nOptions:", 1)[0]
        examples = [ln.strip() for ln in block.splitlines() if ln.strip().startswith(("billing-audit ", "BILLING_AUDIT"))]
        assert any(e.startswith("billing-audit " + " ".join(path)) for e in examples) or (path == () and examples), \
            f"billing-audit {' '.join(path)} --help: no example of the command itself: {examples}"


def test_top_level_help_says_what_audit_does() -> None:
    from click.testing import CliRunner

    text = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
    for words in ("ingests the export files", "tags their lines", "reports the overhead",
                  "report.html, report.json, jobs.csv, teams.csv", "--db, -q/--quiet and --debug go before",
                  "audit The monthly audit in one command: ingest PATHS, tag, report, write four files."):
        assert words in text, words


def _definitions() -> dict[str, str]:
    """The README's definitions table: each field (a backticked name in the first cell) and its formula."""
    start = README.index("**Definitions.**")
    table = README[start:README.index("**Restart windows.**", start)]
    out: dict[str, str] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        fields, formula = line[2:].split(" | ", 1)
        for name in re.findall(r"`([a-z_]+)`", fields):
            out[name] = formula
    return out


def test_the_readmes_formulas_name_the_columns_the_json_has() -> None:
    """Every job field of the JSON is defined in the README, every defined field is in the JSON, and every
    column a formula names is one of the JSON's (or a config key it names)."""
    from billing_audit.report import FINANCE_COLUMNS, JOB_EXTRA, JOB_FIELDS

    defined = _definitions()
    json_fields = set(JOB_FIELDS) | set(JOB_EXTRA)
    assert set(defined) == json_fields, (set(defined) ^ json_fields)
    config_keys = {"checkpoint_interval_minutes", "restart_minutes", "fee_lines", "signals", "inferred", "none",
                   "switch_to_on_demand", "review", "keep_spot", "attribute", "spike", "on_demand_cost", "spot_cost",
                   "overhead", "daily", "n/a"}
    for field, formula in defined.items():
        named = set(re.findall(r"`([a-z_]+)`", formula))
        unknown = {n for n in named if n not in json_fields and n not in config_keys and not n.startswith("budgets")}
        assert not unknown, f"{field}: the formula names {unknown}, which the JSON does not have"
    listed = re.findall(r"`([a-z_]+)`", README[README.index("**The finance columns**"):README.index(
        "(per job, the advice")])
    assert listed[-len(FINANCE_COLUMNS):] == FINANCE_COLUMNS  # the same columns, in the same order
