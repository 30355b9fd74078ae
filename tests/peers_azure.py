"""Local peers for the Azure pull tests: Azurite, a TCP proxy that can drop connections, a Cost Management fake.

* Azurite (npm ``azurite`` 3.35.0, from package.json) is the real Blob Storage emulator.
* ``CutProxy`` sits between the client and Azurite: it logs every request line (and ranges),
  and can cut the connection after N bytes of a response to a chosen blob.
* ``ArmFake`` serves the Resource Manager JSON of ``Microsoft.CostManagement/exports`` (list,
  get with ``$expand=runHistory``, ``runHistory``) over https with a certificate made here, so
  the real ``CostManagementClient`` with a bearer token talks to it as it would to ARM.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from http_peer import LocalServer

from support import ROOT

ACCOUNT = "devstoreaccount1"
# The published Azurite / storage emulator development key (not a secret anywhere).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def ensure_azurite() -> Path:
    """node_modules/.bin/azurite-blob, running `npm ci` first when node_modules is missing."""
    exe = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("Azurite is needed for the Azure pull tests: install Node.js 20 and npm, then run `npm ci`")
    proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not exe.exists():
        raise RuntimeError(
            "`npm ci` failed, so Azurite (npm package azurite 3.35.0, see package.json) is not available for the "
            f"Azure pull tests:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return exe


class Azurite:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Azurite:
        exe = ensure_azurite()
        self.proc = subprocess.Popen(
            [str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence", "--silent",
             "--disableTelemetry", "--skipApiVersionCheck"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            wait_port(self.port)
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def connection_string(port: int, key: str = DEV_KEY) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};")


def seed(service: Any, container: str, tree: Path) -> list[str]:
    """Upload every file under tree (a ``costexports`` folder) as blobs named by their relative path."""
    cc = service.get_container_client(container)
    if not cc.exists():
        cc.create_container()
    names = []
    for f in sorted(p for p in tree.rglob("*") if p.is_file()):
        name = f.relative_to(tree).as_posix()
        cc.upload_blob(name, f.read_bytes(), overwrite=True)
        names.append(name)
    return names


# -- a TCP proxy that logs requests and drops connections on demand -------------------

_REQ = re.compile(rb"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.DOTALL)


@dataclass
class Request:
    method: str
    path: str
    range: str


@dataclass
class CutProxy:
    """127.0.0.1:port -> upstream; ``cut(marker, after, times)`` drops responses to requests naming marker."""

    upstream: int
    port: int = 0
    log: list[Request] = field(default_factory=list)
    marker: bytes = b""
    after: int = 0
    cuts_left: int = 0
    cuts_done: int = 0
    skip: int = 0

    def start(self) -> CutProxy:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop = True
        self.sock.close()

    def cut(self, marker: str, after: int, times: int = 1, skip: int = 0) -> None:
        """Drop the responses to `times` GETs naming marker after `after` bytes, letting the first `skip` pass."""
        self.marker, self.after, self.cuts_left, self.skip = marker.encode(), after, times, skip

    def gets(self, needle: str = "") -> list[Request]:
        """GETs of blobs (not listings) whose path contains needle."""
        return [r for r in self.log if r.method == "GET" and "comp=list" not in r.path and needle in r.path]

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        state = {"armed": False, "sent": 0}

        def c2u() -> None:
            buf = b""
            try:
                while data := client.recv(65536):
                    buf += data
                    while m := _REQ.search(buf):
                        headers = m.group(3).decode("latin-1")
                        rng = re.search(r"(?im)^x-ms-range:\s*(\S+)", headers) or re.search(r"(?im)^range:\s*(\S+)",
                                                                                             headers)
                        path = m.group(2).decode()
                        with self._lock:
                            self.log.append(Request(m.group(1).decode(), path, rng.group(1) if rng else ""))
                            if (self.cuts_left > 0 and self.marker and self.marker in m.group(2)
                                    and m.group(1) == b"GET"):
                                if self.skip > 0:
                                    self.skip -= 1
                                else:
                                    state["armed"], state["sent"] = True, 0
                                    self.cuts_left -= 1
                        buf = buf[m.end():]
                    up.sendall(data)
            except OSError:
                pass
            finally:
                _close(up)

        def u2c() -> None:
            try:
                while data := up.recv(65536):
                    if state["armed"]:
                        room = self.after - state["sent"]
                        if len(data) >= room:
                            client.sendall(data[:room])
                            self.cuts_done += 1
                            client.shutdown(socket.SHUT_RDWR)
                            return
                        state["sent"] += len(data)
                    client.sendall(data)
            except OSError:
                pass
            finally:
                _close(client)
                _close(up)

        threading.Thread(target=c2u, daemon=True).start()
        threading.Thread(target=u2c, daemon=True).start()


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.close()


# -- Cost Management (ARM) fake -------------------------------------------------------


def make_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "arm-cert.pem", folder / "arm-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class FakeCredential:
    """A TokenCredential handing out a fixed bearer token."""

    token = "fake-arm-token-0123456789"

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)


@dataclass
class ArmFake:
    """``/{scope}/providers/Microsoft.CostManagement/exports[/{name}[/runHistory]]`` as ARM answers them."""

    folder: Path
    scope: str = "/subscriptions/3f2a1b0c-0000-4000-8000-0000000000a1"
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> export JSON (without runHistory)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> run items
    fail_next: list[int] = field(default_factory=list)  # statuses to answer before serving normally
    deny: bool = False
    log: list[str] = field(default_factory=list)

    def start(self) -> ArmFake:
        self.cert, key = make_cert(self.folder)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                fake.log.append(self.path)
                if self.headers.get("Authorization") != f"Bearer {FakeCredential.token}":
                    return self._json(401, {"error": {"code": "AuthenticationFailed", "message": "no token"}})
                if fake.fail_next:
                    status = fake.fail_next.pop(0)
                    return self._json(status, {"error": {"code": "ServiceUnavailable", "message": "try again"}})
                if fake.deny:
                    return self._json(403, {"error": {"code": "AuthorizationFailed", "message": (
                        "The client does not have authorization to perform action "
                        "'Microsoft.CostManagement/exports/read'")}})
                u = urlsplit(self.path)
                q = parse_qs(u.query)
                if "api-version" not in q:
                    return self._json(400, {"error": {"code": "MissingApiVersionParameter", "message": "x"}})
                m = re.fullmatch(r"(.*)/providers/Microsoft\.CostManagement/exports(?:/([^/]+)(/runHistory)?)?",
                                 u.path)
                if not m or m.group(1) != fake.scope:
                    return self._json(404, {"error": {"code": "NotFound", "message": "no such scope"}})
                name, hist = m.group(2), m.group(3)
                if name is None:
                    return self._json(200, {"value": [fake._export(n, last_only=True) for n in fake.exports]})
                if name not in fake.exports:
                    return self._json(404, {"error": {"code": "NotFound", "message": f"export {name} not found"}})
                if hist:
                    return self._json(200, {"value": fake.runs.get(name, [])})
                expand = q.get("$expand", [""])[0]
                return self._json(200, fake._export(name, runs=expand == "runHistory"))

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-ms-request-id", "fake")
                self.end_headers()
                self.wfile.write(data)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, key)
        self.http = LocalServer(Handler, tls=ctx)
        self.port = self.http.port
        return self

    @property
    def url(self) -> str:
        return self.http.url

    def stop(self) -> None:
        self.http.stop()

    def _export(self, name: str, runs: bool = False, last_only: bool = False) -> dict[str, Any]:
        body = json.loads(json.dumps(self.exports[name]))
        items = self.runs.get(name, [])
        if runs:
            body["properties"]["runHistory"] = {"value": items[:10]}
        elif last_only and items:
            body["properties"]["runHistory"] = {"value": items[:1]}
        return body

    def add_export(self, name: str, container: str, root: str, account: str = ACCOUNT) -> None:
        self.exports[name] = {
            "id": f"{self.scope}/providers/Microsoft.CostManagement/exports/{name}",
            "name": name,
            "type": "Microsoft.CostManagement/exports",
            "eTag": '"1d"',
            "properties": {
                "format": "Csv",
                "partitionData": True,
                "dataOverwriteBehavior": "CreateNewReport",
                "compressionMode": "None",
                "deliveryInfo": {"destination": {
                    "type": "AzureBlob",
                    "resourceId": f"{self.scope}/resourceGroups/rg-finops/providers/Microsoft.Storage/storageAccounts/"
                                  f"{account}",
                    "container": container,
                    "rootFolderPath": root,
                }},
                "definition": {"type": "ActualCost", "timeframe": "MonthToDate", "dataSet": {"granularity": "Daily"}},
                "schedule": {"status": "Active", "recurrence": "Daily"},
            },
        }
        self.runs.setdefault(name, [])

    def add_run(self, name: str, run_id: str, status: str, submitted: str, start: str | None, end: str | None,
                manifest: str | None = None, file_name: str | None = None) -> None:
        props: dict[str, Any] = {
            "executionType": "Scheduled",
            "status": status,
            "submittedBy": "System",
            "submittedTime": submitted,
            "processingStartTime": submitted,
            "processingEndTime": submitted,
            "runSettings": {k: v for k, v in self.exports[name]["properties"].items() if k != "schedule"},
        }
        if start is not None and end is not None:
            props.update(startDate=start, endDate=end)
        if manifest is not None:
            props["manifestFile"] = manifest
        if file_name is not None:
            props["fileName"] = file_name
        if status != "Completed":
            props["error"] = {"code": "ExportFailed", "message": "the export run failed"}
        self.runs[name].insert(0, {
            "id": f"{self.scope}/providers/Microsoft.CostManagement/exports/{name}/Run/{run_id}",
            "name": run_id,
            "type": "Microsoft.CostManagement/reports/Run",
            "properties": props,
        })
        self.runs[name].sort(key=lambda r: r["properties"]["submittedTime"], reverse=True)


def environ_ca(cert: Path) -> dict[str, str]:
    return {**os.environ, "REQUESTS_CA_BUNDLE": str(cert)}
