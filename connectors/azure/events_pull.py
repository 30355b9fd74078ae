"""`billing-audit pull azure-events`: Spot evictions in the Activity Log from Blob Storage (connectors.event_pull).

A diagnostic setting sending the subscription's Activity Log (Resource Health included) to a storage account
writes the container ``insights-activity-logs`` with one blob per subscription and hour:
``resourceId=/SUBSCRIPTIONS/<SUB>/y=YYYY/m=MM/d=DD/h=HH/m=00/PT1H.json``, dated by the hour of its records (no
lag).  The blob of the current hour is appended to until the hour ends: a later pull sees a new ETag and size,
fetches it again, and stores only its new records (the others are counted as already held).  Blobs are listed and
read through azure-storage-blob, as ``pull azure`` does (the same credentials, retries and redaction).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from connectors.azure.pull import (
    STORAGE_ROLE,
    BlobSource,
    _download,
    _list,
    _safe_dir,
    open_container,
    parse_storage_url,
    redact,
    register_secret,
)
from connectors.event_pull import EventFetched, EventPlan, EventPuller, Fatal, Layout
from connectors.pull_common import PullError, RemoteObject

CONTAINER = "insights-activity-logs"
LAYOUT = Layout(undated_words="blobs outside the y=/m=/d=/h= folders")


class BlobEvents:
    def __init__(self, src: BlobSource):
        self.src = src
        u = urlsplit(str(src.client.url))
        self.base = urlunsplit((u.scheme, u.netloc, u.path.rstrip("/"), "", ""))  # never the SAS

    @property
    def source(self) -> str:
        return self.src.source_id

    def describe(self) -> str:
        return f"{self.base}/{self.src.prefix}".rstrip("/")

    def uri(self, key: str) -> str:
        return f"{self.base}/{key}"

    def list(self) -> list[RemoteObject]:
        return [RemoteObject(b.name, b.size, b.etag) for b in _list(self.src, self.src.prefix).values()]

    def fetch(self, obj: RemoteObject, dest: Path, progress: Callable[[int], None] | None) -> None:
        try:
            _download(self.src, obj, dest, progress)
        except PullError as e:
            text = redact(str(e))
            if text.startswith("access denied"):
                raise Fatal(text) from None
            raise PullError(text) from None


def _names_container(url: str) -> bool:
    return parse_storage_url(url)[2] is not None


HELP = f"""Fetch Azure Spot evictions from the Activity Log in Blob Storage, then store them.

Reads the blobs a diagnostic setting writes for the subscription's Activity
Log (categories Administrative and ResourceHealth) in the container
{CONTAINER}:
resourceId=/SUBSCRIPTIONS/<SUB>/y=YYYY/m=MM/d=DD/h=HH/m=00/PT1H.json.
Each blob is recognised from its content; one that is no event file is an
error naming it, and nothing of it is stored.

\b
--period YYYY-MM (repeatable) or --since YYYY-MM-DD fetch only the blobs of
those hours; --subscription reads one subscription's folder.  A blob whose
ETag and size did not change is not fetched again (the current hour's blob
grows: it is fetched again and only its new records are stored), and a file
the store already read is not read again.

\b
Authentication, as `pull azure`: --connection-string (or the environment
variable AZURE_STORAGE_CONNECTION_STRING), a --storage-url with a SAS token,
or --account-url with DefaultAzureCredential (environment, workload or
managed identity, `az login`).  Keys and SAS tokens are never printed.

\b
Permissions: {STORAGE_ROLE} on the storage account or the container, i.e.
  Microsoft.Storage/storageAccounts/blobServices/containers/read and
  .../containers/blobs/read; or a SAS with read (r) and list (l).

\b
Examples:
  billing-audit pull azure-events --account-url https://logsacct.blob.core.windows.net --period 2026-11
  billing-audit pull azure-events --storage-url 'https://logsacct.blob.core.windows.net/insights-activity-logs?sv=...&sig=...' \\
      --subscription 5a5a5a5a-0000-4000-8000-00000000eu01 --since 2026-11-01
  AZURE_STORAGE_CONNECTION_STRING='...' billing-audit pull azure-events --period 2026-11 --dry-run
"""


class AzureEventsOptions(BaseModel):
    """The flags of `billing-audit pull azure-events`, in --help order (the shared --db goes before --cache)."""

    model_config = ConfigDict(frozen=True)

    account_url: str | None = Field(None, description="https://ACCOUNT.blob.core.windows.net (signed in with DefaultAzureCredential).",
                                    json_schema_extra={"metavar": "URL"})
    storage_url: str | None = Field(None, description="https://ACCOUNT.blob.core.windows.net/CONTAINER[?SAS]",
                                    json_schema_extra={"metavar": "URL"})
    connection_string: str | None = Field(
        None, description="Storage connection string (prefer the environment variable to the command line).",
        json_schema_extra={"envvar": "AZURE_STORAGE_CONNECTION_STRING", "show_envvar": True, "metavar": "CS"}, repr=False)
    container: str | None = Field(None, description=f"Blob container the diagnostic setting writes (default {CONTAINER}, "
                                                    "or the --storage-url's).")
    subscription: str | None = Field(None, description="Only this subscription's blobs (resourceId=/SUBSCRIPTIONS/SUB/).",
                                     json_schema_extra={"metavar": "SUB"})
    periods: tuple[str, ...] = Field((), description="Only the blobs of this month's hours; repeatable.",
                                     json_schema_extra={"flag": "--period", "metavar": "YYYY-MM"})
    since: str | None = Field(None, description="Only the blobs of the hours from this day on.",
                              json_schema_extra={"metavar": "YYYY-MM-DD"})
    cache: str = Field(str(Path("billing-audit-cache") / "azure-events"), description="Download cache folder.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="List the blobs that would be fetched and their size; store nothing.")
    quiet: bool = Field(False, description="No progress bar or summary lines.", json_schema_extra={"flag": "-q/--quiet"})


class AzureEventsPuller(EventPuller):
    name = "azure-events"
    title = "Azure Activity Log in Blob Storage"
    example = "billing-audit pull azure-events --account-url https://logsacct.blob.core.windows.net --period 2026-11"
    help = HELP
    Options = AzureEventsOptions

    def open(self, options: AzureEventsOptions) -> tuple[BlobEvents, Path, Layout]:
        o = options
        register_secret(o.connection_string)
        path = f"resourceId=/SUBSCRIPTIONS/{o.subscription.strip().upper()}" if o.subscription else None
        try:
            if o.connection_string or o.storage_url:
                container = o.container or (None if o.storage_url and _names_container(o.storage_url) else CONTAINER)
                src = open_container(storage_url=o.storage_url, connection_string=o.connection_string,
                                     container=container, path=path)
            elif o.account_url:
                src = open_container(account_url=o.account_url.rstrip("/"), container=o.container or CONTAINER, path=path,
                                     account=(urlsplit(o.account_url).hostname or "account").split(".")[0])
            else:
                raise PullError("give --account-url, --storage-url or --connection-string (or set "
                                "AZURE_STORAGE_CONNECTION_STRING)")
        except PullError as e:
            raise PullError(redact(str(e))) from None
        root = Path(o.cache) / _safe_dir(src.account) / _safe_dir(src.container)
        return BlobEvents(src), root, LAYOUT


PULLER: pulling.Puller[AzureEventsOptions, EventPlan, EventFetched] = AzureEventsPuller()
