"""`servewatch guard` end to end against `servewatch sim`: a stall → py-spy stacks → the tree killed →
exit 3; SIGTERM → the server drained → its own exit status; a server that ignores SIGTERM → killed at
the drain timeout → exit 5; an engine that died behind an exit 0 → exit 4; bad input → one line, exit 2."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import urllib.request

import psutil
import pytest

from tests.test_watch_command import free_port, read_stderr_until, send_long_requests, wait_healthy, wait_until

GUARD = [sys.executable, "-m", "servewatch", "guard"]
SIM = [sys.executable, "-m", "servewatch", "sim", "--max-num-seqs", "8", "--model-name", "tiny"]


def guard(url, *args, server=(), **popen):
    command = [*GUARD, url, "--interval", "0.3", "--json", *args]
    if server:
        command += ["--", *server]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finish(proc, timeout=60):
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return [json.loads(line) for line in stdout.splitlines()], stderr


def started_pid(proc) -> int:
    return started(proc)[0]


def started(proc) -> tuple[int, list[str]]:
    """The started server's pid, and the lines guard's stderr had by then: the server writes there too, and may do
    so before guard's own line."""
    match, seen = read_stderr_until(proc, r"^servewatch guard: started \S+ as pid (\d+)$", timeout_s=30)
    return int(match[1]), seen


@pytest.fixture
def reaper():
    """Whatever a test started is gone at its end, whatever guard did."""
    pids = []
    yield pids.append
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


def test_a_stalled_server_gets_its_stacks_dumped_and_its_tree_killed_exit_3(tmp_path, reaper):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stacks = tmp_path / "stacks"
    proc = guard(url, "--stacks-dir", str(stacks), "--out", str(tmp_path / "bundles"),
                 server=[*SIM, "--port", str(port), "--fault", "stall@6s"])
    pid = started_pid(proc)
    reaper(pid)
    wait_healthy(url)
    send_long_requests(url)
    lines, stderr = finish(proc)
    assert proc.returncode == 3, stderr
    events = {line.get("guard") or line.get("verdict"): line for line in lines}
    assert "alive_health_ok_no_progress" in events
    stack_line, kill_line = events["stacks"], events["kill"]
    assert stack_line["status"] == "captured" and stack_line["producer"].startswith("py-spy")
    assert stack_line["processes"] == {"api": "captured"}
    assert kill_line["killed"] == 1 and kill_line["survivors"] == []
    assert events["exit"]["code"] == 3
    assert events["identity"]["verified"] is True and events["identity"]["override"] is False   # proven once it listened
    assert events["identity"]["listener_pid"] == pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    dump = pathlib.Path(stack_line["path"])
    assert dump.parent == stacks and (os.stat(dump).st_mode & 0o777) == 0o600
    text = dump.read_text()
    assert f"=== pid {pid} (api): captured" in text and "Thread" in text   # a real py-spy dump of the sim
    # The bundle is written before the kill, and it carries no stack and no path of the dump.
    bundle = pathlib.Path(events["alive_health_ok_no_progress"]["bundle"])
    assert all(dump.name not in p.read_text() and "Thread " not in p.read_text() for p in bundle.iterdir())
    identity = json.loads((bundle / "incident.json").read_text())["target"]["identity"]
    assert identity == {"verified": True, "override": False,
                        "how": f"pid {pid} listens on port {port} itself, in servewatch's network namespace"}


def _completion(url, max_tokens, results):
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": max_tokens, "ignore_eos": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            results.append((response.status, json.loads(response.read())["usage"]["completion_tokens"]))
    except OSError as exc:
        results.append((type(exc).__name__, None))


def test_sigterm_drains_a_server_guard_started_and_exits_with_its_status(tmp_path, reaper):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = guard(url, server=[*SIM, "--port", str(port)])
    reaper(started_pid(proc))
    # guard records, and proves the server it started once it listens: both lines, in either order
    _, seen = read_stderr_until(proc, r"^servewatch guard: (recording |identity: )", timeout_s=30)
    other = "identity: " if "recording" in seen[-1] else "recording "
    read_stderr_until(proc, rf"^servewatch guard: {other}", timeout_s=30)
    wait_healthy(url)      # up, with its SIGTERM handler (before that, SIGTERM ends it: exit 143)
    results: list = []
    clients = [threading.Thread(target=_completion, args=(url, 200, results)) for _ in range(2)]
    for client in clients:
        client.start()
    assert wait_until(lambda: _running(url) == 2, 30), "the two requests never ran"
    proc.send_signal(signal.SIGTERM)
    lines, stderr = finish(proc)
    for client in clients:
        client.join(timeout=60)
    assert proc.returncode == 0, stderr
    assert [line["guard"] for line in lines if "guard" in line] == ["policy", "identity", "drain", "exit"]
    assert "the server exited 0 after the drain" in stderr
    assert results == [(200, 200), (200, 200)]      # the requests in flight at SIGTERM finished


def _running(url) -> float:
    from servewatch.exposition.parser import parse

    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        families = parse(response.read().decode())
    return sum(s.value for f in families.values() if f.name == "vllm:num_requests_running" for s in f.samples)


def test_a_server_that_ignores_sigterm_is_killed_at_the_drain_timeout_exit_5(tmp_path, reaper):
    # No HTTP server at all: what guard does with the process does not wait for /health.
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                      "print('up', flush=True); time.sleep(120)"]
    proc = guard(f"http://127.0.0.1:{free_port()}", "--drain-timeout", "1s", server=stubborn)
    pid = started_pid(proc)
    reaper(pid)
    # Its "up" (on guard's stderr under --json) comes after it ignores SIGTERM: a SIGTERM before that would
    # end the server by itself (guard then rightly exits with its status, 143).
    read_stderr_until(proc, r"^up$", timeout_s=30)
    proc.send_signal(signal.SIGTERM)
    lines, stderr = finish(proc)
    assert proc.returncode == 5, stderr
    kill = next(line for line in lines if line.get("guard") == "kill")
    assert kill["killed"] == 1 and kill["survivors"] == []
    assert "did not stop within the drain timeout" in stderr


def test_an_exit_0_after_the_engine_died_is_reported_as_a_failure_exit_4(tmp_path, reaper):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = guard(url, "--exit-grace", "20s",
                 server=[*SIM, "--port", str(port), "--exit-delay", "1.5", "--fault", "engine-death@4s:exit=0"])
    reaper(started_pid(proc))
    lines, stderr = finish(proc)
    assert proc.returncode == 4, stderr
    names = [line.get("guard") or line.get("verdict") for line in lines]
    if "engine_dead" in names:   # seen while the API still answered 503 (a slow probe may see only the exit)
        assert names.index("engine_dead") < names.index("grace") < names.index("process_exit"), names
    exit_line = next(line for line in lines if line.get("verdict") == "process_exit")
    assert "the engine died" in exit_line["why"]
    assert "kill" not in names          # it exited by itself within the grace: nothing to kill
    assert "#48966" in stderr


def test_dry_run_says_what_it_would_do_and_leaves_the_server_alone(tmp_path, reaper):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([*SIM, "--port", str(port), "--fault", "stall@5s"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    reaper(server.pid)
    wait_healthy(url)
    send_long_requests(url)
    proc = guard(url, "--pid", str(server.pid), "--dry-run", "--duration", "14")
    lines, stderr = finish(proc)
    assert proc.returncode == 0, stderr          # attached, still running: guard only stopped watching
    dry = next(line for line in lines if line.get("guard") == "dry_run")
    assert dry["verdict"] == "alive_health_ok_no_progress"
    assert "would dump the stacks of 1 process(es) and kill the tree" in stderr
    assert server.poll() is None
    server.kill()
    server.wait(timeout=10)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    both = subprocess.run([*GUARD, "http://127.0.0.1:1", "--pid", "1", "--", "true"], capture_output=True, text=True,
                          timeout=30)
    neither = subprocess.run([*GUARD, "http://127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    wrong = subprocess.run([*GUARD, "http://127.0.0.1:1", "--act-on", "stall", "--", "true"], capture_output=True,
                           text=True, timeout=30)
    missing = subprocess.run([*GUARD, "http://127.0.0.1:1", "--", str(tmp_path / "no-such-server")],
                             capture_output=True, text=True, timeout=30)
    gone = subprocess.run([*GUARD, "http://127.0.0.1:1", "--pid", "999999999"], capture_output=True, text=True,
                          timeout=30)
    assert gone.stderr.strip() == "servewatch guard: --pid 999999999: no such process"
    stacks = subprocess.run([*GUARD, "http://127.0.0.1:1", "--stacks-dir", "/proc/x", "--", "sleep", "30"],
                            capture_output=True, text=True, timeout=30)
    assert stacks.stderr.strip() == "servewatch guard: --stacks-dir /proc/x: not writable (No such file or directory)"
    assert "started" not in stacks.stderr          # refused before the server was started
    for result in (both, neither, wrong, missing, gone, stacks):
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "either -- COMMAND" in both.stderr and "either -- COMMAND" in neither.stderr
    assert "unknown verdict(s) stall" in wrong.stderr
    assert "cannot start" in missing.stderr


def test_server_nice_sets_the_started_servers_session_priority_and_only_that(reaper):
    """--server-nice N: the session of the server guard started runs at autogroup nice N (servewatch.sched);
    guard's own session is untouched. Refused for an attached server and outside -20..19: one line, exit 2."""
    if not pathlib.Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroups (CONFIG_SCHED_AUTOGROUP): nothing to set")
    ours_before = pathlib.Path("/proc/self/autogroup").read_text()
    proc = guard("http://127.0.0.1:1", "--server-nice", "7", "--no-stacks",
                 server=[sys.executable, "-c", "import time; time.sleep(60)"])
    pid = started_pid(proc)
    reaper(pid)
    read_stderr_until(proc, r"^servewatch guard: the server's session runs at CPU priority nice 7 \(its autogroup\)$",
                      timeout_s=30)
    theirs = pathlib.Path(f"/proc/{pid}/autogroup").read_text().split()
    assert theirs[0].startswith("/autogroup-") and theirs[1:] == ["nice", "7"]
    assert pathlib.Path("/proc/self/autogroup").read_text() == ours_before
    proc.send_signal(signal.SIGTERM)
    finish(proc)
    attached = subprocess.run([*GUARD, "http://127.0.0.1:1", "--pid", str(os.getpid()), "--server-nice", "10"],
                              capture_output=True, text=True, timeout=30)
    outside = subprocess.run([*GUARD, "http://127.0.0.1:1", "--server-nice", "40", "--", "true"],
                             capture_output=True, text=True, timeout=30)
    for result in (attached, outside):
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "applies to a server guard starts" in attached.stderr
    assert outside.stderr.strip() == "servewatch guard: --server-nice 40: a nice is between -20 and 19"
