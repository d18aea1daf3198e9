"""The output contract of `watch`, `guard` and `serve` (servewatch/watch/event_lines.py): with stdout a pipe or a
file, one line per event — a verdict fired, with the path of the bundle written for it, and cleared, with how
long it held — written the moment it happens, while the command still runs (issue 50: `watch URL --out wb >
log` left the log empty until it stopped, the bundle's path printed nowhere). Real subprocesses against the
simulator, a stall injected and cleared through its fault endpoint; every wait is on a line, with a deadline."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from servewatch.bundle.verify import verify_bundle
from servewatch.detectors.verdict import Verdict
from servewatch.sinks.base import Cleared, Fired
from servewatch.watch.event_lines import EventLines
from tests.processes import stop
from tests.test_watch_command import WATCH, send_long_requests, sim, wait_until  # noqa: F401 - sim: a fixture

SERVE = [sys.executable, "-m", "servewatch", "serve"]
GUARD = [sys.executable, "-m", "servewatch", "guard"]
STALL = "alive_health_ok_no_progress"
FIRED_KEYS = {"event", "t", "verdict", "onset", "since_s", "why", "details", "action", "evidence_held", "bundle"}
CLEARED_KEYS = {"event", "t", "verdict", "onset", "duration_s", "ended_by"}


class Lines:
    """A stream's lines as they come (read by a thread): `until(pattern)` waits for the next one that matches,
    up to a deadline."""

    def __init__(self, stream):
        self.queue: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def until(self, pattern: str, timeout_s: float = 90.0) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {self.seen}") from None
            if line is None:
                raise AssertionError(f"the stream ended before a line matching {pattern!r}: {self.seen}")
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def rest(self, timeout_s: float = 30.0) -> list[str]:
        """Every line up to the end of the stream (the process has been told to stop)."""
        deadline = time.monotonic() + timeout_s
        while (line := self.queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
        return self.seen


def _fault(url: str, kind: str) -> None:
    request = urllib.request.Request(url + "/_sim/fault", json.dumps({"kind": kind}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def _running(url: str) -> float:
    from servewatch.exposition.parser import parse

    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        families = parse(response.read().decode())
    return sum(s.value for f in families.values() if f.name == "vllm:num_requests_running" for s in f.samples)


def _stall(url: str) -> None:
    """Requests running, then the engine stalled: the stall verdict fires ~2 s later."""
    send_long_requests(url)
    assert wait_until(lambda: _running(url) >= 1, 30), "no request ever ran"
    _fault(url, "stall")


def _start(argv, cwd):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    return proc, Lines(proc.stdout), Lines(proc.stderr)


PLAIN_FIRED = rf"^(\d\d:\d\d:\d\d) {{of}}verdict {STALL} fired: (no progress for (\d+\.\d) s on engine 0 .+) — bundle (\S+)$"
PLAIN_CLEARED = rf"^\d\d:\d\d:\d\d {{of}}verdict {STALL} cleared after (\d+\.\d) s$"


def _check_bundle(cwd, path: str) -> None:
    bundle = cwd / path                      # as printed: relative to where the command runs (--out wb)
    assert (bundle / "incident.json").is_file(), path
    assert verify_bundle(str(bundle)).verdicts_checked >= 1


def test_watch_to_a_pipe_says_each_event_in_one_line_while_it_runs(sim, tmp_path):
    server, url = sim()
    proc, out, err = _start([*WATCH, url, "--interval", "0.3", "--no-probe", "--out", "wb"], tmp_path)
    try:
        err.until(r"^servewatch watch: recording ")
        _stall(url)
        fired = out.until(PLAIN_FIRED.format(of=""))
        assert proc.poll() is None                        # said while it runs, not when it stops
        assert float(fired[3]) >= 2.0 and fired[4].startswith("wb/")
        _check_bundle(tmp_path, fired[4])
        _fault(url, "clear")
        cleared = out.until(PLAIN_CLEARED.format(of=""))
        assert proc.poll() is None and float(cleared[1]) >= 2.0
        proc.send_signal(signal.SIGINT)
        lines = out.rest()
    finally:
        stop(proc)
    # Only event lines on stdout, each a sentence (no table at the end, no JSON, no Python None)
    assert lines, "nothing on stdout"
    for line in lines:
        assert re.match(rf"^\d\d:\d\d:\d\d verdict \w+ (fired: .+|cleared after \d+\.\d s)$", line), line
        assert "None" not in line and "{" not in line


@pytest.mark.parametrize("json_lines", [False, True], ids=["plain", "json"])
def test_serve_says_each_event_in_one_line_naming_its_target(sim, tmp_path, json_lines):
    server, url = sim()
    argv = [*SERVE, "--target", f"llama-a={url}", "--listen", "127.0.0.1:0", "--interval", "0.3", "--no-probe",
            "--out", "sb", *(["--json"] if json_lines else [])]
    proc, out, err = _start(argv, tmp_path)
    try:
        err.until(r"^servewatch serve: listening on ")
        _stall(url)
        if json_lines:
            fired = json.loads(out.until(rf'"verdict": "{STALL}"').string)
            assert proc.poll() is None
            assert set(fired) == {"target", *FIRED_KEYS} and fired["target"] == "llama-a"
            assert fired["event"] == "fired" and fired["action"] == "restart" and fired["evidence_held"] is True
            assert fired["details"]["threshold_s"] >= 2.0 and fired["bundle"].startswith("sb/llama-a/")
            _check_bundle(tmp_path, fired["bundle"])
            _fault(url, "clear")
            cleared = json.loads(out.until(rf'"event": "cleared", .*"verdict": "{STALL}"').string)
            assert proc.poll() is None
            assert set(cleared) == {"target", *CLEARED_KEYS} and cleared["target"] == "llama-a"
            assert cleared["duration_s"] >= 2.0
        else:
            fired = out.until(PLAIN_FIRED.format(of="llama-a: "))
            assert proc.poll() is None and fired[4].startswith("sb/llama-a/")
            _check_bundle(tmp_path, fired[4])
            _fault(url, "clear")
            cleared = out.until(PLAIN_CLEARED.format(of="llama-a: "))
            assert proc.poll() is None and float(cleared[1]) >= 2.0
        proc.send_signal(signal.SIGTERM)
        lines = out.rest()
    finally:
        stop(proc)
    for line in lines:                                   # every line of stdout is an event line
        if json_lines:
            assert json.loads(line)["target"] == "llama-a"
        else:
            assert re.match(r"^\d\d:\d\d:\d\d llama-a: verdict \w+ ", line), line


def test_serve_says_when_the_evidence_for_an_action_holds_after_the_firing(sim, tmp_path):
    """An idle engine that answers no probe: not_serving fires at the first missed probe and its action (restart)
    waits for a second one; serve says that line too, naming the target (issue 50: serve had no such line, so a
    log showed a restart-class verdict that nothing would act on yet, and never when that changed)."""
    server, url = sim()
    argv = [*SERVE, "--target", f"llama-a={url}", "--listen", "127.0.0.1:0", "--interval", "0.3",
            "--probe-interval", "1", "--probe-deadline", "3"]
    proc, out, err = _start(argv, tmp_path)
    try:
        err.until(r"^servewatch serve: listening on ")
        _fault(url, "stall")
        fired = out.until(r"^\d\d:\d\d:\d\d llama-a: verdict not_serving fired: (.+)$")
        assert "no token within 3 s" in fired[1]
        held = out.until(r"^\d\d:\d\d:\d\d llama-a: verdict not_serving: the evidence for its action \(restart\) "
                         r"now holds: .*\(2 probes in a row over (\d+\.\d) s\)")
        assert proc.poll() is None and float(held[1]) >= 1.0
    finally:
        stop(proc)


def test_guard_says_the_bundle_of_the_verdict_it_acts_on_and_the_pid_it_killed(sim, tmp_path):
    server, url = sim()
    proc, out, err = _start([*GUARD, url, "--pid", str(server.pid), "--interval", "0.3", "--no-probe",
                             "--no-stacks", "--out", "gb"], tmp_path)
    try:
        err.until(r"^servewatch guard: identity: ")
        _stall(url)
        fired = err.until(PLAIN_FIRED.format(of="").replace("^", "^servewatch guard: ", 1))
        _check_bundle(tmp_path, fired[4])
        err.until(rf"^servewatch guard: {STALL}: killed the tree \(api {server.pid}\)$")
        proc.wait(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 3
    assert out.rest() == []               # attached: guard's stdout carries nothing but --json lines


# --- the lines themselves, and the live view's bundle -------------------------------------------------------

WHY = "no progress for 2.5 s on engine 0; /health 200"


def _verdict() -> Verdict:
    return Verdict(name=STALL, t=3723.25, onset=3720.0, why=WHY, details={"threshold_s": 2.0})


def test_the_plain_and_json_lines_word_for_word():
    plain, for_target, as_json = io.StringIO(), io.StringIO(), io.StringIO()
    fired, cleared = Fired(_verdict(), "wb/incident-x"), Cleared(_verdict(), 3751.0)
    lines = EventLines(stream=plain, bundles=True)
    lines.fired(fired)
    lines.fired(Fired(_verdict(), None))                # --out given, the bundle not written
    lines.cleared(cleared)
    lines.evidence(_verdict(), True)                    # held at its firing: the fired line said it all
    lines.evidence(_verdict(), False)                   # held later (e.g. a second probe with no token)
    EventLines(stream=for_target).for_target("llama-a").fired(Fired(_verdict(), None))
    targeted = EventLines(json_lines=True, stream=as_json).for_target("llama-a")
    targeted.fired(fired)
    targeted.cleared(cleared)
    assert plain.getvalue().splitlines() == [
        f"01:02:03 verdict {STALL} fired: {WHY} — bundle wb/incident-x",
        f"01:02:03 verdict {STALL} fired: {WHY} — its bundle could not be written (said on stderr)",
        f"01:02:31 verdict {STALL} cleared after 31.0 s",
        f"01:02:03 verdict {STALL}: the evidence for its action (restart) now holds: {WHY}"]
    assert for_target.getvalue() == f"01:02:03 llama-a: verdict {STALL} fired: {WHY}\n"   # no --out: no bundle said
    fired_json, cleared_json = map(json.loads, as_json.getvalue().splitlines())
    assert set(fired_json) == {"target", *FIRED_KEYS} and set(cleared_json) == {"target", *CLEARED_KEYS}
    assert fired_json["bundle"] == "wb/incident-x" and fired_json["details"] == {"threshold_s": 2.0}
    assert cleared_json["duration_s"] == 31.0 and cleared_json["target"] == "llama-a"


def test_a_bundle_asked_for_with_sigusr1_is_a_line_too():
    plain, as_json = io.StringIO(), io.StringIO()
    EventLines(stream=plain).for_target("llama-a").on_demand("wb/incident-on_demand-1", 3723.0)
    EventLines(json_lines=True, stream=as_json).on_demand("wb/incident-on_demand-1", 3723.0)
    assert plain.getvalue() == "01:02:03 llama-a: bundle on demand (SIGUSR1): wb/incident-on_demand-1\n"
    assert json.loads(as_json.getvalue()) == {"event": "bundle", "t": "1970-01-01T01:02:03.000Z", "asked_by": "SIGUSR1",
                                              "bundle": "wb/incident-on_demand-1"}


def test_a_reader_gone_ends_the_lines_not_the_recording():
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w")
    lines = EventLines(stream=stream)
    lines.fired(Fired(_verdict(), None))                # EPIPE: no exception reaches the recorder
    lines.cleared(Cleared(_verdict(), 3751.0))
    assert lines.closed
    stream.close()                                      # its descriptor is /dev/null now: closes cleanly


def test_the_live_view_shows_the_newest_bundle_by_path(monkeypatch):
    from rich.console import Console

    from servewatch.timeline.window import Window
    from servewatch.watch.output import status_table

    text = io.StringIO()
    fired = [Fired(_verdict(), "wb/incident-1"), Fired(_verdict(), None), Fired(_verdict(), "wb/incident-2")]
    Console(file=text, width=120).print(status_table(Window(), fired, [STALL], 3.0))
    row = next(line for line in text.getvalue().splitlines() if line.startswith("bundle"))
    assert row.split() == ["bundle", "wb/incident-2", "(and", "1", "before", "it)"]
