"""The one way the protocol fakes serve HTTP: a threading server on 127.0.0.1, a free port, a daemon thread."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer:
    """``handler`` served on 127.0.0.1 (a port the OS picks) until :meth:`stop`; ``tls``: serve HTTPS."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None,
                 start: bool = True) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.url = f"http{'s' if tls else ''}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
