"""`servewatch inspect`: the CLI contract on files and URLs, and its one-line errors."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servewatch.cli import main
from tests.conftest import FIXTURES

KV = str(FIXTURES / "metrics" / "vllm_kv_pressure_t0.prom")
SGLANG = str(FIXTURES / "metrics" / "synthetic_from_registration_code.prom")


def run_json(capsys, *argv):
    code = main(["inspect", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_vllm_fixture_json_has_the_documented_shape_and_itl_blindness(capsys):
    code, report = run_json(capsys, KV)
    assert code == 0
    assert report["dialect"] == "vllm" and report["generation"] == "vllm-0.32"
    [engine] = report["engines"]
    assert engine["waiting"] == 9 and engine["running"] == 7
    assert engine["kv_usage"] == pytest.approx(0.8889, abs=1e-4)
    assert engine["counters"]["steps"] == 10376
    itl = engine["histograms"]["itl"]
    assert itl["blind"] is True
    assert itl["first_bucket_fraction"] > 0.99
    assert itl["mean_s"] < itl["p50_s"] < itl["p99_s"] < 0.01  # the quantiles sit inside the first bucket
    assert engine["histograms"]["e2e"]["blind"] is False
    assert any(f["histogram"] == "itl" for f in report["findings"])


def test_sglang_fixture_is_recognised(capsys):
    code, report = run_json(capsys, SGLANG)
    assert code == 0 and report["dialect"] == "sglang"
    [engine] = report["engines"]
    assert (engine["running"], engine["waiting"], engine["kv_usage"]) == (1.0, 0.0, 0.01)


def test_human_output_names_the_finding(capsys):
    assert main(["inspect", KV]) == 0
    out = capsys.readouterr().out
    assert "vllm" in out and "BLIND" in out and "finding ITL" in out


class _Handler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802
        if self.path != "/metrics":      # as vLLM and SGLang: the exposition lives at /metrics only
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(body: bytes) -> str:
        handler = type("H", (_Handler,), {"body": body})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/metrics"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_url_source_is_fetched_once(serve, capsys):
    url = serve(open(KV, "rb").read())
    code, report = run_json(capsys, url)
    assert code == 0 and report["engines"][0]["waiting"] == 9


@pytest.mark.parametrize("tail", ["", "/"])
def test_a_base_url_reads_its_metrics(serve, capsys, tail):
    url = serve(open(KV, "rb").read()).removesuffix("/metrics") + tail
    code, report = run_json(capsys, url)
    assert code == 0 and report["engines"][0]["waiting"] == 9


def test_a_reader_that_goes_away_is_no_traceback(monkeypatch, capsys):
    """`servewatch inspect --json URL | head -c 1`: stdout's reader is gone; exit 1 without a word."""
    import os
    import sys

    read, write = os.pipe()
    os.close(read)                             # the reader went away
    gone = open(write, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", gone)
    try:
        assert main(["inspect", KV, "--json"]) == 1
    finally:
        gone.close()
    assert capsys.readouterr().err == ""


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_dead_url_is_one_line_and_nonzero(capsys):
    import socket
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["inspect", f"http://127.0.0.1:{port}/metrics"]) == 2
    assert "connection refused" in one_error_line(capsys)


def test_html_body_is_not_a_prometheus_exposition(serve, capsys):
    url = serve(b"<html><body>hello</body></html>\n")
    assert main(["inspect", url]) == 2
    assert "line 1" in one_error_line(capsys)


def test_oversized_body_is_refused(serve, capsys):
    url = serve(open(KV, "rb").read())
    assert main(["inspect", url, "--max-bytes", "1000"]) == 2
    assert "1,000-byte bound" in one_error_line(capsys)


def test_missing_file(capsys, tmp_path):
    assert main(["inspect", str(tmp_path / "nope.prom")]) == 2
    assert "nope.prom" in one_error_line(capsys)


def test_prometheus_text_without_engine_metrics(tmp_path, capsys):
    path = tmp_path / "other.prom"
    path.write_text("# TYPE up gauge\nup 1\n")
    assert main(["inspect", str(path)]) == 2
    assert "no vLLM or SGLang metrics" in one_error_line(capsys)
