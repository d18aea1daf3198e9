"""A stop loses nothing (servewatch.stopping): SIGTERM and SIGHUP stop every command that records or writes
in order, as ^C does. Real signals go to real `servewatch` processes at a seeded random moment after each
says (or shows) it is running, against `servewatch sim` over HTTP; then the exit status, one stop line
saying what was kept, that count equal to what is on disk, no torn record (every line parses), and the
summary or bundles written."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from servewatch.bundle.verify import verify_bundle

SERVEWATCH = [sys.executable, "-m", "servewatch"]
SEED = 50            # the random moments, the same on every run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, condition, timeout_s: float = 30.0):
    """Poll `condition()` until it gives something true (which is returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def finished_requests(url: str) -> float:
    """The simulator's finished requests (vllm:request_success_total, every reason)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


@pytest.fixture(scope="module")
def sim():
    port = free_port()
    proc = subprocess.Popen([*SERVEWATCH, "sim", "--port", str(port), "--max-num-seqs", "8", "--model-name", "tiny"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the simulator's /health 200", lambda: healthy(url))
        yield proc, url
    finally:
        proc.kill()
        proc.wait(timeout=10)


class Run:
    """One `servewatch` subprocess, its stderr in a file (read while it runs, no pipe to fill)."""

    def __init__(self, tmp_path: Path, *args: str, ignoring: signal.Signals | None = None):
        self.err_path = tmp_path / f"{args[0]}.stderr"
        self.err_file = open(self.err_path, "w")       # noqa: SIM115 - closed in finish()
        # `ignoring`: a signal ignored when it starts, as `nohup` ignores SIGHUP
        ignore = (lambda: signal.signal(ignoring, signal.SIG_IGN)) if ignoring is not None else None
        self.proc = subprocess.Popen([*SERVEWATCH, *args], stdout=subprocess.DEVNULL, stderr=self.err_file,
                                     preexec_fn=ignore)

    def stderr(self) -> str:
        return self.err_path.read_text()

    def said(self, pattern: str):
        return re.search(pattern, self.stderr(), re.M)

    def stop(self, rng: random.Random, *signals: signal.Signals, spread_s: float = 0.6) -> int:
        """After a random delay (0 to spread_s), the signals one after the other; the exit status."""
        time.sleep(rng.uniform(0.0, spread_s))      # the random moment (not a synchronisation)
        for sig in signals:
            self.proc.send_signal(sig)
        return self.finish()

    def finish(self, timeout_s: float = 40.0) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.err_file.close()

    def stop_line(self, tool: str, sig: signal.Signals) -> str:
        lines = [line for line in self.stderr().splitlines() if line.startswith(f"servewatch {tool}: stopped by ")]
        assert len(lines) == 1, self.stderr()
        assert lines[0].startswith(f"servewatch {tool}: stopped by {sig.name}: "), lines[0]
        return lines[0]


def whole_lines(path: Path) -> list[dict]:
    """Every line of a records file parsed (a torn line fails here), the file ending in a newline."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends inside a record"
    return [json.loads(line) for line in data.decode().splitlines()]


def count_in(line: str, what: str) -> int:
    match = re.search(rf"(\d+) {what}s? ", line)
    assert match, line
    return int(match[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_load_stopped_keeps_every_finished_request_and_its_summary(sim, tmp_path, sig):
    _, url = sim
    rng = random.Random(f"{SEED}-load-{sig.name}")
    out = tmp_path / "run5"
    before = finished_requests(url)
    run = Run(tmp_path, "load", url, "--scenario", "custom", "--rate", "10", "--prompt-tokens", "32",
              "--output-tokens", "16", "--duration", "30", "--out", str(out), "--json")
    wait_for("load's first finished request", lambda: finished_requests(url) > before or run.proc.poll() is not None)
    assert run.stop(rng, sig) == 128 + sig, run.stderr()
    line = run.stop_line("load", sig)
    records = whole_lines(out / "requests.jsonl")
    assert line == (f"servewatch load: stopped by {sig.name}: {len(records)} record{'' if len(records) == 1 else 's'} "
                    f"kept in {out / 'requests.jsonl'}, their summary in {out / 'summary.json'}")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["requests"] == len(records) >= 1
    assert len({r["id"] for r in records}) == len(records)
    assert summary["ok"] == sum(1 for r in records if r["error"] is None and r["http_status"] == 200)
    assert not list(out.glob("*.tmp"))


def test_load_second_signal_ends_at_once_without_a_torn_record(sim, tmp_path):
    _, url = sim
    rng = random.Random(f"{SEED}-load-twice")
    out = tmp_path / "twice"
    before = finished_requests(url)
    run = Run(tmp_path, "load", url, "--scenario", "custom", "--rate", "10", "--prompt-tokens", "32",
              "--output-tokens", "16", "--duration", "30", "--out", str(out), "--json")
    wait_for("load's first finished request", lambda: finished_requests(url) > before or run.proc.poll() is not None)
    # Sent back to back, both signals may be pending when Python runs its handlers, and it runs them in signal
    # number order (SIGHUP, 1, before SIGTERM, 15): the status is that of the signal handled first, and the one
    # stop line names that same signal.
    code = run.stop(rng, signal.SIGTERM, signal.SIGHUP)
    assert code in (128 + signal.SIGTERM, 128 + signal.SIGHUP), run.stderr()
    assert f"servewatch load: stopped by {signal.Signals(code - 128).name}" in run.stderr(), run.stderr()
    assert "Traceback" not in run.stderr()
    if (out / "requests.jsonl").exists():       # written before the second came: whole, or not there at all
        whole_lines(out / "requests.jsonl")


def test_watch_stopped_finishes_the_bundle_being_written(sim, tmp_path):
    proc, url = sim
    rng = random.Random(f"{SEED}-watch")
    out = tmp_path / "wb"
    run = Run(tmp_path, "watch", url, "--interval", "0.2", "--json", "--out", str(out))
    wait_for("watch's 'recording' line", lambda: run.said(r"^servewatch watch: recording ") or run.proc.poll() is not None)
    run.proc.send_signal(signal.SIGUSR1)            # a bundle asked for, then the stop while it may be written
    assert run.stop(rng, signal.SIGTERM, spread_s=0.3) == 143, run.stderr()
    line = run.stop_line("watch", signal.SIGTERM)
    bundles = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    assert count_in(line, "bundle") == len(bundles) == 1, (line, bundles)
    assert line.endswith(f"written to {out}")
    assert verify_bundle(bundles[0]).incident["trigger"]["verdict"] == "on_demand"     # whole: it verifies
    assert proc.poll() is None and healthy(url)


def test_a_signal_ignored_at_the_start_stays_ignored(sim, tmp_path):
    """`nohup servewatch watch URL` must outlive its terminal: its SIGHUP is no stop, a SIGTERM still is."""
    _, url = sim
    run = Run(tmp_path, "watch", url, "--interval", "0.2", "--json", ignoring=signal.SIGHUP)
    wait_for("watch's 'recording' line", lambda: run.said(r"^servewatch watch: recording ") or run.proc.poll() is not None)
    # SIGHUP first (a lower number is also taken first when both are pending): heard, it would give 129
    assert run.stop(random.Random(SEED), signal.SIGHUP, signal.SIGTERM) == 143, run.stderr()
    assert run.stop_line("watch", signal.SIGTERM) == "servewatch watch: stopped by SIGTERM: no --out given, no bundle written"


def send_long_requests(url: str, n: int = 4) -> None:
    """Requests that are still running when the simulator stalls (each in a thread; they end with it)."""
    def one() -> None:
        body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 1500, "ignore_eos": True}).encode()
        request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
        except OSError:
            pass
    for _ in range(n):
        threading.Thread(target=one, daemon=True).start()


def test_serve_stopped_by_sighup_keeps_its_bundles_and_exits_129(tmp_path):
    """A stall fires a verdict and its bundle; SIGHUP at a random moment after: the count said is the
    bundles on disk, each whole (it verifies)."""
    rng = random.Random(f"{SEED}-serve")
    port = free_port()
    stalled = subprocess.Popen([*SERVEWATCH, "sim", "--port", str(port), "--max-num-seqs", "8", "--model-name", "tiny",
                                "--fault", "stall@2s"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    out = tmp_path / "sb"
    try:
        wait_for("the simulator's /health 200", lambda: healthy(url))
        send_long_requests(url)
        run = Run(tmp_path, "serve", "--target", f"llama={url}", "--listen", "127.0.0.1:0", "--interval", "0.2",
                  "--out", str(out))
        listening = wait_for("serve's 'listening' line",
                             lambda: run.said(r"listening on http://127\.0\.0\.1:(\d+)") or run.proc.poll() is not None)
        with urllib.request.urlopen(f"http://127.0.0.1:{listening[1]}/metrics", timeout=10) as response:
            assert b"servewatch_target_up" in response.read()
        wait_for("the stall's bundle", lambda: list(out.glob("llama/incident-*")) or run.proc.poll() is not None)
        assert run.stop(rng, signal.SIGHUP) == 129, run.stderr()
    finally:
        stalled.kill()
        stalled.wait(timeout=10)
    line = run.stop_line("serve", signal.SIGHUP)
    on_disk = [p for p in (out / "llama").iterdir() if p.is_dir()]
    assert line == f"servewatch serve: stopped by SIGHUP: {len(on_disk)} bundle{'' if len(on_disk) == 1 else 's'} " \
                   f"written to {out}"
    assert len(on_disk) >= 1
    for bundle in on_disk:
        verify_bundle(bundle)                        # whole: every hash, the schema, the verdicts recomputed


def test_proxy_stopped_keeps_a_record_of_every_answered_request(sim, tmp_path):
    _, url = sim
    rng = random.Random(f"{SEED}-proxy")
    port = free_port()
    records = tmp_path / "records.jsonl"
    run = Run(tmp_path, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", url, "--records", str(records))
    wait_for("proxy's 'listening' line", lambda: run.said(r"^servewatch proxy: listening on ") or run.proc.poll() is not None)
    answered = []
    done = threading.Event()

    def client() -> None:          # one request after another through the proxy until it stops answering
        body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 8, "ignore_eos": True}).encode()
        while not done.is_set():
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                             {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                    answered.append(response.status)
            except OSError:
                return

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    wait_for("the first record line", lambda: records.exists() and records.read_bytes().count(b"\n") >= 1
             or run.proc.poll() is not None)
    try:
        assert run.stop(rng, signal.SIGTERM) == 143, run.stderr()
    finally:
        done.set()
        thread.join(timeout=15)
    line = run.stop_line("proxy", signal.SIGTERM)
    lines = whole_lines(records)
    assert line == f"servewatch proxy: stopped by SIGTERM: {len(lines)} record{'' if len(lines) == 1 else 's'} " \
                   f"kept in {records}"
    assert len(lines) >= len(answered) >= 1       # every answer the client read has its record


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_guard_stopped_leaves_the_attached_server_running(sim, tmp_path, sig):
    proc, url = sim
    rng = random.Random(f"{SEED}-guard-{sig.name}")
    out = tmp_path / "gb"
    run = Run(tmp_path, "guard", url, "--pid", str(proc.pid), "--interval", "0.2", "--out", str(out),
              "--lives", str(tmp_path / "lives.json"))
    wait_for("guard's 'recording' line", lambda: run.said(r"^servewatch guard: recording ") or run.proc.poll() is not None)
    # guard's own status (servewatch/actions/policy.py): an attached server still running when guard stops is 0
    assert run.stop(rng, sig) == 0, run.stderr()
    assert run.said(r"^servewatch guard: stopping; the attached server is left running$"), run.stderr()
    line = run.stop_line("guard", sig)
    assert line == f"servewatch guard: stopped by {sig.name}: 0 bundles written to {out}"
    assert proc.poll() is None and healthy(url)       # the server is not harmed


def test_canary_record_stopped_while_asking_writes_nothing(tmp_path):
    """A stop before the server answered leaves --out as it was: no half canary."""
    rng = random.Random(f"{SEED}-canary")
    accepted = threading.Event()
    held: list[socket.socket] = []                   # the connection kept open, unanswered
    with socket.socket() as silent:                  # accepts, reads the request, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]

        def accept() -> None:
            try:
                conn, _ = silent.accept()
            except OSError:
                return
            held.append(conn)
            conn.recv(65536)
            accepted.set()
        threading.Thread(target=accept, daemon=True).start()
        out = tmp_path / "canary.json"
        out.write_text("the old canary\n")
        run = Run(tmp_path, "canary", "record", f"http://127.0.0.1:{port}", "--out", str(out), "--model", "tiny")
        wait_for("canary's request", lambda: accepted.is_set() or run.proc.poll() is not None)
        assert run.stop(rng, signal.SIGTERM) == 143, run.stderr()
        for conn in held:
            conn.close()
    assert run.stop_line("canary", signal.SIGTERM) == (f"servewatch canary: stopped by SIGTERM: no canary recorded, "
                                                        f"{out} left as it was")
    assert out.read_text() == "the old canary\n" and not os.path.exists(f"{out}.partial")
