"""``billing-audit prices pull azure``: on-demand VM prices from the Azure Retail Prices API (plain HTTP).

The API is unauthenticated REST: ``GET https://prices.azure.com/api/retail/prices?api-version=2023-01-01-preview``
with an OData ``$filter`` (values case-sensitive from this api-version), ``currencyCode='EUR'`` for a currency
other than USD, and ``meterRegion='primary'`` for primary meters only; a page answers ``{"Items": [...],
"NextPageLink": ...}`` and the next page is at ``NextPageLink`` (null on the last).  One query per meter,
region and currency the needs ask for::

    serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq 'eastus'
      and meterName eq 'NC24ads A100 v4'

(the Linux and Windows products of the meter both answer; :mod:`connectors.azure.prices` tells them apart).  Each
page is written as it came to ``<dest>/azure-retail-<currency>-<region>-<meter>-p<N>.json``, so a second pull of
the same query overwrites its pages instead of adding copies (pages left over from a longer earlier answer are
removed).  429 and 5xx answers, and connection failures, are retried with exponential backoff (a ``Retry-After``
header in seconds is honoured); anything else stops the pull naming the URL and the answer.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from billing_audit.errors import BillingAuditError
from billing_audit.prices import PriceNeed
from connectors.azure.prices import HOUR, PROVIDER

BASE_URL = "https://prices.azure.com/api/retail/prices?api-version=2023-01-01-preview"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_PAGES = 1000  # a query for one meter in one region has a handful of items: more pages is a loop


class PullError(BillingAuditError):
    pass


class AzurePricesOptions(BaseModel):
    """The flags of `billing-audit prices pull azure`."""

    model_config = ConfigDict(frozen=True)

    base_url: str = Field(BASE_URL, description="Retail Prices API endpoint, with its api-version.",
                          json_schema_extra={"envvar": "BILLING_AUDIT_AZURE_PRICES_URL", "metavar": "URL"})
    currency: str | None = Field(None, description="Only the prices in this currency (default: each spot line's "
                                                   "billing currency; the API converts from USD).",
                                 json_schema_extra={"metavar": "CODE"})
    retries: int = Field(5, ge=0, le=20, description="Retries of a 429, 5xx or failed connection.",
                         json_schema_extra={"metavar": "N"})
    backoff: float = Field(1.0, ge=0, le=60, description="First retry wait in seconds (doubles each retry).",
                           json_schema_extra={"metavar": "SECONDS"})
    timeout: float = Field(60.0, gt=0, le=600, description="HTTP timeout in seconds.",
                           json_schema_extra={"metavar": "SECONDS"})
    quiet: bool = Field(False, description="No progress lines.", json_schema_extra={"flag": "-q/--quiet"})


@dataclass(frozen=True)
class Query:
    """One Retail Prices API query: a meter in a region, in a currency."""

    meter: str
    region: str
    currency: str

    def filter(self) -> str:
        return (f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq "
                f"{_odata(self.region)} and meterName eq {_odata(self.meter)}")

    def url(self, base: str) -> str:
        params = {"$filter": self.filter(), "meterRegion": "'primary'"}
        if self.currency != "USD":
            params["currencyCode"] = f"'{self.currency}'"
        sep = "&" if urllib.parse.urlsplit(base).query else "?"
        return base + sep + urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="'$")

    def stem(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.meter.lower()).strip("-")
        return f"azure-retail-{self.currency.lower()}-{self.region}-{slug}"


def _odata(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _meter_case(key_meter: str, description: str | None) -> str:
    """The meter's name as Azure spells it (filter values are case-sensitive): found in the need's description
    (the spot line's meter or product name) when it is there, else rebuilt from the key's lower-case name the
    way Azure writes VM sizes ("nc24ads a100 v4" -> "NC24ads A100 v4")."""
    if description:
        m = re.search(r"(?<![A-Za-z0-9])" + r"\s+".join(map(re.escape, key_meter.split())) + r"(?![A-Za-z0-9])",
                      description, re.IGNORECASE)
        if m:
            return " ".join(m.group(0).split())
    words = []
    for w in key_meter.split(" "):
        parts = []
        for p in w.split("/"):
            mm = re.fullmatch(r"([a-z]+)(\d+)([a-z-]*)", p)
            if re.fullmatch(r"v\d+", p) or not mm:
                parts.append(p)
            else:
                parts.append(mm.group(1).upper() + mm.group(2) + mm.group(3))
        words.append("/".join(parts))
    return " ".join(words)


def queries(needs: list[PriceNeed], currency: str | None = None) -> list[Query]:
    """The queries for ``needs`` (Azure ones, per hour, with a region), one per meter, region and currency."""
    out: dict[tuple[str, str, str], Query] = {}
    for n in needs:
        if n.provider != PROVIDER or n.region is None or n.unit != HOUR:
            continue
        if currency is not None and n.currency.upper() != currency.upper():
            continue
        meter = n.price_key.rsplit("|", 1)[0]
        key = (meter, n.region, n.currency.upper())
        if key not in out:
            out[key] = Query(_meter_case(meter, n.description), n.region, n.currency.upper())
    return sorted(out.values(), key=lambda q: (q.currency, q.region, q.meter))


@dataclass
class Fetcher:
    """GETs JSON pages with retries; counts what it did."""

    options: AzurePricesOptions
    progress: Callable[[str], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    requests: int = 0
    retried: int = 0
    waits: list[float] = field(default_factory=list)

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def get(self, url: str) -> dict[str, Any]:
        attempt = 0
        while True:
            self.requests += 1
            status, why, retry_after = None, "", None
            try:
                req = urllib.request.Request(url, headers={"Accept": "application/json",
                                                           "User-Agent": "billing-audit prices pull"})
                with urllib.request.urlopen(req, timeout=self.options.timeout) as resp:  # noqa: S310 (http(s) only)
                    body = resp.read()
                try:
                    page = json.loads(body.decode("utf-8-sig"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise PullError(f"Azure Retail Prices API: {url} answered with something that is not JSON ({e})") from e
                if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
                    raise PullError(f"Azure Retail Prices API: {url} answered without an \"Items\" list")
                return page
            except urllib.error.HTTPError as e:
                status = e.code
                detail = e.read()[:300].decode("utf-8", "replace").strip()
                why = f"HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")
                retry_after = e.headers.get("Retry-After")
                if status not in RETRY_STATUS:
                    raise PullError(f"Azure Retail Prices API: {url} answered {why}") from e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                why = f"connection failed ({getattr(e, 'reason', e)})"
            if attempt >= self.options.retries:
                raise PullError(f"Azure Retail Prices API: {url}: {why}; gave up after {attempt} retries")
            wait = self.options.backoff * (2 ** attempt)
            if retry_after is not None and retry_after.strip().isdigit():
                wait = max(wait, float(retry_after.strip()))
            attempt += 1
            self.retried += 1
            self.waits.append(wait)
            self.say(f"{why}; retry {attempt}/{self.options.retries} in {wait:g}s")
            self.sleep(wait)


def _same_origin(base: str, link: str) -> bool:
    a, b = urllib.parse.urlsplit(base), urllib.parse.urlsplit(link)
    port = {"http": 80, "https": 443}
    return (a.scheme, a.hostname, a.port or port.get(a.scheme)) == (b.scheme, b.hostname, b.port or port.get(b.scheme))


class AzurePricePuller:
    name = "azure"
    help = """Fetch the on-demand prices of the store's Azure spot lines from the Azure Retail Prices API.

One query per VM meter, region and currency the spot lines need (the meter without " Spot" / " Low Priority",
type Consumption); every page is saved as JSON under the cache and read like a saved page given to
`billing-audit prices ingest`.  Unauthenticated; retries 429 and 5xx answers with backoff.

Examples:
  billing-audit prices pull azure
  billing-audit prices pull azure --currency EUR
"""
    Options = AzurePricesOptions

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self.sleep = sleep
        self.last: Fetcher | None = None  # the counts of the last fetch (requests, retries), for tests and summaries

    def fetch(self, needs: list[PriceNeed], dest: Path, options: Any,
              progress: Callable[[str], None] | None) -> list[Path]:
        opts = options if isinstance(options, AzurePricesOptions) else AzurePricesOptions.model_validate(options or {})
        fetcher = Fetcher(opts, progress, self.sleep)
        self.last = fetcher
        todo = queries(needs, opts.currency)
        if not todo:
            return []
        dest.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for i, q in enumerate(todo, 1):
            fetcher.say(f"[{i}/{len(todo)}] {q.meter} in {q.region}, {q.currency}")
            url: str | None = q.url(opts.base_url)
            pages: list[Path] = []
            while url:
                if len(pages) >= MAX_PAGES:
                    raise PullError(f"Azure Retail Prices API: more than {MAX_PAGES} pages for {q.filter()}; stopped")
                page = fetcher.get(url)
                path = dest / f"{q.stem()}-p{len(pages) + 1:03d}.json"
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(json.dumps(page, indent=1) + "\n", encoding="utf-8")
                tmp.replace(path)
                pages.append(path)
                link = page.get("NextPageLink")
                if link is not None and not isinstance(link, str):
                    raise PullError(f"Azure Retail Prices API: {url} answered a NextPageLink that is not a URL: {link!r}")
                if link and not _same_origin(opts.base_url, link):
                    raise PullError(f"Azure Retail Prices API: {url} pointed NextPageLink at another server ({link}); "
                                    "not followed")
                url = link or None
            for old in dest.glob(f"{q.stem()}-p*.json"):
                if old not in pages and re.fullmatch(re.escape(q.stem()) + r"-p\d{3}\.json", old.name):
                    old.unlink()  # a page of an earlier, longer answer to the same query
                    fetcher.say(f"removed {old.name}: the API answers this query in {len(pages)} page(s) now")
            items = sum(len(json.loads(p.read_text(encoding="utf-8"))["Items"]) for p in pages)
            fetcher.say(f"[{i}/{len(todo)}] {q.meter} in {q.region}: {items} item(s) in {len(pages)} page(s)")
            written += pages
        return written


PULLER = AzurePricePuller()
