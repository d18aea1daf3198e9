"""The client_abort fault's clients: started all at once by default, or spread evenly over `over_s` so that one
freeze of the host at the injection cannot hold every client past its moment to hang up (the real vLLM drill of
2026-12-07 11:43: a 1.56 s freeze, 16 of 24 answers finished whole, no requests_aborted)."""

from __future__ import annotations

import http.server
import threading
import time
from types import SimpleNamespace

import pytest

from servewatch.drill.faults.client_abort import ClientAbort


class _Streaming(http.server.BaseHTTPRequestHandler):
    arrivals: list[float] = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).arrivals.append(time.monotonic())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(b"data: {}\n\n" * 8)
            self.wfile.flush()
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Streaming.arrivals = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Streaming)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _run(server, params):
    fault = ClientAbort(SimpleNamespace(params=params, hold_s=2.0))
    ctx = SimpleNamespace(host="127.0.0.1", port=server.server_address[1], model="m")
    started = time.monotonic()
    fault.inject(ctx)
    fault.revert(ctx)
    return fault, sorted(t - started for t in _Streaming.arrivals)


def test_the_clients_start_spread_over_over_s(server):
    fault, arrivals = _run(server, {"requests": 4, "output_tokens": 8, "over_s": 1.2})
    assert fault.facts == {"aborted": 4, "not_started": 0}
    # starts at 0, 0.3, 0.6 and 0.9 s: each at or after its place, and the last one not before 0.9 s
    for i, at in enumerate(arrivals):
        assert at >= 0.3 * i, arrivals
    assert arrivals[-1] - arrivals[0] >= 0.9 - 0.01


def test_without_over_s_they_start_at_once(server):
    fault, arrivals = _run(server, {"requests": 4, "output_tokens": 8})
    assert fault.facts == {"aborted": 4, "not_started": 0}
    assert arrivals[-1] - arrivals[0] < 0.3       # no client waits for a place in a spread (0.3 s apart above)


def test_over_s_is_a_number():
    with pytest.raises(ValueError, match="parameter 'over_s' must be a number"):
        ClientAbort.check_params({"over_s": "6"})


def test_each_client_leaves_at_its_first_bytes_without_waiting(server, monkeypatch):
    # Every moment a client waits after its first bytes is one in which a freeze of the drill's process lets the
    # engine finish the answer whole: with the clients at once (no over_s), nothing of theirs sleeps.
    import servewatch.drill.faults.client_abort as module

    def no_sleep(seconds):
        raise AssertionError(f"a client waited {seconds} s")

    monkeypatch.setattr(module.time, "sleep", no_sleep)
    fault, _ = _run(server, {"requests": 3, "output_tokens": 8})
    assert fault.facts == {"aborted": 3, "not_started": 0}
