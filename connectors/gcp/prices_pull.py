"""`billing-audit prices pull gcp`: the on-demand prices the store's GCP spot lines need, from one of two sources.

- **The pricing export** (``--pricing-table PROJECT.DATASET.cloud_pricing_export``): the Cloud Billing pricing
  data BigQuery export of the billing account (list *and* the account's own prices).  One parameterised query
  through google-cloud-bigquery: the rows whose SKU description, normalised as the price keys are (lower-case,
  white space collapsed), is one of the needed keys (``@keys``, an array parameter: nothing is pasted into the
  SQL but the validated table name), exported in the last ``--lookback-days`` (35) days, the latest
  ``pricing_as_of_time`` (then ``export_time``) per SKU (``QUALIFY ROW_NUMBER() ...``).  Each SKU's row is
  written as one NDJSON file of the export's shape (``bq extract``'s spelling) under
  ``<dest>/pricing-export/<project>.<dataset>.<table>/sku-<id>.json``.
- **The Catalog API** (the default without ``--pricing-table``; for accounts without the pricing export):
  ``GET https://cloudbilling.googleapis.com/v1/services/{service}/skus?currencyCode=...&pageSize=...&pageToken=...``
  for each ``--service`` (Compute Engine, ``6F81-5844-456A``, by default) and each currency the needs are in,
  every page in turn (the API has no filter by description).  Authentication: google-auth's
  ``AuthorizedSession`` over application default credentials, or ``--api-key``.  The SKUs whose key is needed
  (in a needed region, or sold everywhere) are written one per file as a one-SKU page of the API's own shape,
  ``<dest>/catalog/<service>/<currency>/sku-<skuId>.json``.

Both write each SKU to a file named after it, so a re-pull overwrites it rather than adding a copy.  Throttling
(429) and server errors (5xx) are retried with exponential backoff (honouring ``Retry-After``); dropped
connections too.  Needs that no SKU answers are said in the progress messages and stay unpriced.
With no needs nothing is requested.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from billing_audit.prices import PriceNeed
from connectors.gcp import prices
from connectors.pull_common import PullError, RetryableError, with_retries

COMPUTE_ENGINE = "6F81-5844-456A"
CATALOG_ENDPOINT = "https://cloudbilling.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
LOOKBACK_DAYS = 35
RETRY_ATTEMPTS = 6
RETRY_BASE = 0.5  # seconds; doubled per attempt, with jitter
PRICING_COLUMNS = (
    "export_time", "pricing_as_of_time", "billing_account_id", "billing_account_name", "business_entity_name",
    "service", "sku", "product_taxonomy", "geo_taxonomy", "pricing_unit", "pricing_unit_description",
    "account_currency_code", "currency_code", "currency_conversion_rate", "list_price", "billing_account_price",
    "price_info",
)
_SERVICE_RE = re.compile(r"^[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}$")

Progress = Callable[[str], None] | None


def _say(progress: Progress, text: str) -> None:
    if progress is not None:
        progress(text)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


# -- the pricing export in BigQuery ------------------------------------------------------------------------------


def pricing_query(table_sql: str, columns: list[str]) -> str:
    cols = ",\n  ".join(f"`{c}`" for c in columns)
    return (f"SELECT\n  {cols}\nFROM {table_sql}\n"
            "WHERE LOWER(TRIM(REGEXP_REPLACE(sku.description, r'\\s+', ' '))) IN UNNEST(@keys)\n"
            "  AND export_time >= @since\n"
            "QUALIFY ROW_NUMBER() OVER (PARTITION BY sku.id ORDER BY pricing_as_of_time DESC, export_time DESC) = 1")


def _json_value(v: Any) -> Any:
    """A BigQuery value as ``bq extract`` writes it to NDJSON: NULLs left out, TIMESTAMP and NUMERIC as text."""
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    if isinstance(v, datetime):
        t = (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(UTC)
        s = t.strftime("%Y-%m-%d %H:%M:%S")
        if t.microsecond:
            s += f".{t.microsecond:06d}".rstrip("0")
        return s + " UTC"
    if isinstance(v, Decimal):
        return str(v)
    return v


def pull_pricing_export(needs: list[PriceNeed], dest: Path, table: str, *, project: str | None = None,
                        client: Any = None, retry: Any = None, lookback_days: int = LOOKBACK_DAYS,
                        progress: Progress = None, now: datetime | None = None) -> list[Path]:
    """Query the pricing export for the needed keys; one NDJSON file per SKU.  Returns the files."""
    from google.cloud import bigquery

    from connectors.gcp import pull as gp

    keys = sorted({n.price_key for n in needs})
    if not keys:
        return []
    ref = gp.parse_table(table, project)
    client = client or gp.make_client(project or ref.project)
    retry = retry if retry is not None else gp.make_retry()
    with gp.google_errors("reading the pricing table's schema", ref, client.project):
        t = client.get_table(bigquery.TableReference(bigquery.DatasetReference(ref.project, ref.dataset), ref.table),
                             retry=retry)
    names = {f.name.lower(): f.name for f in t.schema}
    if not {"sku", "list_price", "export_time"} <= set(names):
        raise PullError(f"table {ref.full} does not look like the Cloud Billing pricing export (cloud_pricing_export):"
                        " it lacks sku, list_price or export_time")
    columns = [names[c] for c in PRICING_COLUMNS if c in names]
    since = (now or datetime.now(UTC)) - timedelta(days=lookback_days)
    cfg = bigquery.QueryJobConfig(
        query_parameters=[bigquery.ArrayQueryParameter("keys", "STRING", keys),
                          bigquery.ScalarQueryParameter("since", "TIMESTAMP", since)],
        use_legacy_sql=False, labels={"tool": "billing-audit"})
    _say(progress, f"querying {ref.full} for {len(keys)} SKU description(s)")
    with gp.google_errors("querying the pricing export", ref, client.project):
        job = client.query(pricing_query(ref.quoted, columns), job_config=cfg, location=getattr(t, "location", None),
                           retry=retry)
        rows = [dict(r.items()) for r in job.result(retry=retry)]
    latest: dict[str, dict[str, Any]] = {}
    wanted = set(keys)
    for r in rows:  # the query asked for these only; what comes back is checked all the same
        sku = r.get("sku") or {}
        desc = sku.get("description")
        if not desc or prices.normalise(desc) not in wanted:
            continue
        sid = sku.get("id") or desc
        mark = (r.get("pricing_as_of_time") or r.get("export_time"), r.get("export_time"))
        old = latest.get(sid)
        if old is None or (old.get("pricing_as_of_time") or old.get("export_time"), old.get("export_time")) < mark:
            latest[sid] = r
    folder = dest / "pricing-export" / _safe(ref.full)
    out = []
    for sid, r in sorted(latest.items()):
        line = json.dumps(_json_value(r), separators=(",", ":"), ensure_ascii=False) + "\n"
        out.append(_write(folder / f"sku-{_safe(sid)}.json", line.encode()))
    found = {prices.normalise((r.get("sku") or {}).get("description") or "") for r in latest.values()}
    missing = sorted(wanted - found)
    _say(progress, f"{len(out)} SKU(s) written under {folder}"
         + (f"; not in the pricing export: {', '.join(missing)}" if missing else ""))
    return out


# -- the Catalog API -------------------------------------------------------------------------------------------


class _Http:
    """GET JSON with retries: an AuthorizedSession (ADC) or a plain session with an API key."""

    def __init__(self, api_key: str | None, session: Any = None, base_delay: float = RETRY_BASE,
                 attempts: int = RETRY_ATTEMPTS, sleep: Callable[[float], None] = time.sleep):
        import requests

        self.api_key = api_key
        self.base_delay = base_delay
        self.attempts = attempts
        self.sleep = sleep
        self.retries = 0
        if session is not None:
            self.session = session
        elif api_key:
            self.session = requests.Session()
        else:
            import google.auth
            from google.auth import exceptions as aexc
            from google.auth.transport.requests import AuthorizedSession

            try:
                creds, _ = google.auth.default(scopes=[SCOPE])
            except aexc.DefaultCredentialsError:
                from connectors.gcp.pull import NO_CREDENTIALS

                raise PullError(NO_CREDENTIALS + " (or give --api-key)") from None
            self.session = AuthorizedSession(creds)  # type: ignore[no-untyped-call]

    def get(self, url: str, params: dict[str, Any], what: str) -> dict[str, Any]:
        import requests
        from google.auth import exceptions as aexc

        query = dict(params)
        if self.api_key:
            query["key"] = self.api_key
        wait: list[float] = []

        def once() -> dict[str, Any]:
            try:
                r = self.session.get(url, params=query, timeout=60)
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                    requests.exceptions.ChunkedEncodingError, aexc.TransportError) as e:
                self.retries += 1
                raise RetryableError(type(e).__name__) from None
            except aexc.RefreshError:
                raise PullError("the Google credentials were rejected when asking for an access token: run "
                                "`gcloud auth application-default login` again or check the service-account key") from None
            if r.status_code == 429 or r.status_code >= 500:
                self.retries += 1
                after = r.headers.get("Retry-After", "")
                wait.append(min(float(after), 30.0) if after.replace(".", "", 1).isdigit() else 0.0)
                raise RetryableError(f"HTTP {r.status_code}")
            if r.status_code != 200:
                raise PullError(f"the Cloud Billing Catalog API refused {what} (HTTP {r.status_code}): "
                                f"{_api_message(r)}{_hint(r.status_code)}")
            try:
                body = r.json()
            except ValueError:
                raise PullError(f"the Cloud Billing Catalog API answered {what} with something that is not JSON") from None
            if not isinstance(body, dict):
                raise PullError(f"the Cloud Billing Catalog API answered {what} with JSON that is not an object")
            return body

        def sleep(seconds: float) -> None:
            self.sleep(max(seconds, wait.pop() if wait else 0.0))

        try:
            return with_retries(once, attempts=self.attempts, base_delay=self.base_delay, sleep=sleep)
        except RetryableError as e:
            raise PullError(f"the Cloud Billing Catalog API kept failing for {what}, gave up after "
                            f"{self.attempts} attempts: {e}") from None


def _api_message(r: Any) -> str:
    try:
        msg = str(r.json().get("error", {}).get("message") or "")
    except (ValueError, AttributeError):
        msg = ""
    msg = " ".join(msg.split())[:300]
    return msg or (r.reason or "no message")


def _hint(status: int) -> str:
    if status in (401, 403):
        return (" (the caller needs the Cloud Billing API enabled on its project; with --api-key, a key allowed to "
                "call cloudbilling.googleapis.com)")
    if status == 404:
        return " (check --service: a Cloud Billing service id such as 6F81-5844-456A)"
    return ""


def _covers(sku: dict[str, Any], regions: set[str | None]) -> bool:
    sold = {str(r).lower() for r in sku.get("serviceRegions") or []}
    return None in regions or not sold or "global" in sold or bool(sold & {r for r in regions if r})


def pull_catalog(needs: list[PriceNeed], dest: Path, *, services: tuple[str, ...] = (COMPUTE_ENGINE,),
                 api_key: str | None = None, endpoint: str = CATALOG_ENDPOINT, page_size: int = 5000,
                 progress: Progress = None, http: _Http | None = None) -> list[Path]:
    """Page through each service's SKUs per needed currency; write the needed on-demand SKUs, one per file."""
    if not needs:
        return []
    for s in services:
        if not _SERVICE_RE.fullmatch(s):
            raise PullError(f"--service {s!r}: expected a Cloud Billing service id like {COMPUTE_ENGINE}")
    http = http or _Http(api_key)
    by_currency: dict[str, dict[str, set[str | None]]] = {}
    for n in needs:
        by_currency.setdefault(n.currency.upper(), {}).setdefault(n.price_key, set()).add(n.region)
    out: list[Path] = []
    for currency, keys in sorted(by_currency.items()):
        found: set[str] = set()
        for service in services:
            url = f"{endpoint.rstrip('/')}/v1/services/{service}/skus"
            token: str | None = None
            seen_tokens: set[str] = set()
            page = 0
            while True:
                page += 1
                params: dict[str, Any] = {"currencyCode": currency, "pageSize": page_size}
                if token:
                    params["pageToken"] = token
                body = http.get(url, params, f"services/{service}/skus page {page} ({currency})")
                skus = body.get("skus") or []
                if not isinstance(skus, list):
                    raise PullError(f"the Cloud Billing Catalog API's page {page} of services/{service}/skus has no skus list")
                for sku in skus:
                    if not isinstance(sku, dict) or (sku.get("category") or {}).get("usageType") != "OnDemand":
                        continue
                    key = prices.normalise(str(sku.get("description") or ""))
                    if key in keys and _covers(sku, keys[key]):
                        found.add(key)
                        name = _safe(str(sku.get("skuId") or key))
                        data = json.dumps({"skus": [sku]}, indent=1, ensure_ascii=False) + "\n"
                        out.append(_write(dest / "catalog" / service / currency / f"sku-{name}.json", data.encode()))
                _say(progress, f"catalog services/{service} {currency}: page {page}, {len(skus)} SKU(s), "
                               f"{len(found)} of {len(keys)} needed found")
                token = body.get("nextPageToken") or None
                if not token:
                    break
                if token in seen_tokens:
                    raise PullError(f"the Cloud Billing Catalog API repeated a page token for services/{service}/skus")
                seen_tokens.add(token)
        missing = sorted(set(keys) - found)
        if missing:
            _say(progress, f"not in the catalog ({currency}, on demand): {', '.join(missing)}")
    return sorted(set(out))


# -- `billing-audit prices pull gcp` ------------------------------------------------------------------------------

HELP = """Fetch the on-demand prices of the SKUs the store's GCP spot lines stand in for.

\b
GCP bills spot capacity as SKUs of its own ("Spot Preemptible Nvidia A100
80GB GPU running in Americas"): what it would have cost on demand is the
price of the counterpart SKU ("Nvidia A100 80GB GPU running in Americas").
Only the SKUs the store still needs are fetched.

\b
Two sources:
  --pricing-table PROJECT.DATASET.cloud_pricing_export
      the billing account's pricing export in BigQuery (list and account
      prices); one parameterised query, latest price per SKU.
      Needs roles/bigquery.dataViewer on the table and roles/bigquery.jobUser
      on --project (default the table's project).
  otherwise the public Cloud Billing Catalog API
      (cloudbilling.googleapis.com/v1/services/SERVICE/skus), every page of
      each --service (default Compute Engine, 6F81-5844-456A) in the
      currency of the lines.  Needs the Cloud Billing API enabled; an API key
      (--api-key) or application default credentials.

\b
Authentication: Google application default credentials
(GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, or
the attached service account), or --api-key for the Catalog API.

\b
Examples:
  billing-audit prices pull gcp --pricing-table my-proj.billing.cloud_pricing_export
  billing-audit prices pull gcp --api-key "$GCP_API_KEY"
  billing-audit prices pull gcp --service 6F81-5844-456A --service E000-3F24-B8AA
"""


class GcpPriceOptions(BaseModel):
    """The flags of `billing-audit prices pull gcp`."""

    model_config = ConfigDict(frozen=True)

    pricing_table: str | None = Field(None, description="The pricing export table in BigQuery; without it, the Catalog API.",
                                      json_schema_extra={"flag": "--pricing-table", "metavar": "PROJECT.DATASET.TABLE"})
    project: str | None = Field(None, description="Project that runs (and pays for) the BigQuery query; default the table's.",
                                json_schema_extra={"metavar": "PROJECT"})
    lookback_days: int = Field(LOOKBACK_DAYS, ge=1, le=3660,
                               description="Days of pricing export snapshots searched for the latest price.")
    services: tuple[str, ...] = Field((COMPUTE_ENGINE,), description="Catalog API service id to list SKUs of; repeatable.",
                                      json_schema_extra={"flag": "--service", "metavar": "SERVICE_ID"})
    api_key: str | None = Field(None, description="A Google API key for the Catalog API (instead of application default credentials).",
                                json_schema_extra={"metavar": "KEY"})
    endpoint: str = Field(CATALOG_ENDPOINT, description="The Catalog API's base URL.", json_schema_extra={"metavar": "URL"})
    page_size: int = Field(5000, ge=1, le=5000, description="SKUs per Catalog API page.")


class GcpPricePuller:
    name = "gcp"
    help = HELP
    Options = GcpPriceOptions

    def fetch(self, needs: list[PriceNeed], dest: Path, options: GcpPriceOptions,
              progress: Callable[[str], None] | None) -> list[Path]:
        needs = [n for n in needs if n.provider == prices.PROVIDER]
        if not needs:
            _say(progress, "no GCP prices needed: nothing fetched")
            return []
        if options.pricing_table:
            return pull_pricing_export(needs, dest, options.pricing_table, project=options.project,
                                       lookback_days=options.lookback_days, progress=progress)
        return pull_catalog(needs, dest, services=options.services, api_key=options.api_key,
                            endpoint=options.endpoint, page_size=options.page_size, progress=progress)


PULLER = GcpPricePuller()
