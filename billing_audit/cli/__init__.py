"""The ``billing-audit`` command: thin click commands over :mod:`billing_audit.app`.

One module per command group (``<group>_cmd.py``), each parsing its options, making one call into the
application layer and printing what came back; the options they share, and the error handler, are in
:mod:`billing_audit.cli.options`, what they print in :mod:`billing_audit.cli.console`.
"""

from __future__ import annotations

import click

import billing_audit


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(billing_audit.__version__, prog_name="billing-audit")
def main(debug: bool) -> None:
    """Audit what interrupted spot GPU training really costs, from cloud billing exports.

    \b
    Examples:
      billing-audit ingest exports/              # load every export file under exports/
      billing-audit summary                      # lines and cost per provider, period, currency
      billing-audit audit fixtures/              # ingest, then summarise (the bundled demo)
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
            main.add_command(command)


_register()

__all__ = ["main"]
