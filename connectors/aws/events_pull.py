"""`billing-audit pull aws-events`: EC2 interruption events from S3 (connectors.event_pull), through boto3.

The objects the README names: EventBridge events delivered by Firehose (``<prefix>/YYYY/MM/DD/HH/<stream>-...``,
dated by the arrival of the object's oldest record), CloudTrail log files
(``AWSLogs/<account>/CloudTrail/<region>/YYYY/MM/DD/<account>_CloudTrail_<region>_<YYYYMMDDTHHmmZ>_<id>.json.gz``,
named by the delivery time) and CloudWatch Logs exports (``<prefix>/<task id>/<log stream>/000000.gz``, undated).
Both dates follow the events by minutes (Firehose buffers up to 15 minutes, CloudTrail delivers within about
15), so a period also takes the objects dated an hour either side of it.  CloudTrail's digest files
(``CloudTrail-Digest/``) hold hashes, no events: they are left out, and said.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from connectors.aws.pull import AwsClients, FatalPullError, _reader, list_objects
from connectors.event_pull import EventFetched, EventPlan, EventPuller, Fatal, Layout
from connectors.pull_common import PullError, RemoteObject, RetryableError, download

LAG = timedelta(hours=1)


def _skip(key: str) -> str | None:
    if "/CloudTrail-Digest/" in f"/{key}":
        return "CloudTrail digest files (hashes of the log files, no events)"
    return None


LAYOUT = Layout(lag=LAG, lag_words="an hour", skip=_skip,
                undated_words="CloudWatch Logs exports: <task id>/<log stream>/000000.gz")


class S3Events:
    def __init__(self, clients: AwsClients, bucket: str, prefix: str):
        self.clients, self.bucket, self.prefix = clients, bucket, prefix.strip("/")

    @property
    def source(self) -> str:
        return f"s3://{self.bucket}"

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def list(self) -> list[RemoteObject]:
        return list(list_objects(self.clients, self.bucket, self.prefix).objects.values())

    def fetch(self, obj: RemoteObject, dest: Path, progress: Callable[[int], None] | None) -> None:
        try:
            download(obj, dest, _reader(self.clients, self.bucket, obj, dest), progress=progress)
        except FatalPullError as e:
            raise Fatal(str(e)) from None
        except RetryableError as e:
            raise PullError(f"gave up after 5 attempts: {e}; run the pull again to resume") from None
        dest.with_name(dest.name + ".part.etag").unlink(missing_ok=True)


HELP = """Fetch EC2 interruption events from S3, then store them (as `ingest` does).

Reads the objects under s3://BUCKET/PREFIX: EventBridge EC2 events a Firehose
stream delivers (PREFIX/YYYY/MM/DD/HH/<stream>-<version>-<time>-<id>[.gz]),
CloudTrail log files with BidEvictedEvent
(AWSLogs/<account>/CloudTrail/<region>/YYYY/MM/DD/*.json.gz) and CloudWatch
Logs exports (PREFIX/<task id>/<log stream>/000000.gz).  Each object is
recognised from its content; one that is no event file is an error naming
its key, and nothing of it is stored.

\b
--period YYYY-MM (repeatable) or --since YYYY-MM-DD fetch only the objects
whose date folder falls in it, and those dated an hour either side (Firehose
dates an object by its oldest record's arrival, CloudTrail by its delivery:
minutes after the events).  CloudWatch Logs exports have no date in their
key: they are fetched whatever the period (said).  CloudTrail digest files
are left out.  Objects whose ETag and size did not change are not fetched
again, and a file the store already read is not read again; events are
stored once per instance, time and kind, however many files repeat them.

\b
Authentication: the standard AWS credential chain, as `pull aws` (--profile,
AWS_* variables, SSO, instance or container role).

\b
Permissions (IAM actions):
  s3:ListBucket   on arn:aws:s3:::BUCKET (prefix PREFIX/*)
  s3:GetObject    on arn:aws:s3:::BUCKET/PREFIX/*
  kms:Decrypt     if the objects use a customer KMS key (CloudTrail SSE-KMS)

\b
Examples:
  billing-audit pull aws-events --bucket spot-events --prefix firehose --period 2026-11
  billing-audit pull aws-events --bucket org-trail --prefix AWSLogs/444455557777/CloudTrail --since 2026-11-01
  billing-audit pull aws-events --bucket spot-events --period 2026-11 --dry-run
"""


class AwsEventsOptions(BaseModel):
    """The flags of `billing-audit pull aws-events`, in --help order (the shared --db goes before --cache)."""

    model_config = ConfigDict(frozen=True)

    bucket: str = Field(description="S3 bucket the events are delivered to.")
    prefix: str | None = Field(None, description="Key prefix of the events (Firehose prefix, AWSLogs/..., export prefix); "
                                                 "default: whole bucket.")
    periods: tuple[str, ...] = Field((), description="Only objects dated in this month (and an hour either side); repeatable.",
                                     json_schema_extra={"flag": "--period", "metavar": "YYYY-MM"})
    since: str | None = Field(None, description="Only objects dated from this day (and the hour before) on.",
                              json_schema_extra={"metavar": "YYYY-MM-DD"})
    profile: str | None = Field(None, description="AWS profile (default: AWS_PROFILE / the credential chain).")
    region: str | None = Field(None, description="AWS region of the bucket (default: the profile's / AWS_REGION).")
    endpoint_url: str | None = Field(None, description="Send the S3 calls to this endpoint instead (S3-compatible store, test server).")
    cache: str = Field("billing-audit-cache/aws-events", description="Where downloads are kept, under BUCKET/<key>.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="List the objects that would be fetched and their size; store nothing.")
    quiet: bool = Field(False, description="No progress bar or summary lines.", json_schema_extra={"flag": "-q/--quiet"})


class AwsEventsPuller(EventPuller):
    name = "aws-events"
    title = "AWS EventBridge/CloudTrail events in S3"
    example = "billing-audit pull aws-events --bucket spot-events --prefix firehose --period 2026-11"
    help = HELP
    Options = AwsEventsOptions

    def open(self, options: AwsEventsOptions) -> tuple[S3Events, Path, Layout]:
        clients = AwsClients(profile=options.profile, region=options.region, endpoint_url=options.endpoint_url)
        return S3Events(clients, options.bucket, options.prefix or ""), Path(options.cache) / options.bucket, LAYOUT


PULLER: pulling.Puller[AwsEventsOptions, EventPlan, EventFetched] = AwsEventsPuller()
