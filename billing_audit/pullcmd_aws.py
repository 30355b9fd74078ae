"""`billing-audit pull aws`: fetch CUR / CUR 2.0 / FOCUS deliveries from S3, then ingest them.

Thin click layer over :mod:`connectors.aws.pull`; the AWS SDK is imported only when the
command runs (every CLI start imports this module).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

import billing_audit
from billing_audit.cli.console import err, out
from billing_audit.cli.console import print_ingest as _print_ingest
from billing_audit.cli.options import db_option, handle_errors
from billing_audit.errors import BillingAuditError

HELP = """Fetch AWS Cost and Usage Reports from S3, then ingest them.

Finds the exports under s3://BUCKET/PREFIX: CUR 2.0 and FOCUS data exports
(<prefix>/<export>/metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json),
legacy CUR reports (<prefix>/<report>/<yyyymmdd-yyyymmdd>/<report>-Manifest.json)
and legacy Athena parquet (.../year=YYYY/month=M/).  When the credentials may
call them, the Data Exports API (ListExports, GetExport) and the CUR API
(DescribeReportDefinitions) also name the exports and their destination, so
--export/--report alone is enough; without those rights the bucket layout is used.

\b
Only the newest complete delivery of each billing period is fetched:
  - legacy "keep versions": the assembly the period manifest names (older
    assemblies are never downloaded);
  - CUR 2.0 "create new": the execution the period's manifest lists (or the
    newest timestamped folder);  "overwrite": what is there.
Objects whose ETag and size did not change since the last pull are skipped,
interrupted downloads resume (ranged GETs), throttling, 5xx and dropped
connections are retried.  A manifest that lists a missing object, or a key
with ../, is an error for that period and nothing of it is ingested (exit 2).
Files are kept in the cache under their S3 keys; older deliveries of a
period are deleted from the cache once the newer one is ingested.

\b
Authentication: the standard AWS credential chain - environment variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), --profile or
AWS_PROFILE (access keys, assume-role or IAM Identity Center/SSO profiles: run
`aws sso login` first), web identity, then the container or EC2 instance role.
Credentials are never printed.  --endpoint-url sends every call (S3 and the
discovery APIs) to another endpoint, e.g. an S3-compatible store or a test
server; AWS_ENDPOINT_URL_S3 etc. also work.

\b
Permissions (IAM actions):
  s3:ListBucket                         on arn:aws:s3:::BUCKET (prefix PREFIX/*)
  s3:GetObject                          on arn:aws:s3:::BUCKET/PREFIX/*
  kms:Decrypt                           if the bucket uses a customer KMS key
  bcm-data-exports:ListExports          optional: find CUR 2.0 / FOCUS exports
  bcm-data-exports:GetExport            optional: their bucket, prefix, format
  cur:DescribeReportDefinitions         optional: find legacy CUR reports

\b
Examples:
  billing-audit pull aws --bucket my-billing --prefix cur --report gpu-cur --period 2026-10
  billing-audit pull aws --export gpu-cur2 --profile billing-ro       # destination from GetExport
  billing-audit pull aws --bucket my-billing --prefix exports --dry-run
"""


@click.command(help=HELP)
@click.option("--bucket", help="S3 bucket the exports are delivered to (default: from --export/--report via the APIs).")
@click.option("--prefix", default=None, help="Key prefix of the exports (the export's S3 prefix); default: whole bucket.")
@click.option("--export", "export_name", metavar="NAME", help="Only this CUR 2.0 / FOCUS data export.")
@click.option("--report", "report_name", metavar="NAME", help="Only this legacy CUR report.")
@click.option("--period", "periods", multiple=True, metavar="YYYY-MM", help="Only this billing period; repeatable. Default: all.")
@click.option("--profile", help="AWS profile (default: AWS_PROFILE / the credential chain).")
@click.option("--region", help="AWS region of the bucket (default: the profile's / AWS_REGION).")
@click.option("--endpoint-url", help="Send the AWS calls to this endpoint instead (S3-compatible store, test server).")
@db_option
@click.option("--cache", "cache_dir", default="billing-audit-cache/aws", show_default=True, type=click.Path(file_okay=False),
              help="Where downloads are kept, under BUCKET/<key>.")
@click.option("--dry-run", is_flag=True, help="List what would be fetched and its size (reads only the listing and manifests); ingest nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary lines.")
@handle_errors
def command(bucket: str | None, prefix: str | None, export_name: str | None, report_name: str | None,
            periods: tuple[str, ...], profile: str | None, region: str | None, endpoint_url: str | None,
            db: str, cache_dir: str, dry_run: bool, quiet: bool) -> None:
    from billing_audit import registry

    aws_pull = registry.part("aws", "pull")
    describe_plan = aws_pull.describe_plan

    if export_name and report_name:
        raise BillingAuditError("give --export (CUR 2.0 / FOCUS) or --report (legacy CUR), not both")
    clients = aws_pull.AwsClients(profile=profile, region=region, endpoint_url=endpoint_url)
    plan, cache = aws_pull.plan(clients, Path(cache_dir), bucket=bucket, prefix=prefix, export=export_name,
                                report=report_name, periods=periods)
    problems = list(plan.problems)
    if not plan.deliveries and not problems and not quiet:
        err.print(f"nothing to pull under s3://{plan.bucket}/{plan.prefix}"
                  + (f" for {', '.join(periods)}" if periods else ""), markup=False)
    if dry_run:
        for line in describe_plan(list(plan.deliveries), cache):
            out.print(line, markup=False)
        for p in problems:
            err.print(f"error: {p}", markup=False)
        if problems:
            sys.exit(2)
        return
    show = not quiet and err.is_terminal
    fetched = _fetch(aws_pull, clients, plan, cache, show)
    problems += fetched.problems
    if not quiet:
        err.print(f"s3://{plan.bucket}/{plan.prefix}: {len(fetched.fetched)} delivery(ies), "
                  f"{fetched.files_downloaded} file(s) downloaded ({fetched.bytes_downloaded:,} bytes), "
                  f"{fetched.files_cached} unchanged", markup=False)
    for p in problems:
        err.print(f"error: {p}", markup=False)
    report = None
    if fetched.fetched:
        with billing_audit.open(db) as store:
            report = aws_pull.ingest(store, fetched.fetched, cache)
        _print_ingest(report, quiet)
    if problems or (report is not None and report.failed):
        sys.exit(2)


def _fetch(aws_pull: Any, clients: Any, plan: Any, cache: Any, show: bool) -> Any:
    if not show:
        return aws_pull.fetch(clients, plan, cache)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    total_files = sum(len(d.objects) for d in plan.deliveries)
    total_bytes = sum(d.size for d in plan.deliveries)
    with Progress(TextColumn("[bold]pull aws"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TextColumn("{task.fields[done]}/{task.fields[files]} files"), console=err, transient=True) as bar:
        task = bar.add_task("pull", total=total_bytes, done=0, files=total_files)
        done = 0

        def file_done(obj: Any, downloaded: bool) -> None:
            nonlocal done
            done += 1
            bar.update(task, done=done, advance=0 if downloaded else obj.size)

        def on_bytes(n: int) -> None:
            bar.update(task, advance=n)

        result = aws_pull.fetch(clients, plan, cache, progress=on_bytes, file_done=file_done)
    return result
