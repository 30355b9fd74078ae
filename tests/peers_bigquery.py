"""A local HTTP server speaking the BigQuery REST protocol, enough for `pull gcp` (tests only).

It serves what google-cloud-bigquery calls for ``get_table`` and ``query(...).result()``:

- ``GET  /bigquery/v2/projects/P/datasets/D/tables/T``  the table resource (schema, partitioning);
- ``POST /bigquery/v2/projects/P/jobs``                 jobs.insert (a dry run answers at once);
- ``GET  /bigquery/v2/projects/P/jobs/J``               jobs.get;
- ``GET  /bigquery/v2/projects/P/queries/J``            jobs.getQueryResults, paged with pageToken;
- ``POST /token``                                       an OAuth token endpoint for ADC tests.

It does not run SQL: a query whose text has ``COUNT(*) AS line_count`` is the freshness check
(answered from the table's rows); a query whose text holds a canned answer's ``match`` (``add_result``)
gets that answer; any other returns the table's rows, restricted to the backticked columns of the SELECT
list.  Cells use the REST ``f``/``v`` shape (nested RECORD and REPEATED fields included); TIMESTAMP
cells are int64 microsecond strings (``formatOptions.useInt64Timestamp``).

Every request is logged (method, path, query string, JSON body, Authorization header); ``faults``
holds one-shot answers (status + JSON error, or ``"drop"`` to close the connection) matched by method
and path pattern before the normal handling.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from http_peer import LocalServer


def _f(name: str, typ: str, mode: str = "NULLABLE", fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": typ, "mode": mode}
    if fields:
        out["fields"] = fields
    return out


_KV = [_f("key", "STRING"), _f("value", "STRING")]

# The standard usage cost export's schema (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/standard-usage).
STANDARD_SCHEMA: list[dict[str, Any]] = [
    _f("billing_account_id", "STRING"),
    _f("service", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING")]),
    _f("sku", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING")]),
    _f("usage_start_time", "TIMESTAMP"),
    _f("usage_end_time", "TIMESTAMP"),
    _f("project", "RECORD", fields=[
        _f("id", "STRING"), _f("number", "STRING"), _f("name", "STRING"),
        _f("labels", "RECORD", "REPEATED", _KV), _f("ancestry_numbers", "STRING"),
        _f("ancestors", "RECORD", "REPEATED", [_f("resource_name", "STRING"), _f("display_name", "STRING")]),
    ]),
    _f("labels", "RECORD", "REPEATED", _KV),
    _f("system_labels", "RECORD", "REPEATED", _KV),
    _f("location", "RECORD", fields=[_f("location", "STRING"), _f("country", "STRING"), _f("region", "STRING"),
                                     _f("zone", "STRING")]),
    _f("tags", "RECORD", "REPEATED", [_f("key", "STRING"), _f("value", "STRING"), _f("inherited", "BOOLEAN"),
                                      _f("namespace", "STRING")]),
    _f("transaction_type", "STRING"),
    _f("seller_name", "STRING"),
    _f("export_time", "TIMESTAMP"),
    _f("cost", "FLOAT"),
    _f("currency", "STRING"),
    _f("currency_conversion_rate", "FLOAT"),
    _f("usage", "RECORD", fields=[_f("amount", "FLOAT"), _f("unit", "STRING"), _f("amount_in_pricing_units", "FLOAT"),
                                  _f("pricing_unit", "STRING")]),
    _f("credits", "RECORD", "REPEATED", [_f("name", "STRING"), _f("amount", "FLOAT"), _f("full_name", "STRING"),
                                         _f("id", "STRING"), _f("type", "STRING")]),
    _f("invoice", "RECORD", fields=[_f("month", "STRING"), _f("publisher_type", "STRING")]),
    _f("cost_type", "STRING"),
    _f("adjustment_info", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING"), _f("mode", "STRING"),
                                            _f("type", "STRING")]),
    _f("cost_at_list", "FLOAT"),
    _f("consumption_model", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING")]),
]

_TIER = [_f("pricing_unit_quantity", "FLOAT"), _f("start_usage_amount", "FLOAT"), _f("usd_amount", "NUMERIC"),
         _f("account_currency_amount", "NUMERIC")]
_PRICE = [_f("pricing_unit_quantity", "FLOAT"),
          _f("aggregation_info", "RECORD", fields=[_f("aggregation_level", "STRING"), _f("aggregation_interval", "STRING")]),
          _f("tiered_rates", "RECORD", "REPEATED", _TIER)]

# The Cloud Billing pricing export table cloud_pricing_export
# (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/pricing-data).
PRICING_SCHEMA: list[dict[str, Any]] = [
    _f("export_time", "TIMESTAMP"),
    _f("pricing_as_of_time", "TIMESTAMP"),
    _f("billing_account_id", "STRING"),
    _f("billing_account_name", "STRING"),
    _f("business_entity_name", "STRING"),
    _f("service", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING")]),
    _f("sku", "RECORD", fields=[_f("id", "STRING"), _f("description", "STRING"),
                                _f("destination_migration_mappings", "STRING", "REPEATED")]),
    _f("product_taxonomy", "STRING", "REPEATED"),
    _f("geo_taxonomy", "RECORD", fields=[_f("type", "STRING"), _f("regions", "STRING", "REPEATED")]),
    _f("pricing_unit", "STRING"),
    _f("pricing_unit_description", "STRING"),
    _f("account_currency_code", "STRING"),
    _f("currency_conversion_rate", "FLOAT"),
    _f("list_price", "RECORD", fields=_PRICE),
    _f("billing_account_price", "RECORD", fields=_PRICE),
    _f("price_info", "RECORD", fields=[_f("price_reason", "STRING"), _f("discount_percent", "FLOAT"),
                                       _f("discount_percent_fixed_discount", "FLOAT"),
                                       _f("discount_migrated_from", "STRING")]),
]

_FOCUS_NUMERIC = {"BilledCost", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "ListCost", "ListUnitPrice"}
_FOCUS_FLOAT = {"ConsumedQuantity", "PricingQuantity"}
_FOCUS_TIME = {"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"}


def focus_schema(header: list[str]) -> list[dict[str, Any]]:
    """The FOCUS table: NUMERIC costs, FLOAT quantities, TIMESTAMP periods, Tags as an array of {key, value, ...}."""
    out = []
    for name in header:
        if name == "Tags":
            out.append(_f("Tags", "RECORD", "REPEATED", [*_KV, _f("x_type", "STRING"), _f("x_inherited", "BOOLEAN"),
                                                         _f("x_namespace", "STRING")]))
        elif name in _FOCUS_NUMERIC:
            out.append(_f(name, "NUMERIC"))
        elif name in _FOCUS_FLOAT:
            out.append(_f(name, "FLOAT"))
        elif name in _FOCUS_TIME:
            out.append(_f(name, "TIMESTAMP"))
        else:
            out.append(_f(name, "STRING"))
    out.append(_f("x_ExportTime", "TIMESTAMP"))
    return out


# -- fixture rows --------------------------------------------------------------------------------------------------


def ndjson_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of every .json / .json.gz extract under folder, in file order."""
    rows: list[dict[str, Any]] = []
    for f in sorted(p for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz"))):
        raw = gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes()
        rows.extend(json.loads(line) for line in raw.decode().splitlines() if line.strip())
    return rows


def focus_rows(csv_path: Path, export_time: str = "2026-11-03 06:00:00 UTC") -> tuple[list[str], list[dict[str, Any]]]:
    with csv_path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = []
        for r in reader:
            row: dict[str, Any] = {k: (v if v != "" else None) for k, v in r.items()}
            tags = json.loads(r["Tags"]) if r.get("Tags") else {}
            row["Tags"] = [{"key": k, "value": v, "x_type": "label", "x_inherited": False} for k, v in tags.items()]
            row["x_ExportTime"] = export_time
            rows.append(row)
    return header, rows


def parse_ts(v: Any) -> datetime:
    s = str(v).strip().replace(" UTC", "+00:00").replace("Z", "+00:00")
    if "T" not in s:
        s = s.replace(" ", "T", 1)
    t = datetime.fromisoformat(s)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _micros(v: Any) -> str:
    t = parse_ts(v)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return str((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _cell(value: Any, fld: dict[str, Any]) -> Any:
    if fld.get("mode") == "REPEATED":
        return [{"v": _scalar(v, fld)} for v in (value or [])]
    return _scalar(value, fld)


def _scalar(value: Any, fld: dict[str, Any]) -> Any:
    if value is None:
        return None
    typ = fld["type"]
    if typ in ("RECORD", "STRUCT"):
        return {"f": [{"v": _cell(value.get(sub["name"]), sub)} for sub in fld["fields"]]}
    if typ == "TIMESTAMP":
        return _micros(value)
    if typ == "BOOLEAN":
        return "true" if value in (True, "true", "True") else "false"
    if typ == "FLOAT":
        return repr(float(value))
    if typ in ("INTEGER", "INT64"):
        return str(int(value))
    if typ in ("NUMERIC", "BIGNUMERIC"):
        return str(Decimal(str(value)))
    return str(value)


def to_fv(row: dict[str, Any], schema: list[dict[str, Any]]) -> dict[str, Any]:
    return {"f": [{"v": _cell(row.get(f["name"]), f)} for f in schema]}


# -- the server ----------------------------------------------------------------------------------------------------


@dataclass
class FakeTable:
    project: str
    dataset: str
    table: str
    schema: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    partitioning: dict[str, Any] | None = field(default_factory=lambda: {"type": "DAY"})
    table_type: str = "TABLE"
    location: str = "US"
    export_time_column: str = "export_time"


@dataclass
class Fault:
    method: str
    path: str  # regex searched in the request path
    status: int | str  # an HTTP status, or "drop"
    reason: str = ""
    message: str = ""
    body: dict[str, Any] | None = None  # the JSON answer as is (e.g. an OAuth error), instead of a BigQuery error
    query: str = ""  # regex searched in the query string too (e.g. "pageToken" for a later page)


@dataclass
class Canned:
    """A query's answer given as is: the first canned answer whose `match` is in the SQL wins."""

    match: str
    schema: list[dict[str, Any]]
    rows: list[dict[str, Any]]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    auth: str | None


class FakeBigQuery:
    def __init__(self, page_size: int = 7, token: str = "ya29.test-access-token"):
        self.tables: dict[tuple[str, str, str], FakeTable] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.faults: list[Fault] = []
        self.canned: list[Canned] = []
        self.log: list[Request] = []
        self.page_size = page_size
        self.token = token
        self.bytes_per_row = 1000
        self._lock = threading.Lock()
        self._http = LocalServer(self._handler(), start=False)
        self.url = self._http.url

    def start(self) -> FakeBigQuery:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def add_table(self, t: FakeTable) -> FakeTable:
        self.tables[(t.project, t.dataset, t.table)] = t
        return t

    def add_result(self, match: str, schema: list[dict[str, Any]], rows: list[dict[str, Any]]) -> Canned:
        """Answer queries whose text contains `match` with these rows (cells as in the table's rows)."""
        c = Canned(match, schema, rows)
        self.canned.append(c)
        return c

    # what the tests look at
    def queries(self, dry_run: bool | None = None) -> list[dict[str, Any]]:
        out = []
        for r in self.log:
            if r.method == "POST" and r.path.endswith("/jobs") and isinstance(r.body, dict):
                q = r.body.get("configuration", {})
                if dry_run is None or bool(q.get("dryRun")) == dry_run:
                    out.append(q)
        return out

    def requests(self, method: str, pattern: str) -> list[Request]:
        return [r for r in self.log if r.method == method and re.search(pattern, r.path)]

    # -- answers --
    def _table_resource(self, t: FakeTable) -> dict[str, Any]:
        res: dict[str, Any] = {
            "kind": "bigquery#table",
            "id": f"{t.project}:{t.dataset}.{t.table}",
            "tableReference": {"projectId": t.project, "datasetId": t.dataset, "tableId": t.table},
            "schema": {"fields": t.schema},
            "type": t.table_type,
            "location": t.location,
            "numRows": str(len(t.rows)),
        }
        if t.partitioning:
            res["timePartitioning"] = t.partitioning
        return res

    def _find_table(self, sql: str) -> FakeTable | None:
        m = re.search(r"FROM\s+`([^`]+)`", sql)
        if not m:
            return None
        parts = m.group(1).split(".")
        return self.tables.get((parts[0], parts[1], parts[2])) if len(parts) == 3 else None

    def _result(self, sql: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        canned = next((c for c in self.canned if c.match in sql), None)
        if canned is not None:
            return canned.schema, [to_fv(r, canned.schema) for r in canned.rows]
        t = self._find_table(sql)
        assert t is not None, sql
        if "COUNT(*) AS line_count" in sql:
            exp = [r.get(t.export_time_column) for r in t.rows if r.get(t.export_time_column)]
            schema = [_f("line_count", "INTEGER"), _f("max_export_time", "TIMESTAMP")]
            row = {"line_count": len(t.rows), "max_export_time": max(exp, key=parse_ts) if exp else None}
            return schema, [to_fv(row, schema)]
        select = sql.split("FROM", 1)[0]
        names = re.findall(r"`([^`]+)`", select)
        by_name = {f["name"]: f for f in t.schema}
        schema = [by_name[n] for n in names]
        return schema, [to_fv(r, schema) for r in t.rows]

    def _insert_job(self, project: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        cfg = body.get("configuration", {})
        sql = cfg.get("query", {}).get("query", "")
        t = self._find_table(sql)
        if t is None:
            return 404, _error(404, "notFound", "Not found: Table in the query")
        job_id = (body.get("jobReference") or {}).get("jobId") or uuid.uuid4().hex
        ref = {"projectId": project, "jobId": job_id, "location": t.location}
        stats = {"creationTime": "1700000000000", "startTime": "1700000000001", "endTime": "1700000000002",
                 "totalBytesProcessed": str(self.bytes_per_row * len(t.rows)),
                 "query": {"totalBytesProcessed": str(self.bytes_per_row * len(t.rows)), "cacheHit": False}}
        job = {"kind": "bigquery#job", "id": f"{project}:{t.location}.{job_id}", "jobReference": ref,
               "configuration": cfg, "status": {"state": "DONE"}, "statistics": stats}
        if cfg.get("dryRun"):
            return 200, job
        schema, rows = self._result(sql)
        with self._lock:
            self.jobs[job_id] = {"job": job, "schema": schema, "rows": rows}
        return 200, job

    def _query_results(self, job_id: str, qs: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        j = self.jobs.get(job_id)
        if j is None:
            return 404, _error(404, "notFound", f"Not found: Job {job_id}")
        rows = j["rows"]
        max_results = int(qs.get("maxResults", [self.page_size])[0])
        start = int(qs.get("pageToken", ["0"])[0])
        page = rows[start:start + min(max_results, self.page_size)] if max_results else []
        out: dict[str, Any] = {"kind": "bigquery#getQueryResultsResponse", "jobReference": j["job"]["jobReference"],
                               "jobComplete": True, "schema": {"fields": j["schema"]}, "totalRows": str(len(rows)),
                               "totalBytesProcessed": j["job"]["statistics"]["totalBytesProcessed"],
                               "cacheHit": False}
        if max_results:
            out["rows"] = page
            if start + len(page) < len(rows):
                out["pageToken"] = str(start + len(page))
        return 200, out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                u = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                qs = parse_qs(u.query)
                with server._lock:
                    server.log.append(Request(method, u.path, qs, body, self.headers.get("Authorization")))
                    fault = next((f for f in server.faults if f.method == method and re.search(f.path, u.path)
                                  and re.search(f.query, u.query)), None)
                    if fault:
                        server.faults.remove(fault)
                if fault is not None:
                    if fault.status == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    assert isinstance(fault.status, int)
                    return self._send(fault.status, fault.body or _error(fault.status, fault.reason, fault.message))
                if u.path == "/token" and method == "POST":
                    return self._send(200, {"access_token": server.token, "expires_in": 3600, "token_type": "Bearer"})
                m = re.fullmatch(r"/bigquery/v2/projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)", u.path)
                if m and method == "GET":
                    t = server.tables.get((m[1], m[2], m[3]))
                    if t is None:
                        return self._send(404, _error(404, "notFound", f"Not found: Table {m[1]}:{m[2]}.{m[3]}"))
                    return self._send(200, server._table_resource(t))
                m = re.fullmatch(r"/bigquery/v2/projects/([^/]+)/jobs", u.path)
                if m and method == "POST":
                    return self._send(*server._insert_job(m[1], body or {}))
                m = re.fullmatch(r"/bigquery/v2/projects/([^/]+)/jobs/([^/]+)", u.path)
                if m and method == "GET":
                    j = server.jobs.get(m[2])
                    if j is None:
                        return self._send(404, _error(404, "notFound", f"Not found: Job {m[2]}"))
                    return self._send(200, j["job"])
                m = re.fullmatch(r"/bigquery/v2/projects/([^/]+)/queries/([^/]+)", u.path)
                if m and method == "GET":
                    return self._send(*server._query_results(m[2], qs))
                return self._send(404, _error(404, "notFound", f"no route {method} {u.path}"))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        return Handler


def _error(code: int, reason: str, message: str) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              500: "INTERNAL", 503: "UNAVAILABLE"}.get(code, "UNKNOWN")
    errors = [{"message": message, "domain": "global", "reason": reason}] if reason else []
    return {"error": {"code": code, "message": message, "errors": errors, "status": status}}
