"""`servewatch diagnose` on llama.cpp's llama-server (issue 53): its advice through the dialect
(servewatch/dialects/llamacpp.py: /metrics waits on the engine loop, the engine is a thread of the one process, what a
live engine shows), on the simulator speaking the dialect (a hang) and on windows that carry the real server's log
lines (tests/fixtures/llamacpp: a SIGKILL, an orderly stop, a load failure)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.detectors.registry import runbook_for
from servewatch.dialects import llamacpp
from servewatch.doctor.diagnose import diagnose, readings_from_window
from servewatch.doctor.log_files import read_lines
from servewatch.doctor.log_record import read_record
from servewatch.doctor.postmortem import postmortem
from servewatch.engine.state import Counters, EngineState
from servewatch.sources.logs import parse_line
from servewatch.timeline.samples import HealthSample, MetricsSample
from servewatch.timeline.window import Window
from tests.test_llamacpp import HUNG_S, LlamacppSim, ScrapesSeen

REAL = Path(__file__).resolve().parent / "fixtures" / "llamacpp"
T0 = 1000.0


def _by_name(hypotheses):
    return {h.name: h for h in hypotheses}


@pytest.fixture
def ready_sim():
    server = LlamacppSim(startup=0.0)
    yield server
    server.close()


def test_a_hang_of_the_loop_is_named_as_such_with_the_engines_own_facts(ready_sim, capsys):
    """The simulator's loop hangs after two scrapes were answered (so the window knows the engine): /health stays 200
    and /metrics times out. diagnose says the loop is hung, from the dialect's fact that /metrics waits on it, and
    gives the not_serving runbook's action, not 'is the process listening' (it is); exit 1."""
    seen = ScrapesSeen(ready_sim.engine)

    def hang_once_scraped():
        seen.wait_for(2)
        ready_sim.post("/_sim/fault", {"kind": "stall"})

    driver = threading.Thread(target=hang_once_scraped, daemon=True)
    driver.start()
    code = main(["diagnose", ready_sim.url, "--window", "10", "--interval", "0.5", "--json"])
    driver.join(HUNG_S)
    found = json.loads(capsys.readouterr().out)
    top = found["hypotheses"][0]
    assert code == 1
    assert (top["name"], top["verdict"], top["title"]) == \
        ("not_answering", "supported", "the engine's loop does not answer (/health does)")
    assert "while /health answered 200: llama.cpp answers /health without its engine loop and /metrics waits " \
           "on that loop, so the loop is hung" in top["why"], top["why"]
    assert "its slot listing (/slots) waits on the same loop" in top["next_check"]
    assert top["safe_action"] == runbook_for("not_serving").safe_action
    dead = _by_name_dicts(found)["engine_dead"]
    assert (dead["verdict"], dead["expected"]) == ("ruled out", llamacpp.ENGINE_ALIVE_SIGNS)


def _by_name_dicts(found):
    return {h["name"]: h for h in found["hypotheses"]}


def _state():
    return EngineState("llamacpp", "llamacpp", {}, running=0.0, waiting=0.0,
                       counters=Counters(prompt_tokens=100.0, generation_tokens=40.0, steps=50.0))


def _gone_window(log: str, dialect: str = "llamacpp") -> Window:
    """/metrics and /health answered for 5 s, then every /health refused for 3 s; the log's lines as its source
    reads them (servewatch.sources.logs.parse_line)."""
    lines = (REAL / log).read_text().splitlines()
    events = tuple(event for i, line in enumerate(lines) for event in parse_line(line, T0 + 5.0 * i / len(lines)))
    metrics = tuple(MetricsSample(T0 + t, dialect, dialect, (_state(),)) for t in range(5))
    health = tuple(HealthSample(T0 + t, 200, 0.001) for t in range(5)) + \
        tuple(HealthSample(T0 + t, None, None, error="connect") for t in range(5, 8))
    return Window.from_samples((*metrics, *health, *events))


def test_a_kill_is_the_engines_death_and_a_logged_stop_is_not():
    """llama-server's engine is a thread of its one process (ENGINE_IN_API_PROCESS): /health 200 then refused is the
    engine gone with its process, unless the log says a requested stop ("cleaning up before exit...",
    server.cpp:465). The real SIGKILL log ends with no such line; the real idle SIGTERM's has it."""
    killed = _by_name(diagnose(readings_from_window(_gone_window("server_killed.log"))))
    assert killed["engine_dead"].verdict == "supported"
    assert killed["engine_dead"].why == ("/health answered 200, then could not connect ×3: llama.cpp's engine runs in "
                                         "the server's one process, so the process and its engine are gone")
    stopped = _by_name(diagnose(readings_from_window(_gone_window("server_sigterm_idle.log"))))
    assert stopped["engine_dead"].verdict == "ruled out"
    assert "after 1 line(s) of a requested stop in its log: stopped, not dead" in stopped["engine_dead"].why
    # vLLM's engine is a process of its own with a status for its death (503): a refused port is not that sign
    other = _by_name(diagnose(readings_from_window(_gone_window("server_killed.log", dialect="vllm"))))
    assert other["engine_dead"].verdict == "ruled out"
    assert other["engine_dead"].expected == "/health 200, no EngineDeadError / 'Worker proc ... died' lines"


def test_no_scrape_answered_is_not_an_idle_server():
    """A window whose /metrics never answered measured no running count: 'idle' is not measured, not supported."""
    window = Window.from_samples([HealthSample(T0 + t, 200, 0.001) for t in range(4)] +
                                 [MetricsSample(T0 + t, None, None, error="timeout") for t in (1.0, 3.0)])
    found = _by_name(diagnose(readings_from_window(window)))
    assert found["idle"].verdict == "not measured"
    # and with no engine known, the silent /metrics is said for the engines whose /metrics waits on their loop
    assert found["not_answering"].why == ("/metrics timed out ×2 while /health answered 200: where /metrics waits on "
                                          "the engine's loop (llama.cpp), that loop is hung; elsewhere /metrics "
                                          "itself is slow")


def test_the_real_load_failure_reads_as_a_startup_failure():
    """A truncated GGUF (the real server, capture_load_failure.py): exit 1 in 0.06 s, 'failed to load model'
    (server-context.cpp:1214) then 'exiting due to model loading error' (server.cpp:491); never ready."""
    facts = json.loads((REAL / "load_failure.json").read_text())
    assert facts["returncode"] == 1
    found = postmortem(read_record(read_lines([str(REAL / "server_load_failure.log")])))
    assert (found.death.classification, found.death.engine_message, found.record.ready_t) == \
        ("startup_failure", "failed to load model", None)
    assert "change the flag, build or environment" in found.actions[0].action
