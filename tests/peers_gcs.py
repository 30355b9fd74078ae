"""A local Cloud Storage peer speaking the GCS JSON API the google-cloud-storage client uses (no emulator exists
here): ``GET /storage/v1/b/{bucket}/o`` listing with ``prefix``, ``pageToken`` and ``nextPageToken`` pages of
``page_size`` items (``name``, ``bucket``, ``size`` as a string, ``md5Hash``, ``crc32c``, ``generation``,
``updated``, ...), and media downloads ``GET /download/storage/v1/b/{bucket}/o/{object}?alt=media`` (or
``/storage/v1/b/...?alt=media``) honouring ``Range`` (206 with ``Content-Range``) and ``ifGenerationMatch`` (412),
with ``x-goog-generation`` / ``x-goog-hash`` headers.  Errors are the API's JSON ``{"error": {code, message,
errors: [{reason}]}}``.  Clients reach it through ``STORAGE_EMULATOR_HOST`` (the SDK's own variable: anonymous
credentials).  Every request is logged; ``deny`` answers 403 to every request, ``drop_after`` cuts one download."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from http_peer import LocalServer


@dataclass
class Obj:
    data: bytes
    generation: int
    updated: str = "2026-12-01T06:00:00.000Z"


@dataclass
class Logged:
    method: str
    path: str
    query: dict[str, list[str]]
    range: str | None
    status: int


@dataclass
class FakeGcs:
    page_size: int = 2
    buckets: dict[str, dict[str, Obj]] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    deny: bool = False
    # object name -> (n, bytes): the n-th media GET of it (1-based) drops the connection after that many bytes (once)
    drop_after: dict[str, tuple[int, int]] = field(default_factory=dict)
    _gets: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _gen: int = 1_700_000_000_000_000

    def start(self) -> FakeGcs:
        peer = self

        class Handler(_Handler):
            pass

        Handler.peer = peer
        self.server = LocalServer(Handler)
        self.url = self.server.url
        return self

    def stop(self) -> None:
        self.server.stop()

    def put(self, bucket: str, name: str, data: bytes) -> None:
        with self.lock:
            self._gen += 1
            self.buckets.setdefault(bucket, {})[name] = Obj(data, self._gen)

    def downloads(self) -> list[str]:
        """The object names of media GETs, in order."""
        with self.lock:
            return [unquote(r.path.rsplit("/o/", 1)[1]) for r in self.log
                    if r.method == "GET" and r.query.get("alt") == ["media"]]

    def listings(self) -> list[Logged]:
        with self.lock:
            return [r for r in self.log if r.path.endswith("/o") and r.method == "GET"]


def resource(bucket: str, name: str, o: Obj) -> dict[str, Any]:
    md5 = base64.b64encode(hashlib.md5(o.data).digest()).decode()  # noqa: S324 - the API's own field
    return {"kind": "storage#object", "id": f"{bucket}/{name}/{o.generation}", "name": name, "bucket": bucket,
            "generation": str(o.generation), "metageneration": "1", "contentType": "application/json",
            "size": str(len(o.data)), "md5Hash": md5, "etag": f"C{o.generation % 10_000_000}=",
            "timeCreated": o.updated, "updated": o.updated, "storageClass": "STANDARD",
            "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}/o/{quote(name, safe='')}",
            "mediaLink": f"https://storage.googleapis.com/download/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
                         f"?generation={o.generation}&alt=media"}


class _Handler(BaseHTTPRequestHandler):
    peer: FakeGcs
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _log(self, status: int) -> None:
        u = urlsplit(self.path)
        with self.peer.lock:
            self.peer.log.append(Logged(self.command, u.path, parse_qs(u.query), self.headers.get("Range"), status))

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self._log(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, reason: str, message: str) -> None:
        self._json(status, {"error": {"code": status, "message": message,
                                      "errors": [{"message": message, "domain": "global", "reason": reason}]}})

    def do_GET(self) -> None:  # noqa: N802
        u = urlsplit(self.path)
        q = parse_qs(u.query)
        path = u.path.removeprefix("/download")
        if self.peer.deny:
            return self._error(403, "forbidden", "anonymous caller does not have storage.objects.list access to "
                                                 "the Google Cloud Storage bucket. Permission 'storage.objects.list' "
                                                 "denied on resource (or it may not exist).")
        parts = path.split("/")
        # /storage/v1/b/{bucket}/o[/{object}]
        if len(parts) < 6 or parts[1:4] != ["storage", "v1", "b"] or parts[5] != "o":
            return self._error(404, "notFound", f"no route {u.path}")
        bucket = unquote(parts[4])
        objs = self.peer.buckets.get(bucket)
        if objs is None:
            return self._error(404, "notFound", "The specified bucket does not exist.")
        if len(parts) == 6:
            return self._list(bucket, objs, q)
        name = unquote("/".join(parts[6:]))
        o = objs.get(name)
        if o is None:
            return self._error(404, "notFound", f"No such object: {bucket}/{name}")
        if "ifGenerationMatch" in q and q["ifGenerationMatch"][0] != str(o.generation):
            return self._error(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")
        if q.get("alt") != ["media"]:
            return self._json(200, resource(bucket, name, o))
        self._media(name, o)

    def _list(self, bucket: str, objs: dict[str, Obj], q: dict[str, list[str]]) -> None:
        prefix = q.get("prefix", [""])[0]
        names = sorted(n for n in objs if n.startswith(prefix))
        start = int(q.get("pageToken", ["0"])[0] or 0)
        size = min(self.peer.page_size, int(q.get("maxResults", [str(self.peer.page_size)])[0]))
        page = names[start:start + size]
        doc: dict[str, Any] = {"kind": "storage#objects"}
        if page:
            doc["items"] = [resource(bucket, n, objs[n]) for n in page]
        if start + size < len(names):
            doc["nextPageToken"] = str(start + size)
        self._json(200, doc)

    def _media(self, name: str, o: Obj) -> None:
        data, status, first = o.data, 200, 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            lo, _, hi = rng[len("bytes="):].partition("-")
            first = int(lo or 0)
            last = min(int(hi), len(o.data) - 1) if hi else len(o.data) - 1
            if first >= len(o.data):
                self._log(416)
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data, status = o.data[first:last + 1], 206
        self._log(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-goog-generation", str(o.generation))
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{first + len(data) - 1}/{len(o.data)}")
        else:
            md5 = base64.b64encode(hashlib.md5(o.data).digest()).decode()  # noqa: S324
            self.send_header("x-goog-hash", f"md5={md5}")
        self.end_headers()
        with self.peer.lock:
            n = self.peer._gets[name] = self.peer._gets.get(name, 0) + 1
            nth, cut = self.peer.drop_after.get(name, (0, 0))
            if nth == n:
                del self.peer.drop_after[name]
        if nth == n:
            self.wfile.write(data[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data)
