"""`billing-audit pull`: fetch exports from the clouds, then ingest them like local files.

Each provider's subcommand lives in its own module (pullcmd_aws, pullcmd_azure,
pullcmd_gcp) over the matching connector; this module only groups them.
"""

from __future__ import annotations

import importlib

import click

PROVIDERS = ("aws", "azure", "gcp")


class _LazyGroup(click.Group):
    """Loads each provider's command when asked for: no import cycle with billing_audit.cli, fast start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [p for p in PROVIDERS if self.get_command(ctx, p) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in PROVIDERS:
            return None
        try:
            mod = importlib.import_module(f"billing_audit.pullcmd_{name}")
        except ModuleNotFoundError as e:  # not built
            if e.name != f"billing_audit.pullcmd_{name}":
                raise
            return None
        cmd = mod.command
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=_LazyGroup)
def pull() -> None:
    """Fetch what changed since the last pull from AWS, Azure or GCP, then ingest it.

    Downloads go to a cache folder (--cache, default ./billing-audit-cache/<provider>)
    that keeps each object under its remote key; only the newest delivery of each
    billing period is fetched, unchanged objects are skipped, partial downloads
    resume.  --dry-run lists what would be fetched and its size.

    \b
    Examples:
      billing-audit pull aws --bucket my-billing --prefix cur --period 2026-10
      billing-audit pull azure --scope /subscriptions/SUB --export gpu-daily
      billing-audit pull gcp --table proj.billing.gcp_billing_export_v1_0123 --month 202610
    """
COMMANDS = (pull,)
