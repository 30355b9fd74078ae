"""A local Azure Retail Prices API: ``GET /api/retail/prices`` over HTTP on 127.0.0.1.

It serves a list of items (the API's item shape) through the filter subset the puller uses: ``$filter`` clauses
``field eq 'value'`` joined by ``and`` (case-sensitive values, as api-version 2023-01-01-preview), the
``currencyCode='EUR'`` parameter (items of that currency; USD without it) and ``meterRegion='primary'`` (only
items with ``isPrimaryMeterRegion`` true).  Answers are paged ``page_size`` items at a time with an absolute
``NextPageLink`` carrying ``$skip``, as the real API does.  ``fail`` is a list of statuses to answer once each,
in order, before serving (``429`` with ``Retry-After``); ``log`` records every request's path and query.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from http_peer import LocalServer

_CLAUSE = re.compile(r"^\s*([A-Za-z]+)\s+eq\s+'((?:[^']|'')*)'\s*$")


def parse_filter(text: str) -> list[tuple[str, str]]:
    """``serviceName eq 'Virtual Machines' and meterName eq 'X'`` -> [(field, value)]; ValueError otherwise."""
    out = []
    for clause in re.split(r"\s+and\s+", text.strip()):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"unsupported filter clause {clause!r}")
        out.append((m.group(1), m.group(2).replace("''", "'")))
    return out


def _field(item: dict[str, Any], name: str) -> Any:
    if name == "priceType":
        return item.get("type")
    return item.get(name)


@dataclass
class RetailPricesPeer:
    items: list[dict[str, Any]]
    page_size: int = 2
    fail: list[int] = field(default_factory=list)
    retry_after: str = "1"
    log: list[str] = field(default_factory=list)
    url: str = ""

    def answer(self, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if query.get("api-version") != ["2023-01-01-preview"]:
            return 400, {"Error": {"Code": "InvalidApiVersion", "Message": "api-version 2023-01-01-preview expected"}}
        try:
            clauses = parse_filter(query.get("$filter", [""])[0]) if query.get("$filter") else []
        except ValueError as e:
            return 400, {"Error": {"Code": "InvalidFilter", "Message": str(e)}}
        currency = query.get("currencyCode", ["'USD'"])[0].strip("'")
        primary = query.get("meterRegion", [""])[0].strip("'") == "primary"
        hits = [i for i in self.items
                if i.get("currencyCode") == currency and all(_field(i, f) == v for f, v in clauses)
                and (not primary or i.get("isPrimaryMeterRegion") is True)]
        skip = int(query.get("$skip", ["0"])[0])
        page = hits[skip:skip + self.page_size]
        next_link = None
        if skip + self.page_size < len(hits):
            q = {k: v[0] for k, v in query.items() if k != "$skip"} | {"$skip": str(skip + self.page_size)}
            next_link = f"{self.url}/api/retail/prices?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote,
                                                                                  safe="'$")
        return 200, {"BillingCurrency": currency, "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                     "Items": page, "NextPageLink": next_link, "Count": len(page)}


@contextmanager
def serve(peer: RetailPricesPeer) -> Iterator[RetailPricesPeer]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            parts = urllib.parse.urlsplit(self.path)
            peer.log.append(self.path)
            if peer.fail:
                status = peer.fail.pop(0)
                body = json.dumps({"Error": {"Code": str(status), "Message": "injected"}}).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", peer.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if parts.path != "/api/retail/prices":
                status, doc = 404, {"Error": {"Code": "NotFound", "Message": parts.path}}
            else:
                status, doc = peer.answer(urllib.parse.parse_qs(parts.query, keep_blank_values=True))
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = LocalServer(Handler)
    peer.url = server.url
    try:
        yield peer
    finally:
        server.stop()
        server.thread.join()
