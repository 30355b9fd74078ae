"""Dump every help text the command line prints into a folder, to diff two versions byte for byte.

For the top level and every group, command and subcommand (``pull``'s and ``prices pull``'s included):
``--help`` at COLUMNS=80 and COLUMNS=200; plus ``--version``, the bare command, and the "did you mean"
answers to mistyped commands.  Each case is a fresh ``billing-audit`` process; its stdout, stderr and exit
code go into one file per case.

    .venv/bin/python bench/help_snapshot.py /tmp/help-main     # on main
    .venv/bin/python bench/help_snapshot.py /tmp/help-branch   # on the branch
    diff -r /tmp/help-main /tmp/help-branch
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import click

CLI = str(Path(sys.executable).parent / "billing-audit")
TYPOS = (("reprot",), ("expor",), ("rules", "lsit"), ("prices", "lst"), ("pull", "awz"), ("prices", "pull", "aw"),
         ("nosuch",))


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The top level, every group and every command under it."""
    out = [prefix]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            out += command_paths(cmd, (*prefix, name))
        elif cmd is not None:
            out.append((*prefix, name))
    return out


def run(args: list[str], columns: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_AUDIT_")}
    env.update(COLUMNS=str(columns), NO_COLOR="1", LC_ALL="C.UTF-8")
    p = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=120)
    return f"$ billing-audit {' '.join(args)}\n-- exit {p.returncode}\n-- stdout\n{p.stdout}-- stderr\n{p.stderr}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="Folder to write the snapshots to (created).")
    folder = ap.parse_args().folder
    folder.mkdir(parents=True, exist_ok=True)
    from billing_audit.cli import main as cli

    cases: list[tuple[str, list[str], int]] = []
    for path in command_paths(cli):
        name = "-".join(path) or "_top"
        for columns in (80, 200):
            cases.append((f"{name}.help.{columns}", [*path, "--help"], columns))
    cases.append(("_version", ["--version"], 80))
    cases.append(("_bare", [], 80))
    for typo in TYPOS:
        cases.append(("_typo-" + "-".join(typo), list(typo), 80))
    for name, args, columns in cases:
        (folder / f"{name}.txt").write_text(run(args, columns))
    print(f"{len(cases)} cases written to {folder}")


if __name__ == "__main__":
    main()
