"""`prices pull gcp` against local peers: the BigQuery protocol fake (tests/peers_bigquery.py) holding the pricing
export table, through the real google-cloud-bigquery client, and a Catalog API server (tests/peers_gcp_catalog.py)
serving the fixture SKUs two per page, through requests / google-auth's AuthorizedSession.

The needs are what the store's spot lines need (the keys test_prices_gcp.py checks): the A100, A2 cores and A2 RAM
of the US account, and the H100, A3 cores, A100 and local SSD of the EUR account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing_audit.prices import PriceNeed
from connectors.gcp import prices
from connectors.gcp import prices_pull as pp
from connectors.gcp import pull as gp
from connectors.pull_common import PullError
from gcp_adc import SECRET, adc, private_key  # noqa: F401 - the ADC fixtures
from peers_bigquery import PRICING_SCHEMA, FakeBigQuery, FakeTable, Fault
from peers_gcp_catalog import FakeCatalog
from peers_gcp_catalog import Fault as CatalogFault
from support import FIXTURES

PROJECT = "billing-proj"
TABLE = f"{PROJECT}.billing_export.cloud_pricing_export"
PRICES = FIXTURES / "prices" / "gcp"
EXPORT = PRICES / "pricing-export" / "cloud_pricing_export-000000000000.json"
PAGES = sorted((PRICES / "catalog").glob("skus-page-*.json"))
NOW = datetime(2026, 11, 20, tzinfo=UTC)

pytestmark = pytest.mark.slow


def need(key: str, region: str | None, unit: str, currency: str, desc: str) -> PriceNeed:
    return PriceNeed("gcp", key, region, unit, currency, datetime(2026, 10, 3, 4), datetime(2026, 10, 10, 7), 2, desc)


US_NEEDS = [
    need("nvidia tesla a100 gpu running in americas", "us-central1", "hour", "USD",
         "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas"),
    need("a2 instance core running in americas", "us-central1", "hour", "USD",
         "Spot Preemptible A2 Instance Core running in Americas"),
    need("a2 instance ram running in americas", "us-central1", "gibibyte hour", "USD",
         "Spot Preemptible A2 Instance Ram running in Americas"),
]
EU_NEEDS = [
    need("nvidia h100 80gb gpu running in emea", "europe-west4", "hour", "EUR",
         "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in EMEA"),
    need("a3 instance core running in emea", "europe-west4", "hour", "EUR", "Spot Preemptible A3 Instance Core running in EMEA"),
    need("nvidia tesla a100 gpu running in emea", "europe-west4", "hour", "EUR",
         "Spot Preemptible Nvidia Tesla A100 GPU running in EMEA"),
    need("ssd backed local storage in emea", "europe-west4", "gibibyte month", "EUR",
         "SSD backed Local Storage attached to Spot Preemptible VMs in EMEA"),
]


def _refs(files: list[Path]) -> set[tuple[Any, ...]]:
    out = set()
    for f in files:
        fmt = next(x for x in prices.FORMATS if x.sniff(f, f.read_bytes()[:65536]))
        out |= {(r.price_key, r.region, r.unit, r.currency, r.unit_price, r.kind) for r in fmt.read(f)}
    return out


def _fixture_refs(paths: list[Path], keys: set[str]) -> set[tuple[Any, ...]]:
    return {r for r in _refs(paths) if r[0] in keys}


# -- the pricing export in BigQuery ----------------------------------------------------------------------------


@pytest.fixture
def bq() -> Iterator[FakeBigQuery]:
    srv = FakeBigQuery(page_size=3).start()
    rows = [json.loads(line) for line in EXPORT.read_text().splitlines()]
    srv.add_table(FakeTable(PROJECT, "billing_export", "cloud_pricing_export", PRICING_SCHEMA, rows, partitioning=None))
    try:
        yield srv
    finally:
        srv.stop()


def _client(srv: FakeBigQuery) -> Any:
    from google.auth.credentials import AnonymousCredentials

    return gp.make_client(PROJECT, api_endpoint=srv.url, credentials=AnonymousCredentials())


def _pull_export(srv: FakeBigQuery, dest: Path, needs: list[PriceNeed]) -> list[Path]:
    return pp.pull_pricing_export(needs, dest, TABLE, client=_client(srv), retry=gp.make_retry(deadline=20.0, initial=0.02),
                                  now=NOW)


def test_pricing_export_pull_asks_for_the_needed_skus_and_writes_one_file_each(bq: FakeBigQuery, tmp_path: Path) -> None:
    files = _pull_export(bq, tmp_path, US_NEEDS)
    folder = tmp_path / "pricing-export" / TABLE
    assert files == [folder / "sku-0A2C-1D3E-4F50.json", folder / "sku-0A2C-1D3E-4F51.json",
                     folder / "sku-0E8E-A1B2-C3D4.json"]
    # one parameterised query: the keys as an array parameter, the lookback as a timestamp; latest row per SKU
    (q,) = bq.queries(dry_run=False)
    sql = q["query"]["query"]
    assert "IN UNNEST(@keys)" in sql and "QUALIFY ROW_NUMBER() OVER (PARTITION BY sku.id" in sql
    assert "nvidia" not in sql  # no value is pasted into the SQL
    params = {p["name"]: p for p in q["query"]["queryParameters"]}
    assert [v["value"] for v in params["keys"]["parameterValue"]["arrayValues"]] == sorted(n.price_key for n in US_NEEDS)
    assert params["since"]["parameterValue"]["value"].startswith("2026-10-16")  # 35 days before NOW
    # 8 result rows came back in pages of 3
    assert len(bq.requests("GET", r"/queries/")) >= 3
    # the files are pricing export rows, read as the fixture reads (the 2 November A2 core price, not 1 November's)
    want = _fixture_refs([EXPORT], {n.price_key for n in US_NEEDS})
    assert _refs(files) == want and len(want) == 5 + 4 + 4
    assert ("a2 instance core running in americas", "us-central1", "hour", "USD", Decimal("0.031611"), "retail") in want
    row = json.loads(files[0].read_text())
    assert row["pricing_as_of_time"] == "2026-11-02 00:00:00 UTC" and row["list_price"]["tiered_rates"][0]["usd_amount"] == "0.031611"


def test_pricing_export_pull_retries_and_a_repull_overwrites(bq: FakeBigQuery, tmp_path: Path) -> None:
    bq.faults.append(Fault("POST", r"/jobs$", 503, "backendError", "try again"))
    bq.faults.append(Fault("GET", r"/queries/", 500, "internalError", "boom", query="pageToken"))
    first = _pull_export(bq, tmp_path, US_NEEDS)
    assert not bq.faults  # both injected failures were met, and retried
    before = {f: f.read_bytes() for f in first}
    again = _pull_export(bq, tmp_path, US_NEEDS)
    assert again == first and {f: f.read_bytes() for f in again} == before
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == first


def test_pricing_export_pull_without_needs_asks_nothing(bq: FakeBigQuery, tmp_path: Path) -> None:
    assert _pull_export(bq, tmp_path, []) == []
    assert bq.log == []


def test_pricing_export_pull_refuses_a_table_that_is_not_the_pricing_export(bq: FakeBigQuery, tmp_path: Path) -> None:
    from peers_bigquery import STANDARD_SCHEMA

    bq.add_table(FakeTable(PROJECT, "billing_export", "gcp_billing_export_v1_X", STANDARD_SCHEMA, []))
    with pytest.raises(PullError, match="does not look like the Cloud Billing pricing export"):
        pp.pull_pricing_export(US_NEEDS, tmp_path, f"{PROJECT}.billing_export.gcp_billing_export_v1_X",
                               client=_client(bq), retry=gp.make_retry(deadline=5.0, initial=0.02))
    with pytest.raises(PullError, match="table not found"):
        pp.pull_pricing_export(US_NEEDS, tmp_path, f"{PROJECT}.billing_export.nope", client=_client(bq),
                               retry=gp.make_retry(deadline=5.0, initial=0.02))


def test_puller_fetch_with_application_default_credentials(adc: FakeBigQuery, tmp_path: Path) -> None:
    said: list[str] = []
    opts = pp.PULLER.Options(pricing_table=TABLE, lookback_days=3660)
    files = pp.PULLER.fetch(US_NEEDS + EU_NEEDS[:1], tmp_path / "dest", opts, said.append)
    assert [f.name for f in files] == ["sku-0A2C-1D3E-4F50.json", "sku-0A2C-1D3E-4F51.json", "sku-0E8E-A1B2-C3D4.json"]
    assert adc.requests("POST", r"^/token$")  # the service-account key's token endpoint
    assert {r.auth for r in adc.requests("POST", r"/jobs$")} == {"Bearer " + adc.token}
    assert said[-1].endswith("not in the pricing export: nvidia h100 80gb gpu running in emea")
    assert all(SECRET not in s for s in said)


# -- the Catalog API -------------------------------------------------------------------------------------------


def _catalog_skus() -> list[dict[str, Any]]:
    return [s for p in PAGES for s in json.loads(p.read_text())["skus"]]


@pytest.fixture
def catalog() -> Iterator[FakeCatalog]:
    srv = FakeCatalog({pp.COMPUTE_ENGINE: _catalog_skus()}, page_size=2).start()
    srv.api_key = "AIza-test-key"
    try:
        yield srv
    finally:
        srv.stop()


def _options(srv: FakeCatalog, **kw: Any) -> Any:
    return pp.PULLER.Options(endpoint=srv.url, api_key="AIza-test-key", page_size=2, **kw)


def test_catalog_pull_pages_through_retries_and_keeps_the_needed_on_demand_skus(catalog: FakeCatalog,
                                                                                tmp_path: Path) -> None:
    catalog.faults += [CatalogFault(429, query="pageToken=2"), CatalogFault(500, query="pageToken=4")]
    said: list[str] = []
    files = pp.PULLER.fetch(EU_NEEDS, tmp_path, _options(catalog), said.append)
    folder = tmp_path / "catalog" / pp.COMPUTE_ENGINE / "EUR"
    assert files == [folder / "sku-B2C4-0F7D-9A15.json", folder / "sku-B2C4-0F7D-9B01.json",
                     folder / "sku-B2C4-0F7D-9B03.json"]
    # 6 SKUs two a page: pages at tokens -, 2, 4, each of the later two failing once first
    asked = [(r.query.get("pageToken", [""])[0], r.query["currencyCode"][0], r.query["pageSize"][0], r.query["key"][0])
             for r in catalog.pages()]
    assert asked == [("", "EUR", "2", "AIza-test-key"), ("2", "EUR", "2", "AIza-test-key"),
                     ("2", "EUR", "2", "AIza-test-key"), ("4", "EUR", "2", "AIza-test-key"),
                     ("4", "EUR", "2", "AIza-test-key")]
    # what was written reads like the saved pages (only the needed SKUs: no spot or commitment SKU, no egress)
    keys = {n.price_key for n in EU_NEEDS}
    assert _refs(files) == _fixture_refs(PAGES, keys)
    assert len(_refs(files)) == 2 + 3 + 1
    assert said[-1] == "not in the catalog (EUR, on demand): ssd backed local storage in emea"
    assert all("AIza" not in s for s in said)


def test_catalog_repull_overwrites_and_no_needs_fetch_nothing(catalog: FakeCatalog, tmp_path: Path) -> None:
    first = pp.PULLER.fetch(EU_NEEDS, tmp_path, _options(catalog), None)
    before = {f: f.read_bytes() for f in first}
    again = pp.PULLER.fetch(EU_NEEDS, tmp_path, _options(catalog), None)
    assert again == first and {f: f.read_bytes() for f in again} == before
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == first
    asked = len(catalog.log)
    said: list[str] = []
    assert pp.PULLER.fetch([], tmp_path, _options(catalog), said.append) == []
    assert len(catalog.log) == asked and said == ["no GCP prices needed: nothing fetched"]


def test_catalog_pull_in_another_currency_asks_for_it(catalog: FakeCatalog, tmp_path: Path) -> None:
    catalog.rates = {"USD": Decimal("1.0829")}
    usd = [need("nvidia tesla a100 gpu running in emea", "europe-west4", "hour", "USD",
                "Spot Preemptible Nvidia Tesla A100 GPU running in EMEA")]
    files = pp.PULLER.fetch(usd, tmp_path, _options(catalog), None)
    assert {r.query["currencyCode"][0] for r in catalog.pages()} == {"USD"}
    # 3.4105 EUR x 1.0829 = 3.69323045, as the API converts it
    assert _refs(files) == {("nvidia tesla a100 gpu running in emea", "europe-west4", "hour", "USD",
                             Decimal("3.69323045"), "retail")}


def test_catalog_pull_with_application_default_credentials(adc: FakeBigQuery, catalog: FakeCatalog,
                                                           tmp_path: Path) -> None:
    catalog.api_key = None
    catalog.token = adc.token
    files = pp.PULLER.fetch(EU_NEEDS[:1], tmp_path, pp.PULLER.Options(endpoint=catalog.url, page_size=2), None)
    assert [f.name for f in files] == ["sku-B2C4-0F7D-9B01.json"]
    assert {r.auth for r in catalog.pages()} == {"Bearer " + adc.token}
    assert all("key" not in r.query for r in catalog.pages())


def test_catalog_refusals_and_persistent_failures_are_clear(catalog: FakeCatalog, tmp_path: Path) -> None:
    with pytest.raises(PullError) as e:
        pp.PULLER.fetch(EU_NEEDS, tmp_path, pp.PULLER.Options(endpoint=catalog.url, api_key="AIza-wrong"), None)
    assert "refused services/6F81-5844-456A/skus page 1 (EUR) (HTTP 401): API key not valid" in str(e.value)
    assert "AIza-wrong" not in str(e.value)
    with pytest.raises(PullError, match=r"--service 'compute': expected a Cloud Billing service id"):
        pp.PULLER.fetch(EU_NEEDS, tmp_path, _options(catalog, services=("compute",)), None)
    with pytest.raises(PullError, match=r"HTTP 404\): Service E000-3F24-B8AA not found\. \(check --service"):
        pp.PULLER.fetch(EU_NEEDS, tmp_path, _options(catalog, services=("E000-3F24-B8AA",)), None)
    catalog.faults += [CatalogFault(503) for _ in range(pp.RETRY_ATTEMPTS)]
    http = pp._Http("AIza-test-key", base_delay=0.01)
    with pytest.raises(PullError, match=r"kept failing for services/6F81-5844-456A/skus page 1 \(EUR\), gave up after 6 "
                                        r"attempts: HTTP 503"):
        pp.pull_catalog(EU_NEEDS, tmp_path, endpoint=catalog.url, http=http)
    assert http.retries == pp.RETRY_ATTEMPTS
    assert list(tmp_path.rglob("*.json")) == []


# -- `billing-audit prices pull gcp` on a store ------------------------------------------------------------------


def test_prices_pull_gcp_command_prices_the_spot_lines_then_needs_nothing(catalog: FakeCatalog, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The EUR store (gcp/resource-parquet): its spot H100 (2 lines), A3 cores (2) and A100 (1) need the EMEA
    on-demand prices; the Catalog pages have them.  A second pull needs, asks and fetches nothing."""
    from click.testing import CliRunner

    import billing_audit
    from billing_audit.cli import main

    monkeypatch.chdir(tmp_path)
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "gcp" / "resource-parquet"]).errors
        store.tag()
    args = ["prices", "pull", "gcp", "--db", str(db), "--endpoint", catalog.url, "--api-key", "AIza-test-key",
            "--page-size", "2"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "3 on-demand price(s) needed by 5 spot line(s); 3 file(s) fetched" in r.output
    assert "AIza" not in r.output
    with billing_audit.open(db, read_only=True) as store:
        got = store.con.execute("""SELECT l.x_UsageType, o.od_source, sum(o.od_cost) FROM spot_od o
            JOIN line_items l USING (x_LineItemId) GROUP BY ALL ORDER BY 1""").fetchall()
    assert got == [
        ("Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in EMEA", "reference", Decimal("163.6852")),
        ("Spot Preemptible A3 Instance Core running in EMEA", "reference", Decimal("7.5999872")),
        ("Spot Preemptible Nvidia Tesla A100 GPU running in EMEA", "reference", Decimal("3.4105")),
    ]
    asked = len(catalog.log)
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert "nothing to pull" in again.output and len(catalog.log) == asked
