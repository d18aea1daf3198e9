"""A third engine is one module and one registry line, all the way through: the made-up `toyllm:` naming
(tests/toyllm_dialect.py) registered with one `dialects.register(...)` call, then `inspect`, `watch` and
`rules` run on the simulator speaking it. The simulator renders a dialect it has no hand-written exposition
of from the series the dialect declares (servewatch.sim.metrics_series); nothing under servewatch/ names it.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from servewatch import dialects
from servewatch.cli import main
from servewatch.clock import RealClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import serve
from tests.test_seams import HUNG_S, fault, streams_under_way
from tests.toyllm_dialect import ToyllmDialect

SCRAPES_BEFORE_STALL = 5      # scrapes the recorder takes of a moving engine before the stall


class ScrapeCounter:
    """The simulator's log stream: counts the /metrics GETs its access lines tell, and says when `after`
    more have come (an event, not a sleep)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.scrapes = 0
        self.waiting: list[tuple[int, threading.Event]] = []

    def write(self, text: str) -> None:
        if '"GET /metrics' in text:
            with self.lock:
                self.scrapes += 1
                for target, event in self.waiting:
                    if self.scrapes >= target:
                        event.set()

    def flush(self) -> None:
        pass

    def wait_for(self, more: int, timeout: float) -> bool:
        event = threading.Event()
        with self.lock:
            self.waiting.append((self.scrapes + more, event))
        return event.wait(timeout)


class ToyllmSim:
    """`servewatch sim --dialect toyllm`, in this process (the registration lives here), on 127.0.0.1."""

    def __init__(self):
        self.log = ScrapeCounter()
        self.engine = SimEngine(SimConfig(dialect="toyllm", profile="tiny-cpu", model_name="tiny", max_num_seqs=8),
                                RealClock(), log_stream=self.log)
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        listening = threading.Event()
        self.port = None

        def on_listening(port):
            self.port = port
            listening.set()

        async def run():
            self.stop = asyncio.Event()
            await serve(self.engine, "127.0.0.1", 0, on_listening=on_listening, stop=self.stop)

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(run(),), daemon=True)
        self.thread.start()
        assert listening.wait(HUNG_S), "the simulator did not listen"
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        fault(self.url, "clear")         # a stalled engine would hold its streams through the drain
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(HUNG_S)
        self.loop.close()


@pytest.fixture
def toyllm():
    dialects.register(ToyllmDialect())        # the one registry line
    sim = ToyllmSim()
    yield sim
    sim.close()
    dialects.unregister("toyllm")


def test_inspect_tells_toyllm_by_its_names_through_the_dialect_registry(toyllm, capsys):
    streams_under_way(toyllm.url, n=2)
    assert main(["inspect", toyllm.url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dialect"] == "toyllm" and report["generation"] == "toyllm-1"
    engine, = report["engines"]
    assert engine["labels"] == {"model_name": "tiny", "replica": "0"}
    assert engine["running"] == 2 and engine["counters"]["generation_tokens"] >= 2


def test_watch_records_toyllm_progress_and_gives_a_stall_verdict(toyllm, tmp_path, capsys):
    def stall_once_recorded():
        streams_under_way(toyllm.url, n=3)
        toyllm.log.wait_for(SCRAPES_BEFORE_STALL, HUNG_S)
        fault(toyllm.url, "stall")

    driver = threading.Thread(target=stall_once_recorded, daemon=True)
    driver.start()
    code = main(["watch", toyllm.url, "--interval", "0.2", "--json", "--out", str(tmp_path), "--stop-on-incident",
                 "--duration", str(HUNG_S), "--set", "stall.floor_s=1"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    driver.join(HUNG_S)
    assert code == 1                                   # stopped on the incident
    fired = {line["verdict"]: line for line in lines if line["event"] == "fired"}
    assert "alive_health_ok_no_progress" in fired, lines
    incident = json.loads((tmp_path / fired["alive_health_ok_no_progress"]["bundle"] / "incident.json").read_text())
    assert incident["target"]["dialect"] == "toyllm"
    samples = json.loads((tmp_path / fired["alive_health_ok_no_progress"]["bundle"] / "samples-000.json").read_text())
    tokens = [s["engines"][0]["counters"]["generation_tokens"] for s in samples["samples"]
              if s["source"] == "metrics" and s["dialect"] == "toyllm"]
    assert len(set(tokens)) >= 2 and tokens == sorted(tokens), tokens     # recorded moving, then frozen
    assert f"generation tokens {tokens[-1]:g} unchanged" in fired["alive_health_ok_no_progress"]["why"]


def test_rules_writes_alerts_in_toyllm_names(toyllm, tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("service: chat\nbudget: 30d\nselector: {job: llm}\nobjectives:\n  availability: 99.9\n"
                   "  success: 99.5\n  ttft: {target: 99, threshold: 1}\n  e2e: {target: 99, threshold: 10}\n"
                   "min_requests: 100\n")
    out = tmp_path / "rules.yaml"
    assert main(["rules", "--slo", str(slo), "--dialect", "toyllm", "--out", str(out)]) == 0
    text = out.read_text()
    for name in ("toyllm:requests_running", "toyllm:requests_finished_total", 'toyllm:first_token_seconds_bucket',
                 "toyllm:request_seconds_bucket", "toyllm:http_responses_total"):
        assert name in text, name
    assert "vllm:" not in text and "sglang:" not in text
