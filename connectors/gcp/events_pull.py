"""`billing-audit pull gcp-events`: Compute Engine preemptions from a log sink's Cloud Storage bucket
(connectors.event_pull), through google-cloud-storage.

A log sink routing the ``cloudaudit.googleapis.com/system_event`` log to a bucket writes it in hourly batches:
``cloudaudit.googleapis.com/system_event/YYYY/MM/DD/HH:00:00_HH:59:59_S<n>.json`` (``A<n>`` for late shards),
JSON lines of the log entries of that hour (their ``timestamp``): no lag.  Objects are listed with
``objects.list`` (``prefix``, pages) and read with ranged media downloads pinned to the listed ``generation``
(``ifGenerationMatch``), so a partial download resumes only for the same version of the object.  Credentials:
application default credentials; ``STORAGE_EMULATOR_HOST`` (the SDK's own variable) points the client at another
server with anonymous credentials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from connectors.event_pull import EventFetched, EventPlan, EventPuller, Fatal, Layout
from connectors.gcp.pull import NO_CREDENTIALS
from connectors.pull_common import PullError, RemoteObject, RetryableError, download

PREFIX = "cloudaudit.googleapis.com/system_event/"
CHUNK = 8 << 20  # bytes per ranged GET: a dropped connection costs at most one chunk
LAYOUT = Layout(undated_words="objects outside the <log>/YYYY/MM/DD/ folders")
PERMISSIONS = "roles/storage.objectViewer on the bucket (storage.objects.list, storage.objects.get)"


def _translate(e: BaseException, what: str) -> BaseException:
    """A Google SDK failure as RetryableError, Fatal (the whole pull) or PullError (this object)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(e, aexc.DefaultCredentialsError):
        return Fatal(NO_CREDENTIALS)
    if isinstance(e, aexc.RefreshError):
        return Fatal("Google rejected the credentials (the token could not be refreshed): sign in again with "
                     "`gcloud auth application-default login` or check GOOGLE_APPLICATION_CREDENTIALS")
    if isinstance(e, (gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable,
                      gexc.GatewayTimeout)):
        return RetryableError(f"{what}: HTTP {e.code}")
    if isinstance(e, (gexc.Forbidden, gexc.Unauthorized)):
        return Fatal(f"access denied ({what}, HTTP {e.code}): the credentials need {PERMISSIONS}")
    if isinstance(e, gexc.PreconditionFailed):
        return PullError(f"{what}: the object changed during the pull; run the pull again")
    if isinstance(e, gexc.NotFound):
        return PullError(f"{what}: not found (HTTP 404)")
    if isinstance(e, gexc.GoogleAPICallError):
        return PullError(f"{what}: HTTP {e.code} {' '.join(str(e.message).split())[:200]}")
    return e


def _dropped(e: BaseException) -> bool:
    """A dropped or broken connection (requests, urllib3, http.client, google-auth's transport)."""
    import http.client

    import requests
    import urllib3
    from google.auth import exceptions as aexc

    return isinstance(e, (OSError, requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException,
                          aexc.TransportError))


class GcsEvents:
    def __init__(self, client: Any, bucket: str, prefix: str):
        self.client, self.bucket, self.prefix = client, bucket, prefix.lstrip("/")

    @property
    def source(self) -> str:
        return f"gs://{self.bucket}"

    def describe(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}".rstrip("/")

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket}/{key}"

    def list(self) -> list[RemoteObject]:
        from google.api_core import exceptions as gexc

        what = f"listing {self.describe()}"
        try:
            return [RemoteObject(b.name, int(b.size or 0), str(b.generation or ""))
                    for b in self.client.list_blobs(self.bucket, prefix=self.prefix or None)]
        except gexc.NotFound:
            raise Fatal(f"bucket gs://{self.bucket} does not exist (HTTP 404); check --bucket") from None
        except Exception as e:  # noqa: BLE001 - translated, or as it is
            t = _translate(e, what)
            raise (Fatal(f"{t} (still failing)") if isinstance(t, RetryableError) else t) from None

    def fetch(self, obj: RemoteObject, dest: Path, progress: Callable[[int], None] | None) -> None:
        part, tag = dest.with_name(dest.name + ".part"), dest.with_name(dest.name + ".part.generation")
        if part.exists() and (not tag.exists() or tag.read_text().strip() != obj.etag):
            part.unlink()  # a part of another version of the object: never completed with this one's bytes
        dest.parent.mkdir(parents=True, exist_ok=True)
        tag.write_text(obj.etag)
        try:
            download(obj, dest, self._reader(obj), progress=progress)
        except RetryableError as e:
            raise PullError(f"gave up after 5 attempts: {e}; run the pull again to resume") from None
        tag.unlink(missing_ok=True)

    def _reader(self, obj: RemoteObject) -> Callable[[int], Iterator[bytes]]:
        blob = self.client.bucket(self.bucket).blob(obj.key)
        gen = int(obj.etag) if obj.etag.isdigit() else None
        what = f"get {self.uri(obj.key)}"

        def read_from(offset: int) -> Iterator[bytes]:
            pos = offset
            while pos < obj.size:
                end = min(pos + CHUNK, obj.size) - 1
                try:
                    data = blob.download_as_bytes(start=pos, end=end, raw_download=True, if_generation_match=gen,
                                                  checksum=None, retry=None)
                except Exception as e:  # noqa: BLE001 - translated, or as it is
                    t = _translate(e, what)
                    if t is e and _dropped(e):
                        raise RetryableError(f"{what}: {type(e).__name__}") from None
                    raise t from None
                if not data:
                    raise RetryableError(f"{what}: no bytes at offset {pos}")
                pos += len(data)
                yield data

        return read_from


def make_client(project: str | None = None) -> Any:
    """A storage client over application default credentials (``STORAGE_EMULATOR_HOST``: another server, anonymous)."""
    from google.cloud.storage import Client

    try:
        return Client(project=project) if project else Client()
    except Exception as e:  # noqa: BLE001 - translated, or as it is
        raise _translate(e, "loading credentials") from None


HELP = f"""Fetch GCP preemptions from an audit log sink in Cloud Storage, then store them.

Reads the objects a log sink routing the system_event audit log writes to
Cloud Storage, gs://BUCKET/{PREFIX}YYYY/MM/DD/
HH:00:00_HH:59:59_S0.json (JSON lines of LogEntry objects; the entries with
methodName compute.instances.preempted are kept).  Each object is recognised
from its content; one that is no event file is an error naming it, and
nothing of it is stored.

\b
--period YYYY-MM (repeatable) or --since YYYY-MM-DD fetch only the objects of
those days and hours.  Objects whose generation and size did not change are
not fetched again, and a file the store already read is not read again.

\b
Authentication: Google application default credentials, as `pull gcp`
(GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, or
the attached service account).  STORAGE_EMULATOR_HOST points the client at
another server (anonymous), e.g. a test server.

\b
Permissions: {PERMISSIONS}.

\b
Examples:
  billing-audit pull gcp-events --bucket train-audit-logs --period 2026-11
  billing-audit pull gcp-events --bucket train-audit-logs --since 2026-11-15 --dry-run
"""


class GcpEventsOptions(BaseModel):
    """The flags of `billing-audit pull gcp-events`, in --help order (the shared --db goes before --cache)."""

    model_config = ConfigDict(frozen=True)

    bucket: str = Field(description="Cloud Storage bucket the log sink writes to.")
    prefix: str = Field(PREFIX, description="Object prefix of the system_event log.")
    periods: tuple[str, ...] = Field((), description="Only the objects of this month's days; repeatable.",
                                     json_schema_extra={"flag": "--period", "metavar": "YYYY-MM"})
    since: str | None = Field(None, description="Only the objects of the days from this one on.",
                              json_schema_extra={"metavar": "YYYY-MM-DD"})
    project: str | None = Field(None, description="Project the requests are made for (default: the credentials').",
                                json_schema_extra={"metavar": "PROJECT"})
    cache: str = Field("billing-audit-cache/gcp-events", description="Where downloads are kept, under BUCKET/<name>.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="List the objects that would be fetched and their size; store nothing.")
    quiet: bool = Field(False, description="No progress bar or summary lines.", json_schema_extra={"flag": "-q/--quiet"})


class GcpEventsPuller(EventPuller):
    name = "gcp-events"
    title = "GCP audit log sink in Cloud Storage"
    example = "billing-audit pull gcp-events --bucket train-audit-logs --period 2026-11"
    help = HELP
    Options = GcpEventsOptions

    def open(self, options: GcpEventsOptions) -> tuple[GcsEvents, Path, Layout]:
        return GcsEvents(make_client(options.project), options.bucket, options.prefix), \
            Path(options.cache) / options.bucket, LAYOUT


PULLER: pulling.Puller[GcpEventsOptions, EventPlan, EventFetched] = GcpEventsPuller()
