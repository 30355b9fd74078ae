"""`prices pull aws` (issue #16): the real boto3 ``pricing`` client and plain HTTP against the local Price List peer.

The peer (tests/peers_aws_pricing.py) speaks the Query API's awsJson1_1 GetProducts and serves the Bulk API's
index and offer files; it logs every request, so each test asserts on what was asked as well as on the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from billing_audit.prices import PriceNeed
from connectors.aws import prices_pull
from connectors.aws.prices_pull import PULLER, AwsPricesOptions, Version, in_force
from connectors.pull_common import PullError
from peers_aws_pricing import PricingPeer, bulk_indexes, offer_csv, offer_row, product

P4D = "BoxUsage:p4d.24xlarge"  # US East (N. Virginia): no region prefix in the price list
G5 = "BoxUsage:g5.12xlarge"
CURRENT = "2026-11-01T00:00:00Z"


@pytest.fixture(scope="module")
def peer() -> Iterator[PricingPeer]:
    p = PricingPeer()
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def aws_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ~/.aws, no AWS_* from the machine, no instance metadata; dummy keys unless a test removes them."""
    import os

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def fresh(peer: PricingPeer) -> PricingPeer:
    peer.reset()
    return peer


def need(key: str, first: datetime, last: datetime, region: str | None = "us-east-1", currency: str = "USD") -> PriceNeed:
    return PriceNeed("AWS", key, region, "Hrs", currency, first, last, lines=3)


def opts(peer: PricingPeer, **kw: object) -> AwsPricesOptions:
    return AwsPricesOptions.model_validate({"endpoint_url": peer.url, "bulk_url": peer.url, "region": "us-east-1",
                                            "max_attempts": 4, **kw})


def catalogue() -> list[dict[str, object]]:
    """The asked products and the ones the filters must keep out (Windows, dedicated, capacity reservation,
    another region)."""
    return [
        product("P4DLINUX", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "32.7726000000", CURRENT,
                reserved="19.2200000000"),
        product("P4DWIN", P4D, "RunInstances:0002", "us-east-1", "p4d.24xlarge", "35.7166000000", CURRENT,
                os_name="Windows"),
        product("P4DDED", "DedicatedUsage:p4d.24xlarge", "RunInstances", "us-east-1", "p4d.24xlarge",
                "36.0500000000", CURRENT, tenancy="Dedicated"),
        product("P4DRES", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "32.7726000000", CURRENT,
                capacity="UnusedCapacityReservation"),
        product("P4DFRA", "EUC1-BoxUsage:p4d.24xlarge", "RunInstances", "eu-central-1", "p4d.24xlarge",
                "40.9657000000", CURRENT, location="EU (Frankfurt)"),
        product("G5LINUX", G5, "RunInstances", "us-east-1", "g5.12xlarge", "5.6720000000", CURRENT),
    ]


def test_pages_are_followed_filters_sent_and_each_page_written_as_returned(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue() + [  # a second product answering the same filters: the answer takes two pages
        product("P4DLINUX2", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "32.7726000000", CURRENT)]
    fresh.state.page_size = 1
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))],
                         tmp_path / "prices", opts(fresh), lines.append)

    calls = fresh.calls()
    assert [c.status for c in calls] == [200, 200]
    assert calls[0].body == {
        "ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": 100,
        "Filters": [{"Type": "TERM_MATCH", "Field": "usagetype", "Value": P4D},
                    {"Type": "TERM_MATCH", "Field": "operation", "Value": "RunInstances"},
                    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
                    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
                    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"}]}
    assert calls[1].body == {**calls[0].body, "NextToken": "page-at-1"}

    stem = "BoxUsage_p4d.24xlarge~RunInstances~us-east-1"
    assert [f.relative_to(tmp_path / "prices").as_posix() for f in files] == [
        f"query/{stem}-p001.json", f"query/{stem}-p002.json"]
    first, second = (json.loads(f.read_text()) for f in files)
    assert first == {"FormatVersion": "aws_v1", "PriceList": [json.dumps(fresh.state.products[0])],
                     "NextToken": "page-at-1"}
    assert second == {"FormatVersion": "aws_v1", "PriceList": [json.dumps(fresh.state.products[-1])]}
    assert [json.loads(s)["product"]["sku"] for s in first["PriceList"] + second["PriceList"]] == ["P4DLINUX", "P4DLINUX2"]
    assert [read_back(f) for f in files] == [("aws-get-products", [(f"{P4D}|RunInstances", "us-east-1", "Hrs", "USD",
                                                                    Decimal("32.7726"), "2026-11-01")])] * 2
    assert not fresh.gets()  # the lines are covered by the current list: no Bulk API request
    assert lines[-1] == "aws: 2 GetProducts page(s), 2 product(s), 0 offer file(s) downloaded (0 bytes), 0 retried request(s)"


def test_throttling_and_a_500_are_retried_and_counted(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    fresh.state.faults = [400, 500]  # ThrottlingException, then InternalErrorException
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5)),
                          need(f"{G5}|RunInstances", datetime(2026, 11, 2), datetime(2026, 11, 4))],
                         tmp_path, opts(fresh), lines.append)
    assert [c.status for c in fresh.calls()] == [400, 500, 200, 200]
    assert [(c.body or {})["Filters"][0]["Value"] for c in fresh.calls()] == [G5, G5, G5, P4D]
    assert PULLER.last.retries == 2 and PULLER.last.requests == 4
    assert "aws: GetProducts BoxUsage:g5.12xlarge RunInstances in us-east-1: page 1, 1 product(s), 2 retried" in lines
    skus = [json.loads(s)["product"]["sku"] for f in files for s in json.loads(f.read_text())["PriceList"]]
    assert skus == ["G5LINUX", "P4DLINUX"]


def test_throttling_past_the_attempts_is_one_line(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    fresh.state.faults = [400, 400]
    with pytest.raises(PullError) as e:
        PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))],
                     tmp_path, opts(fresh, max_attempts=2), None)
    assert str(e.value) == ("prices pull aws: GetProducts BoxUsage:p4d.24xlarge RunInstances in us-east-1: "
                            "ThrottlingException: Rate exceeded")
    assert len(fresh.calls()) == 2


def test_a_second_fetch_with_no_needs_asks_nothing(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    assert PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))],
                        tmp_path, opts(fresh), None)
    fresh.state.log.clear()
    assert PULLER.fetch([], tmp_path, opts(fresh), None) == []
    assert fresh.state.log == []
    assert PULLER.last.requests == 0


def test_a_repull_overwrites_its_pages_and_drops_the_ones_a_shorter_answer_has_not(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue() + [
        product("P4DLINUX2", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "32.7726000000", CURRENT)]
    fresh.state.page_size = 1
    asked = [need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))]
    first = PULLER.fetch(asked, tmp_path, opts(fresh), None)
    assert len(first) == 2
    other = tmp_path / "query" / "BoxUsage_p4d.24xlarge~RunInstances~us-east-1-phl-1-p001.json"  # a local zone's
    other.write_text("{}")
    fresh.state.page_size = 100
    again = PULLER.fetch(asked, tmp_path, opts(fresh), None)
    assert again == first[:1]
    assert sorted(p.name for p in (tmp_path / "query").iterdir()) == sorted([first[0].name, other.name])
    assert len(json.loads(again[0].read_text())["PriceList"]) == 2


# -- the Bulk API ---------------------------------------------------------------------------------------------
VERSIONS = [("20260828000000", "2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z"),
            ("20260915000000", "2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z"),
            ("20261012000000", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"),
            ("20261101000000", "2026-11-01T00:00:00Z", "")]


def serve_bulk(peer: PricingPeer) -> dict[str, bytes]:
    """Index files and one us-east-1 offer file per version: the asked p4d record (its price changing), a Reserved
    record, the Windows and g5 records (not asked)."""
    files = bulk_indexes(VERSIONS, ["us-east-1", "eu-central-1"])
    prices = {"20260828000000": "30.1000000000", "20260915000000": "31.2000000000",
              "20261012000000": "32.0000000000", "20261101000000": "32.7726000000"}
    for vid, begin, _ in VERSIONS:
        eff = begin[:10]
        rows = [
            offer_row("P4DLINUX", "Reserved", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "19.2200000000", eff,
                      description="Linux/UNIX (Amazon VPC), p4d.24xlarge reserved instance applied", lease="1yr"),
            offer_row("P4DLINUX", "OnDemand", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", prices[vid], eff,
                      description=f'${prices[vid][:5]} per On Demand Linux p4d.24xlarge Instance Hour, "quoted", 8 GPUs'),
            offer_row("P4DWIN", "OnDemand", P4D, "RunInstances:0002", "us-east-1", "p4d.24xlarge", "35.7166000000", eff,
                      os_name="Windows"),
            offer_row("G5LINUX", "OnDemand", G5, "RunInstances", "us-east-1", "g5.12xlarge", "5.6720000000", eff),
        ]
        files[f"/offers/v1.0/aws/AmazonEC2/{vid}/us-east-1/index.csv"] = offer_csv(vid, begin, rows)
    peer.state.files.update(files)
    return files


def read_back(f: Path) -> tuple[str, list[tuple[object, ...]]]:
    """The one connectors.aws.prices format that recognises ``f``, and the references it reads from it."""
    from connectors.aws.prices import FORMATS

    head = f.read_bytes()[:65536]
    fmts = [x for x in FORMATS if x.sniff(f, head)]
    assert len(fmts) == 1, (f, [x.id for x in fmts])
    return fmts[0].id, [(r.price_key, r.region, r.unit, r.currency, r.unit_price,
                         r.effective_from.date().isoformat() if r.effective_from else None) for r in fmts[0].read(f)]


def kept_lines(body: bytes, *skus_terms: tuple[str, str, str]) -> bytes:
    """The metadata lines and header of an offer file, and its records of the (sku, term, operation) given."""
    lines = body.decode().splitlines(keepends=True)
    out = lines[:6]
    for ln in lines[6:]:
        cells = ln.split('","')
        if any(cells[0] == f'"{s}' and cells[3] == t and f'"{op}"' in ln for s, t, op in skus_terms):
            out.append(ln)
    return "".join(out).encode()


def test_the_bulk_versions_in_force_before_the_current_price_are_chosen_by_date(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    served = serve_bulk(fresh)
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 9, 10), datetime(2026, 11, 5))],
                         tmp_path, opts(fresh), lines.append)
    # the current price is effective from 2026-11-01: lines from 2026-09-10 need the September and October lists
    csvs = [r.path for r in fresh.gets(".csv")]
    assert csvs == ["/offers/v1.0/aws/AmazonEC2/20260915000000/us-east-1/index.csv"] * 2 + [
        "/offers/v1.0/aws/AmazonEC2/20261012000000/us-east-1/index.csv"] * 2  # HEAD then GET each
    assert [r.method for r in fresh.gets(".csv")] == ["HEAD", "GET", "HEAD", "GET"]
    names = [f.relative_to(tmp_path).as_posix() for f in files]
    assert names[0] == "query/BoxUsage_p4d.24xlarge~RunInstances~us-east-1-p001.json"
    assert [n.rsplit("-", 1)[0] for n in names[1:]] == ["bulk/AmazonEC2-20260915000000-us-east-1",
                                                        "bulk/AmazonEC2-20261012000000-us-east-1"]
    for f, vid in zip(files[1:], ("20260915000000", "20261012000000"), strict=True):
        body = served[f"/offers/v1.0/aws/AmazonEC2/{vid}/us-east-1/index.csv"]
        assert f.read_bytes() == kept_lines(body, ("P4DLINUX", "OnDemand", "RunInstances"))
        assert f.read_bytes().count(b"\n") == 7  # 5 metadata lines, the header, the one asked record
    assert not (tmp_path / "offers").exists()  # the full downloads are not kept by default
    # read back as `prices ingest` reads them: exactly the asked price, each from when it applied
    assert [read_back(f) for f in files] == [
        ("aws-get-products", [(f"{P4D}|RunInstances", "us-east-1", "Hrs", "USD", Decimal("32.7726"), "2026-11-01")]),
        ("aws-price-list-csv", [(f"{P4D}|RunInstances", "us-east-1", "Hrs", "USD", Decimal("31.2"), "2026-09-01")]),
        ("aws-price-list-csv", [(f"{P4D}|RunInstances", "us-east-1", "Hrs", "USD", Decimal("32.0"), "2026-10-01")])]
    assert "aws: AmazonEC2 20260915000000 us-east-1 index.csv: 1 on-demand record(s) of 1 usage type(s) kept in " \
           f"{files[1].name}" in lines


def test_versions_in_force() -> None:
    vs = [Version(v, *(prices_pull._parse_time(x) for x in (b, e)), f"/x/{v}/index.json")  # type: ignore[arg-type]
          for v, b, e in VERSIONS]
    ids = lambda got: [v.id for v in got]  # noqa: E731
    assert ids(in_force(vs, datetime(2026, 8, 31, 23), datetime(2026, 9, 1))) == ["20260828000000"]
    assert ids(in_force(vs, datetime(2026, 8, 31, 23), datetime(2026, 9, 1, 0, 0, 1))) == ["20260828000000",
                                                                                           "20260915000000"]
    assert ids(in_force(vs, datetime(2026, 10, 5), datetime(2026, 10, 5))) == ["20261012000000"]  # an instant
    assert ids(in_force(vs, datetime(2027, 1, 1), datetime(2027, 2, 1))) == ["20261101000000"]
    assert ids(in_force(vs, datetime(2026, 1, 1), datetime(2026, 2, 1))) == []


def test_bulk_only_needs_no_credentials_retries_a_503_and_keeps_the_offer_file_when_asked(
        fresh: PricingPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    served = serve_bulk(fresh)
    path = "/offers/v1.0/aws/AmazonEC2/20261012000000/us-east-1/index.csv"
    fresh.state.file_faults[path] = [503]
    fresh.state.file_drops["/offers/v1.0/aws/AmazonEC2/index.json"] = 100  # the version index cut short once
    asked = [need(f"{P4D}|RunInstances", datetime(2026, 10, 3), datetime(2026, 10, 5)),
             need(f"{P4D}|RunInstances:0002", datetime(2026, 10, 4), datetime(2026, 10, 6))]
    o = opts(fresh, source="bulk", keep_offer_files=True)
    files = PULLER.fetch(asked, tmp_path, o, None)
    assert fresh.calls() == []
    assert [(r.method, r.status) for r in fresh.gets(path)] == [("HEAD", 200), ("GET", 503), ("GET", 200)]
    assert [r.status for r in fresh.gets("/offers/v1.0/aws/AmazonEC2/index.json")] == [200, 200]
    assert PULLER.last.retries == 2 and PULLER.last.downloads == 1
    assert len(files) == 1
    assert files[0].read_bytes() == kept_lines(served[path], ("P4DLINUX", "OnDemand", "RunInstances"),
                                               ("P4DWIN", "OnDemand", "RunInstances:0002"))
    kept = tmp_path / "offers/AmazonEC2/20261012000000/us-east-1/index.csv"
    assert kept.read_bytes() == served[path]
    # a later pull of the same version reads the kept file: a HEAD, no download
    fresh.state.log.clear()
    assert PULLER.fetch(asked[:1], tmp_path, o, None)[0].read_bytes() == kept_lines(
        served[path], ("P4DLINUX", "OnDemand", "RunInstances"))
    assert [r.method for r in fresh.gets(".csv")] == ["HEAD"]
    assert PULLER.last.downloads == 0


def test_a_denied_query_api_falls_back_to_the_bulk_api_under_auto(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.deny = True
    serve_bulk(fresh)
    lines: list[str] = []
    asked = [need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))]
    files = PULLER.fetch(asked, tmp_path, opts(fresh), lines.append)
    assert [f.name.rsplit("-", 1)[0] for f in files] == ["AmazonEC2-20261101000000-us-east-1"]
    assert lines[0] == ("note: prices pull aws: access denied to the Price List Query API (GetProducts "
                        "BoxUsage:p4d.24xlarge RunInstances in us-east-1): the credentials need pricing:GetProducts "
                        "(or pass --source bulk, which needs no credentials); reading the Bulk API instead")
    with pytest.raises(PullError) as e:
        PULLER.fetch(asked, tmp_path, opts(fresh, source="query"), None)
    assert "the credentials need pricing:GetProducts" in str(e.value) and "\n" not in str(e.value)


def test_query_only_says_what_it_leaves_to_the_bulk_api(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 9, 10), datetime(2026, 11, 5))],
                         tmp_path, opts(fresh, source="query"), lines.append)
    assert len(files) == 1 and not fresh.gets()
    assert ("note: aws: 1 usage type(s) have lines older than the current price list (or are not in it): "
            "pass --source auto to read the Bulk API's historical versions") in lines


# -- configuration errors: one line each ------------------------------------------------------------------
NEEDS = [need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))]


def test_no_credentials_is_one_line(fresh: PricingPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(PullError) as e:
        PULLER.fetch(NEEDS, tmp_path, opts(fresh), None)
    assert str(e.value) == (
        "prices pull aws: no AWS credentials found: set AWS_PROFILE or --profile, AWS_ACCESS_KEY_ID/"
        "AWS_SECRET_ACCESS_KEY, run `aws sso login`, or run where an instance/container role is attached "
        "(or pass --source bulk, which needs none)")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    with pytest.raises(PullError) as e:
        PULLER.fetch(NEEDS, tmp_path, opts(fresh), None)
    assert str(e.value) == "prices pull aws: incomplete AWS credentials: AWS_SECRET_ACCESS_KEY is missing"
    with pytest.raises(PullError) as e:
        PULLER.fetch(NEEDS, tmp_path, opts(fresh, profile="nope"), None)
    assert str(e.value) == "prices pull aws: AWS profile 'nope' is not in the AWS config or credentials file"
    assert fresh.state.log == []


def test_a_region_without_the_query_api_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PullError) as e:
        PULLER.fetch(NEEDS, tmp_path, AwsPricesOptions(region="eu-west-1"), None)
    assert str(e.value) == ("prices pull aws: the Price List Query API has no endpoint in eu-west-1: pass --region "
                            "us-east-1, eu-central-1, ap-south-1 (cn-northwest-1 in China)")


@pytest.mark.parametrize(("env", "expected"), [({}, "us-east-1"), ({"AWS_REGION": "eu-central-1"}, "eu-central-1"),
                                               ({"AWS_REGION": "eu-west-1"}, "us-east-1"),
                                               ({"AWS_DEFAULT_REGION": "ap-south-1"}, "ap-south-1")])
def test_the_query_api_region_defaults(env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = prices_pull.pricing_client(AwsPricesOptions())
    assert client.meta.region_name == expected
    assert client.meta.endpoint_url == f"https://api.pricing.{expected}.amazonaws.com"


def test_a_bad_key_names_it(fresh: PricingPeer, tmp_path: Path) -> None:
    with pytest.raises(PullError) as e:
        PULLER.fetch([need("BoxUsage:p4d.24xlarge", datetime(2026, 11, 3), datetime(2026, 11, 5))],
                     tmp_path, opts(fresh), None)
    assert str(e.value) == ("prices pull aws: AWS price key 'BoxUsage:p4d.24xlarge': expected "
                            "'<usage type>|<operation>', e.g. 'BoxUsage:p4d.24xlarge|RunInstances'")
    assert fresh.state.log == []


def test_too_many_offer_files_stop_before_any_download(fresh: PricingPeer, tmp_path: Path) -> None:
    serve_bulk(fresh)
    with pytest.raises(PullError) as e:
        PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 8, 10), datetime(2026, 11, 5))], tmp_path,
                     opts(fresh, source="bulk", max_offer_files=3), None)
    assert str(e.value) == ("prices pull aws: the lines need 4 historical offer files (one per price list version "
                            "and region, each up to several GB), more than --max-offer-files 3: raise it, or pull a "
                            "shorter period")
    assert fresh.gets(".csv") == []


def test_a_key_missing_from_the_offer_file_is_said(fresh: PricingPeer, tmp_path: Path) -> None:
    serve_bulk(fresh)
    lines: list[str] = []
    files = PULLER.fetch([need("BoxUsage:p5.48xlarge|RunInstances", datetime(2026, 10, 3), datetime(2026, 10, 5))],
                         tmp_path, opts(fresh, source="bulk"), lines.append)
    assert files[0].read_bytes().count(b"\n") == 6  # metadata and header only
    assert ("note: aws: AmazonEC2 20261012000000 us-east-1 index.csv has no on-demand price for "
            "BoxUsage:p5.48xlarge RunInstances") in lines


def test_region_prefixes_and_instance_types_with_a_dash(fresh: PricingPeer, tmp_path: Path) -> None:
    """A bill's ``USE1-`` prefix is not in the price list; other regions keep theirs; ``u-6tb1.metal`` has a dash."""
    fresh.state.products = catalogue() + [
        product("U6TB", "BoxUsage:u-6tb1.metal", "RunInstances", "us-east-1", "u-6tb1.metal", "54.6000000000", CURRENT)]
    files = PULLER.fetch([need(f"USE1-{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5)),
                          need("EUC1-BoxUsage:p4d.24xlarge|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5),
                               region="eu-central-1"),
                          need("BoxUsage:u-6tb1.metal|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5))],
                         tmp_path, opts(fresh), None)
    sent = [{f["Field"]: f["Value"] for f in (c.body or {})["Filters"]} for c in fresh.calls()]
    assert sent == [
        {"usagetype": "EUC1-BoxUsage:p4d.24xlarge", "operation": "RunInstances", "regionCode": "eu-central-1",
         "tenancy": "Shared", "capacitystatus": "Used"},
        {"usagetype": P4D, "operation": "RunInstances", "regionCode": "us-east-1", "tenancy": "Shared",
         "capacitystatus": "Used"},
        {"usagetype": "BoxUsage:u-6tb1.metal", "operation": "RunInstances", "regionCode": "us-east-1",
         "tenancy": "Shared", "capacitystatus": "Used"}]
    skus = [json.loads(s)["product"]["sku"] for f in files for s in json.loads(f.read_text())["PriceList"]]
    assert skus == ["P4DFRA", "P4DLINUX", "U6TB"]


def test_a_large_offer_file_dropped_part_way_is_resumed_with_a_range(fresh: PricingPeer, tmp_path: Path) -> None:
    serve_bulk(fresh)
    vid, begin = "20261012000000", "2026-10-01T00:00:00Z"
    path = f"/offers/v1.0/aws/AmazonEC2/{vid}/us-east-1/index.csv"
    decoys = [offer_row(f"SKU{i:06d}", "OnDemand", f"BoxUsage:m{i % 97}.large", "RunInstances", "us-east-1",
                        f"m{i % 97}.large", "0.1000000000", begin[:10]) for i in range(6000)]
    asked = offer_row("P4DLINUX", "OnDemand", P4D, "RunInstances", "us-east-1", "p4d.24xlarge", "32.0000000000",
                      begin[:10])
    body = offer_csv(vid, begin, decoys[:3000] + [asked] + decoys[3000:])
    assert len(body) > 2_000_000
    fresh.state.files[path] = body
    fresh.state.file_drops[path] = 700_000
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 10, 3), datetime(2026, 10, 5))], tmp_path,
                         opts(fresh, source="bulk"), lines.append)
    assert [(r.method, r.range) for r in fresh.gets(path)] == [("HEAD", None), ("GET", None), ("GET", "bytes=700000-")]
    assert PULLER.last.retries == 1 and PULLER.last.bytes == len(body)
    assert files[0].read_bytes() == b"".join(body.splitlines(keepends=True)[:6]) + (
        ",".join(f'"{c}"' if c else "" for c in asked) + "\n").encode()
    meter = [ln for ln in lines if " MB" in ln and " of " in ln]
    # one line per 5% or per MiB read, whichever is larger, and the last: 0.7 MB before the drop, then 1 MiB reads
    assert meter == [f"aws: AmazonEC2 {vid} us-east-1 index.csv: {mb} of {len(body) / 1e6:,.1f} MB"
                     for mb in (f"{(700_000 + (1 << 20)) / 1e6:,.1f}", f"{len(body) / 1e6:,.1f}")]


# -- end to end: the 2018 CUR's spot lines priced through `billing-audit prices pull aws` ----------------------
def test_prices_pull_aws_prices_the_2018_spot_lines_and_a_second_pull_fetches_nothing(
        fresh: PricingPeer, tmp_path: Path) -> None:
    """The 2018 CUR's spot lines have a public on-demand cost of 0.  The current list (the Query API) has p3.2xlarge
    and p3.8xlarge at prices in force since 2017 and p3.16xlarge only from 2026-11-01, so the June 2018 lines of
    p3.16xlarge are priced from the Bulk API's June 2018 version (the fixture offer file, 24.48 an hour; the May and
    July versions are not fetched: the peer does not even serve them)."""
    from click.testing import CliRunner

    from billing_audit.cli import main
    from support import FIXTURES

    db = str(tmp_path / "s.duckdb")
    run = CliRunner()
    assert run.invoke(main, ["ingest", str(FIXTURES / "aws/cur-2018-csv"), "--db", db, "-q"]).exit_code == 0
    assert run.invoke(main, ["tag", "--db", db, "-q"]).exit_code == 0
    since_2017 = "2017-10-26T00:00:00Z"
    fresh.state.products = [
        product("P32X", "BoxUsage:p3.2xlarge", "RunInstances", "us-east-1", "p3.2xlarge", "3.0600000000", since_2017),
        product("P38X", "BoxUsage:p3.8xlarge", "RunInstances", "us-east-1", "p3.8xlarge", "12.2400000000", since_2017),
        # a later price (hypothetical), in force from 2026-11-01 only: never the June 2018 lines'
        product("P316X", "BoxUsage:p3.16xlarge", "RunInstances", "us-east-1", "p3.16xlarge", "26.1200000000", CURRENT),
        product("P316XW", "BoxUsage:p3.16xlarge", "RunInstances:0002", "us-east-1", "p3.16xlarge", "27.4240000000",
                CURRENT, os_name="Windows")]
    fresh.state.files.update(bulk_indexes([("20180501000000", "2018-05-01T00:00:00Z", "2018-06-01T00:00:00Z"),
                                           ("20180601000000", "2018-06-01T00:00:00Z", "2018-07-01T00:00:00Z"),
                                           ("20180701000000", "2018-07-01T00:00:00Z", "2026-11-01T00:00:00Z"),
                                           ("20261101000000", "2026-11-01T00:00:00Z", "")], ["us-east-1"]))
    offer = FIXTURES / "prices/aws/AmazonEC2-20180601-us-east-1.csv"  # written by fixtures/gen_aws_prices.py
    fresh.state.files["/offers/v1.0/aws/AmazonEC2/20180601000000/us-east-1/index.csv"] = offer.read_bytes()
    flags = ["prices", "pull", "aws", "--db", db, "--endpoint-url", fresh.url, "--bulk-url", fresh.url]
    nokeys = run.invoke(main, flags, env={"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None})
    assert nokeys.exit_code == 2 and "Traceback" not in nokeys.output
    assert nokeys.output.splitlines() == [
        "error: prices pull aws: no AWS credentials found: set AWS_PROFILE or --profile, AWS_ACCESS_KEY_ID/"
        "AWS_SECRET_ACCESS_KEY, run `aws sso login`, or run where an instance/container role is attached "
        "(or pass --source bulk, which needs none)"]
    assert fresh.state.log == []
    r = run.invoke(main, flags)
    assert r.exit_code == 0, r.output
    assert [(c.body or {})["Filters"][0]["Value"] for c in fresh.calls()] == [
        "BoxUsage:p3.16xlarge", "BoxUsage:p3.2xlarge", "BoxUsage:p3.8xlarge"]
    assert [(g.method, g.path) for g in fresh.gets(".csv")] == [
        ("HEAD", "/offers/v1.0/aws/AmazonEC2/20180601000000/us-east-1/index.csv"),
        ("GET", "/offers/v1.0/aws/AmazonEC2/20180601000000/us-east-1/index.csv")]

    import duckdb

    with duckdb.connect(db, read_only=True) as con:
        got = con.execute("""SELECT l.x_UsageType, l.ChargePeriodStart, o.od_source, o.od_unit_price, o.od_cost
            FROM spot_od o JOIN line_items l USING (x_LineItemId) ORDER BY l.x_SourceRow""").fetchall()
    D = Decimal
    assert [(u, t.isoformat(), s, p, c) for u, t, s, p, c in got] == [
        # quantity x the price in force: 1 h, 1 h, 0.5 h of p3.16xlarge at the June 2018 list's 24.48
        ("USE1-SpotUsage:p3.16xlarge", "2018-06-12T03:00:00", "reference", D("24.48"), D("24.48")),
        ("USE1-SpotUsage:p3.16xlarge", "2018-06-12T04:00:00", "reference", D("24.48"), D("24.48")),
        ("USE1-SpotUsage:p3.16xlarge", "2018-06-12T05:00:00", "reference", D("24.48"), D("12.24")),
        # the current list's prices in force since 2017 (the p3.2xlarge reference replaces the bill's 3.06)
        ("USE1-SpotUsage:p3.2xlarge", "2018-06-13T05:00:00", "reference", D("3.06"), D("3.06")),
        ("USE1-SpotUsage:p3.2xlarge", "2018-06-13T06:00:00", "reference", D("3.06"), D("3.06")),
        ("USE1-SpotUsage:p3.8xlarge", "2018-06-13T07:00:00", "reference", D("12.24"), D("12.24")),
        ("USE1-SpotUsage:p3.8xlarge", "2018-06-14T01:00:00", "reference", D("12.24"), D("12.24"))]

    fresh.state.log.clear()
    again = run.invoke(main, flags)
    assert again.exit_code == 0, again.output
    assert "nothing to pull: every aws spot line has an on-demand price from the export or a reference" in again.output
    assert fresh.state.log == []


def test_lines_without_a_region_are_said_not_fetched_from_the_bulk_api(fresh: PricingPeer, tmp_path: Path) -> None:
    serve_bulk(fresh)
    lines: list[str] = []
    files = PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 10, 3), datetime(2026, 10, 5), region=None),
                          need(f"{P4D}|RunInstances", datetime(2026, 10, 3), datetime(2026, 10, 5))],
                         tmp_path, opts(fresh, source="bulk"), lines.append)
    assert [f.name.rsplit("-", 1)[0] for f in files] == ["AmazonEC2-20261012000000-us-east-1"]
    assert ("note: aws: BoxUsage:p4d.24xlarge RunInstances has lines without a region: no regional offer file to "
            "read them from, they stay unpriced") in lines


def test_a_currency_the_price_list_has_not_is_said(fresh: PricingPeer, tmp_path: Path) -> None:
    fresh.state.products = catalogue()
    lines: list[str] = []
    PULLER.fetch([need(f"{P4D}|RunInstances", datetime(2026, 11, 3), datetime(2026, 11, 5), currency="EUR")],
                 tmp_path, opts(fresh), lines.append)
    assert lines[0] == "note: aws: the AWS Price List is in USD (CNY in China): the EUR needs stay unpriced"
