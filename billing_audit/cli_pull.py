"""`billing-audit pull`: fetch exports from the clouds, then ingest them like local files.

Each provider's subcommand lives in its own module (pullcmd_aws, pullcmd_azure,
pullcmd_gcp) over the matching connector; this module only groups them.
"""

from __future__ import annotations

import importlib

import click


@click.group()
def pull() -> None:
    """Fetch what changed since the last pull from AWS, Azure or GCP, then ingest it.

    Downloads go to a cache folder (--cache, default ./billing-audit-cache) that
    keeps each object under its remote key; only the newest delivery of each
    billing period is fetched, unchanged objects are skipped, partial downloads
    resume.  --dry-run lists what would be fetched and its size.

    \b
    Examples:
      billing-audit pull aws --bucket my-billing --prefix cur --period 2026-10
      billing-audit pull azure --scope /subscriptions/SUB --export gpu-daily
      billing-audit pull gcp --table proj.billing.gcp_billing_export_v1_0123 --month 202610
    """


for _name in ("aws", "azure", "gcp"):
    try:
        _mod = importlib.import_module(f"billing_audit.pullcmd_{_name}")
    except ModuleNotFoundError as _e:  # not built yet
        if _e.name != f"billing_audit.pullcmd_{_name}":
            raise
        continue
    pull.add_command(_mod.command, _name)
