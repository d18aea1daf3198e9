"""A local /metrics server with one path per scrape failure kind, for the three readers' tests.

`FAILING` maps each failure kind to how to provoke it: a prefix on the server (its URL is
base + prefix + "/metrics", read with the bounds below), or None for `connect` (a port nobody listens on), or
NO_SUCH_HOST for `dns` (a host name no resolver knows: .invalid is reserved for that).
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import FIXTURES

VLLM = (FIXTURES / "metrics" / "vllm_kv_pressure_t0.prom").read_bytes()
MAX_BYTES = 200_000           # the fixture (51 KB) fits; /huge does not
MAX_SERIES = 1_000            # the fixture (430 series) fits; /many does not
TIMEOUT_S = 0.5


def many_engines(engines: int) -> bytes:
    """The vLLM fixture with `engines - 1` more engines that only report a running gauge."""
    lines = VLLM.decode().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running{")) + 1
    extra = [f'vllm:num_requests_running{{engine="{i}",model_name="tiny"}} 0.0' for i in range(1, engines)]
    return "\n".join(lines[:at] + extra + lines[at:]).encode()


BODIES = {
    "": (200, VLLM),
    "/unavailable": (503, b"busy\n"),
    "/huge": (200, b"# padding\n" * 30_000),
    "/many": (200, many_engines(MAX_SERIES)),
    "/html": (200, b"<html><body>hello</body></html>\n"),
    "/other": (200, b"# TYPE up gauge\nup 1\n"),
}
NO_SUCH_HOST = "http://servewatch-no-such-host.invalid:9"
FAILING = {                      # failure kind -> the prefix that provokes it (None: nobody listening)
    "connect": None,
    "dns": NO_SUCH_HOST,
    "timeout": "/slow",
    "http_status": "/unavailable",
    "protocol": "/garbage",
    "too_large": "/huge",
    "too_many_series": "/many",
    "parse": "/html",
    "no_engine_metrics": "/other",
}


class _Handler(BaseHTTPRequestHandler):
    release: threading.Event

    def do_GET(self):  # noqa: N802
        prefix = self.path.removesuffix("/metrics")
        if prefix == "/slow":
            self.release.wait(30)        # answers when the test is over
            return
        if prefix == "/garbage":
            self.wfile.write(b"garbage\r\n\r\n")
            return
        if prefix == "/endless":        # sample lines without end, no length: only a bound stops the reader
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            line = b'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n' * 1000
            try:
                while not self.release.is_set():
                    self.wfile.write(line)
            except OSError:
                pass
            self.close_connection = True
            return
        status, body = BODIES[prefix]
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def scrape_server():
    """The base URL (http://127.0.0.1:port) of a server answering every prefix in BODIES and FAILING."""
    release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"release": release}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def url_for(base: str, kind: str) -> str:
    """The /metrics URL that fails with `kind`."""
    prefix = FAILING[kind]
    if prefix == NO_SUCH_HOST:
        return prefix + "/metrics"
    return (closed_port_url() if prefix is None else base + prefix) + "/metrics"
