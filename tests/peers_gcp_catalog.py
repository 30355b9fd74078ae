"""A local HTTP server speaking the Cloud Billing Catalog API's SKU listing, enough for `prices pull gcp` (tests only).

``GET /v1/services/{service}/skus?currencyCode=C&pageSize=N&pageToken=T[&key=K]`` answers
``{"skus": [...], "nextPageToken": "..."}`` from ``skus[service]`` (a list of SKU objects in the API's shape),
pages of ``min(pageSize, page_size)`` SKUs, the last page without ``nextPageToken`` (as the API leaves it out).
Prices are kept in each SKU's own currency; a request in another currency gets each ``unitPrice`` converted with
``rates[currency]`` (units + nanos, as the API does with ``currencyConversionRate``).  An unknown service is a
404 in Google's error shape.  ``faults`` holds one-shot answers (an HTTP status, matched by a regex on the query
string) served before the normal handling, e.g. one 429 and one 500.  ``api_key`` / ``token``: when set, a request
must carry ``key=`` or ``Authorization: Bearer`` with it (401 otherwise).  Every request is logged.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from http_peer import LocalServer


@dataclass
class Fault:
    status: int
    query: str = ""  # regex searched in the query string
    retry_after: str | None = "0"


@dataclass
class Request:
    path: str
    query: dict[str, list[str]]
    auth: str | None


def _convert(money: dict[str, Any], currency: str, rate: Decimal) -> dict[str, Any]:
    value = (Decimal(str(money.get("units", "0"))) + Decimal(money.get("nanos", 0)) / Decimal(10**9)) * rate
    value = value.quantize(Decimal("0.000000001"), rounding=ROUND_HALF_EVEN)
    units = int(value)
    nanos = int((value - units) * 10**9)
    out: dict[str, Any] = {"currencyCode": currency}
    if units:
        out["units"] = str(units)
    if nanos:
        out["nanos"] = nanos
    return out


class FakeCatalog:
    def __init__(self, skus: dict[str, list[dict[str, Any]]], page_size: int = 2,
                 rates: dict[str, Decimal] | None = None):
        self.skus = skus
        self.page_size = page_size
        self.rates = rates or {}
        self.faults: list[Fault] = []
        self.log: list[Request] = []
        self.api_key: str | None = None
        self.token: str | None = None
        self._lock = threading.Lock()
        self._http = LocalServer(self._handler(), start=False)
        self.url = self._http.url

    def start(self) -> FakeCatalog:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def pages(self) -> list[Request]:
        return [r for r in self.log if r.path.endswith("/skus")]

    def _page(self, service: str, qs: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if service not in self.skus:
            return 404, _error(404, f"Service {service} not found.")
        currency = qs.get("currencyCode", ["USD"])[0]
        size = min(int(qs.get("pageSize", ["5000"])[0]), self.page_size)
        start = int(qs.get("pageToken", ["0"])[0] or 0)
        chunk = copy.deepcopy(self.skus[service][start:start + size])
        for sku in chunk:
            for info in sku.get("pricingInfo", []):
                for tier in info.get("pricingExpression", {}).get("tieredRates", []):
                    own = tier["unitPrice"]["currencyCode"]
                    if own != currency:
                        if currency not in self.rates:
                            return 400, _error(400, f"Currency {currency} is not supported.")
                        tier["unitPrice"] = _convert(tier["unitPrice"], currency, self.rates[currency])
                        info["currencyConversionRate"] = float(self.rates[currency])
        body: dict[str, Any] = {"skus": chunk}
        if start + size < len(self.skus[service]):
            body["nextPageToken"] = str(start + size)
        return 200, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                u = urlparse(self.path)
                qs = parse_qs(u.query)
                auth = self.headers.get("Authorization")
                with server._lock:
                    server.log.append(Request(u.path, qs, auth))
                    fault = next((f for f in server.faults if re.search(f.query, u.query)), None)
                    if fault:
                        server.faults.remove(fault)
                if fault is not None:
                    headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
                    return self._send(fault.status, _error(fault.status, "injected"), headers)
                if server.api_key and qs.get("key", [None])[0] != server.api_key and \
                        not (server.token and auth == f"Bearer {server.token}"):
                    return self._send(401, _error(401, "API key not valid. Please pass a valid API key."))
                if server.token and not server.api_key and auth != f"Bearer {server.token}":
                    return self._send(401, _error(401, "Request had invalid authentication credentials."))
                m = re.fullmatch(r"/v1/services/([^/]+)/skus", u.path)
                if not m:
                    return self._send(404, _error(404, f"no route GET {u.path}"))
                return self._send(*server._page(m[1], qs))

        return Handler


def _error(code: int, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}.get(code, "UNKNOWN")
    return {"error": {"code": code, "message": message, "status": status}}
