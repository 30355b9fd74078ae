"""Pull AWS Cost and Usage Reports (legacy CUR, CUR 2.0, FOCUS) from S3 into the local cache.

Three steps, as :mod:`connectors.pull_common` describes:

* :func:`plan` discovers the exports - through the ``bcm-data-exports`` API (CUR 2.0 and
  FOCUS: ListExports, GetExport) and the ``cur`` API (legacy: DescribeReportDefinitions) when
  the caller may call them, and always from the bucket layout - and picks, per billing
  period, the newest complete delivery:

  - legacy CUR (``<prefix>/<report>/<yyyymmdd-yyyymmdd>/<report>-Manifest.json``): the
    period-level manifest names the current ``assemblyId``; only its ``reportKeys`` are
    fetched, plus the manifests (keep-versions mode keeps every older assembly);
  - CUR 2.0 / FOCUS (``<prefix>/<export>/metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json``):
    the execution the period's manifest lists (or, when manifests sit in timestamped
    folders, the newest one); without any manifest, the newest ``data/BILLING_PERIOD=``
    folder;
  - legacy Athena parquet (``.../year=2026/month=10/*.parquet``, overwrite mode only): what is there.

* :func:`fetch` downloads what changed (ETag and size) into the cache under the same keys,
  resuming partial files with ranged GETs and retrying throttling, 5xx and dropped connections;
* :func:`ingest` hands the fetched files to ``Store.ingest`` and then drops older deliveries
  of the same periods from the cache.

Nothing here prints; errors the user can fix are :class:`PullError` (one line, no secrets).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from billing_audit import pulling
from billing_audit.reader import is_data_file
from connectors.pull_common import (
    STATE_FILE,
    PlannedDelivery,
    PullCache,
    PullError,
    RemoteObject,
    RetryableError,
    download,
    with_retries,
)
from connectors.pull_common import (
    describe_plan as describe_plan,
)

if TYPE_CHECKING:
    from billing_audit.store import IngestReport, Store


class _Lazy:
    """A module imported on first use: ``connectors`` is imported on every CLI start, boto3 is slow to import."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


boto3: Any = _Lazy("boto3")
bx: Any = _Lazy("botocore.exceptions")
_config: Any = _Lazy("botocore.config")

CHUNK = 64 * 1024
PERIOD_RX = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")

# -- the layouts ----------------------------------------------------------------------------------
LEGACY_PERIOD_MANIFEST = re.compile(
    r"^(?P<root>(?:.*/)?)(?P<report>[^/]+)/(?P<start>\d{8})-(?P<end>\d{8})/(?P=report)-Manifest\.json$"
)
LEGACY_ASSEMBLY_MANIFEST = re.compile(
    r"^(?P<root>(?:.*/)?)(?P<report>[^/]+)/(?P<start>\d{8})-(?P<end>\d{8})/(?P<assembly>[^/]+)/(?P=report)-Manifest\.json$"
)
CUR2_MANIFEST = re.compile(
    r"^(?P<root>(?:.*/)?)(?P<export>[^/]+)/metadata/BILLING_PERIOD=(?P<period>\d{4}-\d{2})/(?:(?P<sub>.+)/)?[^/]+-Manifest\.json$"
)
CUR2_DATA = re.compile(r"^(?P<root>(?:.*/)?)(?P<export>[^/]+)/data/BILLING_PERIOD=(?P<period>\d{4}-\d{2})/(?:(?P<sub>.+)/)?[^/]+$")
ATHENA_DATA = re.compile(r"^(?P<root>(?:.*/)?)(?P<report>[^/]+)/year=(?P<y>\d{4})/month=(?P<m>\d{1,2})/[^/]+\.parquet$")
_STAMP = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})T?(\d{2}):?(\d{2}):?(\d{2})?")

# Error codes that mean "you may not", "no such thing", "try again", "bad credentials".
_DENIED = {"AccessDenied", "AccessDeniedException", "AllAccessDisabled", "Forbidden", "403", "UnauthorizedOperation"}
_RETRY = {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded", "TooManyRequests",
          "TooManyRequestsException", "RequestThrottled", "RequestTimeout", "RequestTimeoutException", "InternalError",
          "InternalServerException", "InternalErrorException", "ServiceUnavailable", "ServiceUnavailableException",
          "503", "500", "502", "504"}
_BAD_CREDS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "InvalidToken",
              "InvalidClientTokenId", "UnrecognizedClientException", "TokenRefreshRequired"}


class FatalPullError(PullError):
    """Stops the whole pull (credentials, access, missing bucket), not just one delivery."""


@dataclass
class ExportInfo:
    """An export the account's APIs describe (bcm-data-exports or cur)."""

    kind: str  # "cur2" (CUR 2.0 / FOCUS data export) or "legacy" (CUR)
    name: str
    bucket: str
    prefix: str
    format: str = ""
    versioning: str = ""  # CREATE_NEW_REPORT | OVERWRITE_REPORT


@dataclass
class AwsDelivery(PlannedDelivery):
    kind: str = ""  # legacy | cur2 | athena
    scopes: tuple[str, ...] = ()  # key prefixes of this period's deliveries (older ones are pruned from the cache)


@dataclass
class Problem:
    period: str
    label: str
    message: str

    def __str__(self) -> str:
        return f"{self.label} ({self.period}): {self.message}"


@dataclass
class AwsPlan:
    bucket: str
    prefix: str
    deliveries: list[AwsDelivery] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    discovered: list[ExportInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bodies: dict[str, bytes] = field(default_factory=dict)  # manifests read while planning (not written: dry runs fetch nothing)


@dataclass
class FetchResult:
    fetched: list[AwsDelivery] = field(default_factory=list)  # complete in the cache
    problems: list[Problem] = field(default_factory=list)
    files_downloaded: int = 0
    bytes_downloaded: int = 0
    files_cached: int = 0


# -- sessions and clients -------------------------------------------------------------------------
class AwsClients:
    """boto3 clients from the standard credential chain (env, profile, SSO, instance/container role).

    The SDK's configuration errors are mapped where the clients are made: no region, missing or partial
    credentials, an unknown profile or an expired SSO session become one line prefixed with ``what`` (the
    command, e.g. "--engine athena") that names the command's own flags (``flags``: "region", "profile")."""

    def __init__(self, profile: str | None = None, region: str | None = None, endpoint_url: str | None = None,
                 what: str = "", flags: dict[str, str] | None = None):
        self.what = what
        self.flags = {"region": "--region", "profile": "--profile", **(flags or {})}
        # AWS_REGION wins over AWS_DEFAULT_REGION, as in the AWS CLI v2 and the other SDKs (botocore reads only the latter)
        region = region or os.environ.get("AWS_REGION") or None
        try:
            self.session = boto3.Session(profile_name=profile, region_name=region)
        except bx.ProfileNotFound:
            name = profile or os.environ.get("AWS_PROFILE")
            raise self._fail(f"AWS profile {name!r} is not in the AWS config or credentials file") from None
        self.endpoint_url = endpoint_url or None
        s3cfg: dict[str, Any] = {"addressing_style": "path"} if endpoint_url else {}
        self.s3 = self.client(
            "s3",
            config=_config.Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=10, read_timeout=60, s3=s3cfg),
        )
        # Data Exports and the CUR API live in us-east-1 (cn-northwest-1 in China).
        home = "cn-northwest-1" if (self.session.region_name or "").startswith("cn-") else "us-east-1"
        disc = _config.Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=5, read_timeout=20)
        self._disc = (home, disc)

    def _fail(self, message: str) -> FatalPullError:
        return FatalPullError(f"{self.what}: {message}" if self.what else message)

    def client(self, service: str, **kw: Any) -> Any:
        """A ``service`` client (the session's region, the endpoint), its configuration checked here."""
        try:
            return self.session.client(service, **{"endpoint_url": self.endpoint_url, **kw})
        except bx.NoRegionError:
            raise self._fail(f"no AWS region: pass {self.flags['region']} or set AWS_REGION") from None
        except Exception as e:  # noqa: BLE001 - the credential chain's errors (botocore resolves them here), else as is
            if (c := credentials_error(e, self.flags["profile"])) is not None:
                raise self._fail(str(c)) from None
            raise

    def check_credentials(self) -> None:
        """Fail now, in one line, when the credential chain finds nothing (clients only find out at the first call)."""
        try:
            found = self.session.get_credentials()
        except Exception as e:  # noqa: BLE001 - mapped, else as is
            if (c := credentials_error(e, self.flags["profile"])) is not None:
                raise self._fail(str(c)) from None
            raise
        if found is None:
            raise self._fail(no_credentials(self.flags["profile"]))

    def discovery(self, service: str) -> Any:
        home, cfg = self._disc
        return self.client(service, region_name=home, config=cfg)


def _code(e: bx.ClientError) -> str:
    err = e.response.get("Error", {}) if isinstance(e.response, dict) else {}
    code = str(err.get("Code") or "")
    if not code:
        code = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return code


def _status(e: bx.ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def no_credentials(profile_flag: str = "--profile") -> str:
    return (f"no AWS credentials found: set AWS_PROFILE or {profile_flag}, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "run `aws sso login`, or run where an instance/container role is attached")


def credentials_error(e: Exception, profile_flag: str = "--profile") -> FatalPullError | None:
    """A clear message for the credential chain's failures (never the keys themselves)."""
    if isinstance(e, bx.NoCredentialsError):
        return FatalPullError(no_credentials(profile_flag))
    if isinstance(e, bx.PartialCredentialsError):
        return FatalPullError(f"incomplete AWS credentials: {e.kwargs.get('cred_var', 'a value')} is missing")
    sso = tuple(getattr(bx, n) for n in ("SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError",
                                          "SSOError") if hasattr(bx, n))
    if sso and isinstance(e, sso):
        return FatalPullError(f"the AWS SSO session is missing or expired: run `aws sso login` (with {profile_flag} if you use one)")
    if isinstance(e, bx.ClientError) and _code(e) in _BAD_CREDS:
        return FatalPullError(f"AWS rejected the credentials ({_code(e)}): check the keys, the profile or the session token")
    return None


def _translate(e: Exception, bucket: str, what: str) -> Exception:
    """Map a botocore failure to RetryableError (worth another try) or a one-line PullError."""
    if (c := credentials_error(e)) is not None:
        return c
    if isinstance(e, bx.ClientError):
        code, status = _code(e), _status(e)
        if code in _RETRY or status in (429, 500, 502, 503, 504):
            return RetryableError(f"{what}: {code or status}")
        if code == "NoSuchBucket":
            return FatalPullError(f"bucket {bucket!r} does not exist (NoSuchBucket); check --bucket (and --region)")
        if code in _DENIED or status == 403:
            return FatalPullError(
                f"access denied to s3://{bucket} ({what}): the credentials need s3:ListBucket on the bucket and "
                "s3:GetObject on the objects under the prefix (and the bucket policy / KMS key must allow them)"
            )
        if code == "PermanentRedirect" or status == 301:
            return FatalPullError(f"bucket {bucket!r} is in another region: pass --region")
        if code in ("NoSuchKey", "404", "NotFound"):
            return PullError(f"{what}: the object is gone (NoSuchKey); it was deleted or replaced during the pull")
        if code in ("PreconditionFailed", "412"):
            return PullError(f"{what}: the object changed during the pull; run the pull again")
        return PullError(f"{what}: {code or status}")
    if isinstance(e, (bx.EndpointConnectionError, bx.ConnectionClosedError, bx.ReadTimeoutError,
                      bx.ConnectTimeoutError, bx.ResponseStreamingError, bx.IncompleteReadError)):
        return RetryableError(f"{what}: {type(e).__name__}")
    if isinstance(e, (ConnectionError, TimeoutError)):
        return RetryableError(f"{what}: {type(e).__name__}")
    return e


def _call(fn: Callable[[], Any], bucket: str, what: str, attempts: int = 4) -> Any:
    def once() -> Any:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - translated or re-raised as is
            raise _translate(e, bucket, what) from None

    try:
        return with_retries(once, attempts=attempts)
    except RetryableError as e:
        if "EndpointConnectionError" in str(e):
            raise FatalPullError(f"cannot reach the S3 endpoint ({what}); check --endpoint-url/--region and the network") from None
        raise FatalPullError(f"{what}: still failing after {attempts} attempts ({e})") from None


# -- discovery ------------------------------------------------------------------------------------
def _norm_prefix(prefix: str | None) -> str:
    return (prefix or "").strip("/")


def discover(clients: AwsClients, want_cur2: bool = True, want_legacy: bool = True) -> tuple[list[ExportInfo], list[str]]:
    """Exports the APIs describe; an API the caller may not use (or cannot reach) is skipped quietly."""
    found: list[ExportInfo] = []
    notes: list[str] = []
    if want_cur2:
        try:
            bcm = clients.discovery("bcm-data-exports")
            arns: list[str] = []
            token: str | None = None
            while True:
                page = bcm.list_exports(**({"NextToken": token} if token else {}))
                arns += [x["ExportArn"] for x in page.get("Exports", []) if x.get("ExportArn")]
                token = page.get("NextToken")
                if not token:
                    break
            for arn in arns:
                exp = bcm.get_export(ExportArn=arn).get("Export", {})
                dest = exp.get("DestinationConfigurations", {}).get("S3Destination", {})
                out = dest.get("S3OutputConfigurations", {})
                if dest.get("S3Bucket"):
                    found.append(ExportInfo("cur2", str(exp.get("Name", "")), dest["S3Bucket"], _norm_prefix(dest.get("S3Prefix")),
                                            str(out.get("Format", "")), str(out.get("Overwrite", ""))))
        except Exception as e:  # noqa: BLE001
            if (c := credentials_error(e)) is not None and not isinstance(e, bx.ClientError):
                raise c from None
            notes.append(f"bcm-data-exports not used ({_why(e)})")
    if want_legacy:
        try:
            cur = clients.discovery("cur")
            token = None
            while True:
                page = cur.describe_report_definitions(**({"NextToken": token} if token else {}))
                for r in page.get("ReportDefinitions", []):
                    found.append(ExportInfo("legacy", r["ReportName"], r["S3Bucket"], _norm_prefix(r.get("S3Prefix")),
                                            str(r.get("Format", "")), str(r.get("ReportVersioning", ""))))
                token = page.get("NextToken")
                if not token:
                    break
        except Exception as e:  # noqa: BLE001
            if (c := credentials_error(e)) is not None and not isinstance(e, bx.ClientError):
                raise c from None
            notes.append(f"cur not used ({_why(e)})")
    return found, notes


def _why(e: Exception) -> str:
    return _code(e) if isinstance(e, bx.ClientError) else type(e).__name__


# -- listing and manifests ------------------------------------------------------------------------
@dataclass
class Listing:
    objects: dict[str, RemoteObject]
    modified: dict[str, datetime]


def list_objects(clients: AwsClients, bucket: str, prefix: str) -> Listing:
    objs: dict[str, RemoteObject] = {}
    mod: dict[str, datetime] = {}

    def pages() -> list[dict[str, Any]]:
        pag = clients.s3.get_paginator("list_objects_v2")
        kw: dict[str, Any] = {"Bucket": bucket}
        if prefix:
            kw["Prefix"] = prefix + "/"
        return list(pag.paginate(**kw))

    for page in _call(pages, bucket, f"list s3://{bucket}/{prefix}"):
        for o in page.get("Contents", []):
            key = o["Key"]
            if key.endswith("/"):
                continue  # folder marker
            objs[key] = RemoteObject(key=key, size=int(o.get("Size", 0)), etag=str(o.get("ETag", "")).strip('"'))
            if o.get("LastModified"):
                mod[key] = o["LastModified"]
    return Listing(objs, mod)


def _read_manifest(clients: AwsClients, bucket: str, obj: RemoteObject, cache: PullCache,
                   bodies: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A manifest's JSON: from the cache when unchanged there, else a GET (kept in bodies for fetch)."""
    if cache.unchanged(obj):
        raw = cache.path_for(obj.key).read_bytes()
    else:
        def get() -> bytes:
            body = clients.s3.get_object(Bucket=bucket, Key=obj.key)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        raw = _call(get, bucket, f"read s3://{bucket}/{obj.key}")
        if bodies is not None and len(raw) == obj.size:
            bodies[obj.key] = raw
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as e:
        raise PullError(f"s3://{bucket}/{obj.key} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise PullError(f"s3://{bucket}/{obj.key} is not a manifest object")
    return data


def _key_of(ref: str, bucket: str) -> str:
    """A manifest's reference to a file: ``s3://bucket/key`` or a bare key."""
    if ref.startswith("s3://"):
        rest = ref[len("s3://"):]
        _, _, key = rest.partition("/")  # the bucket named in the manifest may be a replica's source
        return key
    return ref


def _resolve(keys: list[str], listing: Listing, clients: AwsClients, bucket: str, cache: PullCache) -> list[RemoteObject]:
    """The objects a manifest names; PullError for an unsafe key or an object that is not in the bucket."""
    out: list[RemoteObject] = []
    for k in keys:
        cache.path_for(k)  # refuses ../, absolute paths, drive letters
        obj = listing.objects.get(k)
        if obj is None:  # outside the listed prefix? ask for it
            try:
                head = clients.s3.head_object(Bucket=bucket, Key=k)
                obj = RemoteObject(key=k, size=int(head.get("ContentLength", 0)), etag=str(head.get("ETag", "")).strip('"'))
                listing.objects[k] = obj
            except bx.ClientError as e:
                if _code(e) in ("404", "NoSuchKey", "NotFound"):
                    raise PullError(f"the manifest lists s3://{bucket}/{k}, which is not in the bucket; "
                                    "nothing is ingested for this period") from None
                raise _translate(e, bucket, f"head s3://{bucket}/{k}") from None
            except Exception as e:  # noqa: BLE001
                raise _translate(e, bucket, f"head s3://{bucket}/{k}") from None
        out.append(obj)
    return out


def _stamp_of(text: str | None) -> datetime | None:
    m = _STAMP.search(text or "")
    if not m:
        return None
    try:
        y, mo, d, h, mi, s = (int(g or 0) for g in m.groups())
        return datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    except ValueError:
        return None


# -- plan -----------------------------------------------------------------------------------------
def plan(
    clients: AwsClients,
    cache_root: Path,
    *,
    bucket: str | None,
    prefix: str | None = None,
    export: str | None = None,
    report: str | None = None,
    periods: tuple[str, ...] | list[str] = (),
    use_apis: bool = True,
) -> tuple[AwsPlan, PullCache]:
    """Discover the exports and choose the newest complete delivery of each billing period."""
    if export and report:
        raise PullError("give --export (CUR 2.0 / FOCUS data export) or --report (legacy CUR), not both")
    for p in periods:
        if not PERIOD_RX.match(p):
            raise PullError(f"--period {p!r}: expected YYYY-MM")
    discovered: list[ExportInfo] = []
    notes: list[str] = []
    if use_apis:
        discovered, notes = discover(clients, want_cur2=not report, want_legacy=not export)
    named = export or report
    if bucket is None:
        match = [x for x in discovered if named and x.name == named]
        if not named:
            raise PullError("give --bucket (and --prefix), or --export/--report to look the destination up")
        if not match:
            api = "bcm-data-exports ListExports" if export else "cur DescribeReportDefinitions"
            raise PullError(f"no {'export' if export else 'report'} named {named!r} found through {api} "
                            "(or no permission to call it); give --bucket and --prefix")
        bucket = match[0].bucket
        prefix = match[0].prefix if prefix is None else prefix
    elif prefix is None and named:  # the API knows where this export lives in the bucket
        match = [x for x in discovered if x.name == named and x.bucket == bucket]
        if match:
            prefix = match[0].prefix
    prefix = _norm_prefix(prefix)
    cache = PullCache(cache_root / bucket, f"s3://{bucket}")
    result = AwsPlan(bucket=bucket, prefix=prefix, discovered=discovered, notes=notes)
    listing = list_objects(clients, bucket, prefix)
    if not listing.objects:
        raise FatalPullError(f"nothing under s3://{bucket}/{prefix}: check --bucket and --prefix")
    want = set(periods)
    claimed: set[str] = set()

    def keep(period: str) -> bool:
        return not want or period in want

    handled: set[tuple[str, str]] = set()  # (report, period) a legacy manifest decided
    _plan_legacy(result, listing, clients, cache, report if not export else "\x00", keep, claimed, handled)
    _plan_cur2(result, listing, clients, cache, export if not report else "\x00", keep, claimed)
    _plan_athena(result, listing, cache, report if not export else "\x00", keep, claimed, handled)
    result.deliveries.sort(key=lambda d: (d.period, d.label))
    if named and not result.deliveries and not result.problems:
        names = _names(listing)
        other = "legacy CUR report (use --report)" if export and named in names["legacy"] else (
            "CUR 2.0/FOCUS export (use --export)" if report and named in names["cur2"] else "")
        if other:
            raise PullError(f"{named!r} under s3://{bucket}/{prefix} is a {other}")
        if want and named in names["legacy"] | names["cur2"]:
            raise PullError(f"{named!r} has no delivery for {', '.join(sorted(want))} under s3://{bucket}/{prefix}")
        raise PullError(f"no {'export' if export else 'report'} named {named!r} under s3://{bucket}/{prefix}")
    if not result.deliveries and not result.problems and not want:
        raise PullError(f"no CUR, CUR 2.0 or FOCUS export found under s3://{bucket}/{prefix}")
    return result, cache


def _names(listing: Listing) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"legacy": set(), "cur2": set()}
    for k in listing.objects:
        if m := LEGACY_PERIOD_MANIFEST.match(k):
            out["legacy"].add(m["report"])
        elif m := (CUR2_MANIFEST.match(k) or CUR2_DATA.match(k)):
            out["cur2"].add(m["export"])
        elif m := ATHENA_DATA.match(k):
            out["legacy"].add(m["report"])
    return out


def _plan_legacy(res: AwsPlan, listing: Listing, clients: AwsClients, cache: PullCache, name: str | None,
                 keep: Callable[[str], bool], claimed: set[str], handled: set[tuple[str, str]]) -> None:
    period_manifests: dict[tuple[str, str, str], str] = {}
    assembly_manifests: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for k in sorted(listing.objects):
        if m := LEGACY_PERIOD_MANIFEST.match(k):
            period_manifests[(m["root"], m["report"], f"{m['start']}-{m['end']}")] = k
        elif m := LEGACY_ASSEMBLY_MANIFEST.match(k):
            assembly_manifests.setdefault((m["root"], m["report"], f"{m['start']}-{m['end']}"), []).append((m["assembly"], k))
    for group in sorted(set(period_manifests) | set(assembly_manifests)):
        root, rep, folder = group
        period = f"{folder[:4]}-{folder[4:6]}"
        if (name and rep != name) or not keep(period):
            continue
        label = f"{rep} (legacy CUR)"
        handled.add((rep, period))
        manifest_key = period_manifests.get(group)
        assemblies = dict(assembly_manifests.get(group, []))
        if manifest_key is None:  # no period manifest: the newest assembly by time
            manifest_key = max(assemblies.values(), key=lambda k: (listing.modified.get(k) or datetime.min.replace(tzinfo=UTC), k))
        try:
            data = _read_manifest(clients, res.bucket, listing.objects[manifest_key], cache, res.bodies)
            assembly = str(data.get("assemblyId") or "")
            keys = data.get("reportKeys")
            if not isinstance(keys, list) or not all(isinstance(x, str) for x in keys):
                raise PullError(f"s3://{res.bucket}/{manifest_key} has no reportKeys list")
            label = f"{rep} assembly {assembly}" if assembly else label
            objs = [listing.objects[manifest_key]]
            if assembly in assemblies and assemblies[assembly] != manifest_key:
                objs.append(listing.objects[assemblies[assembly]])
            objs += _resolve(keys, listing, clients, res.bucket, cache)
        except FatalPullError:
            raise
        except PullError as e:
            res.problems.append(Problem(period, label, str(e)))
            claimed.update(_under(listing, f"{root}{rep}/{folder}/"))
            continue
        claimed.update(o.key for o in objs)
        res.deliveries.append(AwsDelivery(period, label, _dedup(objs), kind="legacy", scopes=(f"{root}{rep}/{folder}/",)))


def _plan_cur2(res: AwsPlan, listing: Listing, clients: AwsClients, cache: PullCache, name: str | None,
               keep: Callable[[str], bool], claimed: set[str]) -> None:
    manifests: dict[tuple[str, str, str], list[tuple[str | None, str]]] = {}
    data: dict[tuple[str, str, str], dict[str | None, list[str]]] = {}
    for k in sorted(listing.objects):
        if m := CUR2_MANIFEST.match(k):
            manifests.setdefault((m["root"], m["export"], m["period"]), []).append((m["sub"], k))
        elif (m := CUR2_DATA.match(k)) and is_data_file(PurePosixPath(k)):  # type: ignore[arg-type]
            data.setdefault((m["root"], m["export"], m["period"]), {}).setdefault(m["sub"], []).append(k)
    for group in sorted(set(manifests) | set(data)):
        root, exp, period = group
        if (name and exp != name) or not keep(period):
            continue
        scopes = (f"{root}{exp}/data/BILLING_PERIOD={period}/", f"{root}{exp}/metadata/BILLING_PERIOD={period}/")
        label = f"{exp} (CUR 2.0/FOCUS)"

        def when(sub: str | None, keys: list[str]) -> tuple[int, datetime, str]:
            stamp = _stamp_of(sub)
            latest = max((listing.modified.get(k) or datetime.min.replace(tzinfo=UTC) for k in keys),
                         default=datetime.min.replace(tzinfo=UTC))
            return (1 if sub is None else 0, stamp or latest, sub or "")

        try:
            if group in manifests:
                cands = manifests[group]
                # the manifest in the period folder is rewritten on each refresh; else the newest timestamped one
                sub, mkey = max(cands, key=lambda c: (when(c[0], [c[1]]), c[1].endswith(f"/{exp}-Manifest.json")))
                doc = _read_manifest(clients, res.bucket, listing.objects[mkey], cache, res.bodies)
                refs = _data_refs(doc.get("dataFiles"))
                if refs is None:
                    raise PullError(f"s3://{res.bucket}/{mkey} has no dataFiles list")
                execution = str(doc.get("executionId") or sub or "")
                label = f"{exp} execution {execution}" if execution else label
                objs = [listing.objects[mkey], *_resolve([_key_of(r, res.bucket) for r in refs], listing, clients, res.bucket, cache)]
            else:
                subs = data[group]
                sub = max(subs, key=lambda s: when(s, subs[s]))
                label = f"{exp} {'folder ' + sub if sub else 'data'} (no manifest)"
                objs = [listing.objects[k] for k in subs[sub]]
                for o in objs:
                    cache.path_for(o.key)
        except FatalPullError:
            raise
        except PullError as e:
            res.problems.append(Problem(period, label, str(e)))
            for s in scopes:
                claimed.update(_under(listing, s))
            continue
        claimed.update(o.key for o in objs)
        res.deliveries.append(AwsDelivery(period, label, _dedup(objs), kind="cur2", scopes=scopes))


def _plan_athena(res: AwsPlan, listing: Listing, cache: PullCache, name: str | None,
                 keep: Callable[[str], bool], claimed: set[str], handled: set[tuple[str, str]]) -> None:
    folders: dict[tuple[str, str, str], list[str]] = {}
    for k in sorted(listing.objects):
        if k in claimed or not (m := ATHENA_DATA.match(k)):
            continue
        period = f"{m['y']}-{int(m['m']):02d}"
        folders.setdefault((k.rsplit("/", 1)[0] + "/", m["report"], period), []).append(k)
    for (folder, rep, period), keys in sorted(folders.items()):
        if (name and rep != name) or not keep(period) or (rep, period) in handled:
            continue  # a period manifest of the report lists its files (or is broken): that decides
        label = f"{rep} (Athena parquet)"
        try:
            for k in keys:
                cache.path_for(k)
        except PullError as e:
            res.problems.append(Problem(period, label, str(e)))
            continue
        res.deliveries.append(AwsDelivery(period, label, [listing.objects[k] for k in keys], kind="athena", scopes=(folder,)))


def _data_refs(value: object) -> list[str] | None:
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            ref = next((item[k] for k in ("s3Uri", "uri", "key", "path", "name") if isinstance(item.get(k), str)), None)
            if ref:
                out.append(ref)
    return out


def _under(listing: Listing, prefix: str) -> list[str]:
    return [k for k in listing.objects if k.startswith(prefix)]


def _dedup(objs: list[RemoteObject]) -> list[RemoteObject]:
    seen: dict[str, RemoteObject] = {}
    for o in objs:
        seen.setdefault(o.key, o)
    return list(seen.values())


# -- fetch ----------------------------------------------------------------------------------------
def _reader(clients: AwsClients, bucket: str, obj: RemoteObject, dest: Path) -> Callable[[int], Iterator[bytes]]:
    """read_from(offset) for pull_common.download: a (ranged) GET pinned to the planned ETag.

    ``<file>.part.etag`` remembers which version of the object the ``.part`` holds: a part of an
    older version is thrown away, never completed with the new version's bytes.
    """
    part = dest.with_name(dest.name + ".part")
    tag = dest.with_name(dest.name + ".part.etag")

    def read_from(offset: int) -> Iterator[bytes]:
        if offset and (not tag.exists() or tag.read_text().strip() != obj.etag):
            part.unlink(missing_ok=True)
            raise RetryableError(f"{obj.key}: the partial download belongs to another version of the object")
        if not offset:
            tag.write_text(obj.etag)
        kw: dict[str, Any] = {"Bucket": bucket, "Key": obj.key}
        if offset:
            kw["Range"] = f"bytes={offset}-"
        if obj.etag:
            kw["IfMatch"] = f'"{obj.etag}"'
        what = f"get s3://{bucket}/{obj.key}"
        try:
            resp = clients.s3.get_object(**kw)
        except Exception as e:  # noqa: BLE001
            raise _translate(e, bucket, what) from None
        body = resp["Body"]
        skip = offset if offset and not resp.get("ContentRange") else 0  # the server ignored Range: drop what we have
        try:
            for chunk in body.iter_chunks(CHUNK):
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                    if not chunk:
                        continue
                yield chunk
        except Exception as e:  # noqa: BLE001
            t = _translate(e, bucket, what)
            if t is e and not isinstance(e, RetryableError):
                t = RetryableError(f"{what}: {type(e).__name__}")  # urllib3 protocol errors: the connection dropped
            raise t from None
        finally:
            body.close()

    return read_from


def fetch(
    clients: AwsClients,
    the_plan: AwsPlan,
    cache: PullCache,
    *,
    progress: Callable[[int], None] | None = None,
    file_done: Callable[[RemoteObject, bool], None] | None = None,
    attempts: int = 5,
) -> FetchResult:
    """Download what changed into the cache; a delivery that cannot be completed is a problem, not ingested."""
    out = FetchResult()
    for d in the_plan.deliveries:
        try:
            # data files first, manifests last: an interrupted pull never leaves a manifest without its files
            for obj in sorted(d.objects, key=lambda o: o.key.lower().endswith("manifest.json")):
                downloaded = not cache.unchanged(obj)
                if not downloaded:
                    out.files_cached += 1
                else:
                    dest = cache.path_for(obj.key)
                    if obj.key in the_plan.bodies:  # read while planning: no second GET
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        tmp = dest.with_name(dest.name + ".part")
                        tmp.write_bytes(the_plan.bodies[obj.key])
                        os.replace(tmp, dest)
                        cache.record(obj)
                        out.files_downloaded += 1
                        out.bytes_downloaded += obj.size
                        if file_done:
                            file_done(obj, False)
                        continue
                    try:
                        download(obj, dest, _reader(clients, the_plan.bucket, obj, dest), progress=progress, attempts=attempts)
                    except RetryableError as e:
                        raise PullError(f"gave up after {attempts} attempts: {e}") from None
                    dest.with_name(dest.name + ".part.etag").unlink(missing_ok=True)
                    cache.record(obj)
                    out.files_downloaded += 1
                    out.bytes_downloaded += obj.size
                if file_done:
                    file_done(obj, downloaded)
        except FatalPullError:
            raise
        except PullError as e:
            out.problems.append(Problem(d.period, d.label, str(e)))
            continue
        out.fetched.append(d)
    return out


# -- ingest ---------------------------------------------------------------------------------------
def local_paths(deliveries: list[AwsDelivery], cache: PullCache) -> list[Path]:
    return [cache.path_for(o.key) for d in deliveries for o in d.objects]


def ingest(store: Store, deliveries: list[AwsDelivery], cache: PullCache,
           progress: Callable[[str, int], None] | None = None, prune: bool = True) -> IngestReport:
    """Ingest the fetched deliveries; then drop older deliveries of the same periods from the cache."""
    from billing_audit.store import IngestReport

    paths = local_paths(deliveries, cache)
    if not paths:
        return IngestReport()
    report = store.ingest(paths, progress=progress)
    if prune:
        bad = {Path(e.file.split("!")[0]).resolve() for e in report.errors}
        ok = [d for d in deliveries if not any(cache.path_for(o.key) in bad for o in d.objects)]
        prune_cache(cache, ok)
    return report


def prune_cache(cache: PullCache, deliveries: list[AwsDelivery]) -> int:
    """Delete cached files of older deliveries (e.g. "create new" snapshots) in these deliveries' periods."""
    removed = 0
    for d in deliveries:
        current = {o.key for o in d.objects}
        for sid, rec in list(cache.state.items()):
            key = str(rec.get("key", ""))
            if not sid.startswith(cache.source + "/") or key in current or not any(key.startswith(s) for s in d.scopes):
                continue
            path = cache.path_for(key)
            for p in (path, path.with_name(path.name + ".part"), path.with_name(path.name + ".part.etag")):
                if p.exists():
                    p.unlink()
            del cache.state[sid]
            removed += 1
            _drop_empty_dirs(path.parent, cache.root)
    if removed:
        state = cache.root / STATE_FILE
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache.state, indent=1, sort_keys=True))
        os.replace(tmp, state)
    return removed


def _drop_empty_dirs(folder: Path, root: Path) -> None:
    root = root.resolve()
    folder = folder.resolve()
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# -- `billing-audit pull aws` (billing_audit.pulling.Puller) ---------------------------------------------------------
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


class AwsOptions(BaseModel):
    """The flags of `billing-audit pull aws`, in --help order (the shared --db goes before --cache)."""

    model_config = ConfigDict(frozen=True)

    bucket: str | None = Field(None, description="S3 bucket the exports are delivered to (default: from --export/--report via the APIs).")
    prefix: str | None = Field(None, description="Key prefix of the exports (the export's S3 prefix); default: whole bucket.")
    export: str | None = Field(None, description="Only this CUR 2.0 / FOCUS data export.", json_schema_extra={"metavar": "NAME"})
    report: str | None = Field(None, description="Only this legacy CUR report.", json_schema_extra={"metavar": "NAME"})
    periods: tuple[str, ...] = Field((), description="Only this billing period; repeatable. Default: all.",
                                     json_schema_extra={"flag": "--period", "metavar": "YYYY-MM"})
    profile: str | None = Field(None, description="AWS profile (default: AWS_PROFILE / the credential chain).")
    region: str | None = Field(None, description="AWS region of the bucket (default: the profile's / AWS_REGION).")
    endpoint_url: str | None = Field(None, description="Send the AWS calls to this endpoint instead (S3-compatible store, test server).")
    cache: str = Field("billing-audit-cache/aws", description="Where downloads are kept, under BUCKET/<key>.",
                       json_schema_extra={"path": "dir"})
    dry_run: bool = Field(False, description="List what would be fetched and its size (reads only the listing and manifests); "
                                             "ingest nothing.")
    quiet: bool = Field(False, description="No progress bar or summary lines.", json_schema_extra={"flag": "-q/--quiet"})


@dataclass
class AwsPullPlan:
    clients: AwsClients
    plan: AwsPlan
    cache: PullCache
    messages: list[pulling.Message] = field(default_factory=list)

    def dry_run(self) -> pulling.DryRun:
        problems = [str(p) for p in self.plan.problems]
        return pulling.DryRun(describe_plan(list(self.plan.deliveries), self.cache), [pulling.error(p) for p in problems],
                              failed=bool(problems))


@dataclass
class AwsFetched:
    result: FetchResult
    cache: PullCache
    messages: list[pulling.Message] = field(default_factory=list)
    failed: bool = False
    error: str | None = None

    @property
    def ready(self) -> bool:
        return bool(self.result.fetched)


class AwsPuller:
    name = "aws"
    title = "AWS"
    example = "billing-audit pull aws --bucket my-billing --prefix cur --period 2026-10"
    help = HELP
    Options = AwsOptions
    db_before = "cache"

    def plan(self, options: AwsOptions) -> AwsPullPlan:
        if options.export and options.report:
            raise PullError("give --export (CUR 2.0 / FOCUS) or --report (legacy CUR), not both")
        clients = AwsClients(profile=options.profile, region=options.region, endpoint_url=options.endpoint_url)
        the_plan, cache = plan(clients, Path(options.cache), bucket=options.bucket, prefix=options.prefix,
                               export=options.export, report=options.report, periods=options.periods)
        res = AwsPullPlan(clients, the_plan, cache)
        if not the_plan.deliveries and not the_plan.problems:
            res.messages.append(pulling.info(f"nothing to pull under s3://{the_plan.bucket}/{the_plan.prefix}"
                                             + (f" for {', '.join(options.periods)}" if options.periods else "")))
        return res

    def fetch(self, p: AwsPullPlan, progress: pulling.FetchProgress | None) -> AwsFetched:
        if progress is None:
            result = fetch(p.clients, p.plan, p.cache)
        else:
            files = sum(len(d.objects) for d in p.plan.deliveries)
            progress.start("pull aws", sum(d.size for d in p.plan.deliveries), "bytes")
            progress.detail(f"0/{files} files")
            done = 0

            def file_done(obj: RemoteObject, downloaded: bool) -> None:
                nonlocal done
                done += 1
                progress.detail(f"{done}/{files} files")
                if not downloaded:
                    progress.advance(obj.size)

            result = fetch(p.clients, p.plan, p.cache, progress=progress.advance, file_done=file_done)
        problems = [*p.plan.problems, *result.problems]
        said = [pulling.info(f"s3://{p.plan.bucket}/{p.plan.prefix}: {len(result.fetched)} delivery(ies), "
                             f"{result.files_downloaded} file(s) downloaded ({result.bytes_downloaded:,} bytes), "
                             f"{result.files_cached} unchanged")]
        return AwsFetched(result, p.cache, said + [pulling.error(str(x)) for x in problems], failed=bool(problems))

    def ingest(self, store: Store, fetched: AwsFetched, progress: pulling.IngestProgress | None) -> IngestReport:
        return ingest(store, fetched.result.fetched, fetched.cache, progress=progress)


PULLER: pulling.Puller[AwsOptions, AwsPullPlan, AwsFetched] = AwsPuller()
