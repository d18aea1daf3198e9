"""A requested shutdown is not an engine death: on a real vLLM 0.32, SIGTERM to the API server logs
"[shutdown] API server: shutdown triggered" and stops the engine core first — gone 0.4 s after the
signal while the API process still lives — then the API server. The first real drill called that
engine_dead. With the server's log read, the shutdown line tells the two apart; an engine killed
under the same API server (the other real excerpt) is still engine_dead.

The excerpts are real (tests/fixtures/vllm_real/graceful_stop_sigterm.log, graceful_stop_in_flight.log,
engine_core_sigkill.log, from the lab vLLM under `servewatch drill`); the process samples and read times
are built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servewatch.detectors import DetectorConfig
from servewatch.detectors.liveness import detect_engine_dead, detect_process_exit
from servewatch.sources.logs import parse_line
from tests.timeline_builders import API, Timeline

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_real"
GRACEFUL = (FIXTURES / "graceful_stop_sigterm.log").read_text().splitlines()
# The same stop with four requests in flight: the API server also logs EngineDeadError as it goes.
IN_FLIGHT = (FIXTURES / "graceful_stop_in_flight.log").read_text().splitlines()
KILLED = (FIXTURES / "engine_core_sigkill.log").read_text().splitlines()
CONFIG = DetectorConfig()


def _run(lines: list[str] | None, *, read_late_s: float, gone_ticks: int = 12, exits: bool = False):
    """Four busy ticks (the excerpt's lines before its first shutdown or death line read meanwhile),
    then the engine gone under a live API server (and, with `exits`, the API process gone after that).
    The rest of the excerpt is read `read_late_s` after the first tick that misses the engine (a tail
    polled after the process sample). Every verdict over every prefix of the timeline."""
    lines = list(lines or [])
    first = next((i for i, line in enumerate(lines)
                  if {e.kind for e in parse_line(line, 0.0)} & {"shutdown", "engine_dead"}), len(lines))
    tl = Timeline(interval=0.5)
    tl.ticks(4)
    tl.samples += [e for line in lines[:first] for e in parse_line(line, tl.t - 0.25)]
    gone_at = tl.t
    fired: dict[str, float] = {}
    pending = lines[first:]
    for i in range(gone_ticks):
        tl.tick(health=None, health_error="connect_refused", running=2, members=(API,),
                alive=not (exits and i >= gone_ticks // 2))
        if pending and tl.t - 0.5 >= gone_at + read_late_s - 1e-9:
            for line in pending:
                tl.samples += parse_line(line, tl.t - 0.5 + 0.03)
            pending = []
        window = tl.window()
        for detect in (detect_engine_dead, detect_process_exit):
            for verdict in detect(window, CONFIG):
                fired.setdefault(verdict.name, round(window.end - gone_at, 2))
                if verdict.name == "process_exit":
                    fired["after_engine_death"] = verdict.details["after_engine_death"]
    return fired


def _kinds(lines):
    return {e.kind for line in lines for e in parse_line(line, 0.0)}


def test_the_real_excerpts_carry_a_shutdown_line_only_when_one_was_asked_for():
    assert "shutdown" in _kinds(GRACEFUL) and "engine_dead" not in _kinds(GRACEFUL)
    assert {"shutdown", "engine_dead"} <= _kinds(IN_FLIGHT)
    assert "engine_dead" in _kinds(KILLED) and "shutdown" not in _kinds(KILLED)


def test_a_real_sglang_sigterm_says_shutdown_before_its_children_go():
    lines = (FIXTURES.parent / "sglang_real" / "server.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "SIGTERM received" in line)
    assert _kinds(lines[at:at + 1]) == {"shutdown"}
    assert "shutdown" not in _kinds(lines[:at]) and "engine_dead" not in _kinds(lines[at:])


@pytest.mark.parametrize("excerpt", ["idle", "in flight"])
@pytest.mark.parametrize("read_late_s", [0.0, 0.5, 1.5])
def test_a_graceful_stop_is_not_an_engine_death_even_when_the_line_is_read_a_poll_late(read_late_s, excerpt):
    fired = _run(GRACEFUL if excerpt == "idle" else IN_FLIGHT, read_late_s=read_late_s, exits=True)
    assert "engine_dead" not in fired
    assert "process_exit" in fired and fired["after_engine_death"] is False


def test_an_engine_killed_under_a_live_api_server_is_still_an_engine_death():
    fired = _run(KILLED, read_late_s=0.5)
    assert fired["engine_dead"] <= 0.5 + 0.1          # its own log lines say so as soon as they are read


def test_with_a_log_but_no_shutdown_line_a_vanished_engine_waits_then_counts():
    stats_only = [line for line in GRACEFUL if "Engine 000:" in line][:2]
    fired = _run(stats_only, read_late_s=0.0)
    assert CONFIG.shutdown_log_wait_s <= fired["engine_dead"] <= CONFIG.shutdown_log_wait_s + 0.5 + 0.1


def test_without_a_log_a_vanished_engine_is_an_engine_death_at_once():
    fired = _run(None, read_late_s=0.0)
    assert fired["engine_dead"] <= 0.1
