"""A local Athena peer for the engine tests: the JSON 1.1 protocol the real boto3 client speaks.

moto's Athena (5.x) runs no SQL, answers every GetQueryExecution with SUCCEEDED (no FAILED, no
DataScannedInBytes) and returns canned results in one page (NextToken ignored), so it cannot show the
client's polling, paging or failure handling.  This server answers ``POST /`` with
``X-Amz-Target: AmazonAthena.<Op>`` for StartQueryExecution, GetQueryExecution, GetQueryResults and
StopQueryExecution:

* each query takes the next queued :class:`Canned` answer: the states GetQueryExecution walks through,
  the result rows (strings or None, served as ``VarCharValue`` cells, header row first, ``page_size``
  rows a page with a NextToken), the bytes scanned, or a failure reason;
* with an S3 client (moto's, from peers_aws), the output location's bucket must exist, as on AWS, and the
  result is written there as ``<OutputLocation><QueryExecutionId>.csv``;
* every request body is logged by operation.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from http_peer import LocalServer


@dataclass
class Canned:
    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, Athena type)
    rows: list[list[str | None]] = field(default_factory=list)
    states: tuple[str, ...] = ("QUEUED", "RUNNING", "SUCCEEDED")
    reason: str | None = None  # StateChangeReason when the last state is FAILED / CANCELLED
    scanned: int = 0
    page_size: int = 1000


@dataclass
class _Query:
    id: str
    request: dict[str, Any]
    canned: Canned
    polls: int = 0

    @property
    def state(self) -> str:
        return self.canned.states[min(self.polls, len(self.canned.states) - 1)]


class AthenaPeer:
    def __init__(self, s3: Any = None) -> None:
        self.s3 = s3
        self.queue: deque[Canned] = deque()
        self.queries: dict[str, _Query] = {}
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        peer = self

        class Handler(_Handler):
            pass

        Handler.peer = peer
        self.http = LocalServer(Handler)
        self.url = self.http.url

    def stop(self) -> None:
        self.http.stop()

    def requests(self, op: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for o, body in self.log if o == op]

    # -- the operations -------------------------------------------------------------------------------
    def handle(self, op: str, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.log.append((op, req))
            if op == "StartQueryExecution":
                return self._start(req)
            q = self.queries.get(str(req.get("QueryExecutionId")))
            if q is None:
                return 400, {"__type": "InvalidRequestException", "Message": "QueryExecution not found"}
            if op == "GetQueryExecution":
                return 200, self._execution(q)
            if op == "GetQueryResults":
                return self._results(q, req)
            if op == "StopQueryExecution":
                q.canned.states = ("CANCELLED",)
                return 200, {}
        return 400, {"__type": "UnknownOperationException", "Message": op}

    def _start(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        out = req.get("ResultConfiguration", {}).get("OutputLocation", "")
        if self.s3 is not None:
            bucket = out.removeprefix("s3://").split("/", 1)[0]
            try:
                self.s3.head_bucket(Bucket=bucket)
            except Exception:  # noqa: BLE001 - any S3 answer but 200
                return 400, {"__type": "InvalidRequestException",
                             "Message": f"Unable to verify/create output bucket {bucket}"}
        canned = self.queue.popleft() if self.queue else Canned()
        q = _Query(str(uuid.uuid4()), req, canned)
        self.queries[q.id] = q
        if self.s3 is not None and canned.states[-1] == "SUCCEEDED":
            bucket, _, prefix = out.removeprefix("s3://").partition("/")
            buf = io.StringIO()
            w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
            w.writerow([n for n, _ in canned.columns])
            w.writerows([["" if v is None else v for v in r] for r in canned.rows])
            self.s3.put_object(Bucket=bucket, Key=f"{prefix}{q.id}.csv", Body=buf.getvalue().encode())
        return 200, {"QueryExecutionId": q.id}

    def _execution(self, q: _Query) -> dict[str, Any]:
        state = q.state
        q.polls += 1
        status: dict[str, Any] = {"State": state, "SubmissionDateTime": time.time()}
        if state in ("FAILED", "CANCELLED") and q.canned.reason:
            status["StateChangeReason"] = q.canned.reason
        out = q.request.get("ResultConfiguration", {}).get("OutputLocation", "")
        return {"QueryExecution": {
            "QueryExecutionId": q.id, "Query": q.request.get("QueryString"), "StatementType": "DML",
            "ResultConfiguration": {"OutputLocation": f"{out}{q.id}.csv"},
            "QueryExecutionContext": q.request.get("QueryExecutionContext", {}),
            "Status": status, "WorkGroup": q.request.get("WorkGroup", "primary"),
            "Statistics": {"DataScannedInBytes": q.canned.scanned if state == "SUCCEEDED" else 0},
        }}

    def _results(self, q: _Query, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if q.state != "SUCCEEDED":
            return 400, {"__type": "InvalidRequestException", "Message": f"Query has not yet finished. "
                         f"Current state: {q.state}"}
        c = q.canned
        header = [[n for n, _ in c.columns]]
        rows = header + c.rows
        start = int(req.get("NextToken") or 0)
        size = min(int(req.get("MaxResults") or 1000), c.page_size)
        page = rows[start:start + size]
        doc: dict[str, Any] = {"ResultSet": {
            "Rows": [{"Data": [{} if v is None else {"VarCharValue": v} for v in r]} for r in page],
            "ResultSetMetadata": {"ColumnInfo": [
                {"CatalogName": "hive", "Name": n, "Label": n, "Type": t, "Nullable": "UNKNOWN",
                 "CaseSensitive": t == "varchar"} for n, t in c.columns]},
        }, "UpdateCount": 0}
        if start + size < len(rows):
            doc["NextToken"] = str(start + size)
        return 200, doc


class _Handler(BaseHTTPRequestHandler):
    peer: AthenaPeer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        service, _, op = str(self.headers.get("X-Amz-Target")).partition(".")
        if service != "AmazonAthena":
            status, doc = 400, {"__type": "UnknownOperationException", "Message": service}
        else:
            status, doc = self.peer.handle(op, req)
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        if status >= 400:
            self.send_header("x-amzn-ErrorType", str(doc.get("__type")))
        self.end_headers()
        self.wfile.write(body)
