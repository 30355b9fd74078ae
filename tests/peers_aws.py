"""Local AWS peers for the pull tests: moto's S3 server behind a small front server.

The front server (127.0.0.1, free port) is what boto3 talks to (``endpoint_url``):

* JSON 1.1 POSTs with ``X-Amz-Target: AWSBillingAndCostManagementDataExports.<Op>`` (ListExports,
  GetExport) or ``AWSOrigamiServiceGatewayService.DescribeReportDefinitions`` are answered here,
  shaped like botocore's service models (moto has neither service);
* everything else is forwarded to moto's S3, with faults injected on request: an error status
  (503 SlowDown, 403 AccessDenied), or a connection dropped after N body bytes;
* every request is logged (method, path, Range header, X-Amz-Target, status).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3
from botocore.config import Config
from http_peer import LocalServer
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
DUMMY = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass
class Fault:
    """Applied to requests whose method matches and whose path contains ``path``."""

    path: str
    method: str = "GET"
    status: int = 0  # answer this status (with an S3 XML error) instead of forwarding
    code: str = "SlowDown"
    drop_after: int | None = None  # forward, but close the connection after this many body bytes
    times: int = 1  # how many requests it hits (-1: all)

    def hits(self, method: str, path: str) -> bool:
        return self.times != 0 and method == self.method and self.path in unquote(path)


@dataclass
class Req:
    method: str
    path: str
    range: str | None
    target: str | None
    status: int
    sent: int = 0

    @property
    def key_path(self) -> str:
        return unquote(urlsplit(self.path).path)


@dataclass
class PeerState:
    exports: list[dict[str, Any]] = field(default_factory=list)  # GetExport "Export" documents
    reports: list[dict[str, Any]] = field(default_factory=list)  # ReportDefinition documents
    deny_discovery: bool = False
    faults: list[Fault] = field(default_factory=list)
    log: list[Req] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class AwsPeer:
    def __init__(self) -> None:
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        self.moto_host, self.moto_port = self.moto.get_host_and_port()
        self.state = PeerState()
        peer = self

        class Handler(_Front):
            pass

        Handler.peer = peer
        self.front = LocalServer(Handler)
        self.url = self.front.url

    def stop(self) -> None:
        self.front.stop()
        self.moto.stop()

    # -- helpers for the tests --------------------------------------------------------------------
    def s3(self) -> Any:
        """A client straight to moto (no faults, not logged): for seeding."""
        return boto3.client("s3", endpoint_url=f"http://{self.moto_host}:{self.moto_port}", region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}), **DUMMY)

    def reset(self) -> None:
        conn = http.client.HTTPConnection(self.moto_host, self.moto_port, timeout=10)
        conn.request("POST", "/moto-api/reset")
        conn.getresponse().read()
        conn.close()
        self.state.exports.clear()
        self.state.reports.clear()
        self.state.faults.clear()
        self.state.log.clear()
        self.state.deny_discovery = False

    def seed(self, bucket: str, folder: Path, under: str = "") -> list[str]:
        """Upload every file under folder with its relative path (after ``under``) as the key."""
        s3 = self.s3()
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
        keys = []
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = under + f.relative_to(folder).as_posix()
            s3.put_object(Bucket=bucket, Key=key, Body=f.read_bytes())
            keys.append(key)
        return keys

    def gets(self, part: str = "") -> list[Req]:
        """Object GETs (not listings) whose key contains part."""
        with self.state.lock:
            return [r for r in self.state.log if r.method == "GET" and "list-type" not in r.path
                    and "?" not in r.path.replace("?x-id=GetObject", "") and part in r.key_path]

    def targets(self) -> list[str]:
        with self.state.lock:
            return [r.target for r in self.state.log if r.target]


class _Front(BaseHTTPRequestHandler):
    peer: AwsPeer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _log(self, status: int, target: str | None = None, sent: int = 0) -> None:
        with self.peer.state.lock:
            self.peer.state.log.append(Req(self.command, self.path, self.headers.get("Range"), target, status, sent))

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._forward()

    def do_HEAD(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        target = self.headers.get("X-Amz-Target")
        if target:
            self._json_api(target)
        else:
            self._forward()

    # -- cur and bcm-data-exports -----------------------------------------------------------------
    def _json_api(self, target: str) -> None:
        st = self.peer.state
        req = json.loads(self._body() or b"{}")
        service, _, op = target.partition(".")

        def reply(status: int, doc: dict[str, Any]) -> None:
            self._log(status, target)
            extra = {"x-amzn-RequestId": "00000000-0000-4000-8000-000000000000"}
            if status >= 400:
                extra["x-amzn-ErrorType"] = str(doc.get("__type"))
            self._send(status, json.dumps(doc).encode(), "application/x-amz-json-1.1", extra)

        if st.deny_discovery:
            return reply(400, {"__type": "AccessDeniedException",
                               "Message": f"User: arn:aws:iam::123456789012:user/ro is not authorized to perform: {op}"})
        if service == "AWSBillingAndCostManagementDataExports" and op == "ListExports":
            return reply(200, {"Exports": [
                {"ExportArn": e["ExportArn"], "ExportName": e["Name"],
                 "ExportStatus": {"StatusCode": "HEALTHY", "LastRefreshedAt": "2026-10-03T04:17:00Z"}} for e in st.exports]})
        if service == "AWSBillingAndCostManagementDataExports" and op == "GetExport":
            for e in st.exports:
                if e["ExportArn"] == req.get("ExportArn"):
                    return reply(200, {"Export": e, "ExportStatus": {"StatusCode": "HEALTHY",
                                                                     "CreatedAt": "2026-09-01T00:00:00Z",
                                                                     "LastRefreshedAt": "2026-10-03T04:17:00Z"}})
            return reply(400, {"__type": "ResourceNotFoundException", "Message": "export not found",
                               "ResourceId": str(req.get("ExportArn")), "ResourceType": "export"})
        if service == "AWSOrigamiServiceGatewayService" and op == "DescribeReportDefinitions":
            return reply(200, {"ReportDefinitions": st.reports})
        return reply(400, {"__type": "UnknownOperationException", "Message": target})

    # -- S3 through moto, with faults -------------------------------------------------------------
    def _forward(self) -> None:
        st = self.peer.state
        body = self._body()
        fault = None
        with st.lock:
            for f in st.faults:
                if f.hits(self.command, self.path):
                    fault = f
                    if f.times > 0:
                        f.times -= 1
                    break
        if fault is not None and fault.status:
            xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{fault.code}</Code>"
                   f"<Message>injected {fault.code}</Message><RequestId>FAULT</RequestId></Error>").encode()
            self._log(fault.status)
            self._send(fault.status, xml, "application/xml")
            return
        conn = http.client.HTTPConnection(self.peer.moto_host, self.peer.moto_port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "server", "date"):
                self.send_header(k, v)
        length = int(resp.getheader("Content-Length") or len(data)) if self.command == "HEAD" else len(data)
        self.send_header("Content-Length", str(length))
        if fault is not None and fault.drop_after is not None and self.command == "GET":
            self.end_headers()
            self.wfile.write(data[: fault.drop_after])
            self.wfile.flush()
            self._log(resp.status, sent=min(len(data), fault.drop_after))
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._log(resp.status, sent=len(data))
