"""`billing-audit pull azure`: the click command over connectors.azure.pull (imported only when run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from billing_audit.cli.compat import _run_ingest
from billing_audit.cli.console import err
from billing_audit.cli.console import print_ingest as _print_ingest
from billing_audit.cli.options import db_option, handle_errors
from billing_audit.errors import BillingAuditError

HELP = """Pull Azure Cost Management exports from Blob Storage, then ingest them.

Only the newest completed run of each export and billing period is downloaded
(never every daily snapshot; a newer failed run never wins); blobs already in
the cache with the same ETag are skipped, partial downloads resume.

\b
Two ways to find the runs:
  --scope SCOPE       ask Cost Management for the scope's exports (--export to
                      pick some) and their run history; each run's manifest
                      names its blobs in the export's storage account.
  --storage-url URL   read an export folder directly (no Cost Management access):
  --connection-string every manifest.json / _manifest.json under --path is read,
                      runs are grouped by the billing period the manifest names.

\b
Authentication:
  Cost Management and storage use DefaultAzureCredential: environment
  (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET or certificate),
  workload identity, managed identity, Azure CLI (`az login`), Azure
  PowerShell, azd.  A --storage-url with a SAS token, or a
  --connection-string (env AZURE_STORAGE_CONNECTION_STRING), is used for the
  blobs instead.  Keys, SAS tokens and connection strings are never printed.

\b
Permissions:
  --scope: Cost Management Reader (or Reader) on the scope, i.e.
    Microsoft.CostManagement/exports/read (exports list, get with
    runHistory, runHistory); billing-account/profile scopes need the billing
    reader role there.
  blobs: Storage Blob Data Reader on the storage account or container, i.e.
    Microsoft.Storage/storageAccounts/blobServices/containers/read and
    .../containers/blobs/read; or a SAS with read (r) and list (l).

\b
Examples:
  billing-audit pull azure --scope /subscriptions/SUB --export gpu-daily --period 2026-10
  billing-audit pull azure --scope /providers/Microsoft.Billing/billingAccounts/123 --dry-run
  billing-audit pull azure --storage-url 'https://acct.blob.core.windows.net/costexports/ea?sv=...&sig=...'
  AZURE_STORAGE_CONNECTION_STRING='...' billing-audit pull azure --container costexports --path ea
"""

_PERIOD = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def _periods(values: tuple[str, ...]) -> list[str]:
    out = []
    for v in values:
        for p in v.split(","):
            p = p.strip()
            if not _PERIOD.match(p):
                raise BillingAuditError(f"--period {p!r}: expected YYYY-MM")
            out.append(p)
    return out


@click.command(help=HELP)
@click.option("--scope", help="Cost Management scope: /subscriptions/ID, .../resourceGroups/RG, "
              "/providers/Microsoft.Billing/billingAccounts/ID[/billingProfiles/ID], ...")
@click.option("--export", "exports", multiple=True, metavar="NAME", help="Only this export (repeatable).")
@click.option("--period", "periods", multiple=True, metavar="YYYY-MM", help="Only this billing period (repeatable).")
@click.option("--storage-url", metavar="URL", help="https://ACCOUNT.blob.core.windows.net/CONTAINER[/PATH][?SAS]")
@click.option("--connection-string", envvar="AZURE_STORAGE_CONNECTION_STRING", show_envvar=True, metavar="CS",
              help="Storage connection string (prefer the environment variable to the command line).")
@click.option("--container", help="Blob container (with --connection-string, or to override the export's).")
@click.option("--path", "path", help="Folder in the container holding the export runs (default: all).")
@click.option("--arm-endpoint", envvar="BILLING_AUDIT_AZURE_ARM_ENDPOINT", metavar="URL",
              help="Resource Manager endpoint (sovereign clouds); default https://management.azure.com.")
@click.option("--cache", "cache", type=click.Path(file_okay=False), default=str(Path("billing-audit-cache") / "azure"),
              show_default=True, help="Download cache folder.")
@click.option("--dry-run", is_flag=True, help="List what would be fetched and its size; fetch nothing.")
@db_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@handle_errors
def command(
    scope: str | None,
    exports: tuple[str, ...],
    periods: tuple[str, ...],
    storage_url: str | None,
    connection_string: str | None,
    container: str | None,
    path: str | None,
    arm_endpoint: str | None,
    cache: str,
    dry_run: bool,
    db: str,
    quiet: bool,
) -> None:
    from billing_audit import registry

    ap = registry.part("azure", "pull")
    describe_plan = ap.describe_plan

    wanted = _periods(periods)
    ap.register_secret(connection_string)
    if storage_url:
        ap.parse_storage_url(storage_url)  # registers its SAS as a secret, checks the URL
    root = Path(cache)
    try:
        if scope:
            def open_source(account: str, dest_container: str) -> Any:
                if storage_url or connection_string:
                    return ap.open_container(storage_url=storage_url, connection_string=connection_string,
                                             container=container or dest_container, path=path)
                if not account:
                    raise ap.PullError("the export names no storage account: give --storage-url")
                return ap.open_container(account_url=f"https://{account}.blob.core.windows.net", account=account,
                                         container=container or dest_container, path=path)

            client = ap.cost_client(arm_endpoint=arm_endpoint)
            plans = ap.plan_scope(client, scope, open_source, root, exports=exports, periods=wanted)
        else:
            if not (storage_url or connection_string):
                raise ap.PullError("give --scope, or --storage-url / --connection-string to read an export folder")
            src = ap.open_container(storage_url=storage_url, connection_string=connection_string,
                                    container=container, path=path)
            plans = [ap.plan_container(src, root, periods=wanted, exports=exports)]
    except ap.PullError as e:
        raise ap.PullError(ap.redact(str(e))) from None

    for p in plans:
        for note in p.notes:
            err.print(f"note: {ap.redact(note)}", markup=False)
    if dry_run:
        for p in plans:
            click.echo(f"{p.source.describe()} -> {p.cache.root}")
            for line in describe_plan(p.deliveries, p.cache):
                click.echo(ap.redact(line))
            for e in p.errors:
                click.echo(f"  cannot pull: {ap.redact(e)}")
        if not any(p.deliveries for p in plans) and not any(p.errors for p in plans):
            click.echo("nothing to pull")
        return

    paths, errors, fetched, cached, nbytes = _fetch_all(plans, quiet)
    for e in errors[:-1]:
        err.print(f"error: {ap.redact(e)}", markup=False)
    if not quiet:
        err.print(f"fetched {fetched} file(s) ({nbytes:,} bytes), {cached} unchanged in the cache", markup=False)
    if paths:
        report = _run_ingest(db, tuple(str(x) for x in paths), quiet)
        _print_ingest(report, quiet)
        if report.failed and not errors:
            sys.exit(2)
    elif not errors and not quiet:
        err.print("nothing to ingest", markup=False)
    if errors:
        raise ap.PullError(ap.redact(errors[-1]) + (f" ({len(errors)} problems, see above)" if len(errors) > 1 else ""))


def _fetch_all(plans: list[Any], quiet: bool) -> tuple[list[Path], list[str], int, int, int]:
    from billing_audit import registry

    ap = registry.part("azure", "pull")

    paths: list[Path] = []
    errors: list[str] = []
    fetched = cached = nbytes = 0
    total = sum(d.size for p in plans for d in p.deliveries)
    show = not quiet and err.is_terminal and total > 0

    def run(progress: Any = None, on_file: Any = None) -> None:
        nonlocal fetched, cached, nbytes
        for p in plans:
            res = ap.fetch(p, progress=progress, on_file=on_file)
            paths.extend(res.paths)
            errors.extend(res.errors)
            fetched += res.fetched
            cached += res.cached
            nbytes += res.bytes

    if not show:
        run()
        return paths, errors, fetched, cached, nbytes
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn("[bold]pull azure"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TextColumn("{task.fields[file]}"), console=err, transient=True) as bar:
        task = bar.add_task("pull", total=total, file="")
        run(progress=lambda n: bar.update(task, advance=n),
            on_file=lambda key: bar.update(task, file=key[-60:]))
    return paths, errors, fetched, cached, nbytes
