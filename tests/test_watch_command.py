"""`servewatch watch` end to end: bad inputs give one line and a non-zero exit; against `servewatch sim`
over HTTP the stall and the engine death are reported as JSON lines, with bundles that verify."""

import json
import re
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from servewatch.bundle.verify import verify_bundle

WATCH = [sys.executable, "-m", "servewatch", "watch"]


def cli(*args, timeout=60):
    return subprocess.run([*WATCH, *args], capture_output=True, text=True, timeout=timeout)


def test_wrong_pid_is_one_line_and_exit_2():
    result = cli("http://127.0.0.1:1", "--pid", "999999999", "--json")
    assert result.returncode == 2
    assert result.stderr.strip() == "servewatch watch: --pid 999999999: no such process"
    assert result.stdout == ""


def test_unwritable_out_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = cli("http://127.0.0.1:1", "--out", str(blocker / "bundles"), "--json")
    assert result.returncode == 2
    assert result.stderr.startswith("servewatch watch: --out ") and len(result.stderr.strip().splitlines()) == 1


def test_bad_url_and_missing_log_file():
    assert cli("ftp://example", "--json").returncode == 2
    result = cli("http://127.0.0.1:1", "--log-file", "/nonexistent/x.log", "--json")
    assert result.returncode == 2 and "no such directory" in result.stderr


def test_target_down_at_start_keeps_watching_and_reports_health_loss():
    result = cli("http://127.0.0.1:1", "--interval", "0.2", "--duration", "1.5", "--json")
    # it kept watching to the end; a URL that never answered is bad input all the same (README: non-zero)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == ("servewatch watch: http://127.0.0.1:1: nothing answered /health or "
                                              "/metrics in 1.5 s")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["verdict"] for line in lines] == ["health_loss"]
    assert set(lines[0]) == {"event", "t", "verdict", "onset", "since_s", "why", "details", "action", "evidence_held",
                             "bundle"} and lines[0]["event"] == "fired"
    assert lines[0]["action"] == "page" and lines[0]["evidence_held"] is True      # health_loss: a person decides
    assert lines[0]["t"].endswith("Z") and lines[0]["since_s"] >= 0.3 and lines[0]["bundle"] is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("simulator did not become healthy")


@pytest.fixture
def sim(tmp_path):
    procs = []

    def start(*args):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", str(port), "--max-num-seqs", "8",
                                 "--model-name", "tiny", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        return proc, url
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def send_long_requests(url, n=4):
    def one():
        body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 1500, "ignore_eos": True}).encode()
        request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=40) as response:
                response.read()
        except OSError:
            pass
    for _ in range(n):
        threading.Thread(target=one, daemon=True).start()


def test_stall_over_http_with_pid_fires_json_with_a_verifiable_bundle(sim, tmp_path):
    proc, url = sim("--fault", "stall@6s")
    send_long_requests(url)
    out = tmp_path / "bundles"
    result = cli(url, "--pid", str(proc.pid), "--interval", "0.5", "--json", "--stop-on-incident",
                 "--duration", "30", "--out", str(out), timeout=60)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 1, result.stderr
    stall = next(line for line in lines if line["verdict"] == "alive_health_ok_no_progress")
    assert stall["since_s"] >= 2.0 and "/health 200" in stall["why"]
    assert stall["bundle"] and verify_bundle(stall["bundle"]).verdicts_checked >= 1
    assert stat_mode(stall["bundle"]) == 0o700
    # Before any verdict, one stderr line said the target was on the record, naming its dialect.
    assert re.search(r"^servewatch watch: recording http://127\.0\.0\.1:\d+: /health 200, /metrics vllm \(vllm-0\.32\)$",
                     result.stderr, re.M), result.stderr


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


def test_engine_death_over_http_is_dead_then_exit(sim, tmp_path):
    log = tmp_path / "sim.log"
    proc, url = sim("--exit-delay", "1.5", "--log-file", str(log))
    watch = subprocess.Popen([*WATCH, url, "--pid", str(proc.pid), "--interval", "0.3", "--json", "--duration", "8"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # inject the death once the recorder is scraping (the simulator logs every request it serves)
        assert wait_until(lambda: "GET /metrics" in log.read_text(errors="replace"), 30), "watch never scraped"
        fault = json.dumps({"kind": "engine-death", "exit_code": 0}).encode()
        request = urllib.request.Request(url + "/_sim/fault", fault, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        stdout, stderr = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(timeout=10)
    lines = [json.loads(line) for line in stdout.splitlines()]
    names = [line["verdict"] for line in lines]
    assert names[0] == "engine_dead" and "process_exit" in names, stdout + stderr
    exit_line = next(line for line in lines if line["verdict"] == "process_exit")
    assert "the engine died" in exit_line["why"]


def wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def _kill_with_descendants(proc):
    """The timer's end of a read: the process and every descendant, since a child that shares the pipe (a server
    that guard started writes to guard's stderr) would otherwise hold it open and the read would never end."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.kill()
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def read_stderr_until(proc, pattern, timeout_s):
    """Lines of proc.stderr until one matches `pattern` (bounded by a timer that kills the process and its
    descendants, so that the read ends and the assertion names what was seen)."""
    timer = threading.Timer(timeout_s, _kill_with_descendants, (proc,))
    timer.start()
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match, seen
    finally:
        timer.cancel()
    raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {seen}")


def test_sigusr1_writes_a_bundle_of_the_window_on_demand_and_watching_goes_on(sim, tmp_path):
    proc, url = sim()
    out = tmp_path / "bundles"
    watch = subprocess.Popen([*WATCH, url, "--pid", str(proc.pid), "--interval", "0.2", "--json", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_stderr_until(watch, r"^servewatch watch: recording ", timeout_s=30)
        watch.send_signal(signal.SIGUSR1)
        first, _ = read_stderr_until(watch, r"^servewatch watch: bundle on demand: (\S+)$", timeout_s=30)
        watch.send_signal(signal.SIGUSR1)     # a second request: a second bundle, the watch still running
        second, _ = read_stderr_until(watch, r"^servewatch watch: bundle on demand: (\S+)$", timeout_s=30)
        assert watch.poll() is None
    finally:
        watch.send_signal(signal.SIGINT)
        stdout, _ = watch.communicate(timeout=30)
    # An idle simulator: no verdict; each bundle also one JSON line on stdout (the output contract), by path.
    events = [json.loads(line) for line in stdout.splitlines()]
    assert [(e["event"], e["asked_by"], e["bundle"]) for e in events] == [
        ("bundle", "SIGUSR1", first[1]), ("bundle", "SIGUSR1", second[1])]
    for path in (first[1], second[1]):
        assert "-on_demand-" in path and stat_mode(path) == 0o700
        report = verify_bundle(path)          # hashes, schema, and the (absent) verdicts recomputed
        assert report.verdicts_checked == 0
    assert first[1] != second[1]
    incident = json.loads((pathlib.Path(second[1]) / "incident.json").read_text())
    assert incident["trigger"]["verdict"] == "on_demand"


def test_sigusr1_without_out_says_so_and_keeps_watching(sim):
    proc, url = sim()
    watch = subprocess.Popen([*WATCH, url, "--interval", "0.2", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_stderr_until(watch, r"^servewatch watch: recording ", timeout_s=30)
        watch.send_signal(signal.SIGUSR1)
        read_stderr_until(watch, r"^servewatch watch: SIGUSR1: no --out DIR was given, no bundle written$",
                          timeout_s=30)
        assert watch.poll() is None
    finally:
        watch.send_signal(signal.SIGINT)
        watch.communicate(timeout=30)
    assert watch.returncode == 130         # ^C: 128 + SIGINT


def test_sigterm_stops_the_watch_in_order_with_exit_143(sim):
    proc, url = sim()
    watch = subprocess.Popen([*WATCH, url, "--interval", "0.2", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    read_stderr_until(watch, r"^servewatch watch: recording ", timeout_s=30)
    watch.send_signal(signal.SIGTERM)
    _, stderr = watch.communicate(timeout=30)
    assert watch.returncode == 143, stderr          # 128 + SIGTERM, as every command stopped by a signal
    assert "servewatch watch: stopped by SIGTERM: no --out given, no bundle written" in stderr


def test_a_read_that_times_out_ends_even_where_a_child_holds_the_pipe():
    """read_stderr_until's timer kills the process's descendants too: a server guard started writes to guard's stderr,
    and while it lived the read never ended (CI of e460f62: a 30 s read hung to pytest's 120 s timeout)."""
    holder = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                               "import time; print('parent', file=sys.stderr, flush=True); time.sleep(600)"],
                              stderr=subprocess.PIPE, text=True)
    try:
        began = time.monotonic()
        with pytest.raises(AssertionError, match="no line matching 'never'.*parent"):
            read_stderr_until(holder, r"never", timeout_s=1)
        assert time.monotonic() - began < 30
    finally:
        holder.kill()
        holder.wait(10)
