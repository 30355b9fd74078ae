"""`billing-audit prices ingest|pull|list`: price references, what spot would have cost on demand.

``prices pull <name>`` has one subcommand per connector with a ``prices_pull`` part, built from its ``PULLER``
(its ``help`` and ``Options`` model) like ``pull`` is from the export pullers; the group names no provider.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import click

from billing_audit import registry
from billing_audit.cli.console import echo, note, print_frame, say
from billing_audit.cli.options import (
    LazyHelpCommand,
    common_options,
    db_option,
    format_option,
    handle_errors,
    model_options,
    quiet_on,
    wait_option,
)


def _print_load(load: Any) -> None:
    for e in load.errors:
        say(f"error: {e}")
    for told in load.notes():  # what was replaced: always said
        say(f"note: {told}")
    (say if load.errors else note)(load.summary())  # as ingest's summary line: left out by -q unless a file failed
    if load.repriced is None and (load.added or load.replaced):
        note("run `billing-audit tag` to price the spot lines with them")


def _formats() -> str:
    from billing_audit.pricing import describe_formats

    return describe_formats() or "  (no connector has a prices part)"


@click.group()
def prices() -> None:
    """Price references: what the spot lines would have cost on demand, from the providers' price lists.

    Each spot line's on-demand equivalent comes from the export when it carries a usable on-demand price,
    else from a price reference (negotiated before retail, the newest list), else from the same usage
    bought on demand elsewhere in the bill (labelled as the bill's); else it is unpriced and its spot cost
    is left out of the measured savings.

    \b
    Examples:
      billing-audit prices ingest prices/          # saved price lists and API pages
      billing-audit prices pull aws                # fetch what the spot lines need
      billing-audit prices list                    # what is held, and the coverage
    """


INGEST_HEAD = "Load price-reference files (or folders of them) into the store."
INGEST_BODY = """Files are recognised from their content:

\b
{formats}

\b
One transaction per file.  Re-ingesting a file changes nothing; a newer
price list (later publication / fetch time) for the same price replaces
the older one, and says how many it replaced.  `ingest` and `audit` load
these files too when they are among their paths.  With a current tag run
the spot lines are priced again at once.

\b
Examples:
  billing-audit prices ingest ec2-index.csv
  billing-audit prices ingest saved-pages/ --db audit.duckdb
"""


@prices.command("ingest", cls=LazyHelpCommand, head=INGEST_HEAD, body=lambda: INGEST_BODY.format(formats=_formats()))
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@wait_option
@handle_errors
def ingest(paths: tuple[str, ...], db: str, wait: float) -> None:
    from billing_audit import app

    load = app.prices_ingest(db, paths, wait=wait, on_wait=say)
    _print_load(load)
    if load.errors:
        sys.exit(2)


@functools.cache
def _pullers() -> tuple[str, ...]:
    return registry.with_part("prices_pull")


def _build_pull(name: str) -> click.Command:
    from billing_audit import app

    puller = registry.part(name, "prices_pull").PULLER

    @click.command(name, help=puller.help)
    @model_options(puller.Options)
    @db_option
    @wait_option
    @handle_errors
    def command(db: str, wait: float, **values: Any) -> None:

        options = puller.Options(**values)
        quiet = bool(getattr(options, "quiet", False)) or quiet_on()  # -q before or after the name
        result = app.prices_pull(db, name, options, puller=puller, progress=None if quiet else say, wait=wait,
                                 on_wait=say)
        if not result.needs:
            note(f"nothing to pull: every {name} spot line has an on-demand price from the export or a reference")
            return
        note(f"{len(result.needs)} on-demand price(s) needed by {sum(n.lines for n in result.needs):,} spot line(s); "
            f"{len(result.files)} file(s) fetched")
        if result.load is not None:
            _print_load(result.load)
            if result.load.errors:
                sys.exit(2)

    return common_options(command)


class PricesPullGroup(click.Group):
    """The connectors that can pull price references, listed without importing their SDKs."""

    builds_commands = True  # common_options: each subcommand gets -q and --debug when built

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_pullers())

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return _build_pull(name) if name in _pullers() else None


@prices.group("pull", cls=PricesPullGroup)
def pull() -> None:
    """Fetch the on-demand prices the store's spot lines need, then load them.

    Only what is needed is fetched: the spot lines without a usable on-demand price in the export and
    without a covering reference (those priced from the bill too), per price key, region, unit and
    currency over their charge periods.  Files go to billing-audit-cache/prices/<provider> beside the
    store and are loaded exactly as `prices ingest` loads them, so a second pull fetches nothing.

    \b
    Examples:
      billing-audit prices pull aws
    """


@prices.command("list")
@db_option
@format_option("table", "csv", "json")
@handle_errors
def list_(db: str, fmt: str) -> None:
    """The price references held (per provider and kind) and the coverage of the store's spot lines: their
    cost priced by the export, a reference or the bill, and unpriced (from the last tag run).  Read-only.

    \b
    Examples:
      billing-audit prices list
      billing-audit prices list --format json
    """

    import polars as pl

    from billing_audit import app

    listing = app.prices_list(db)
    refs = pl.DataFrame(listing.references) if listing.references else pl.DataFrame(
        schema={"provider": pl.String, "kind": pl.String, "refs": pl.Int64})
    cov = pl.DataFrame(listing.coverage) if listing.coverage else pl.DataFrame(
        schema={"provider": pl.String, "currency": pl.String, "spot_lines": pl.Int64})
    if fmt == "json":
        import json

        from billing_audit.inert import json_inert

        doc = {"references": refs.to_dicts(), "coverage": cov.to_dicts()}
        echo(json_inert(json.dumps(doc, default=str, indent=2)))
        return
    print_frame(refs, "price references held", fmt)
    print_frame(cov, "spot lines' on-demand prices, by source (last tag run)", fmt)


COMMANDS = (prices,)
