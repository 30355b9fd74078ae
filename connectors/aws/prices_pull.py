"""``billing-audit prices pull aws``: on-demand EC2 prices from the AWS Price List, for what the spot lines need.

Two APIs, both AWS's own (the files they give are read by :mod:`connectors.aws.prices` exactly as a saved copy
would be, so a pulled page and a saved page are one code path):

* **the Query API** (``pricing:GetProducts``, boto3's ``pricing`` client; endpoints in us-east-1, eu-central-1
  and ap-south-1): the *current* price list.  One query per on-demand usage type and operation
  (``ServiceCode`` AmazonEC2, ``TERM_MATCH`` on ``usagetype``, ``operation``, ``regionCode``, ``capacitystatus``
  Used and, for a BoxUsage / DedicatedUsage type, its ``tenancy``), ``FormatVersion`` aws_v1, followed over
  ``NextToken``.  Each response page is written as boto3 returns it without ``ResponseMetadata``
  (``{"FormatVersion": "aws_v1", "PriceList": ["<product JSON>", ...], "NextToken": ...}``) to
  ``query/<usage type>~<operation>~<region>-p<NNN>.json``: a re-pull overwrites its pages (and removes pages a
  shorter answer no longer has) instead of adding copies.
* **the Bulk API** (``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/...``, no credentials): the
  *historical* price lists.  Used for a need whose lines start before the current price's ``effectiveDate``
  (the current list does not say what applied then), and for every need when the Query API may not be called
  (AccessDenied) or ``--source bulk`` is asked.  The offer index names the EC2 version index
  (``versionIndexUrl``); its ``versions`` carry ``versionEffectiveBeginDate`` / ``versionEffectiveEndDate``;
  every version in force during a need's uncovered period is chosen, and its regional offer file
  (``<version>/<region>/index.csv``: five metadata lines, then the header) is streamed to disk with progress,
  resuming a partial download.  The file is several GB for a large region, so what is kept is its metadata
  lines, header and the OnDemand records of the asked usage types and operations, byte for byte:
  ``bulk/AmazonEC2-<version>-<region>-<hash of the asked keys>.csv``.  The full download is removed unless
  ``--keep-offer-files`` (then a later pull of the same version reads it instead of downloading it again).

Retries: the ``pricing`` client uses botocore's standard retry mode (ThrottlingException, 5xx) with
``--max-attempts``; the Bulk API downloads retry 429 / 5xx / dropped connections with backoff.  The retries
survived are counted in the progress lines.  Credentials and region problems are one line
(:func:`connectors.aws.pull.credentials_error`); the IAM permission needed is ``pricing:GetProducts``.
"""

from __future__ import annotations

import csv
import hashlib
import http.client
import io
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin

from pydantic import BaseModel, ConfigDict, Field

from billing_audit.prices import PriceNeed
from connectors.aws.prices import canonical_usage_type
from connectors.aws.pull import _config, boto3, bx, credentials_error, no_credentials
from connectors.pull_common import PullError, RemoteObject, RetryableError, download, with_retries

Progress = Callable[[str], None]

SERVICE = "AmazonEC2"
PRICING_REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")  # where the Query API is served (docs: Price List Query API)
PRICING_REGIONS_CN = ("cn-northwest-1",)
BULK_URL = "https://pricing.us-east-1.amazonaws.com"
OFFER_INDEX = "/offers/v1.0/aws/index.json"
CHUNK = 1 << 20
_DENIED = {"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"}
_KIND = re.compile(r"(?:^|-)(BoxUsage|DedicatedUsage|HostUsage):")

HELP = """Fetch the on-demand EC2 prices the store's spot lines need from the AWS Price List.

The Query API (pricing:GetProducts; credentials from the standard chain) gives the current prices; lines older
than the current price list are priced from the Bulk API's historical offer files (public, no credentials;
several GB per region: only the asked records are kept).

\b
Examples:
  billing-audit prices pull aws                      # Query API, Bulk API for older lines
  billing-audit prices pull aws --profile billing-ro --region eu-central-1
  billing-audit prices pull aws --source bulk        # no credentials needed
"""


class AwsPricesOptions(BaseModel):
    """The flags of `billing-audit prices pull aws`."""

    model_config = ConfigDict(frozen=True)

    source: Literal["auto", "query", "bulk"] = Field(
        "auto", description="auto: the Query API, and the Bulk API's historical lists for older lines (or when "
                            "the Query API is denied); query: the Query API only; bulk: the Bulk API only (no credentials).",
        json_schema_extra={"metavar": "auto|query|bulk"})
    profile: str | None = Field(None, description="AWS profile (default: AWS_PROFILE / the credential chain).")
    region: str | None = Field(None, description="Region of the Price List Query API endpoint: us-east-1, eu-central-1 "
                                                 "or ap-south-1 (default: the profile's / AWS_REGION when it is one of "
                                                 "them, else us-east-1).")
    endpoint_url: str | None = Field(None, description="Send the Query API calls to this endpoint instead (test server).")
    bulk_url: str = Field(BULK_URL, description="Base URL of the Price List Bulk API.", json_schema_extra={"metavar": "URL"})
    page_size: int = Field(100, ge=1, le=100, description="Products per GetProducts page (MaxResults, 1-100).",
                           json_schema_extra={"metavar": "N"})
    max_attempts: int = Field(8, ge=1, le=20, description="Attempts per request, retries on throttling and 5xx included.",
                              json_schema_extra={"metavar": "N"})
    max_offer_files: int = Field(12, ge=1, description="Stop before downloading more Bulk API offer files than this "
                                                       "(one per price list version and region).",
                                 json_schema_extra={"metavar": "N"})
    keep_offer_files: bool = Field(False, description="Keep the full Bulk API offer files downloaded (several GB per "
                                                      "region) so later pulls of the same version read them again.")
    cache: str | None = Field(None, description="Where the fetched pages and offer files go (default: "
                                                "billing-audit-cache/prices/aws beside the store).",
                              json_schema_extra={"path": "dir"})
    quiet: bool = Field(False, description="No progress lines.", json_schema_extra={"flag": "-q/--quiet"})


# -- the keys -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """One on-demand usage type and operation in one region: one GetProducts query."""

    usage_type: str
    operation: str
    region: str | None

    @property
    def stem(self) -> str:
        return _safe(f"{self.usage_type}~{self.operation}~{self.region or 'any'}")

    def filters(self) -> list[dict[str, str]]:
        out = [("usagetype", self.usage_type), ("operation", self.operation)]
        if self.region:
            out.append(("regionCode", self.region))
        if m := _KIND.search(self.usage_type):
            out.append(("tenancy", {"BoxUsage": "Shared", "DedicatedUsage": "Dedicated", "HostUsage": "Host"}[m[1]]))
        out.append(("capacitystatus", "Used"))
        return [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in out]


def split_key(price_key: str) -> tuple[str, str]:
    """``(usage type, operation)`` of an AWS price key ``<usage type>|<operation>`` (connectors.aws.prices), the
    usage type as the price list writes it (US East (N. Virginia) without ``USE1-``)."""
    usage, sep, op = price_key.partition("|")
    if not sep or not usage.strip() or not op.strip() or "|" in op:
        raise _fail(f"AWS price key {price_key!r}: expected '<usage type>|<operation>', "
                    "e.g. 'BoxUsage:p4d.24xlarge|RunInstances'")
    return canonical_usage_type(usage.strip()), op.strip()


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._~=-]+", "_", text)


# -- a session and its client ---------------------------------------------------------------------------
def _fail(message: str) -> PullError:
    return PullError(f"prices pull aws: {message}")


def _pricing_region(options: AwsPricesOptions, session: Any) -> str:
    if options.region:
        if options.endpoint_url or options.region in PRICING_REGIONS + PRICING_REGIONS_CN:
            return options.region
        raise _fail(f"the Price List Query API has no endpoint in {options.region}: pass --region "
                    f"{', '.join(PRICING_REGIONS)} (cn-northwest-1 in China)")
    here = session.region_name or ""
    if here in PRICING_REGIONS + PRICING_REGIONS_CN:
        return here
    return "cn-northwest-1" if here.startswith("cn-") else "us-east-1"


def pricing_client(options: AwsPricesOptions) -> Any:
    """boto3's ``pricing`` client from the standard credential chain, its configuration checked now (one line)."""
    try:
        session = boto3.Session(profile_name=options.profile,
                                region_name=options.region or os.environ.get("AWS_REGION") or None)
    except bx.ProfileNotFound:
        name = options.profile or os.environ.get("AWS_PROFILE")
        raise _fail(f"AWS profile {name!r} is not in the AWS config or credentials file") from None
    region = _pricing_region(options, session)
    cfg = _config.Config(retries={"mode": "standard", "total_max_attempts": options.max_attempts},
                         connect_timeout=10, read_timeout=60)
    try:
        found = session.get_credentials()
        if found is None:
            raise _fail(no_credentials() + " (or pass --source bulk, which needs none)")
        return session.client("pricing", region_name=region, endpoint_url=options.endpoint_url or None, config=cfg)
    except bx.NoRegionError:
        raise _fail("no AWS region: pass --region or set AWS_REGION") from None
    except PullError:
        raise
    except Exception as e:  # noqa: BLE001 - the credential chain's errors, mapped; else as is
        if (c := credentials_error(e)) is not None:
            raise _fail(str(c)) from None
        raise


def _client_error(e: Exception, what: str) -> Exception:
    """A one-line PullError for what stops the pull (access, credentials, unreachable endpoint)."""
    if (c := credentials_error(e)) is not None:
        return _fail(str(c))
    if isinstance(e, bx.ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code in _DENIED:
            return _fail(f"access denied to the Price List Query API ({what}): the credentials need pricing:GetProducts "
                         "(or pass --source bulk, which needs no credentials)")
        return _fail(f"{what}: {code}: {err.get('Message', '')}".rstrip(": "))
    if isinstance(e, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return _fail(f"cannot reach the Price List Query API ({what}): {e}")
    return e


class QueryDenied(PullError):
    """The credentials may not call pricing:GetProducts (``--source auto`` then reads the Bulk API)."""


def _denied(e: Exception) -> bool:
    return isinstance(e, bx.ClientError) and str(e.response.get("Error", {}).get("Code")) in _DENIED


# -- the Query API ----------------------------------------------------------------------------------------
@dataclass
class Stats:
    requests: int = 0
    retries: int = 0
    pages: int = 0
    products: int = 0
    downloads: int = 0
    bytes: int = 0
    files: list[Path] = field(default_factory=list)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC).replace(tzinfo=None)


def _naive(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def on_demand_since(price_list: Iterable[str], q: Query) -> datetime | None:
    """The latest OnDemand ``effectiveDate`` of the products of ``q`` in a GetProducts PriceList (None: none found):
    lines before it are not priced by this list."""
    found: datetime | None = None
    for item in price_list:
        doc = json.loads(item) if isinstance(item, str) else item
        attrs = doc.get("product", {}).get("attributes", {})
        if canonical_usage_type(str(attrs.get("usagetype"))) != q.usage_type or attrs.get("operation") != q.operation:
            continue
        for term in (doc.get("terms", {}).get("OnDemand") or {}).values():
            t = _parse_time(term.get("effectiveDate"))
            if t is not None and (found is None or t > found):
                found = t
    return found


def query(client: Any, q: Query, dest: Path, options: AwsPricesOptions, stats: Stats,
          progress: Progress | None) -> datetime | None:
    """Every page of one query written under ``dest/query``; returns the OnDemand effective date found."""
    folder = dest / "query"
    token: str | None = None
    page = 0
    since: datetime | None = None
    written: set[Path] = set()
    what = f"GetProducts {q.usage_type} {q.operation}" + (f" in {q.region}" if q.region else "")
    while True:
        args: dict[str, Any] = {"ServiceCode": SERVICE, "Filters": q.filters(), "FormatVersion": "aws_v1",
                                "MaxResults": options.page_size}
        if token:
            args["NextToken"] = token
        try:
            resp = client.get_products(**args)
        except Exception as e:  # noqa: BLE001 - mapped to one line, else as is
            if _denied(e):
                raise QueryDenied(str(_client_error(e, what))) from None
            raise _client_error(e, what) from None
        meta = resp.pop("ResponseMetadata", {})
        stats.requests += 1 + int(meta.get("RetryAttempts", 0))
        stats.retries += int(meta.get("RetryAttempts", 0))
        page += 1
        path = folder / f"{q.stem}-p{page:03d}.json"
        _write_atomic(path, json.dumps(resp, ensure_ascii=False).encode())
        written.add(path)
        items = resp.get("PriceList") or []
        stats.pages += 1
        stats.products += len(items)
        t = on_demand_since(items, q)
        since = t if since is None or (t is not None and t > since) else since
        if progress:
            progress(f"aws: {what}: page {page}, {len(items)} product(s)"
                     + (f", {meta['RetryAttempts']} retried" if meta.get("RetryAttempts") else ""))
        token = resp.get("NextToken")
        if not token:
            break
    mine = re.compile(re.escape(q.stem) + r"-p\d{3,}\.json")
    for old in folder.iterdir():  # pages an earlier, longer answer left
        if mine.fullmatch(old.name) and old not in written:
            old.unlink()
    stats.files += sorted(written)
    return since


# -- the Bulk API ----------------------------------------------------------------------------------------
class Http:
    """GETs of the Bulk API with retries (429, 5xx, dropped connections) and backoff."""

    def __init__(self, base: str, attempts: int, stats: Stats, sleep: Callable[[float], None] = time.sleep):
        self.base = base.rstrip("/") + "/"
        self.attempts = attempts
        self.stats = stats
        self.sleep = sleep

    def url(self, ref: str) -> str:
        return urljoin(self.base, ref.lstrip("/")) if not re.match(r"^https?://", ref) else ref

    def _open(self, url: str, method: str = "GET", offset: int = 0) -> Any:
        req = urllib.request.Request(url, method=method)
        if offset:
            req.add_header("Range", f"bytes={offset}-")
        self.stats.requests += 1
        try:
            return urllib.request.urlopen(req, timeout=60)  # noqa: S310 - http(s) URLs of the Bulk API only
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 429 or e.code >= 500:
                raise RetryableError(f"{url}: HTTP {e.code}") from None
            if e.code == 404:
                raise _fail(f"the Price List Bulk API has no {url} (HTTP 404)") from None
            raise _fail(f"{url}: HTTP {e.code}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            raise RetryableError(f"{url}: {getattr(e, 'reason', e)}") from None

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        tries = 0

        def once() -> Any:
            nonlocal tries
            tries += 1
            if tries > 1:
                self.stats.retries += 1
            return fn()

        try:
            return with_retries(once, attempts=self.attempts, sleep=self.sleep)
        except RetryableError as e:
            raise _fail(f"the Price List Bulk API still fails after {self.attempts} attempts: {e}") from None

    def json(self, ref: str) -> dict[str, Any]:
        url = self.url(ref)

        def get() -> bytes:
            with self._open(url) as r:
                try:
                    return bytes(r.read())
                except (http.client.HTTPException, ConnectionError, TimeoutError, OSError) as e:
                    raise RetryableError(f"{url}: {e}") from None

        body = self._retrying(get)
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise _fail(f"{url}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise _fail(f"{url}: expected a JSON object")
        return doc

    def head(self, url: str) -> RemoteObject:
        def once() -> RemoteObject:
            with self._open(url, "HEAD") as r:
                size = r.headers.get("Content-Length")
                if size is None:
                    raise _fail(f"{url}: no Content-Length")
                return RemoteObject(key=url, size=int(size), etag=str(r.headers.get("ETag") or ""), url=url)

        return self._retrying(once)  # type: ignore[no-any-return]

    def reader(self, url: str) -> Callable[[int], Iterator[bytes]]:
        """``read_from(offset)`` for :func:`connectors.pull_common.download` (which retries it): every call after
        the first is a retry, counted."""
        calls = 0

        def read_from(offset: int) -> Iterator[bytes]:
            nonlocal calls
            calls += 1
            if calls > 1:
                self.stats.retries += 1
            r = self._open(url, offset=offset)
            with r:
                if offset and r.status != 206:
                    raise RetryableError(f"{url}: the server ignored the Range header")
                while True:
                    try:
                        b = r.read(CHUNK)
                    except (http.client.HTTPException, ConnectionError, TimeoutError, OSError) as e:
                        raise RetryableError(f"{url}: {type(e).__name__} after part of the body") from None
                    if not b:
                        return
                    yield b

        return read_from


@dataclass(frozen=True)
class Version:
    id: str
    begin: datetime
    end: datetime | None  # None: still current
    url: str  # offerVersionUrl (…/<id>/index.json)


def versions(doc: dict[str, Any], where: str) -> list[Version]:
    """The ``versions`` of a service version index, oldest first."""
    out = []
    for vid, v in (doc.get("versions") or {}).items():
        try:
            begin = _parse_time(v.get("versionEffectiveBeginDate"))
            end = _parse_time(v.get("versionEffectiveEndDate") or None)
        except ValueError as e:
            raise _fail(f"{where}: version {vid}: bad effective date ({e})") from None
        if begin is None or not v.get("offerVersionUrl"):
            raise _fail(f"{where}: version {vid} has no versionEffectiveBeginDate or offerVersionUrl")
        out.append(Version(str(vid), begin, end, str(v["offerVersionUrl"])))
    return sorted(out, key=lambda v: (v.begin, v.id))


def in_force(all_versions: list[Version], first: datetime, last: datetime) -> list[Version]:
    """The versions in force at some instant of [first, last): begin < last and (end is None or end > first).
    Where two versions claim the same period the one published later (larger id) wins."""
    first, last = _naive(first), _naive(last)
    chosen: dict[datetime, Version] = {}
    for v in all_versions:
        overlaps = (v.begin < last or v.begin <= first) and (v.end is None or v.end > first)
        if overlaps and (v.begin not in chosen or v.id > chosen[v.begin].id):
            chosen[v.begin] = v
    return [chosen[b] for b in sorted(chosen)]


def regional_url(v: Version, region: str) -> str:
    """``/offers/v1.0/aws/AmazonEC2/<version>/<region>/index.csv`` from the version's offerVersionUrl."""
    base = v.url.rsplit("/", 1)[0]
    return f"{base}/{region}/index.csv"


def _records(f: io.BufferedReader) -> Iterator[bytes]:
    """The raw records of a CSV file (a quoted field may hold a newline), each with its line ending."""
    pending = b""
    for line in f:
        pending += line
        if pending.count(b'"') % 2 == 0:
            yield pending
            pending = b""
    if pending:
        yield pending


def filter_offer(src: Path, out: Path, wanted: set[tuple[str, str]]) -> tuple[int, set[tuple[str, str]]]:
    """Write ``src``'s five metadata lines, its header and its OnDemand records whose (usageType, operation) is in
    ``wanted`` to ``out``, byte for byte; returns the records kept and the pairs found."""
    kept = 0
    found: set[tuple[str, str]] = set()
    # a record can only match when it holds an asked usage type: skip the others without parsing them
    # (a multi-GB file: about ten times faster); what the search finds is then parsed and compared exactly
    maybe = re.compile(b"|".join(re.escape(u.encode()) for u in sorted({u for u, _ in wanted})) or b"(?!)")
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f, open(tmp, "wb") as w:
        recs = _records(f)
        head: list[str] | None = None
        for n, rec in enumerate(recs, 1):
            if head is not None and not maybe.search(rec):
                continue
            row = next(csv.reader([rec.decode("utf-8-sig")]), [])
            if head is None:
                w.write(rec)
                if row[:1] == ["SKU"]:
                    head = row
                    cols = {c: i for i, c in enumerate(head)}
                    missing = [c for c in ("TermType", "usageType", "operation") if c not in cols]
                    if missing:
                        raise _fail(f"{src}: the header (line {n}) has no {', '.join(missing)} column")
                    it, iu, io_ = cols["TermType"], cols["usageType"], cols["operation"]
                elif n > 10:
                    raise _fail(f"{src}: no header line starting with \"SKU\" in the first 10 lines: not an offer CSV")
                continue
            if len(row) > max(it, iu, io_) and row[it] == "OnDemand" and (
                    pair := (canonical_usage_type(row[iu]), row[io_])) in wanted:
                w.write(rec)
                kept += 1
                found.add(pair)
        if head is None:
            raise _fail(f"{src}: no header line starting with \"SKU\": not an offer CSV")
    os.replace(tmp, out)
    return kept, found


class _Meter:
    """Progress lines for a long download: at most one per 5% (and the last)."""

    def __init__(self, label: str, size: int, progress: Progress | None):
        self.label, self.size, self.progress = label, size, progress
        self.done = 0
        self.step = max(size // 20, CHUNK)
        self.next = self.step

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress and (self.done >= self.next or self.done >= self.size):
            self.next = self.done + self.step
            self.progress(f"aws: {self.label}: {self.done / 1e6:,.1f} of {self.size / 1e6:,.1f} MB")


def bulk(windows: dict[Query, tuple[datetime, datetime]], dest: Path, options: AwsPricesOptions, stats: Stats,
         progress: Progress | None, http: Http | None = None) -> None:
    """The regional offer files of the versions in force during each query's window, filtered to its keys."""
    if not windows:
        return
    http = http or Http(options.bulk_url, options.max_attempts, stats)
    index = http.json(OFFER_INDEX)
    offer = (index.get("offers") or {}).get(SERVICE)
    if not offer or not offer.get("versionIndexUrl"):
        raise _fail(f"{http.url(OFFER_INDEX)}: no {SERVICE} offer with a versionIndexUrl")
    vurl = str(offer["versionIndexUrl"])
    all_versions = versions(http.json(vurl), http.url(vurl))
    if not all_versions:
        raise _fail(f"{http.url(vurl)}: no versions")
    # (version, region) -> the (usage type, operation) pairs asked of it
    plan: dict[tuple[Version, str], set[tuple[str, str]]] = {}
    for q, (first, last) in windows.items():
        if not q.region:
            if progress:
                progress(f"note: aws: {q.usage_type} {q.operation} has lines without a region: no regional offer "
                         "file to read them from, they stay unpriced")
            continue
        chosen = in_force(all_versions, first, last)
        if not chosen:
            raise _fail(f"no {SERVICE} price list version was in force between {first:%Y-%m-%d} and {last:%Y-%m-%d} "
                        f"({http.url(vurl)} starts {all_versions[0].begin:%Y-%m-%d})")
        for v in chosen:
            plan.setdefault((v, q.region), set()).add((q.usage_type, q.operation))
    if len(plan) > options.max_offer_files:
        raise _fail(f"the lines need {len(plan)} historical offer files (one per price list version and region, "
                    f"each up to several GB), more than --max-offer-files {options.max_offer_files}: raise it, or pull "
                    "a shorter period")
    raw_root = dest / "offers"
    for (v, region), wanted in sorted(plan.items(), key=lambda kv: (kv[0][1], kv[0][0].begin)):
        url = http.url(regional_url(v, region))
        raw = raw_root / SERVICE / v.id / region / "index.csv"
        label = f"{SERVICE} {v.id} {region} index.csv"
        obj = http.head(url)
        if raw.exists() and raw.stat().st_size == obj.size:
            if progress:
                progress(f"aws: {label}: kept from an earlier pull ({obj.size / 1e6:,.1f} MB)")
        else:
            if progress:
                progress(f"aws: {label}: downloading {obj.size / 1e6:,.1f} MB")
            meter = _Meter(label, obj.size, progress)
            part = raw.with_name(raw.name + ".part")
            before = part.stat().st_size if part.exists() else 0
            download(obj, raw, http.reader(url), progress=meter, attempts=options.max_attempts)
            stats.downloads += 1
            stats.bytes += obj.size - before
        digest = hashlib.sha256("\n".join(sorted(f"{u}|{o}" for u, o in wanted)).encode()).hexdigest()[:10]
        out = dest / "bulk" / f"{SERVICE}-{v.id}-{region}-{digest}.csv"
        kept, found = filter_offer(raw, out, wanted)
        if progress:
            progress(f"aws: {label}: {kept} on-demand record(s) of {len(wanted)} usage type(s) kept in {out.name}")
            for u, o in sorted(wanted - found):
                progress(f"note: aws: {label} has no on-demand price for {u} {o}")
        stats.files.append(out)
        if not options.keep_offer_files:
            raw.unlink()
            for d in (raw.parent, raw.parent.parent, raw.parent.parent.parent, raw_root):
                try:
                    d.rmdir()
                except OSError:
                    break


# -- the puller -------------------------------------------------------------------------------------------
class AwsPricesPuller:
    name = "aws"
    title = "AWS Price List"
    help = HELP
    Options = AwsPricesOptions

    def __init__(self) -> None:
        self.last = Stats()  # the figures of the latest fetch (requests, retries, pages, downloads)

    def fetch(self, needs: list[PriceNeed], dest: Path, options: AwsPricesOptions,
              progress: Progress | None) -> list[Path]:
        stats = self.last = Stats()
        if not needs:
            return []
        if not isinstance(options, AwsPricesOptions):
            options = AwsPricesOptions.model_validate(options)
        # one query per usage type, operation and region, over the widest period of the needs that ask it
        spans: dict[Query, tuple[datetime, datetime]] = {}
        for n in needs:
            usage, op = split_key(n.price_key)
            q = Query(usage, op, n.region)
            a, b = spans.get(q, (_naive(n.first), _naive(n.last)))
            spans[q] = (min(a, _naive(n.first)), max(b, _naive(n.last)))
        for cur in sorted({n.currency for n in needs} - {"USD", "CNY"}):
            if progress:
                progress(f"note: aws: the AWS Price List is in USD (CNY in China): the {cur} needs stay unpriced")
        windows: dict[Query, tuple[datetime, datetime]] = {}
        if options.source == "bulk":
            windows = dict(spans)
        else:
            client = pricing_client(options)
            try:
                for q in sorted(spans, key=lambda q: (q.region or "", q.usage_type, q.operation)):
                    since = query(client, q, dest, options, stats, progress)
                    first, last = spans[q]
                    if since is None:
                        windows[q] = (first, last)
                    elif first < since:
                        windows[q] = (first, min(last, since))
            except QueryDenied as e:
                if options.source != "auto":
                    raise
                if progress:
                    progress(f"note: {e}; reading the Bulk API instead")
                windows = dict(spans)
            if options.source == "query":
                if windows and progress:
                    progress(f"note: aws: {len(windows)} usage type(s) have lines older than the current price list "
                             "(or are not in it): pass --source auto to read the Bulk API's historical versions")
                windows = {}
        bulk(windows, dest, options, stats, progress)
        if progress:
            progress(f"aws: {stats.pages} GetProducts page(s), {stats.products} product(s), {stats.downloads} offer "
                     f"file(s) downloaded ({stats.bytes:,} bytes), {stats.retries} retried request(s)")
        return list(stats.files)


PULLER = AwsPricesPuller()
