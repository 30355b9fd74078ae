"""`billing-audit pull <name>`: one subcommand per connector with a ``pull`` part, built from its puller.

The group names no provider: ``billing_audit.pulling`` lists the connectors that can pull, and each
subcommand's help and flags come from that connector's ``PULLER`` (its ``help`` and ``Options`` model),
loaded when the subcommand is asked for.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import click

from billing_audit.cli.console import Bars, echo, live, print_ingest
from billing_audit.cli.options import common_options, db_option, handle_errors, model_options, quiet_on, wait_option
from billing_audit.errors import BillingAuditError

GROUP_HELP = """Fetch what changed since the last pull from {titles}, then ingest it.

Downloads go to a cache folder (--cache, default ./billing-audit-cache/<provider>)
that keeps each object under its remote key; only the newest delivery of each
billing period is fetched, unchanged objects are skipped, partial downloads
resume.  --dry-run lists what would be fetched and its size.
{events}
\b
Examples:
{examples}
"""


@functools.cache
def group_help() -> str:
    """The group's help, from every puller's title and first example."""

    from billing_audit import pulling

    pullers = [pulling.puller(n) for n in pulling.names()]
    exports = [p for p in pullers if not p.name.endswith(pulling.EVENTS)] or pullers
    events = [p for p in pullers if p.name.endswith(pulling.EVENTS)]
    titles = [p.title for p in exports]
    joined = ", ".join(titles[:-1]) + " or " + titles[-1] if len(titles) > 1 else "".join(titles)
    said = "" if not events else (
        "\nThe <provider>-events subcommands fetch interruption event logs instead\n"
        f"({', '.join(p.title for p in events)}): every object whose date\n"
        "folder falls in --period / --since, ingested as `ingest` reads event files.\n")
    return GROUP_HELP.format(titles=joined, events=said, examples="\n".join(f"  {p.example}" for p in exports + events))


def short_help(limit: int) -> str:
    """The group's line in `billing-audit --help`: its first sentence, with the export pullers' titles read from
    their connector packages (``TITLE``) rather than from the pullers, so that listing the commands imports none."""
    from billing_audit import registry

    names = registry.with_part("pull")
    titles = [str(t) for n in names if (t := getattr(registry.connector(n), "TITLE", None))]
    if not names or len(titles) < len(names):  # a connector without TITLE: its puller says
        head = group_help()
    else:
        joined = ", ".join(titles[:-1]) + " or " + titles[-1] if len(titles) > 1 else "".join(titles)
        head = GROUP_HELP.format(titles=joined, events="", examples="")
    return click.Command(None, help=head.partition("\n\n")[0]).get_short_help_str(limit)


def build(name: str) -> click.Command:
    """`pull <name>`: the puller's help, its Options fields as flags (the shared --db where it says), one app call."""

    from billing_audit import app, pulling

    puller = pulling.puller(name)

    @click.command(name, help=puller.help)
    @model_options(puller.Options, shared={puller.db_before: db_option})
    @wait_option
    @handle_errors
    def command(db: str, wait: float, **values: Any) -> None:
        options = puller.Options(**values)
        quiet = bool(options.quiet) or quiet_on()  # -q before or after the name
        show = not quiet and live()
        with Bars() as bars:
            def tell(m: pulling.Message) -> None:
                if m.level != "info" or not quiet:
                    bars.say(str(m))

            result = app.pull(name, options, db, say=tell, progress=bars if show else None,
                              ingest_progress=bars.ingest if show else None, wait=wait,
                              on_wait=bars.say)
        if result.dry_run is not None:
            for line in result.dry_run.lines:
                echo(line)
            for m in result.dry_run.messages:
                tell(m)
            if result.dry_run.failed:
                sys.exit(2)
            return
        if result.ingest is not None:
            print_ingest(result.ingest, quiet)
        if result.error:
            raise BillingAuditError(result.error)
        if result.failed:
            sys.exit(2)

    return common_options(command)


class PullGroup(click.Group):
    """The connectors that can pull, listed without importing them; a subcommand is built when asked for."""

    builds_commands = True  # common_options: each subcommand gets -q and --debug when built

    def list_commands(self, ctx: click.Context) -> list[str]:
        from billing_audit import pulling

        return list(pulling.names())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from billing_audit import pulling

        return build(name) if name in pulling.names() else None

    @property
    def help(self) -> str:
        return group_help()

    @help.setter
    def help(self, value: str | None) -> None:  # click sets it in __init__; the text comes from the pullers
        pass

    def get_short_help_str(self, limit: int = 45) -> str:
        return short_help(limit)


@click.group(cls=PullGroup)
def pull() -> None:
    """Fetch from the clouds, then ingest (the help comes from the pullers: :func:`group_help`)."""


COMMANDS = (pull,)
