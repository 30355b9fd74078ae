"""`billing-audit pull gcp`: one invoice month of the BigQuery billing export, queried, cached as parquet, ingested.

The Google SDK is imported by connectors.gcp.pull inside its functions, and that module is
imported inside the command: starting the CLI never loads it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from billing_audit.cli.compat import _run_ingest
from billing_audit.cli.console import err
from billing_audit.cli.console import print_ingest as _print_ingest
from billing_audit.cli.options import db_option, handle_errors

HELP = """Query GCP billing export rows of an invoice month from BigQuery, cache them, ingest them.

\b
TABLE is the export table, PROJECT.DATASET.TABLE:
  gcp_billing_export_v1_<ACCOUNT>           standard usage cost export
  gcp_billing_export_resource_v1_<ACCOUNT>  detailed (resource-level) export
  gcp_billing_export_focus_<ACCOUNT>        FOCUS table or view
The kind is read from the table's schema.

\b
One parameterised query per month selects the rows as the export has them
(nested service, sku, project, labels, credits arrays, ...), filtered by
invoice.month = @invoice_month and by partition time - from 3 days before
the month to --late-days (15) after it, since late usage, tax and
adjustments are written after the month ends - so BigQuery bills a small
scan.  The result streams into a parquet file under --cache
(<project>/<dataset>/<table>/invoice_month=YYYYMM/), a full snapshot of the
month that replaces it in the store.  A cheap COUNT(*)/MAX(export_time)
query runs first: when the month has not changed since the last pull,
nothing is downloaded (--force downloads anyway).  --dry-run only asks
BigQuery how many bytes the queries would process.

\b
Authentication: Google application default credentials, in this order -
GOOGLE_APPLICATION_CREDENTIALS (a service-account key file or other
credential file), the gcloud user login (`gcloud auth
application-default login`), or the service account attached to the GCE
VM / GKE pod / Cloud Run service running the command.

\b
Permissions needed:
  roles/bigquery.dataViewer on the export dataset or table
      (bigquery.tables.get, bigquery.tables.getData)
  roles/bigquery.jobUser on the project that runs the query, --project
      (bigquery.jobs.create); it is billed for the bytes the query scans.

\b
Examples:
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_v1_01ABCD_23EF45_678901 --month 202610
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_resource_v1_01ABCD_23EF45_678901 \\
      --month 202610 --project my-analytics-proj --max-bytes-billed 2000000000
  billing-audit pull gcp --table my-proj.billing.gcp_billing_export_v1_01ABCD_23EF45_678901 --month 202611 --dry-run
"""


def _progress_hooks(show: bool):  # type: ignore[no-untyped-def]
    """(context manager, on_start, progress) for a rich bar of rows on a terminal; no-ops otherwise."""
    from contextlib import nullcontext

    if not show:
        return nullcontext(), None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("[bold]pull gcp {task.fields[month]}"), BarColumn(),
                   TextColumn("{task.completed:,.0f}/{task.total:,.0f} rows"), TimeElapsedColumn(),
                   console=err, transient=True)
    state: dict[str, int] = {}

    def on_start(month, total):  # type: ignore[no-untyped-def]
        state["task"] = bar.add_task("rows", total=total or None, month=month.invoice_month)

    def progress(n: int) -> None:
        if "task" in state:
            bar.update(state["task"], advance=n)

    return bar, on_start, progress


@click.command(help=HELP)
@click.option("--table", "table", required=True, metavar="PROJECT.DATASET.TABLE", help="The billing export table.")
@click.option("--month", "months", required=True, multiple=True, metavar="YYYYMM",
              help="Invoice month to pull; repeatable.")
@click.option("--project", "project", metavar="PROJECT",
              help="Project that runs (and pays for) the query; default the table's project.")
@click.option("--cache", "cache", type=click.Path(file_okay=False), default="billing-audit-cache/gcp", show_default=True,
              help="Cache folder for the downloaded months.")
@db_option
@click.option("--dry-run", is_flag=True, help="Print the bytes the queries would process; download nothing.")
@click.option("--max-bytes-billed", "max_bytes", type=click.IntRange(min=1), metavar="BYTES",
              help="Refuse to run a query that would bill more than this (job maximum_bytes_billed).")
@click.option("--late-days", type=click.IntRange(min=0, max=120), default=15, show_default=True,
              help="Days after the month whose partitions are still searched for its late rows.")
@click.option("--force", is_flag=True, help="Download the month even if it looks unchanged since the last pull.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary lines.")
@handle_errors
def command(table: str, months: tuple[str, ...], project: str | None, cache: str, db: str, dry_run: bool,
            max_bytes: int | None, late_days: int, force: bool, quiet: bool) -> None:
    from billing_audit import registry

    gp = registry.part("gcp", "pull")

    ref = gp.parse_table(table, project)  # before any request
    plan = gp.PullPlan(ref=ref, job_project=project or ref.project,
                       months=[gp.parse_month(m) for m in dict.fromkeys(months)], cache_root=Path(cache),
                       late_days=late_days, max_bytes=max_bytes)
    ctx, on_start, progress = _progress_hooks(not quiet and not dry_run and err.is_terminal)
    with ctx:
        info, results = gp.pull(plan, dry_run=dry_run, force=force, on_start=on_start, progress=progress)
    if dry_run:
        for r in results:
            for line in r.lines:
                click.echo(line)
        return
    for r in results:
        if quiet:
            continue
        if r.status == "downloaded":
            processed = f", the query processed {r.bytes_processed:,} bytes" if r.bytes_processed is not None else ""
            err.print(f"{r.month.invoice_month}: {r.rows:,} line(s) downloaded to {r.path} ({r.size:,} bytes{processed})",
                      markup=False)
        elif r.status == "unchanged":
            err.print(f"{r.month.invoice_month}: unchanged since the last pull ({r.rows:,} lines, last export "
                      f"{r.fresh.get('max_export_time') or 'unknown'}): nothing downloaded", markup=False)
        elif r.status == "empty":
            err.print(f"{r.month.invoice_month}: no rows for this invoice month in {info.ref.full}: nothing ingested",
                      markup=False)
    paths = gp.ingest_paths(results)
    if not paths:
        return
    report = _run_ingest(db, tuple(str(p) for p in paths), quiet)
    _print_ingest(report, quiet)
    if report.failed:
        sys.exit(2)

