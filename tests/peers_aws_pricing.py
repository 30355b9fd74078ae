"""A local peer of the AWS Price List APIs for the price-pull tests (moto 5.2 has no ``pricing`` service).

One HTTP server on 127.0.0.1 (free port) speaks both:

* the **Query API**: ``POST /`` with ``X-Amz-Target: AWSPriceListService.GetProducts`` and an awsJson1_1 body
  (``ServiceCode``, ``Filters``, ``FormatVersion``, ``NextToken``, ``MaxResults``), answered like botocore's
  service model says: ``{"FormatVersion": "aws_v1", "PriceList": ["<product JSON>", ...], "NextToken": ...}``,
  ``PriceList`` items being JSON *strings*; products are matched on every ``TERM_MATCH`` filter (the field an
  attribute of ``product.attributes``, or ``ServiceCode``), served in pages of ``min(MaxResults, page_size)``
  with an opaque ``NextToken``; errors as awsJson1_1 does them (``{"__type": ..., "message": ...}`` and the
  ``x-amzn-ErrorType`` header): one ThrottlingException (400) and one InternalErrorException (500) can be
  injected, or every call denied (AccessDeniedException);
* the **Bulk API**: ``GET`` / ``HEAD`` of the files put in ``files`` (index JSONs, offer CSVs), with ``Range``
  (206), injected 503s and a connection dropped part way through a body.

Every request is logged (method, path, target, the JSON body, status).  The real boto3 client talks to it with
``endpoint_url`` and dummy credentials (:meth:`PricingPeer.client`).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import boto3
from botocore.config import Config
from http_peer import LocalServer

DUMMY = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
TARGET = "AWSPriceListService.GetProducts"


@dataclass
class Req:
    method: str
    path: str
    target: str | None
    body: dict[str, Any] | None
    status: int
    range: str | None = None


@dataclass
class PeerState:
    products: list[dict[str, Any]] = field(default_factory=list)  # GetProducts product documents
    page_size: int = 100
    faults: list[int] = field(default_factory=list)  # statuses for the next GetProducts calls: 400 throttle, 500
    deny: bool = False
    files: dict[str, bytes] = field(default_factory=dict)  # Bulk API: path -> body
    file_faults: dict[str, list[int]] = field(default_factory=dict)  # path -> statuses for its next GETs
    file_drops: dict[str, int] = field(default_factory=dict)  # path -> close the next GET after this many bytes
    log: list[Req] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class PricingPeer:
    def __init__(self) -> None:
        self.state = PeerState()
        peer = self

        class Handler(_Handler):
            pass

        Handler.peer = peer
        self.http = LocalServer(Handler)
        self.url = self.http.url

    def stop(self) -> None:
        self.http.stop()

    def reset(self) -> None:
        with self.state.lock:
            self.state.products.clear()
            self.state.faults.clear()
            self.state.files.clear()
            self.state.file_faults.clear()
            self.state.file_drops.clear()
            self.state.log.clear()
            self.state.deny = False
            self.state.page_size = 100

    def client(self, region: str = "us-east-1", attempts: int = 4) -> Any:
        return boto3.client("pricing", endpoint_url=self.url, region_name=region,
                            config=Config(retries={"mode": "standard", "total_max_attempts": attempts}), **DUMMY)

    def calls(self) -> list[Req]:
        """The GetProducts requests, in order (retries included)."""
        with self.state.lock:
            return [r for r in self.state.log if r.target == TARGET]

    def gets(self, part: str = "") -> list[Req]:
        with self.state.lock:
            return [r for r in self.state.log if r.method in ("GET", "HEAD") and part in r.path]


def _match(doc: dict[str, Any], service: str, filters: list[dict[str, Any]]) -> bool:
    if doc.get("serviceCode") != service:
        return False
    attrs = doc.get("product", {}).get("attributes", {})
    for f in filters:
        if f.get("Type") != "TERM_MATCH":
            raise ValueError(f"filter type {f.get('Type')!r} not served by this peer")
        field_, value = f["Field"], f["Value"]
        have = service if field_ == "ServiceCode" else attrs.get(field_)
        if have != value:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    peer: PricingPeer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _log(self, status: int, target: str | None = None, body: dict[str, Any] | None = None) -> None:
        with self.peer.state.lock:
            self.peer.state.log.append(Req(self.command, self.path, target, body, status, self.headers.get("Range")))

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # -- the Query API ------------------------------------------------------------------------------------
    def do_POST(self) -> None:
        st = self.peer.state
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        target = self.headers.get("X-Amz-Target")
        req = json.loads(raw or b"{}")

        def reply(status: int, doc: dict[str, Any]) -> None:
            self._log(status, target, req)
            extra = {"x-amzn-RequestId": "00000000-0000-4000-8000-000000000000"}
            if status >= 400:
                extra["x-amzn-ErrorType"] = str(doc["__type"])
            self._send(status, json.dumps(doc).encode(), "application/x-amz-json-1.1", extra)

        if target != TARGET:
            return reply(400, {"__type": "UnknownOperationException", "message": f"no operation {target!r}"})
        with st.lock:
            fault = st.faults.pop(0) if st.faults else None
        if fault == 400:
            return reply(400, {"__type": "ThrottlingException", "message": "Rate exceeded"})
        if fault is not None:
            return reply(fault, {"__type": "InternalErrorException", "message": "An internal error occurred"})
        if st.deny:
            return reply(400, {"__type": "AccessDeniedException",
                               "message": "User: arn:aws:iam::123456789012:user/ro is not authorized to perform: "
                                          "pricing:GetProducts"})
        if not req.get("ServiceCode"):
            return reply(400, {"__type": "InvalidParameterException", "message": "ServiceCode is required"})
        if req.get("FormatVersion", "aws_v1") != "aws_v1":
            return reply(400, {"__type": "InvalidParameterException", "message": "FormatVersion must be aws_v1"})
        try:
            found = [p for p in st.products if _match(p, req["ServiceCode"], req.get("Filters") or [])]
        except ValueError as e:
            return reply(400, {"__type": "InvalidParameterException", "message": str(e)})
        start = 0
        if token := req.get("NextToken"):
            m = re.fullmatch(r"page-at-(\d+)", token)
            if not m:
                return reply(400, {"__type": "InvalidNextTokenException", "message": "bad token"})
            start = int(m.group(1))
        size = min(int(req.get("MaxResults") or 100), st.page_size)
        page = found[start:start + size]
        doc: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in page]}
        if start + size < len(found):
            doc["NextToken"] = f"page-at-{start + size}"
        return reply(200, doc)

    # -- the Bulk API -------------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        st = self.peer.state
        path = self.path.split("?", 1)[0]
        with st.lock:
            body = st.files.get(path)
            faults = st.file_faults.get(path) if self.command == "GET" else None
            fault = faults.pop(0) if faults else None
            drop = st.file_drops.pop(path, None) if self.command == "GET" else None
        if fault is not None:
            self._log(fault)
            return self._send(fault, b"<Error><Code>SlowDown</Code></Error>", "application/xml")
        if body is None:
            self._log(404)
            return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
        ctype = "application/json" if path.endswith(".json") else "text/csv"
        etag = {"ETag": f'"{len(body):x}-{hash(body) & 0xFFFFFFFF:08x}"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng and (m := re.fullmatch(r"bytes=(\d+)-", rng)):
            off = int(m.group(1))
            self._log(206)
            return self._send(206, body[off:], ctype,
                              {**etag, "Content-Range": f"bytes {off}-{len(body) - 1}/{len(body)}"})
        if drop is not None:  # the whole length announced, part of it sent, the connection closed
            self._log(200)
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:drop])
            self.wfile.flush()
            self.close_connection = True
            return None
        self._log(200)
        return self._send(200, body, ctype, etag)


# -- documents shaped like AWS's ----------------------------------------------------------------------------
OD_TERM = "JRTCKXETXF"  # AWS's OnDemand offer term code
OD_RATE = "6YS6EN2CT7"


def product(sku: str, usage_type: str, operation: str, region: str, instance_type: str, price: str,
            effective: str, *, os_name: str = "Linux", tenancy: str = "Shared", capacity: str = "Used",
            pre_sw: str = "NA", location: str = "US East (N. Virginia)", version: str = "20261101000000",
            reserved: str | None = None) -> dict[str, Any]:
    """A GetProducts product document (aws_v1) with an OnDemand term at ``price`` USD per hour."""
    od = {f"{sku}.{OD_TERM}": {
        "priceDimensions": {f"{sku}.{OD_TERM}.{OD_RATE}": {
            "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
            "description": f"${price} per On Demand {os_name} {instance_type} Instance Hour",
            "rateCode": f"{sku}.{OD_TERM}.{OD_RATE}", "pricePerUnit": {"USD": price}}},
        "sku": sku, "effectiveDate": effective, "offerTermCode": OD_TERM, "termAttributes": {}}}
    terms: dict[str, Any] = {"OnDemand": od}
    if reserved is not None:  # a Reserved term the reader must not take for the on-demand price
        terms["Reserved"] = {f"{sku}.4NA7Y494T4": {
            "priceDimensions": {f"{sku}.4NA7Y494T4.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": f"{os_name} ({instance_type}), reserved instance applied",
                "rateCode": f"{sku}.4NA7Y494T4.6YS6EN2CT7", "pricePerUnit": {"USD": reserved}}},
            "sku": sku, "effectiveDate": effective, "offerTermCode": "4NA7Y494T4",
            "termAttributes": {"LeaseContractLength": "1yr", "OfferingClass": "standard", "PurchaseOption": "No Upfront"}}}
    return {
        "product": {"productFamily": "Compute Instance", "sku": sku, "attributes": {
            "servicecode": "AmazonEC2", "location": location, "locationType": "AWS Region", "regionCode": region,
            "instanceType": instance_type, "usagetype": usage_type, "operation": operation, "tenancy": tenancy,
            "operatingSystem": os_name, "licenseModel": "No License required", "preInstalledSw": pre_sw,
            "capacitystatus": capacity, "marketoption": "OnDemand", "servicename": "Amazon Elastic Compute Cloud"}},
        "serviceCode": "AmazonEC2", "terms": terms, "version": version, "publicationDate": "2026-11-01T00:00:00Z",
    }


OFFER_HEADER = ("SKU", "OfferTermCode", "RateCode", "TermType", "PriceDescription", "EffectiveDate", "StartingRange",
                "EndingRange", "Unit", "PricePerUnit", "Currency", "RelatedTo", "LeaseContractLength",
                "PurchaseOption", "OfferingClass", "Product Family", "serviceCode", "Location", "Location Type",
                "Instance Type", "Tenancy", "Operating System", "License Model", "usageType", "operation",
                "CapacityStatus", "MarketOption", "Pre Installed S/W", "Region Code", "serviceName")


def _q(v: str) -> str:
    return "" if v == "" else '"' + v.replace('"', '""') + '"'


def offer_row(sku: str, term: str, usage_type: str, operation: str, region: str, instance_type: str, price: str,
              effective: str, *, description: str | None = None, os_name: str = "Linux", tenancy: str = "Shared",
              location: str = "US East (N. Virginia)", lease: str = "") -> tuple[str, ...]:
    code = OD_TERM if term == "OnDemand" else "4NA7Y494T4"
    desc = description or f"${price} per On Demand {os_name} {instance_type} Instance Hour"
    return (sku, code, f"{sku}.{code}.{OD_RATE}", term, desc, effective, "0", "Inf", "Hrs", price, "USD", "", lease,
            "No Upfront" if lease else "", "standard" if lease else "", "Compute Instance", "AmazonEC2", location,
            "AWS Region", instance_type, tenancy, os_name, "No License required", usage_type, operation, "Used",
            "OnDemand", "NA", region, "Amazon Elastic Compute Cloud")


def offer_csv(version: str, published: str, rows: list[tuple[str, ...]]) -> bytes:
    """A regional offer file as the Bulk API serves it: five metadata lines, the header, the rows (all quoted,
    empty cells bare, LF line ends)."""
    lines = [
        '"FormatVersion","v1.0"',
        '"Disclaimer","This pricing list is for informational purposes only. All prices are subject to the '
        'additional terms included in the pricing pages on http://aws.amazon.com."',
        f'"Publication Date","{published}"',
        f'"Version","{version}"',
        '"OfferCode","AmazonEC2"',
        ",".join(_q(c) for c in OFFER_HEADER),
        *(",".join(_q(c) for c in r) for r in rows),
    ]
    return ("\n".join(lines) + "\n").encode()


def bulk_indexes(versions: list[tuple[str, str, str]], regions: list[str]) -> dict[str, bytes]:
    """The offer index, the EC2 version index (``versions``: id, begin, end or "") and the current region index."""
    current = versions[-1][0]
    offer_index = {"formatVersion": "v1.0", "disclaimer": "...", "publicationDate": "2026-11-01T00:00:00Z",
                   "offers": {"AmazonEC2": {
                       "offerCode": "AmazonEC2", "versionIndexUrl": "/offers/v1.0/aws/AmazonEC2/index.json",
                       "currentVersionUrl": "/offers/v1.0/aws/AmazonEC2/current/index.json",
                       "currentRegionIndexUrl": "/offers/v1.0/aws/AmazonEC2/current/region_index.json"},
                       "AmazonS3": {"offerCode": "AmazonS3", "versionIndexUrl": "/offers/v1.0/aws/AmazonS3/index.json",
                                    "currentVersionUrl": "/offers/v1.0/aws/AmazonS3/current/index.json",
                                    "currentRegionIndexUrl": "/offers/v1.0/aws/AmazonS3/current/region_index.json"}}}
    version_index = {"formatVersion": "v1.0", "disclaimer": "...", "publicationDate": "2026-11-01T00:00:00Z",
                     "offerCode": "AmazonEC2", "currentVersion": current,
                     "versions": {vid: {"versionEffectiveBeginDate": b, "versionEffectiveEndDate": e,
                                        "offerVersionUrl": f"/offers/v1.0/aws/AmazonEC2/{vid}/index.json"}
                                  for vid, b, e in versions}}
    region_index = {"formatVersion": "v1.0", "disclaimer": "...", "publicationDate": "2026-11-01T00:00:00Z",
                    "regions": {r: {"regionCode": r,
                                    "currentVersionUrl": f"/offers/v1.0/aws/AmazonEC2/{current}/{r}/index.json"}
                                for r in regions}}
    return {"/offers/v1.0/aws/index.json": json.dumps(offer_index).encode(),
            "/offers/v1.0/aws/AmazonEC2/index.json": json.dumps(version_index).encode(),
            "/offers/v1.0/aws/AmazonEC2/current/region_index.json": json.dumps(region_index).encode()}
