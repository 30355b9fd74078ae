"""`billing-audit ingest`."""

from __future__ import annotations

import sys

import click

from billing_audit.cli.console import Bars, live, print_ingest, say
from billing_audit.cli.options import (
    LazyHelpCommand,
    config_option,
    db_option,
    handle_errors,
    quiet_option,
    wait_option,
)

HEAD = "Load billing export files or folders into the store."
BODY = """Each file's format is recognised from its own header or schema:

\b
{formats}

\b
Folders are searched recursively.  Manifests (AWS *-Manifest.json, Azure
manifest.json/_manifest.json) group files into deliveries; without one, the
data files of a folder are one delivery (older Azure exports: one
<export>_<guid> file per run).  A delivery replaces only an older delivery
of the same export for the same provider, billing account and billing
period, so ingesting every snapshot of a month counts the month once, and a
second export of the month counts beside the first.  Where two exports
deliver the same lines, they are counted once and the ingest says how many
([exports] in the config chooses which export keeps them).  Re-ingesting an
unchanged delivery does nothing.  A bad file is reported with its row and
column, lands nothing, and the other files still load (exit code 2).
The store is created if needed; while readers (report, summary, a notebook)
or another writer hold it, ingest says so and waits up to --wait seconds.

Interruption event files beside the exports are recognised from their
content too and stored once per provider, resource, time and kind (README
"Interruption events and fee reconciliation"):

\b
{sources}

\b
Examples:
  billing-audit ingest cur/my-report/year=2026/month=10/
  billing-audit --debug ingest export.csv.gz --db audit.duckdb
  billing-audit ingest exports/ --wait 120     # a nightly job beside notebooks
  billing-audit ingest exports/ spot-events/   # bills and the providers' event logs
"""


def _body() -> str:
    """The help after its first line: the formats and event sources the connectors read (imported now)."""
    from billing_audit.events import describe_sources
    from billing_audit.formats import describe_formats

    return BODY.format(formats=describe_formats(), sources=describe_sources())


follow_outside_option = click.option(
    "--follow-outside", is_flag=True, default=False,
    help="Also read what lies outside the named PATHS: symlinks pointing elsewhere and manifest keys "
         "resolving elsewhere are read.  Off by default: those are skipped, each with an error (exit 2).")


@click.command(cls=LazyHelpCommand, head=HEAD, body=_body)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@config_option()
@quiet_option("No progress bar or summary line.")
@wait_option
@follow_outside_option
@handle_errors
def ingest(paths: tuple[str, ...], db: str, config_path: str | None, quiet: bool, wait: float,
           follow_outside: bool) -> None:
    from billing_audit import app

    with Bars() as bars:
        report = app.ingest(db, paths, progress=bars.ingest if not quiet and live() else None,
                            config_path=config_path, wait=wait, on_wait=say, follow_outside=follow_outside)
    print_ingest(report, quiet)
    if report.failed:
        sys.exit(2)


COMMANDS = (ingest,)
