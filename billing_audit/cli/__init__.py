"""The ``billing-audit`` command: thin click commands over :mod:`billing_audit.app`.

One module per command group (``<group>_cmd.py``), each parsing its options, making one call into the
application layer and printing what came back; the options they share, and the error handler, are in
:mod:`billing_audit.cli.options`, what they print in :mod:`billing_audit.cli.console`.

The commands load lazily (click's "Lazily Loading Subcommands"): :data:`LAZY_COMMANDS` names each one's
module, imported when the command is asked for, and a command module imports the application layer (DuckDB,
polars, rich) inside its functions, so `billing-audit --help` and `--version` import click alone.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Any

import click

import billing_audit
from billing_audit.cli.options import common_options, global_options

#: command name -> "module:attribute" of its click command (each module's ``COMMANDS`` are all here:
#: tests/cli/test_startup.py).
LAZY_COMMANDS: dict[str, str] = {
    "audit": "billing_audit.cli.report_cmd:audit",
    "explain": "billing_audit.cli.explain_cmd:explain",
    "export": "billing_audit.cli.report_cmd:export",
    "generate": "billing_audit.cli.generate_cmd:generate",
    "ingest": "billing_audit.cli.ingest_cmd:ingest",
    "lines-export": "billing_audit.cli.lines_export_cmd:lines_export",
    "prices": "billing_audit.cli.prices_cmd:prices",
    "pull": "billing_audit.cli.pull_cmd:pull",
    "report": "billing_audit.cli.report_cmd:report",
    "rules": "billing_audit.cli.rules_cmd:rules",
    "search": "billing_audit.cli.search_cmd:search",
    "summary": "billing_audit.cli.summary_cmd:summary",
    "tag": "billing_audit.cli.tag_cmd:tag",
    "validate": "billing_audit.cli.validate_cmd:validate",
}


class LazyGroup(click.Group):
    """A group whose commands are imported when asked for, from ``lazy_commands`` (name -> "module:attr");
    each gets the shared -q/--quiet and --debug (:func:`common_options`) when loaded."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not self.get_command(ctx, click.utils.make_str(args[0])):
            for name in self.lazy_commands:  # an unknown name: "did you mean" picks among every command
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def _load(self, cmd_name: str) -> click.Command:
        module, _, attr = self.lazy_commands[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"{self.lazy_commands[cmd_name]} is not the click command {cmd_name!r}")
        return common_options(command)


@click.group(cls=LazyGroup, lazy_commands=LAZY_COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@global_options
@click.version_option(billing_audit.__version__, prog_name="billing-audit")
def main() -> None:
    """Audit what interrupted spot GPU training really costs, from cloud billing exports.

    `audit PATHS` is the monthly run in one command: it ingests the export files, tags their lines
    with the rules, reports the overhead per training job and team, and writes four files to --out
    (report.html, report.json, jobs.csv, teams.csv).  The other commands are its steps and the
    ways to look into the store.  --db, -q/--quiet and --debug go before the command or after it.

    \b
    Examples:
      billing-audit audit fixtures/ --out demo-report    # ingest, tag, report, write the four files
      billing-audit ingest exports/                      # load every export file under exports/
      billing-audit summary --period 2026-10             # lines and cost per provider, period, currency
      billing-audit --db audit.duckdb search egress      # --db before the command, or after it
    """


def run() -> None:
    """The console script and ``python -m billing_audit.cli``: :func:`main`, then the process ends as soon as its
    output is flushed, without the interpreter's teardown (freeing DuckDB's, polars' and pyarrow's modules object
    by object: about 0.1 s, as much as a small command's own work).  Every store and file a command opens is
    closed before main returns; the exit code is click's (0, 1 for an error, 2 for a usage error)."""
    try:
        main()
        code: Any = 0
    except SystemExit as e:
        code = e.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, exit 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`| head`): nothing more can be written
            stream.flush()
    os._exit(code)


__all__ = ["LAZY_COMMANDS", "LazyGroup", "main", "run"]
