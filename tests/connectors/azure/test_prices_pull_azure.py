"""`prices pull azure` against a local Retail Prices API (tests/peers_azure_prices.py) over HTTP on 127.0.0.1:
paging followed, retries counted (Retry-After honoured), the pages written read back into exactly the prices
asked for, a re-pull overwriting its pages, and a pull with nothing to fetch making no request."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing_audit.errors import BillingAuditError
from billing_audit.prices import PriceNeed
from connectors.azure import prices
from connectors.azure.prices_pull import AzurePricePuller, AzurePricesOptions, queries
from peers_azure_prices import RetailPricesPeer, parse_filter, serve
from support import FIXTURES

PAGES = FIXTURES / "prices" / "azure" / "retail-prices"
D = Decimal


def _items() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in ("vm-usd-page-1.json", "vm-usd-page-2.json", "vm-eur-page-1.json"):
        out += json.loads((PAGES / name).read_text())["Items"]
    return out


def _need(key: str, region: str, currency: str = "USD", description: str | None = None) -> PriceNeed:
    return PriceNeed(provider="azure", price_key=key, region=region, unit="1 Hour", currency=currency,
                     first=datetime(2026, 10, 1), last=datetime(2026, 10, 5), lines=2, description=description)


NEEDS = [
    _need("nc24ads a100 v4|linux", "eastus", description="NC24ads A100 v4 Spot"),
    _need("nc24ads a100 v4|windows", "eastus", description="NC24ads A100 v4 Spot"),  # same query as the Linux one
    _need("nc4as t4 v3|windows", "westeurope",
          description="Virtual Machines NCasT4v3 Series Windows - NC4as T4 v3 Spot - EU West"),
    _need("nc24ads a100 v4|linux", "swedencentral"),  # the API lists nothing there: one empty page
    _need("nc24ads a100 v4|linux", "eastus", currency="EUR", description="NC24ads A100 v4 Spot"),
]


def _read_back(paths: list[Path]) -> set[tuple[object, ...]]:
    out = set()
    for p in paths:
        assert prices.FORMATS[0].sniff(p, p.read_bytes()[:65536])
        out |= {(r.price_key, r.region, r.currency, r.unit_price) for r in prices.read_retail(p)}
    return out


@pytest.fixture
def peer() -> Any:
    with serve(RetailPricesPeer(_items(), page_size=1, fail=[429, 500], retry_after="1")) as p:
        yield p


def test_pull_follows_pages_retries_and_writes_what_was_asked(peer: RetailPricesPeer, tmp_path: Path) -> None:
    waits: list[float] = []
    puller = AzurePricePuller(sleep=waits.append)
    said: list[str] = []
    opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview", backoff=0.25)
    files = puller.fetch(NEEDS, tmp_path / "cache", opts, said.append)
    names = [p.name for p in files]
    assert names == [
        "azure-retail-eur-eastus-nc24ads-a100-v4-p001.json",
        "azure-retail-usd-eastus-nc24ads-a100-v4-p001.json",  # Linux and Windows: two items, one a page
        "azure-retail-usd-eastus-nc24ads-a100-v4-p002.json",
        "azure-retail-usd-swedencentral-nc24ads-a100-v4-p001.json",
        "azure-retail-usd-westeurope-nc4as-t4-v3-p001.json",  # Linux and Windows (not the Spot meter)
        "azure-retail-usd-westeurope-nc4as-t4-v3-p002.json",
    ]
    assert _read_back(files) == {
        ("nc24ads a100 v4|linux", "eastus", "EUR", D("3.37916")),
        ("nc24ads a100 v4|linux", "eastus", "USD", D("3.673")),
        ("nc24ads a100 v4|windows", "eastus", "USD", D("3.857")),
        ("nc4as t4 v3|linux", "westeurope", "USD", D("0.578")),
        ("nc4as t4 v3|windows", "westeurope", "USD", D("0.71")),
    }
    # 6 pages, 2 injected failures retried: the 429's Retry-After (1 s) over the 0.25 s backoff, then 0.5 s
    assert puller.last is not None and (puller.last.requests, puller.last.retried) == (8, 2)
    assert waits == [1.0, 0.5]
    assert len(peer.log) == 8
    assert any("HTTP 429" in s and "retry 1/5 in 1s" in s for s in said)
    assert any("HTTP 500" in s and "retry 2/5 in 0.5s" in s for s in said)
    assert "[4/4] NC4as T4 v3 in westeurope: 2 item(s) in 2 page(s)" in said
    # the queries: case-sensitive values, primary meters, the currency as its own parameter
    first = [q for q in peer.log if "currencyCode" in q]  # the EUR query: refused twice, then answered
    assert len(first) == 3 and len(set(first)) == 1
    assert "currencyCode='EUR'" in first[0] and "meterRegion='primary'" in first[0]
    assert "meterName%20eq%20'NC24ads%20A100%20v4'" in first[0]


def test_second_pull_overwrites_its_pages_and_drops_stale_ones(tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    with serve(RetailPricesPeer(_items(), page_size=1)) as peer:
        opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview")
        first = AzurePricePuller(sleep=lambda s: None).fetch(NEEDS[2:3], dest, opts, None)
        assert len(first) == 2
    with serve(RetailPricesPeer(_items(), page_size=5)) as peer:
        said: list[str] = []
        opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview")
        second = AzurePricePuller(sleep=lambda s: None).fetch(NEEDS[2:3], dest, opts, said.append)
    assert [p.name for p in second] == ["azure-retail-usd-westeurope-nc4as-t4-v3-p001.json"]
    assert sorted(p.name for p in dest.iterdir()) == ["azure-retail-usd-westeurope-nc4as-t4-v3-p001.json"]
    assert "removed azure-retail-usd-westeurope-nc4as-t4-v3-p002.json: the API answers this query in 1 page(s) now" in said
    assert _read_back(second) == {("nc4as t4 v3|linux", "westeurope", "USD", D("0.578")),
                                  ("nc4as t4 v3|windows", "westeurope", "USD", D("0.71"))}


def test_nothing_needed_fetches_nothing(peer: RetailPricesPeer, tmp_path: Path) -> None:
    puller = AzurePricePuller(sleep=lambda s: None)
    opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview")
    assert puller.fetch([], tmp_path / "cache", opts, None) == []
    other = dataclasses.replace(_need("n1-standard-8", "us-central1"), provider="gcp")
    assert puller.fetch([other], tmp_path / "cache", opts, None) == []
    assert peer.log == [] and not (tmp_path / "cache").exists()
    assert puller.last is not None and puller.last.requests == 0


def test_currency_option_keeps_only_that_currency() -> None:
    assert [(q.meter, q.region, q.currency) for q in queries(NEEDS, "EUR")] == [("NC24ads A100 v4", "eastus", "EUR")]
    # without a description the meter's case is rebuilt the way Azure writes VM sizes
    assert [q.meter for q in queries([_need("nd96isr h100 v5|linux", "eastus"), _need("d4 v3/d4s v3|linux", "eastus"),
                                      _need("b2ms|linux", "eastus"), _need("nc4as t4 v3|linux", "eastus")])] == [
        "B2ms", "D4 v3/D4s v3", "NC4as T4 v3", "ND96isr H100 v5"]


def test_retries_give_up_with_the_url_and_the_answer(tmp_path: Path) -> None:
    with serve(RetailPricesPeer(_items(), fail=[503, 503, 503])) as peer:
        opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2023-01-01-preview", retries=2,
                                  backoff=0)
        with pytest.raises(BillingAuditError, match=r"HTTP 503 Service Unavailable.*gave up after 2 retries"):
            AzurePricePuller(sleep=lambda s: None).fetch(NEEDS[:1], tmp_path, opts, None)
        assert len(peer.log) == 3


def test_a_refused_query_stops_the_pull_naming_it(tmp_path: Path) -> None:
    with serve(RetailPricesPeer(_items())) as peer:
        opts = AzurePricesOptions(base_url=f"{peer.url}/api/retail/prices?api-version=2021-10-01")
        with pytest.raises(BillingAuditError, match=r"api-version=2021-10-01.*answered HTTP 400 Bad Request: .*"
                                                    r"InvalidApiVersion"):
            AzurePricePuller(sleep=lambda s: None).fetch(NEEDS[:1], tmp_path, opts, None)
        assert len(peer.log) == 1  # a 400 is not retried


def test_next_page_link_to_another_server_is_not_followed(tmp_path: Path) -> None:
    with serve(RetailPricesPeer(_items(), page_size=1)) as peer:
        real = peer.url
        peer.url = "http://127.0.0.2:9"  # the peer now writes NextPageLinks to another host
        opts = AzurePricesOptions(base_url=f"{real}/api/retail/prices?api-version=2023-01-01-preview")
        with pytest.raises(BillingAuditError, match=r"pointed NextPageLink at another server \(http://127\.0\.0\.2:9/"):
            AzurePricePuller(sleep=lambda s: None).fetch(NEEDS[:1], tmp_path, opts, None)


def test_the_peer_speaks_the_filter_subset() -> None:
    assert parse_filter("serviceName eq 'Virtual Machines' and meterName eq 'O''Brien'") == [
        ("serviceName", "Virtual Machines"), ("meterName", "O'Brien")]
    with pytest.raises(ValueError, match="unsupported"):
        parse_filter("contains(meterName, 'A100')")
