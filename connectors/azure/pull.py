"""Pull Azure Cost Management exports from Blob Storage: the newest complete run of each billing period.

Two ways in, one plan:

* ``plan_scope``: ask Cost Management (``CostManagementClient``) for the scope's exports and
  their run history, keep the newest *Completed* run per export and billing period (a newer
  failed run never wins), follow its manifest to the blobs.
* ``plan_container``: no Cost Management access, only the storage container: list it under a
  path, read every run's ``manifest.json`` / ``_manifest.json`` (manifests only, cached by
  ETag), group the runs by export and the billing period the manifest names, keep the newest
  run (``runInfo.submittedTime``).

Either way only the chosen run's blobs are downloaded (``fetch``) into a :class:`PullCache`
folder under their blob names, so the manifest's ``blobName`` keys resolve locally and
``Store.ingest`` groups them into one delivery.  A manifest that lists a missing blob, or a
blob name that would leave the cache folder, stops that period (nothing of it is fetched or
ingested) and is reported; the other periods go on.

Example::

    from connectors.azure import pull as ap
    src = ap.open_container(connection_string=cs, container="costexports")
    plan = ap.plan_container(src, Path("cache/azure"), periods=["2026-10"])
    folders = ap.fetch(plan)
    report = ap.ingest(store, folders)

Secrets (account keys, SAS tokens, connection strings) never reach a message: every error
text goes through :func:`redact`.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from connectors.pull_common import (
    PlannedDelivery,
    PullCache,
    PullError,
    RemoteObject,
    RetryableError,
    download,
    safe_relpath,
    with_retries,
)
from connectors.pull_common import (
    describe_plan as describe_plan,
)

if TYPE_CHECKING:
    from billing_audit.store import IngestReport, Store

T = TypeVar("T")

MANIFEST_NAMES = ("manifest.json", "_manifest.json")
COMPLETED = "completed"
_PERIOD_DIR = re.compile(r"(\d{8})-(\d{8})")
_DATA_SUFFIXES = (".csv", ".csv.gz", ".gz", ".parquet", ".snappy.parquet", ".zip")

STORAGE_ROLE = "Storage Blob Data Reader"
ARM_ROLE = "Cost Management Reader"


# -- secrets ------------------------------------------------------------------------

_SECRET_PATTERNS = [
    (re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey|sig)=[^;&\s'\"]+"), r"\1=***"),
    (re.compile(r"(?i)(Authorization:?\s*)(Bearer|SharedKey)\s+\S+"), r"\1\2 ***"),
]
_known_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so that :func:`redact` removes it from any text."""
    if value and len(value) >= 6:
        _known_secrets.add(value)


def redact(text: str) -> str:
    for s in sorted(_known_secrets, key=len, reverse=True):
        text = text.replace(s, "***")
    for rx, repl in _SECRET_PATTERNS:
        text = rx.sub(repl, text)
    return text


# -- errors and retries -------------------------------------------------------------


class _Backoff:
    """The sleep for with_retries that honours a server's Retry-After (capped)."""

    def __init__(self) -> None:
        self.hint = 0.0

    def sleep(self, delay: float) -> None:
        time.sleep(max(delay, min(self.hint, 60.0)))
        self.hint = 0.0


def _status(e: BaseException) -> int | None:
    return getattr(e, "status_code", None)


def _error_code(e: BaseException) -> str:
    code = getattr(e, "error_code", None)
    if code:
        return str(code)
    err = getattr(e, "error", None)
    return str(getattr(err, "code", "") or "")


def _classify(e: BaseException, what: str, backoff: _Backoff | None, *, denied_hint: str) -> BaseException:
    """An Azure SDK exception as RetryableError, PullError, or itself (a bug: let it show)."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        IncompleteReadError,
        ResourceModifiedError,
        ServiceRequestError,
        ServiceResponseError,
    )

    try:
        from azure.identity import CredentialUnavailableError
    except ImportError:  # pragma: no cover
        CredentialUnavailableError = ()  # type: ignore[assignment,misc]  # noqa: N806

    if isinstance(e, CredentialUnavailableError) or (
        isinstance(e, ClientAuthenticationError) and _status(e) is None
    ):
        return PullError(
            "no usable Azure credentials: sign in with `az login`, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/"
            "AZURE_CLIENT_SECRET, or use a managed identity (or give --connection-string / a --storage-url with "
            "a SAS token for the storage account)"
        )
    if isinstance(e, (ServiceRequestError, ServiceResponseError, IncompleteReadError, ConnectionError, TimeoutError)):
        return RetryableError(redact(f"{what}: {type(e).__name__}: {e}"))
    if isinstance(e, HttpResponseError):
        status = _status(e) or 0
        code = _error_code(e)
        if status in (408, 429) or status >= 500:
            if backoff is not None and e.response is not None:
                headers: Any = getattr(e.response, "headers", {})
                ra = headers.get("Retry-After") or headers.get(
                    "x-ms-ratelimit-microsoft.costmanagement-qpu-retry-after"
                )
                try:
                    backoff.hint = float(ra) if ra else 0.0
                except ValueError:
                    backoff.hint = 0.0
            return RetryableError(redact(f"{what}: HTTP {status} {code}".rstrip()))
        if status in (401, 403):
            return PullError(redact(f"access denied to {what} (HTTP {status}{' ' + code if code else ''}): {denied_hint}"))
        if status == 404:
            return PullError(redact(f"{what} not found (HTTP 404{' ' + code if code else ''})"))
        if isinstance(e, ResourceModifiedError) or status == 412:
            return PullError(redact(f"{what} changed while it was being downloaded; run the pull again"))
        return PullError(redact(f"{what} failed: HTTP {status}{' ' + code if code else ''}"))
    return e


def call(
    fn: Callable[[], T], what: str, *, denied_hint: str = f"the identity needs the {STORAGE_ROLE} role", attempts: int = 5
) -> T:
    """fn() with the Azure errors made clear: retried on throttling/5xx/dropped connections, PullError otherwise."""
    backoff = _Backoff()

    def once() -> T:
        try:
            return fn()
        except PullError:
            raise
        except Exception as e:  # noqa: BLE001 - classified below
            c = _classify(e, what, backoff, denied_hint=denied_hint)
            if c is e:
                raise
            raise c from None

    try:
        return with_retries(once, attempts=attempts, sleep=backoff.sleep)
    except RetryableError as e:
        raise PullError(redact(f"{e} (still failing after {attempts} attempts)")) from None


# -- storage ------------------------------------------------------------------------


@dataclass
class BlobSource:
    """One blob container and how to reach it.  ``prefix`` is where the exports are (may be "")."""

    client: Any  # azure.storage.blob.ContainerClient
    account: str
    container: str
    prefix: str = ""

    @property
    def source_id(self) -> str:
        return f"{self.account}/{self.container}"

    def describe(self) -> str:
        return f"container {self.container!r} of storage account {self.account!r}"


# Blobs come in ranged GETs of CHUNK bytes, each written to the .part file as it arrives:
# a dropped connection costs at most one chunk.  The SDK's own retries are off; ``call``
# and pull_common.download retry with backoff.
CHUNK = 8 << 20


def _client_kw() -> dict[str, Any]:
    return {"retry_total": 0, "connection_timeout": 20, "read_timeout": 120,
            "max_single_get_size": CHUNK, "max_chunk_get_size": CHUNK}


def default_credential() -> Any:
    """DefaultAzureCredential (environment, workload identity, managed identity, Azure CLI, ...).

    When none of them has credentials, azure-identity logs a warning listing every one it tried (a dozen
    lines on stderr through logging's last-resort handler); the pull says it in one line instead
    (:func:`credentials_error`), so the library's logger gets a handler that drops what nobody configured
    logging for (a program that configures logging still gets the records)."""
    import logging

    from azure.identity import DefaultAzureCredential

    identity = logging.getLogger("azure.identity")
    if not identity.handlers:
        identity.addHandler(logging.NullHandler())
    return DefaultAzureCredential(exclude_interactive_browser_credential=True)


def _path_style(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def parse_storage_url(url: str) -> tuple[str, str, str | None, str, str | None]:
    """(account_url, account, container, path, sas) from an account or container URL, with or without SAS.

    >>> parse_storage_url("https://acct.blob.core.windows.net/costexports/ea?sv=1&sig=x")[1:4]
    ('acct', 'costexports', 'ea')
    """
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise PullError("--storage-url: expected https://ACCOUNT.blob.core.windows.net/CONTAINER[/PATH][?SAS]")
    segs = [unquote(s) for s in u.path.split("/") if s]
    host = u.hostname
    base = f"{u.scheme}://{u.netloc}"
    if _path_style(host):  # Azurite / emulator: http://127.0.0.1:10000/ACCOUNT/CONTAINER/...
        if not segs:
            raise PullError("--storage-url: an emulator URL needs the account name in its path")
        account = segs.pop(0)
        base += f"/{account}"
    else:
        account = host.split(".")[0]
    container = segs[0] if segs else None
    path = "/".join(segs[1:])
    sas = u.query or None
    if sas and not any(k == "sig" for k, _ in parse_qsl(sas)):
        sas = None  # not a SAS query
    register_secret(sas)
    for _, v in parse_qsl(u.query):
        register_secret(v if len(v) > 20 else None)
    return base, account, container, path, sas


def open_container(
    *,
    storage_url: str | None = None,
    connection_string: str | None = None,
    container: str | None = None,
    path: str | None = None,
    account_url: str | None = None,
    account: str | None = None,
    credential: Any = None,
    client_kwargs: dict[str, Any] | None = None,
) -> BlobSource:
    """A :class:`BlobSource` from a connection string, a storage URL (SAS or Entra ID) or an account URL."""
    from azure.core.credentials import AzureSasCredential
    from azure.storage.blob import ContainerClient

    kw = {**_client_kw(), **(client_kwargs or {})}
    if connection_string:
        register_secret(connection_string)
        for part in connection_string.split(";"):
            k, _, v = part.partition("=")
            if k.strip().lower() in ("accountkey", "sharedaccesssignature"):
                register_secret(v)
        if not container:
            raise PullError("--connection-string needs --container")
        try:
            client = ContainerClient.from_connection_string(connection_string, container_name=container, **kw)
        except ValueError:
            raise PullError("--connection-string: not a valid storage connection string") from None
        return BlobSource(client, client.account_name or "account", container, _norm_prefix(path))
    if storage_url:
        base, acct, url_container, url_path, sas = parse_storage_url(storage_url)
        container = container or url_container
        if not container:
            raise PullError("--storage-url names no container: add it to the URL or give --container")
        cred = AzureSasCredential(sas) if sas else (credential or default_credential())
        client = ContainerClient(base, container, credential=cred, **kw)
        return BlobSource(client, acct, container, _norm_prefix(path if path is not None else url_path))
    if account_url and container:
        client = ContainerClient(account_url, container, credential=credential or default_credential(), **kw)
        return BlobSource(client, account or urlsplit(account_url).hostname or "account", container, _norm_prefix(path))
    raise PullError("give --scope, --storage-url, or --connection-string with --container")


def _norm_prefix(path: str | None) -> str:
    p = (path or "").strip().strip("/")
    return p + "/" if p else ""


@dataclass
class _Blob:
    name: str
    size: int
    etag: str
    modified: datetime | None


def _etag(value: object) -> str:
    return str(value or "").strip('"')


def _s(value: object) -> str:
    """An SDK enum or string as its wire value."""
    return str(getattr(value, "value", value) or "")


def _list(src: BlobSource, prefix: str) -> dict[str, _Blob]:
    def go() -> dict[str, _Blob]:
        out = {}
        for b in src.client.list_blobs(name_starts_with=prefix or None):
            out[b.name] = _Blob(b.name, int(b.size or 0), _etag(b.etag), b.last_modified)
        return out

    return call(go, f"listing {src.describe()} under {prefix or '/'!r}", denied_hint=_storage_hint())


def _storage_hint() -> str:
    return (
        f"the signed-in identity needs the {STORAGE_ROLE} role on the storage account (or container), "
        "or the SAS token needs read (r) and list (l) permissions and must not be expired"
    )


def _head(src: BlobSource, name: str) -> _Blob | None:
    from azure.core.exceptions import ResourceNotFoundError

    def go() -> _Blob | None:
        try:
            p = src.client.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return None
        return _Blob(name, int(p.size or 0), _etag(p.etag), p.last_modified)

    return call(go, f"blob {name!r} in {src.describe()}", denied_hint=_storage_hint())


def _reader(src: BlobSource, obj: RemoteObject) -> Callable[[int], Iterable[bytes]]:
    """read_from(offset) for pull_common.download: a ranged GET pinned to the planned ETag."""
    from azure.core import MatchConditions

    name = obj.url or obj.key
    what = f"blob {name!r} in {src.describe()}"

    def read_from(offset: int) -> Iterator[bytes]:
        blob = src.client.get_blob_client(name)
        kw: dict[str, Any] = {"offset": offset, "max_concurrency": 1}
        if obj.size:
            kw["length"] = obj.size - offset
        if obj.etag:
            kw.update(etag=f'"{obj.etag}"', match_condition=MatchConditions.IfNotModified)
        try:
            stream = blob.download_blob(**kw)
            yield from stream.chunks()
        except PullError:
            raise
        except Exception as e:  # noqa: BLE001
            c = _classify(e, what, None, denied_hint=_storage_hint())
            if c is e:
                raise
            raise c from None

    return read_from


# Manifests read while planning are kept under another name, so that `billing-audit ingest`
# of the cache folder never takes a run that was not chosen for a delivery.
SCAN_SUFFIX = ".scanned"


def _scan_obj(name: str, size: int, etag: str) -> RemoteObject:
    return RemoteObject(name + SCAN_SUFFIX, size, etag, url=name)


def _read_json(src: BlobSource, blob: _Blob, scan: PullCache) -> dict[str, Any]:
    """A manifest's JSON, from the scan cache when its ETag and size are unchanged."""
    obj = _scan_obj(blob.name, blob.size, blob.etag)
    dest = scan.path_for(obj.key)
    if not scan.unchanged(obj):
        _download(src, obj, dest)
        scan.record(obj)
    try:
        data = json.loads(dest.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as e:
        raise PullError(f"manifest {blob.name!r} in {src.describe()} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise PullError(f"manifest {blob.name!r} in {src.describe()} is not a JSON object")
    return data


def _download(src: BlobSource, obj: RemoteObject, dest: Path, progress: Callable[[int], None] | None = None) -> None:
    """pull_common.download, plus: a partial file of another blob version is thrown away, not resumed."""
    part = dest.with_name(dest.name + ".part")
    tag = dest.with_name(dest.name + ".part-etag")
    if part.exists() and (not tag.exists() or _etag(tag.read_text()) != _etag(obj.etag)):
        part.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tag.write_text(obj.etag)
    try:
        download(obj, dest, _reader(src, obj), progress=progress)
    except RetryableError as e:
        raise PullError(redact(f"{e} (still failing after 5 attempts; run the pull again to resume)")) from None
    tag.unlink(missing_ok=True)


# -- plans --------------------------------------------------------------------------


@dataclass
class AzureDelivery(PlannedDelivery):
    export: str = ""
    run_id: str = ""
    submitted: datetime | None = None
    manifest_key: str = ""  # "" for a legacy run without a manifest


@dataclass
class Plan:
    """What one container holds for the pull: deliveries to fetch and periods that cannot be pulled."""

    source: BlobSource
    cache: PullCache
    scan: PullCache  # manifests read while planning
    deliveries: list[AzureDelivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cache_for(root: Path, src: BlobSource) -> tuple[PullCache, PullCache]:
    """(data cache, manifest scan cache) of a container under the cache root."""
    base = root / _safe_dir(src.account) / _safe_dir(src.container)
    return PullCache(base, src.source_id), PullCache(root / ".manifests" / _safe_dir(src.account) / _safe_dir(src.container),
                                                      src.source_id)


def _safe_dir(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "_"


def _parse_time(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        return None
    s = re.sub(r"(\.\d{6})\d+", r"\1", value.strip().replace("Z", "+00:00"))
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def manifest_period(data: dict[str, Any], key: str) -> str:
    """YYYY-MM of the run, from runInfo.startDate (the path only when the manifest says nothing)."""
    run = data.get("runInfo") or {}
    start = _parse_time(run.get("startDate")) if isinstance(run, dict) else None
    if start is not None:
        return f"{start:%Y-%m}"
    for part in reversed(PurePosixPath(key).parts[:-1]):
        m = _PERIOD_DIR.fullmatch(part)
        if m:
            return f"{m.group(1)[:4]}-{m.group(1)[4:6]}"
    return ""


def _is_manifest(name: str) -> bool:
    return PurePosixPath(name).name.lower() in MANIFEST_NAMES


def _is_data(name: str) -> bool:
    low = name.lower()
    return low.endswith(_DATA_SUFFIXES) and not _is_manifest(name)


def _blob_key(raw: str) -> str:
    """A manifest's blobName as written, a full blob URL reduced to its path."""
    raw = raw.strip()
    if re.match(r"^[a-z][a-z0-9+.-]*://", raw, re.IGNORECASE):
        raw = unquote(urlsplit(raw).path).lstrip("/")
    return raw


def _candidates(src: BlobSource, key: str) -> list[str]:
    """Names a manifest key may have in the container (with or without a leading account/container)."""
    out = [key]
    for lead in (f"{src.account}/{src.container}/", f"{src.container}/", "/"):
        if key.startswith(lead):
            out.append(key[len(lead):])
    return out


def _delivery_from_manifest(
    src: BlobSource,
    manifest: _Blob,
    data: dict[str, Any],
    listing: dict[str, _Blob] | None,
    *,
    period: str = "",
) -> AzureDelivery:
    """The run a manifest describes, every blob it lists checked to exist (PullError otherwise)."""
    export_cfg = data.get("exportConfig") or {}
    run = data.get("runInfo") or {}
    export = str(export_cfg.get("exportName") or "") or PurePosixPath(manifest.name).parent.name
    period = period or manifest_period(data, manifest.name)
    run_id = str(run.get("runId") or PurePosixPath(manifest.name).parent.name)
    submitted = _parse_time(run.get("submittedTime")) or manifest.modified
    safe_relpath(manifest.name)
    folder = str(PurePosixPath(manifest.name).parent)
    if listing is None:
        listing = _list(src, folder + "/")
    objects = [RemoteObject(manifest.name, manifest.size, manifest.etag)]
    missing = []
    blobs = data.get("blobs") or []
    if not isinstance(blobs, list):
        raise PullError(f"manifest {manifest.name!r}: 'blobs' is not a list")
    for item in blobs:
        raw = item.get("blobName") if isinstance(item, dict) else None
        if not raw or not isinstance(raw, str):
            continue
        key = _blob_key(raw)
        try:
            safe_relpath(key)
        except PullError as e:
            raise PullError(f"manifest {manifest.name!r} ({export} {period}): {e}; nothing of {period} is pulled") from None
        candidates = _candidates(src, key)
        found = next((listing[c] for c in candidates if c in listing), None)
        if found is None:
            for c in candidates:
                found = _head(src, c)
                if found is not None:
                    break
        if found is None:
            missing.append(key)
            continue
        objects.append(RemoteObject(found.name, found.size, found.etag))
    if missing:
        raise PullError(
            f"manifest {manifest.name!r} ({export} {period}, run {run_id}) lists {len(missing)} blob(s) that are not "
            f"in {src.describe()} (first: {missing[0]!r}); nothing of {period} is pulled"
        )
    if len(objects) == 1:
        raise PullError(f"manifest {manifest.name!r} ({export} {period}, run {run_id}) lists no blobs")
    when = f"{submitted:%Y-%m-%d %H:%M}" if submitted else "?"
    return AzureDelivery(
        period=period,
        label=f"{export} run {run_id} ({when} UTC)",
        objects=objects,
        export=export,
        run_id=run_id,
        submitted=submitted,
        manifest_key=manifest.name,
    )


def _want(period: str, periods: Iterable[str] | None) -> bool:
    ps = set(periods or [])
    return not ps or period in ps


def plan_container(
    src: BlobSource,
    cache_root: Path,
    *,
    periods: Iterable[str] | None = None,
    exports: Iterable[str] | None = None,
) -> Plan:
    """The newest run per export and billing period found in a container under ``src.prefix``.

    Reads every manifest under the prefix (cached by ETag, so a second pull reads none again),
    groups the runs by export and the period the manifest names, keeps the newest by
    ``runInfo.submittedTime``.  Exports older than manifests (one file per run in a
    ``yyyyMMdd-yyyyMMdd`` folder) are handled too: the newest file of each such folder.
    """
    cache, scan = cache_for(cache_root, src)
    plan = Plan(src, cache, scan)
    listing = _list(src, src.prefix)
    if not listing:
        raise PullError(f"nothing found in {src.describe()} under {src.prefix or '/'!r}")
    wanted_exports = {e.lower() for e in exports or []}
    runs: dict[tuple[str, str], list[tuple[datetime, _Blob, dict[str, Any]]]] = {}
    covered: set[str] = set()
    seen_exports: set[str] = set()
    epoch = datetime.min.replace(tzinfo=UTC)
    for blob in sorted(listing.values(), key=lambda b: b.name):
        if not _is_manifest(blob.name):
            continue
        try:
            safe_relpath(blob.name)
            data = _read_json(src, blob, scan)
        except PullError as e:
            plan.errors.append(str(e))
            continue
        if "blobs" not in data or "exportConfig" not in data:
            continue  # another tool's manifest.json
        export_cfg = data.get("exportConfig") or {}
        export = str(export_cfg.get("resourceId") or export_cfg.get("exportName") or "")
        name = str(export_cfg.get("exportName") or export)
        folder = str(PurePosixPath(blob.name).parent) + "/"
        covered.update(n for n in listing if n.startswith(folder))
        for item in data.get("blobs") or []:
            if isinstance(item, dict) and isinstance(item.get("blobName"), str):
                covered.update(_candidates(src, _blob_key(item["blobName"])))
        seen_exports.add(name)
        if wanted_exports and name.lower() not in wanted_exports:
            continue
        period = manifest_period(data, blob.name)
        if not _want(period, periods):
            continue
        submitted = _parse_time((data.get("runInfo") or {}).get("submittedTime")) or blob.modified or epoch
        runs.setdefault((export, period), []).append((submitted, blob, data))
    for (_export, period), cands in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cands.sort(key=lambda c: (c[0], c[1].name), reverse=True)
        _, blob, data = cands[0]
        try:
            d = _delivery_from_manifest(src, blob, data, listing, period=period)
        except PullError as e:
            plan.errors.append(str(e))
            continue
        if len(cands) > 1:
            d.label += f"; newest of {len(cands)} runs"
        plan.deliveries.append(d)
    _plan_legacy(plan, listing, covered, periods, wanted_exports)
    seen_exports.update(d.export for d in plan.deliveries)
    unknown = sorted(e for e in wanted_exports if e not in {s.lower() for s in seen_exports})
    if unknown:
        raise PullError(f"export {unknown[0]!r} not found in {src.describe()} under {src.prefix or '/'!r} "
                        f"(exports there: {', '.join(sorted(seen_exports)) or 'none'})")
    return plan


def _plan_legacy(
    plan: Plan, listing: dict[str, _Blob], covered: set[str], periods: Iterable[str] | None, exports: set[str]
) -> None:
    """Runs without a manifest: ``.../<export>/<yyyyMMdd-yyyyMMdd>/<export>_<id>.csv``, one file per run."""
    folders: dict[str, list[_Blob]] = {}
    for b in listing.values():
        if b.name in covered or not _is_data(b.name):
            continue
        parent = PurePosixPath(b.name).parent
        if not _PERIOD_DIR.fullmatch(parent.name):
            continue
        folders.setdefault(str(parent), []).append(b)
    epoch = datetime.min.replace(tzinfo=UTC)
    for folder, blobs in sorted(folders.items()):
        m = _PERIOD_DIR.fullmatch(PurePosixPath(folder).name)
        assert m is not None
        period = f"{m.group(1)[:4]}-{m.group(1)[4:6]}"
        export = PurePosixPath(folder).parent.name
        if not _want(period, periods) or (exports and export.lower() not in exports):
            continue
        blobs.sort(key=lambda b: (b.modified or epoch, b.name), reverse=True)
        newest = blobs[0]
        try:
            safe_relpath(newest.name)
        except PullError as e:
            plan.errors.append(str(e))
            continue
        label = f"{export} file {PurePosixPath(newest.name).name} (no manifest; newest of {len(blobs)} file(s))"
        plan.deliveries.append(
            AzureDelivery(period, label, [RemoteObject(newest.name, newest.size, newest.etag)], export=export,
                          run_id=PurePosixPath(newest.name).stem, submitted=newest.modified)
        )


# -- Cost Management ----------------------------------------------------------------


def cost_client(credential: Any = None, *, arm_endpoint: str | None = None, **kwargs: Any) -> Any:
    """A CostManagementClient with the SDK's own retries off (``call`` retries with backoff)."""
    from azure.mgmt.costmanagement import CostManagementClient

    kw: dict[str, Any] = {"retry_total": 0, **kwargs}
    if arm_endpoint:
        kw["base_url"] = arm_endpoint.rstrip("/")
    return CostManagementClient(credential or default_credential(), **kw)


def _arm_hint(scope: str) -> str:
    return (
        f"the identity needs the {ARM_ROLE} role (Microsoft.CostManagement/exports/read) on {scope}; "
        "for billing-account scopes, the billing account/profile reader role"
    )


@dataclass
class _Run:
    export: str
    run_id: str
    status: str
    submitted: datetime | None
    period: str
    manifest_file: str
    file_name: str
    container: str
    root: str
    account: str


def _g(obj: Any, *names: str) -> Any:
    """Attribute chain on SDK models, None when any link is missing."""
    for n in names:
        if obj is None:
            return None
        obj = getattr(obj, n, None)
    return obj


def _destination(props: Any) -> tuple[str, str, str]:
    dest = _g(props, "delivery_info", "destination")
    container = str(_g(dest, "container") or "")
    root = str(_g(dest, "root_folder_path") or "").strip("/")
    account = str(_g(dest, "storage_account") or "")
    rid = str(_g(dest, "resource_id") or "")
    m = re.search(r"/storageAccounts/([^/]+)", rid, re.IGNORECASE)
    if m:
        account = m.group(1)
    return container, root, account


def _run_period(props: Any) -> str:
    for t in (_g(props, "start_date"), _g(props, "run_settings", "definition", "time_period", "from_property")):
        t = _parse_time(t)
        if t is not None:
            return f"{t:%Y-%m}"
    return ""


def list_runs(client: Any, scope: str, exports: Iterable[str] | None = None) -> tuple[list[_Run], list[str]]:
    """Every run the scope's exports report (status, period, where its files are), plus notes."""
    hint = _arm_hint(scope)
    found = call(lambda: client.exports.list(scope), f"Cost Management exports of {scope}", denied_hint=hint)
    all_exports = list(found.value or [])
    names = [str(e.name) for e in all_exports]
    wanted = list(exports or [])
    notes: list[str] = []
    if wanted:
        missing = [w for w in wanted if w.lower() not in {n.lower() for n in names}]
        if missing:
            raise PullError(f"export {missing[0]!r} not found in {scope} (exports there: {', '.join(names) or 'none'})")
        all_exports = [e for e in all_exports if str(e.name).lower() in {w.lower() for w in wanted}]
    elif not all_exports:
        raise PullError(f"no Cost Management exports in {scope}")
    runs: list[_Run] = []
    for exp in all_exports:
        name = str(exp.name)
        full = call(functools.partial(client.exports.get, scope, name, expand="runHistory"),
                    f"export {name!r} in {scope}", denied_hint=hint)
        props = full.properties
        dtype = _s(_g(props, "delivery_info", "destination", "type")) or "AzureBlob"
        if dtype.lower() not in ("azureblob", ""):
            notes.append(f"export {name}: destination type {dtype} is not Azure Blob Storage; skipped")
            continue
        items: dict[str, Any] = {}
        for r in _g(props, "run_history", "value") or []:
            items[str(r.name or r.id)] = r
        try:
            hist = call(functools.partial(client.exports.get_execution_history, scope, name),
                        f"run history of export {name!r}", denied_hint=hint)
            for r in hist.value or []:
                items.setdefault(str(r.name or r.id), r)
        except PullError as e:
            if not items:
                raise
            notes.append(f"export {name}: full run history unavailable ({e}); using the runs the export lists")
        e_container, e_root, e_account = _destination(props)
        for rid, r in items.items():
            rp = r.properties
            r_container, r_root, r_account = _destination(_g(rp, "run_settings"))
            runs.append(_Run(
                export=name,
                run_id=rid.rsplit("/", 1)[-1],
                status=_s(_g(rp, "status")),
                submitted=_parse_time(_g(rp, "submitted_time")),
                period=_run_period(rp),
                manifest_file=str(_g(rp, "manifest_file") or ""),
                file_name=str(_g(rp, "file_name") or ""),
                container=r_container or e_container,
                root=r_root or e_root,
                account=r_account or e_account,
            ))
    return runs, notes


def newest_completed(runs: list[_Run], periods: Iterable[str] | None = None) -> tuple[list[_Run], list[_Run]]:
    """(the newest Completed run per export and period, runs whose period is unknown).

    A failed, queued or in-progress run never wins, however new.
    """
    best: dict[tuple[str, str], _Run] = {}
    unknown = []
    epoch = datetime.min.replace(tzinfo=UTC)
    for r in runs:
        if r.status.lower() != COMPLETED:
            continue
        if not r.period:
            unknown.append(r)
            continue
        if not _want(r.period, periods):
            continue
        key = (r.export, r.period)
        if key not in best or (r.submitted or epoch, r.run_id) > (best[key].submitted or epoch, best[key].run_id):
            best[key] = r
    return sorted(best.values(), key=lambda r: (r.period, r.export)), unknown


def _locate_manifest(src: BlobSource, run: _Run) -> _Blob:
    """The manifest blob of a run: manifestFile, else beside fileName, else under the destination's root folder."""
    def candidates(p: str) -> list[str]:
        return _candidates(src, _blob_key(p))

    for raw in (run.manifest_file, run.file_name if _is_manifest(run.file_name) else ""):
        if raw:
            for c in candidates(raw):
                safe_relpath(c)
                b = _head(src, c)
                if b is not None:
                    return b
    if run.file_name:
        for c in candidates(run.file_name):
            folder = c if c.endswith("/") else str(PurePosixPath(c).parent) + "/"
            found = [b for n, b in _list(src, folder).items() if _is_manifest(n)]
            if found:
                return sorted(found, key=lambda b: b.name)[0]
    root = (run.root + "/") if run.root else ""
    manifests = [b for n, b in _list(src, root).items() if _is_manifest(n) and run.run_id in PurePosixPath(n).parts]
    if manifests:
        return sorted(manifests, key=lambda b: b.name)[0]
    raise PullError(
        f"export {run.export!r} run {run.run_id} ({run.period}): its manifest is not in {src.describe()} "
        f"(looked for {run.manifest_file or run.file_name or root + '**/' + run.run_id + '/manifest.json'!r}); "
        "the files may have been deleted by a retention policy"
    )


SourceFactory = Callable[[str, str], BlobSource]  # (account, container) -> BlobSource


def plan_scope(
    client: Any,
    scope: str,
    open_source: SourceFactory,
    cache_root: Path,
    *,
    exports: Iterable[str] | None = None,
    periods: Iterable[str] | None = None,
) -> list[Plan]:
    """Plans (one per destination container) for the newest Completed run of each export and period."""
    runs, notes = list_runs(client, scope, exports)
    chosen, unknown = newest_completed(runs, periods)
    plans: dict[tuple[str, str], Plan] = {}

    def plan_of(run: _Run) -> Plan:
        if not run.container:
            raise PullError(f"export {run.export!r}: Cost Management names no destination container")
        k = (run.account, run.container)
        if k not in plans:
            src = open_source(run.account, run.container)
            plans[k] = Plan(src, *cache_for(cache_root, src))
        return plans[k]

    if unknown:  # the run history does not say which month: the manifests do (small, cached by ETag)
        for r in unknown:
            try:
                p = plan_of(r)
                r.period = manifest_period(_read_json(p.source, _locate_manifest(p.source, r), p.scan), "")
            except PullError as e:
                notes.append(str(e))
        chosen, _ = newest_completed([r for r in runs if r.period], periods)
    for r in chosen:
        plan = plan_of(r)
        try:
            mb = _locate_manifest(plan.source, r)
            data = _read_json(plan.source, mb, plan.scan)
            d = _delivery_from_manifest(plan.source, mb, data, None, period=r.period)
        except PullError as e:
            plan.errors.append(str(e))
            continue
        d.label = f"{r.export} run {r.run_id} ({r.submitted:%Y-%m-%d %H:%M} UTC)" if r.submitted else d.label
        plan.deliveries.append(d)
    out = list(plans.values())
    if out:
        out[0].notes.extend(notes)
    elif notes:
        raise PullError(notes[0])
    if not chosen and not any(p.errors for p in out):
        failed = [r for r in runs if r.status.lower() != COMPLETED]
        what = f" for {', '.join(sorted(set(periods)))}" if periods else ""
        raise PullError(
            f"no completed export run{what} in {scope}"
            + (f" ({len(failed)} run(s) failed or are still running)" if failed else "")
        )
    return out


# -- fetch and ingest ---------------------------------------------------------------


@dataclass
class FetchResult:
    paths: list[Path] = field(default_factory=list)  # what to ingest: each delivery's manifest and data files
    fetched: int = 0
    cached: int = 0
    bytes: int = 0
    errors: list[str] = field(default_factory=list)


def fetch(
    plan: Plan,
    *,
    progress: Callable[[int], None] | None = None,
    on_file: Callable[[str], None] | None = None,
) -> FetchResult:
    """Download each delivery's objects not already cached; the local files to ingest.

    Only the planned files are handed to the ingest (never the whole cache folder, which
    may hold older runs).  A delivery that fails (access denied, a blob gone since the
    plan) is reported in ``errors`` and left out; the others still come back.
    """
    res = FetchResult(errors=list(plan.errors))
    for d in plan.deliveries:
        try:
            paths = []
            n_fetched = n_cached = n_bytes = 0
            for obj in d.objects:
                dest = plan.cache.path_for(obj.key)
                paths.append(dest)
                if on_file:
                    on_file(obj.key)
                if plan.cache.unchanged(obj):
                    n_cached += 1
                    if progress:
                        progress(obj.size)
                    continue
                scanned = _scan_obj(obj.key, obj.size, obj.etag)
                if obj.key == d.manifest_key and plan.scan.unchanged(scanned):
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(plan.scan.path_for(scanned.key), dest)  # read while planning: no second download
                    if progress:
                        progress(obj.size)
                else:
                    _download(plan.source, obj, dest, progress)
                    n_bytes += obj.size
                plan.cache.record(obj)
                n_fetched += 1
        except PullError as e:
            res.errors.append(f"{d.period} {d.label}: {e}")
            continue
        res.paths.extend(paths)
        res.fetched += n_fetched
        res.cached += n_cached
        res.bytes += n_bytes
    return res


def ingest(store: Any, paths: list[Path], progress: Any = None) -> Any:
    """Store.ingest of the fetched files (each delivery replaces its billing period atomically)."""
    return store.ingest([str(f) for f in paths], progress=progress)


# -- `billing-audit pull azure` (billing_audit.pulling.Puller) -------------------------------------------------------
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


class AzureOptions(BaseModel):
    """The flags of `billing-audit pull azure`, in --help order (the shared --db goes before --quiet)."""

    model_config = ConfigDict(frozen=True)

    scope: str | None = Field(None, description="Cost Management scope: /subscriptions/ID, .../resourceGroups/RG, "
                                                "/providers/Microsoft.Billing/billingAccounts/ID[/billingProfiles/ID], ...")
    exports: tuple[str, ...] = Field((), description="Only this export (repeatable).",
                                     json_schema_extra={"flag": "--export", "metavar": "NAME"})
    periods: tuple[str, ...] = Field((), description="Only this billing period (repeatable).",
                                     json_schema_extra={"flag": "--period", "metavar": "YYYY-MM"})
    storage_url: str | None = Field(None, description="https://ACCOUNT.blob.core.windows.net/CONTAINER[/PATH][?SAS]",
                                    json_schema_extra={"metavar": "URL"})
    connection_string: str | None = Field(
        None, description="Storage connection string (prefer the environment variable to the command line).",
        json_schema_extra={"envvar": "AZURE_STORAGE_CONNECTION_STRING", "show_envvar": True, "metavar": "CS"}, repr=False)
    container: str | None = Field(None, description="Blob container (with --connection-string, or to override the export's).")
    path: str | None = Field(None, description="Folder in the container holding the export runs (default: all).")
    arm_endpoint: str | None = Field(None, description="Resource Manager endpoint (sovereign clouds); default https://management.azure.com.",
                                     json_schema_extra={"envvar": "BILLING_AUDIT_AZURE_ARM_ENDPOINT", "metavar": "URL"})
    cache: str = Field(str(Path("billing-audit-cache") / "azure"), description="Download cache folder.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="List what would be fetched and its size; fetch nothing.")
    quiet: bool = Field(False, description="No progress bar or summary line.", json_schema_extra={"flag": "-q/--quiet"})


_OPTION_PERIOD = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def _option_periods(values: tuple[str, ...]) -> list[str]:
    """--period values, each YYYY-MM (comma-separated lists too)."""
    out = []
    for v in values:
        for p in v.split(","):
            p = p.strip()
            if not _OPTION_PERIOD.match(p):
                raise PullError(f"--period {p!r}: expected YYYY-MM")
            out.append(p)
    return out


@dataclass
class AzurePullPlan:
    plans: list[Plan]
    messages: list[pulling.Message] = field(default_factory=list)

    def dry_run(self) -> pulling.DryRun:
        lines: list[str] = []
        for p in self.plans:
            lines.append(f"{p.source.describe()} -> {p.cache.root}")
            lines += [redact(line) for line in describe_plan(list(p.deliveries), p.cache)]
            lines += [f"  cannot pull: {redact(e)}" for e in p.errors]
        if not any(p.deliveries for p in self.plans) and not any(p.errors for p in self.plans):
            lines.append("nothing to pull")
        return pulling.DryRun(lines)


@dataclass
class AzureFetched:
    paths: list[Path]
    messages: list[pulling.Message] = field(default_factory=list)
    failed: bool = False
    error: str | None = None  # the last problem (the others are messages)

    @property
    def ready(self) -> bool:
        return bool(self.paths)


class AzurePuller:
    name = "azure"
    title = "Azure"
    example = "billing-audit pull azure --scope /subscriptions/SUB --export gpu-daily"
    help = HELP
    Options = AzureOptions
    db_before = "quiet"

    def plan(self, options: AzureOptions) -> AzurePullPlan:
        o = options
        wanted = _option_periods(o.periods)
        register_secret(o.connection_string)
        if o.storage_url:
            parse_storage_url(o.storage_url)  # registers its SAS as a secret, checks the URL
        root = Path(o.cache)
        try:
            if o.scope:
                def open_source(account: str, dest_container: str) -> BlobSource:
                    if o.storage_url or o.connection_string:
                        return open_container(storage_url=o.storage_url, connection_string=o.connection_string,
                                              container=o.container or dest_container, path=o.path)
                    if not account:
                        raise PullError("the export names no storage account: give --storage-url")
                    return open_container(account_url=f"https://{account}.blob.core.windows.net", account=account,
                                          container=o.container or dest_container, path=o.path)

                client = cost_client(arm_endpoint=o.arm_endpoint)
                plans = plan_scope(client, o.scope, open_source, root, exports=o.exports, periods=wanted)
            else:
                if not (o.storage_url or o.connection_string):
                    raise PullError("give --scope, or --storage-url / --connection-string to read an export folder")
                src = open_container(storage_url=o.storage_url, connection_string=o.connection_string,
                                     container=o.container, path=o.path)
                plans = [plan_container(src, root, periods=wanted, exports=o.exports)]
        except PullError as e:
            raise PullError(redact(str(e))) from None
        return AzurePullPlan(plans, [pulling.note(redact(n)) for p in plans for n in p.notes])

    def fetch(self, p: AzurePullPlan, progress: pulling.FetchProgress | None) -> AzureFetched:
        total = sum(d.size for pl in p.plans for d in pl.deliveries)
        on_bytes: Callable[[int], None] | None = None
        on_file: Callable[[str], None] | None = None
        if progress is not None and total > 0:
            progress.start("pull azure", total, "bytes")
            on_bytes, on_file = progress.advance, progress.detail
        paths: list[Path] = []
        errors: list[str] = []
        fetched = cached = nbytes = 0
        for pl in p.plans:
            res = fetch(pl, progress=on_bytes, on_file=on_file)
            paths.extend(res.paths)
            errors.extend(res.errors)
            fetched += res.fetched
            cached += res.cached
            nbytes += res.bytes
        said = [pulling.error(redact(e)) for e in errors[:-1]]
        said.append(pulling.info(f"fetched {fetched} file(s) ({nbytes:,} bytes), {cached} unchanged in the cache"))
        if not paths and not errors:
            said.append(pulling.info("nothing to ingest"))
        last = redact(errors[-1]) + (f" ({len(errors)} problems, see above)" if len(errors) > 1 else "") if errors else None
        return AzureFetched(paths, said, error=last)

    def ingest(self, store: Store, fetched: AzureFetched, progress: pulling.IngestProgress | None) -> IngestReport:
        report: IngestReport = ingest(store, fetched.paths, progress=progress)
        return report


PULLER: pulling.Puller[AzureOptions, AzurePullPlan, AzureFetched] = AzurePuller()
