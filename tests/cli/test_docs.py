"""The README documents every command and every built-in rule (sqlite-utils' test_docs idea)."""

from __future__ import annotations

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
