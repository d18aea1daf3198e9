"""`servewatch serve` from the command line: bad input is one line on stderr and exit 2; SIGTERM stops
it cleanly."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request

SERVE = [sys.executable, "-m", "servewatch", "serve"]


def cli(*args, timeout=60):
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=timeout)


def one_line(result) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_config_names_file_line_and_key(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text("interval: 1s\ntargets:\n  - url: http://127.0.0.1:8000\n    nmae: a\n")
    assert one_line(cli("--config", str(path))) == f"servewatch serve: {path}:4: targets[0].nmae: unknown key " \
                                                   "(known: url, name, pid, log_file, proxy, gpu_metrics, prefill, decode)"


def test_bad_inputs_are_one_line(tmp_path):
    assert "no targets" in one_line(cli())
    assert "not an http(s) URL" in one_line(cli("--target", "ftp://x:1"))
    assert "--shard" in one_line(cli("--target", "http://127.0.0.1:1", "--shard", "2/2"))
    assert "no such file_sd file" in one_line(cli("--file-sd", str(tmp_path / "none.json")))
    assert "not an http(s) URL" in one_line(cli("--target", "http://127.0.0.1:1", "--alertmanager", "am:9093"))


def test_listen_address_in_use_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line(cli("--target", "http://127.0.0.1:1", "--listen", f"127.0.0.1:{port}"))
    assert line.startswith(f"servewatch serve: --listen 127.0.0.1:{port}: ") and "in use" in line


def test_runs_until_sigterm_and_serves_metrics():
    proc = subprocess.Popen([*SERVE, "--target", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
                             "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.match(r"servewatch serve: listening on http://127\.0\.0\.1:(\d+), watching 1 target\(s\)$", line)
        assert match, line
        with urllib.request.urlopen(f"http://127.0.0.1:{match[1]}/metrics", timeout=10) as response:
            assert b'servewatch_target_up{target="127.0.0.1:1"}' in response.read()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr       # 128 + SIGTERM, after an orderly stop
    assert stderr.strip().endswith("servewatch serve: stopped by SIGTERM: no --out given, no bundle written")


def test_a_bad_detector_setting_is_one_line():
    line = one_line(cli("--target", "http://127.0.0.1:1", "--set", "stall.nope=3"))
    assert line.startswith("servewatch serve: --set: unknown detector setting 'stall.nope'")
