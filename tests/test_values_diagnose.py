"""Values of servewatch/doctor/diagnose.py (issue 50: the mutation rule finds it): each explanation the doctor
ranks for a complaint, read from the quantities of a window (supported, ruled out, not measured; its figures, the
score that orders it, the words), the "looks healthy" line, a load run's signature as readings, and the doctor's own
ranges. A runbook's own text is named here as "RUNBOOK branch field" and read from the registry."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servewatch.detectors.registry import runbook_for
from servewatch.detectors.verdict import Verdict
from servewatch.doctor.diagnose import (CANDIDATES, CONNECT_GRACE_S, CONNECT_RETRY_S, CONTENTION_ITL_S,
                                        LONG_OUTPUT_TOKENS, LONG_PROMPT_TOKENS, SYMPTOMS, Readings, _fmt, diagnose,
                                        looks_healthy, readings_from_load)


def verdict(name, why, **details):
    return Verdict(name=name, t=30.0, onset=10.0, why=why, details=details)


SCENARIOS = {
    "nothing": lambda: Readings(),
    "healthy": lambda: Readings(seconds=60.0, scrapes=12, max_running=4, max_waiting=0, max_kv=0.3, slot_limit=256,
                                tokens_moved=True, health_last=200, health_answers=12, tokens_in=44, tokens_out=128,
                                queue_s=0.002, ttft_s=0.08, itl_s=0.012, e2e_s=1.6, preemptions=0,
                                sources=["recorded samples"]),
    "idle_lifetime": lambda: Readings(seconds=30.0, scrapes=1, max_running=0, max_waiting=0, max_kv=0.0,
                                      health_last=200, health_answers=3, ttft_s=1.5, lifetime_means=True,
                                      sources=["recorded samples"]),
    "overload_slots": lambda: Readings(seconds=60.0, scrapes=12, max_running=256, max_waiting=44, max_kv=0.5,
                                       slot_limit=256, tokens_moved=True, queue_s=3.5, ttft_s=3.6, itl_s=0.03,
                                       slot_limit_flag="--max-num-seqs"),
    "overload_no_limit": lambda: Readings(max_running=8, max_waiting=0, max_kv=0.2, queue_s=0.5,
                                          slot_limit_flag="--max-running-requests"),
    "kv_pressure": lambda: Readings(max_running=30, max_waiting=5, max_kv=0.97, preemptions=12, tokens_moved=True),
    "kv_high_alone": lambda: Readings(max_running=30, max_waiting=0, max_kv=0.95, preemptions=0),
    "stall": lambda: Readings(seconds=45.0, scrapes=9, max_running=3, tokens_moved=False, health_last=200,
                              health_answers=9),
    "stall_short": lambda: Readings(seconds=5.0, scrapes=2, max_running=3, tokens_moved=False, health_last=200),
    "stall_idle": lambda: Readings(seconds=45.0, scrapes=9, max_running=0, tokens_moved=False),
    "long_output": lambda: Readings(tokens_out=1024, tokens_in=44, queue_s=0.01, ttft_s=0.05, length_share=0.9),
    "long_output_queued": lambda: Readings(tokens_out=600, queue_s=0.2),
    "long_prompt": lambda: Readings(tokens_in=2905, ttft_s=0.9),
    "contention": lambda: Readings(itl_s=0.05, max_running=200, slot_limit_flag="--max-num-seqs"),
    "engine_dead_status": lambda: Readings(health_last=503, health_dead_status=503, engine_dead_lines=2,
                                           health_answers=4),
    "engine_dead_lines_only": lambda: Readings(engine_dead_lines=1),
    "refused": lambda: Readings(health_failures={"connect": 7}, metrics_failures={"connect": 7, "http_500": 1}),
    "http_errors": lambda: Readings(scrapes=3, health_last=500, health_answers=5, health_failures={"http_500": 5}),
    "process_gone": lambda: Readings(health_last=200, health_answers=3, health_failures={"connect": 4},
                                     engine="llama.cpp", engine_in_api_process=True),
    "process_stopped": lambda: Readings(health_last=200, health_answers=3, health_failures={"connect": 4},
                                        engine="llama.cpp", engine_in_api_process=True, shutdown_lines=2),
    "loop_hung_known": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5},
                                        engine="llama.cpp", metrics_wait_on_engine=True, slots_path="/slots"),
    "loop_hung_unknown": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5}),
    "confirmed": lambda: Readings(max_running=8, max_waiting=3, max_kv=0.5, tokens_moved=True, health_last=503,
                                  verdicts=[verdict("engine_dead", "/health 503 ×3"),
                                            verdict("alive_health_ok_no_progress", "no token for 30 s"),
                                            verdict("overload", "3 waiting", cause="kv"),
                                            verdict("preemption", "12 preempted")]),
    "kv_confirmed": lambda: Readings(max_kv=0.5, verdicts=[verdict("kv_pressure", "KV 99 %")]),
    "edges": lambda: Readings(tokens_out=512, queue_s=0.0999, tokens_in=1000, itl_s=0.049, max_running=0,
                              max_waiting=3, health_last=300, preemptions=4, max_kv=0.9,
                              health_failures={"connect": 2, "http_503": 5}),
    "edges_below": lambda: Readings(tokens_out=600, queue_s=0.1, tokens_in=999, max_running=0, max_waiting=0,
                                    health_last=299, preemptions=3, max_kv=0.8999),
    "never_answered": lambda: Readings(health_failures={"connect": 2, "http_503": 5}),
    "kv_edge": lambda: Readings(max_kv=0.9, max_waiting=0, preemptions=1),
    "stall_at_floor": lambda: Readings(seconds=2.0, max_running=1, tokens_moved=False, health_last=None),
    "overload_at_limit_kv_high": lambda: Readings(max_running=256, slot_limit=256, max_waiting=4, max_kv=0.95,
                                                  tokens_moved=True),
    "loop_not_waiting": lambda: Readings(health_last=200, health_answers=6, metrics_failures={"timeout": 5},
                                         metrics_wait_on_engine=False),
}
SYMPTOM_OF = {"overload_slots": "hangs-under-load", "long_output": "long-answers", "contention": "slow-text",
              "long_prompt": "slow-first-token", "refused": "errors", "kv_pressure": "slow-text",
              "stall": "hangs-under-load", "healthy": "e2e-up", "overload_no_limit": "slow-first-token",
              "kv_high_alone": "hangs-under-load", "stall_short": "errors", "stall_idle": "slow-text",
              "long_output_queued": "e2e-up", "engine_dead_status": "errors", "http_errors": "errors",
              "process_gone": "errors", "process_stopped": "errors", "loop_hung_known": "slow-text",
              "loop_hung_unknown": "long-answers", "loop_not_waiting": "long-answers", "kv_edge": "slow-text",
              "stall_at_floor": "errors", "overload_at_limit_kv_high": "hangs-under-load", "kv_confirmed": "slow-text",
              "never_answered": "errors"}


# Each scenario's explanations as the doctor ranks them, whole: tests/fixtures/diagnose_expected.json, written by
# `python -m tests.test_values_diagnose --write` from what diagnose says now (a runbook's text as "RUNBOOK branch
# field") and read back here; review its diff before committing it.
GOLDEN = Path(__file__).parent / "fixtures" / "diagnose_expected.json"
EXPECTED = json.loads(GOLDEN.read_text(encoding="utf-8"))


def _resolve(value):
    if isinstance(value, str) and value.startswith("RUNBOOK "):
        _, branch, name = value.split(" ")
        branch_ = runbook_for(branch)
        return branch_.check_next[0] if name == "check_next" else getattr(branch_, name)
    return value


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_explanations_ranked(name):
    hypotheses = diagnose(SCENARIOS[name](), SYMPTOM_OF.get(name))
    expected = EXPECTED[name]
    assert [h.to_dict() for h in hypotheses] == [{k: _resolve(v) for k, v in h.items()}
                                                 for h in expected["hypotheses"]]
    assert looks_healthy(SCENARIOS[name](), hypotheses) == expected["healthy"]


def test_the_doctor_s_ranges_and_symptoms():
    assert (LONG_OUTPUT_TOKENS, LONG_PROMPT_TOKENS, CONTENTION_ITL_S) == (512, 1000, 0.05)
    assert (CONNECT_GRACE_S, CONNECT_RETRY_S) == (5.0, 0.25)
    assert set(CANDIDATES) == set(SYMPTOMS) | {None}
    with pytest.raises(ValueError) as refused:
        diagnose(Readings(), "slow")
    assert str(refused.value) == "unknown symptom 'slow'"


@pytest.mark.parametrize("value, unit, pct, text", [
    (None, "", False, "not measured"), (0.305, "", True, "30%"), (0.9994, "s", False, "999.4 ms"),
    (1.0, "s", False, "1.00 s"), (12345.6, "", False, "12,346"), (3, " tokens", False, "3 tokens"),
])
def test_a_figure_in_words(value, unit, pct, text):
    assert _fmt(value, unit, pct) == text


def test_a_load_run_s_signature_as_readings():
    summary = {"signature": {"tokens_in": 44, "tokens_out": 128, "queue_wait_s": 0.01, "ttft_s": 0.2, "itl_s": 0.02,
                             "e2e_s": 2.7, "max_running": 8, "max_waiting": 2, "max_kv": 0.4},
               "server_view": {"slot_limit": 256, "preemptions": 3, "samples": 20, "errors": {"timeout": 2, "connect": 1}},
               "output_tokens_requested": 128}
    r = readings_from_load(summary)
    assert (r.tokens_in, r.tokens_out, r.queue_s, r.ttft_s, r.itl_s, r.e2e_s) == (44, 128, 0.01, 0.2, 0.02, 2.7)
    assert (r.max_running, r.max_waiting, r.max_kv, r.slot_limit, r.preemptions) == (8, 2, 0.4, 256, 3)
    assert r.scrapes == 17
    assert r.metrics_failures == {"timeout": 2, "connect": 1}
    assert r.length_share == 1.0
    assert r.sources == ["load run signature"]
    short = readings_from_load({"tokens_out": 100, "output_tokens_requested": 128})
    assert (short.tokens_out, short.length_share, short.scrapes, short.metrics_failures) == (100, None, 0, {})
    assert readings_from_load({"tokens_out": None, "output_tokens_requested": 128}).length_share is None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_that_refuses_for_the_whole_grace_is_said_refused():
    import time

    from servewatch.doctor.diagnose import refused_throughout

    port = _free_port()
    started = time.monotonic()
    assert refused_throughout(f"http://127.0.0.1:{port}/", 0.3, 0.05) is True
    took = time.monotonic() - started
    assert 0.3 <= took < 0.3 + 2.0                  # the grace, plus an allowance for a loaded machine
    assert refused_throughout(f"http://127.0.0.1:{port}/", 0.0) is True      # no grace: the first refusal decides


def test_a_port_that_listens_or_a_bad_url_is_not_said_refused():
    import socket
    import time

    from servewatch.doctor.diagnose import refused_throughout

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        started = time.monotonic()
        assert refused_throughout(f"http://127.0.0.1:{server.getsockname()[1]}/", 5.0) is False
        assert time.monotonic() - started < 2.0     # at the first connection, not after the grace
    assert refused_throughout("http://127.0.0.1:99999/", 5.0) is False        # no such port: not a refusal


# --- the quantities of a recorded window (the simulator's overload of tests/test_diagnose.py) -----------------

def _readings(window) -> dict:
    import dataclasses

    from servewatch.doctor.diagnose import readings_from_window

    readings = readings_from_window(window)
    out = dataclasses.asdict(readings)
    out["verdicts"] = [v.name for v in readings.verdicts]
    return out


def _same(got: dict, expected: dict) -> bool:
    """Equal key by key, floats to 1e-9 relative (the simulator's means are sums of float seconds)."""
    assert set(got) == set(expected)
    return all(got[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v) for k, v in expected.items())


ENGINE_FACTS = {"health_dead_status": 503, "slot_limit_flag": "--max-num-seqs", "engine": "vLLM",
                "engine_alive_signs": "/health 200, no EngineDeadError / 'Worker proc ... died' lines",
                "engine_in_api_process": False, "metrics_wait_on_engine": False, "slots_path": None}
MEANS = {"queue_s": 2.1832180991768837, "ttft_s": 2.9476416230201723, "itl_s": 0.01938807742402998,
         "e2e_s": 4.696143489331007}


def _good(window):
    from servewatch.timeline.samples import MetricsSample

    return [m for m in window.samples() if isinstance(m, MetricsSample) and m.engines]


def test_the_quantities_of_an_overloaded_window():
    from tests.test_diagnose import _overload_window

    assert _same(_readings(_overload_window(1)), {
        "seconds": 12.0, "scrapes": 25, "max_running": 16.0, "max_waiting": 102.0, "max_kv": 0.023125,
        "slot_limit": 16.0, "tokens_moved": True, "health_last": 200, **ENGINE_FACTS, "preemptions": 0.0,
        "tokens_in": 55.0, "tokens_out": 146.453125, "length_share": 1.0, **MEANS, "engine_dead_lines": 0,
        "shutdown_lines": 0, "health_answers": 25, "health_failures": {}, "metrics_failures": {},
        "lifetime_means": False, "verdicts": ["overload"], "sources": ["recorded samples"]})


def test_one_scrape_gives_the_server_s_lifetime_means_said_as_such():
    from servewatch.timeline.window import Window
    from tests.test_diagnose import _overload_window

    last = _good(_overload_window(1))[-1]
    assert _same(_readings(Window.from_samples([last])), {
        "seconds": 0.0, "scrapes": 1, "max_running": 16.0, "max_waiting": 102.0, "max_kv": 0.01984375,
        "slot_limit": 16.0, "tokens_moved": None, "health_last": None, **ENGINE_FACTS, "preemptions": None,
        "tokens_in": None, "tokens_out": None, "length_share": 1.0, **MEANS, "engine_dead_lines": 0,
        "shutdown_lines": 0, "health_answers": 0, "health_failures": {}, "metrics_failures": {},
        "lifetime_means": True, "verdicts": [], "sources": ["recorded samples"]})


def test_two_scrapes_with_nothing_finished_between_fall_back_to_the_lifetime_means():
    import dataclasses

    from servewatch.timeline.window import Window
    from tests.test_diagnose import _overload_window

    last = _good(_overload_window(1))[-1]
    readings = _readings(Window.from_samples([last, dataclasses.replace(last, t=last.t + 0.5)]))
    assert (readings["seconds"], readings["scrapes"], readings["tokens_moved"], readings["preemptions"]) == (
        0.5, 2, False, 0.0)
    assert (readings["tokens_in"], readings["tokens_out"], readings["lifetime_means"]) == (None, None, True)
    assert {k: readings[k] for k in MEANS} == pytest.approx(MEANS, rel=1e-9)
    assert readings["length_share"] == 1.0


def _one(readings, name, config=None):
    return next(h for h in diagnose(readings, None, config) if h.name == name)


def test_each_explanation_at_the_edge_of_its_conditions():
    from servewatch.detectors.config import DetectorConfig

    assert _one(Readings(max_running=0, max_waiting=0, health_last=300), "idle").verdict == "ruled out"
    assert _one(Readings(max_running=0, max_waiting=0, health_last=None), "idle").verdict == "supported"
    assert _one(Readings(max_running=0, max_waiting=3), "idle").verdict == "ruled out"
    frozen = dict(max_running=2, tokens_moved=False, seconds=10.0)
    assert _one(Readings(**frozen, health_last=300), "stall").verdict == "ruled out"
    assert _one(Readings(max_running=2, tokens_moved=False), "stall", DetectorConfig(stall_floor_s=1.0)).verdict == \
        "ruled out"                                                # no duration: 0 s, below a 1 s floor
    instant = _one(Readings(max_running=2, tokens_moved=False), "stall", DetectorConfig(stall_floor_s=0.0))
    assert instant.why == "2 running and the generation counter did not move in 0.0 s"
    assert _one(Readings(max_kv=0.95, max_waiting=1, preemptions=0), "kv_pressure").verdict == "supported"
    assert _one(Readings(max_kv=0.5, max_waiting=1, max_running=3, tokens_moved=True), "overload").verdict == \
        "supported"
    hung = dict(health_answers=3, metrics_failures={"timeout": 2}, metrics_wait_on_engine=True, engine="llama.cpp")
    assert _one(Readings(**hung, health_last=300), "not_answering").title == \
        "the server does not answer (or answers with errors)"
    assert _one(Readings(**hung, health_last=299), "not_answering").title == \
        "the engine's loop does not answer (/health does)"
    dead = _one(Readings(health_last=503, health_dead_status=503), "engine_dead")
    assert (dead.verdict, dead.why) == ("supported", "/health answered 503")


def test_looks_healthy_from_several_sources_and_without_figures():
    readings = Readings(max_running=1, max_waiting=0, max_kv=0.1, sources=["recorded samples", "load run signature"])
    line = looks_healthy(readings, diagnose(readings))
    assert line.splitlines()[0] == ("Looks healthy: nothing measured supports a problem (from the recorded samples, "
                                    "load run signature)")
    bare = Readings(scrapes=1)
    line = looks_healthy(bare, diagnose(bare, "errors"))
    assert line.splitlines() == [
        "Looks healthy: nothing measured supports a problem (from what was recorded)",
        "   ruled out: 1 explanation (below); not measured here (listed last): the engine died; alive but not "
        "progressing (a stalled engine or worker); overload: demand above capacity"]


def _as_written(hypothesis: dict) -> dict:
    """A hypothesis as the golden file holds it: a field that is a registered runbook's text as "RUNBOOK branch
    field" (the branch whose text matches the most fields of this hypothesis)."""
    from servewatch.detectors.registry import names

    fields = {"next_check": "check_next", "safe_action": "safe_action", "rollback": "rollback",
              "restart_destroys": "restart_destroys"}

    def text(branch, field):
        found = runbook_for(branch)
        return found.check_next[0] if field == "check_next" else getattr(found, field)

    matches = {b: sum(hypothesis.get(k) == text(b, f) for k, f in fields.items()) for b in names() if runbook_for(b)}
    best = max(matches, key=lambda b: matches[b]) if matches and max(matches.values()) else None
    return {k: (f"RUNBOOK {best} {fields[k]}" if best and k in fields and v == text(best, fields[k]) else v)
            for k, v in hypothesis.items()}


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    written = {}
    for name in SCENARIOS:
        hypotheses = diagnose(SCENARIOS[name](), SYMPTOM_OF.get(name))
        written[name] = {"hypotheses": [_as_written(h.to_dict()) for h in hypotheses],
                         "healthy": looks_healthy(SCENARIOS[name](), hypotheses)}
    GOLDEN.write_text(json.dumps(written, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{GOLDEN}: {len(written)} scenarios")
