"""The ``billing-audit`` command: thin click commands over :mod:`billing_audit.app`.

One module per command group (``<group>_cmd.py``), each parsing its options, making one call into the
application layer and printing what came back; the options they share, and the error handler, are in
:mod:`billing_audit.cli.options`, what they print in :mod:`billing_audit.cli.console`.
"""

from __future__ import annotations

import click

import billing_audit
from billing_audit.cli.options import common_options, global_options


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
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


def _register() -> None:
    from billing_audit.cli import (
        explain_cmd,
        generate_cmd,
        ingest_cmd,
        lines_export_cmd,
        prices_cmd,
        pull_cmd,
        report_cmd,
        rules_cmd,
        search_cmd,
        summary_cmd,
        tag_cmd,
        validate_cmd,
    )

    for module in (ingest_cmd, summary_cmd, tag_cmd, rules_cmd, explain_cmd, report_cmd, lines_export_cmd, search_cmd,
                   pull_cmd, prices_cmd, generate_cmd, validate_cmd):
        for command in module.COMMANDS:
            main.add_command(common_options(command))


_register()

__all__ = ["main"]
