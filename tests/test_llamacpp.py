"""llama.cpp's llama-server as a third engine (issue 53): its dialect (servewatch/dialects/llamacpp.py) read from
bodies written the way its source writes them (tools/server/server-task.cpp, server-context.cpp; each test names
the lines), its hang told from a long prompt batch (not_serving), the simulator speaking it, and the count of what
the dialect needed: one module and one registry line."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servewatch import dialects
from servewatch.detectors import not_serving as N
from servewatch.detectors.config import DetectorConfig
from servewatch.dialects import llamacpp
from servewatch.engine.state import Counters, EngineState
from servewatch.timeline.samples import DEADLINE, HealthSample, LogEvent, MetricsSample, ProbeSample
from servewatch.timeline.window import Window

ROOT = Path(__file__).resolve().parent.parent
HUNG_S = 10.0        # a condition the tests wait on is met well within this (the simulator answers in milliseconds)


def exposition(prompt=120, predicted=48, decode=60, processing=1, deferred=0, prompt_tps=310.5, predicted_tps=22.75):
    """A /metrics body as server_task_result_metrics::to_metrics writes it (server-task.cpp:1531-1610): HELP, TYPE
    and one unlabelled sample per item, counters first, then gauges."""
    counters = [("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", prompt),
                ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", 16),
                ("prompt_seconds_total", "Total time spent processing prompts", 0.41),
                ("tokens_predicted_total", "Number of generation tokens processed", predicted),
                ("tokens_predicted_seconds_total", "Total time spent generating tokens", 2.2),
                ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and "
                                   "multimodal decoding", decode),
                ("n_tokens_max", "Largest observed sequence length (prompt + generation)", 168)]
    gauges = [("prompt_tokens_seconds", "Average prompt throughput in tokens/s", prompt_tps),
              ("predicted_tokens_seconds", "Average generation throughput in tokens/s", predicted_tps),
              ("requests_processing", "Number of requests processing", processing),
              ("requests_deferred", "Number of requests deferred", deferred),
              ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", 1.25)]
    lines = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, text, value in items:
            lines += [f"# HELP llamacpp:{name} {text}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value}"]
    return "\n".join(lines) + "\n"


# --- the dialect -------------------------------------------------------------------------------------------------

def test_a_scrape_reads_as_one_engine_with_its_slots_and_totals():
    scrape = dialects.read_scrape(exposition(prompt=120, predicted=48, decode=60, processing=2, deferred=3))
    assert (scrape.dialect, scrape.naming) == ("llamacpp", "llamacpp")
    [state] = scrape.engines
    assert (state.labels, state.running, state.waiting, state.kv_usage) == ({}, 2, 3, None)
    assert (state.counters.prompt_tokens, state.counters.generation_tokens, state.counters.steps) == (120, 48, 60)
    assert state.counters.progress() == (60, 48, 120)


def test_the_gauges_every_scrape_resets_are_never_read_so_another_scraper_changes_nothing_servewatch_sees():
    # Every GET /metrics resets the buckets behind these two (server-context.cpp:5052-5053, 2723-2725): another
    # scraper moves them, and servewatch's own scrapes shorten another's averaging window. servewatch reads the
    # totals only, so two bodies that differ in nothing but those gauges read the same.
    assert set(llamacpp.RESET_ON_SCRAPE) == {"llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds"}
    assert not set(llamacpp.RESET_ON_SCRAPE) & set(dialects.wanted_families())
    fresh = dialects.read_scrape(exposition(prompt_tps=310.5, predicted_tps=22.75)).engines
    reset = dialects.read_scrape(exposition(prompt_tps=0, predicted_tps=0)).engines
    assert fresh == reset and fresh[0].counters.generation_tokens == 48


def test_the_slot_listing_reads_as_numbers_and_tells_a_slot_still_on_its_prompt():
    # server_slot::to_json (server-context.cpp:724-757) without LLAMA_SERVER_SLOTS_DEBUG: no prompt, no text
    body = [{"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": True, "id_task": 7,
             "n_prompt_tokens": 2048, "n_prompt_tokens_processed": 2048, "n_prompt_tokens_cache": 0,
             "params": {"n_predict": 64},
             "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 64, "n_decoded": 0}]},
            {"id": 1, "n_ctx": 4096, "speculative": False, "is_processing": True, "id_task": 5,
             "n_prompt_tokens": 40, "n_prompt_tokens_processed": 30, "n_prompt_tokens_cache": 8,
             "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 6, "n_decoded": 10}]},
            {"id": 2, "n_ctx": 4096, "speculative": False, "is_processing": False}]
    first, second, third = llamacpp.DIALECT.read_slots(body)
    assert (first.id, first.busy, first.prefilling, first.prompt_processed, first.decoded) == (0, True, True, 2048, 0)
    assert (second.prefilling, second.prompt_cached, second.decoded, second.remaining) == (False, 8, 10, 6)
    assert (third.busy, third.prefilling, third.n_ctx, third.decoded) == (False, False, 4096, None)
    assert "prompt" not in repr(llamacpp.DIALECT.read_slots(body)).replace("prompt_", "")
    with pytest.raises(ValueError, match="slot 0 has no integer id"):
        llamacpp.DIALECT.read_slots([{"id": "0", "is_processing": True}])
    with pytest.raises(ValueError, match="not a JSON array"):
        llamacpp.DIALECT.read_slots({"slots": []})
    with pytest.raises(ValueError, match="vllm has no slot listing"):
        dialects.by_name("vllm").read_slots(body)


def test_health_process_and_flags_are_the_servers():
    d = llamacpp.DIALECT
    assert (d.loading_message, d.slots_path, d.metrics_wait_on_engine, d.health_runs_through_engine) == \
        ("Loading model", "/slots", True, False)
    assert d.health_dead_status is None
    assert (d.role_of("llama-server"), d.role_of("python3")) == ("api", None)
    assert (d.slot_limit_flag, d.context_length_flag) == ("--parallel", "--ctx-size")
    assert not d.alert_namings       # no latency histograms or request outcomes: no alert rules in its names


@pytest.mark.parametrize("line, found", [
    # the SLT_INF / SRV_INF macros (server-common.h:28, 35): "slot %12.*s: id %2d | task %d | ", "srv  %12.*s: "
    ("slot print_timing: id  0 | task 12 | prompt processing, n_tokens =   2048, progress = 0.50, t =   3.10 s / "
     "660.65 tokens per second",
     ("stats", {"batch": "prefill", "slot": 0, "tokens": 2048, "progress": 0.5, "seconds": 3.1, "tps": 660.65})),
    ("slot print_timing: id  3 | task 40 | n_gen =    120, tg =  21.50 t/s, tg_3s =  20.10 t/s",
     ("stats", {"batch": "decode", "slot": 3, "decoded": 120, "tps": 21.5})),
    ("srv    load_model: loading model '/models/tiny.gguf'", ("startup", {"stage": "weights_loading"})),
    ("srv          init: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'",
     ("startup", {"stage": "kv_cache_size", "max_running": 4, "per_request": 4096})),
    # server.cpp:498, 526: written by llama_server(), its name 12 characters wide
    ("srv  llama_server: model loaded", ("startup", {"stage": "ready"})),
    ("srv  llama_server: listening on http://127.0.0.1:8080", ("startup", {"stage": "api_listening"})),
    ("srv    load_model: loaded multimodal model, '/models/mm.gguf'", None),
    ("srv  llama_server: cleaning up before exit...", ("shutdown", {"reason": "requested"})),
    ("srv    load_model: failed to load model, '/models/x.gguf'", ("startup_failure", {"reason": "failed to load model"})),
    ("srv  update_slots: decode() failed: out of memory", ("error", {"reason": "decode() failed"})),
])
def test_log_lines_read_as_numbers_and_literals(line, found):
    match = llamacpp.LOG_PREFIX.match("0.03.120.004 I " + line)
    assert match and match.group("level") == "I" and match.group("msg") == line
    assert llamacpp.LOG_PREFIX.match(line).group("msg") == line        # neither stamp nor level by default
    assert llamacpp.DIALECT.parse_log_message(line) == ([found] if found else [])
    assert "/models" not in repr(llamacpp.DIALECT.parse_log_message(line))
    from servewatch.bundle.serialize import sample_to_dict

    for kind, fields in llamacpp.DIALECT.parse_log_message(line):      # a bundle keeps the whole finding
        assert sample_to_dict(LogEvent(T0, kind, fields))["fields"] == fields


def test_the_log_prefix_reads_only_the_servers_own_lines():
    for other in ("INFO 12-05 10:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s",
                  "[2026-12-05 10:00:01] Decode batch, #running-req: 1", "llama_model_loader: loaded meta data"):
        assert llamacpp.LOG_PREFIX.match(other) is None


# --- the hang: not_serving ---------------------------------------------------------------------------------------

T0 = 1000.0


def _state(running=0.0):
    return EngineState("llamacpp", "llamacpp", {}, running=running, waiting=0.0,
                       counters=Counters(prompt_tokens=100.0, generation_tokens=40.0, steps=50.0))


def _window(*, hang_at=10.0, running=0.0, logs=(), dialect="llamacpp", span=24):
    """/health 200 every second up to `span`; /metrics answers until `hang_at`, then each scrape times out (5 s);
    probes asked at 12 and 20 miss their 3 s deadline (at 15 and 23)."""
    good = tuple(MetricsSample(T0 + t, dialect, dialect, (_state(running),)) for t in range(int(hang_at)))
    timeouts = tuple(MetricsSample(T0 + t, None, None, scrape_s=None, error="timeout")
                     for t in range(int(hang_at) + 5, span, 5))
    return Window(health=tuple(HealthSample(T0 + t, 200, 0.001) for t in range(span)), metrics=good + timeouts,
                  probe=tuple(ProbeSample(T0 + asked + 3.0, DEADLINE, None, 3.0, error="timeout") for asked in (12, 20)),
                  logs=tuple(logs))


def test_health_ok_while_metrics_time_out_and_probes_miss_is_not_serving_naming_the_endpoint():
    [verdict] = N.detect(_window(), DetectorConfig())
    assert verdict.name == "not_serving" and verdict.onset == T0 + 12
    # scrapes timed out at 15 and 20; the last answer came at 9, the verdict at 23 (the second miss)
    assert verdict.details == {**verdict.details, "timed_out": "/metrics", "metrics_timeouts": 2,
                               "metrics_silent_s": 14.0}
    assert verdict.t == T0 + 23
    assert "/metrics has not answered for 14.0 s (2 scrape(s) timed out meanwhile" in verdict.why
    assert "while /health answered 200" in verdict.why
    assert [(e.source, e.t - T0, e.field, e.value) for e in verdict.evidence if e.field == "error"] == \
        [("metrics", 15, "error", "timeout"), ("metrics", 20, "error", "timeout")]


def test_a_scrape_still_waiting_when_the_probes_miss_is_silence_too():
    window = _window(hang_at=10.0)
    window = Window(health=window.health, metrics=tuple(m for m in window.metrics if m.error is None),
                    probe=window.probe)
    [verdict] = N.detect(window, DetectorConfig())
    assert (verdict.details["metrics_timeouts"], verdict.details["metrics_silent_s"]) == (0, 14.0)
    assert "/metrics has not answered for 14.0 s (0 scrape(s) timed out meanwhile" in verdict.why


def test_a_scrape_merely_late_is_no_silence():
    # scrapes every second until 9; probes asked at 12 and 20 fail at once (HTTP 500) at 12.5 and 20.5: no scrape has
    # ended since 12, but 20.5 - 9 = 11.5 s is over 3 x the 1 s cadence: silent. With the probes at 9.2 and 9.6, the
    # 0.6 s since the last answer is not.
    from servewatch.timeline.samples import FAILED

    def window(*asked):
        w = _window()
        return Window(health=tuple(h for h in w.health if h.t <= T0 + asked[-1] + 0.5),
                      metrics=tuple(m for m in w.metrics if m.error is None),
                      probe=tuple(ProbeSample(T0 + a + 0.5, FAILED, 0.5, 3.0, status=500, error="http_500")
                                  for a in asked))
    assert N.detect(window(12, 20), DetectorConfig())[0].details["timed_out"] == "/metrics"
    [verdict] = N.detect(window(9.2, 9.6), DetectorConfig())
    assert "timed_out" not in verdict.details and "/metrics has not answered" not in verdict.why


def test_the_hang_under_load_is_named_though_the_last_scrape_before_it_showed_requests_running():
    # The gauges read before the loop hung are stale: they no longer send the verdict to the stall detector, which
    # cannot fire without fresh scrapes.
    [verdict] = N.detect(_window(running=3.0), DetectorConfig())
    assert verdict.details["timed_out"] == "/metrics" and "running" not in verdict.details


def test_a_long_prompt_batch_logged_meanwhile_is_not_a_hang():
    progress = LogEvent(T0 + 18.0, "stats", {"batch": "prefill", "slot": 0, "tokens": 4096, "progress": 0.5})
    assert N.detect(_window(running=1.0, logs=[progress]), DetectorConfig()) == []
    # the same line from before the first missed probe was sent proves nothing about now
    earlier = LogEvent(T0 + 11.0, "stats", {"batch": "prefill", "slot": 0, "tokens": 4096, "progress": 0.5})
    assert len(N.detect(_window(running=1.0, logs=[earlier]), DetectorConfig())) == 1


@pytest.mark.parametrize("progress, tps, hang", [
    (0.25, 100.0, False),     # 6144 tokens left at 100/s: 61 s; silent 13 s since the line: a long prompt, no verdict
    (0.95, 1000.0, True),     # 108 tokens left at 1000/s: 0.1 s, long overdue at 13 s
    (0.5, 320.0, True),       # 2048 left at 320/s: 6.4 s, twice that 12.8 s < 13 s: the hang is said
    (0.5, 310.0, False),      # 2048 left at 310/s: 6.61 s, twice that 13.2 s > 13 s: still due
])
def test_a_prompt_under_way_is_waited_for_twice_the_rest_of_it_at_its_logged_rate(progress, tps, hang):
    # the line at 10 (before the first probe was asked at 12): 2048 prompt tokens computed; the verdict's time is 23
    line = LogEvent(T0 + 10.0, "stats", {"batch": "prefill", "slot": 0, "tokens": 2048, "progress": progress,
                                        "tps": tps, "seconds": 20.0})
    assert N.PROMPT_DUE_FACTOR == 2.0
    assert len(N.detect(_window(running=1.0, logs=[line]), DetectorConfig())) == (1 if hang else 0)


def test_an_engine_whose_metrics_do_not_wait_on_its_loop_keeps_the_old_rule():
    # vLLM answers /metrics from its API process: its timeouts say nothing of the engine, the stale gauges decide
    assert N.detect(_window(running=3.0, dialect="vllm"), DetectorConfig()) == []


# --- the simulator speaks it -------------------------------------------------------------------------------------

class LlamacppSim:
    """`servewatch sim --dialect llamacpp` in this process, on 127.0.0.1, starting for `startup` seconds."""

    def __init__(self, startup: float):
        from servewatch.clock import RealClock
        from servewatch.sim import SimConfig, SimEngine
        from servewatch.sim.server import serve

        self.engine = SimEngine(SimConfig(dialect="llamacpp", profile="tiny-cpu", model_name="tiny", max_num_seqs=3,
                                          startup_seconds=startup), RealClock())
        self.loop = asyncio.new_event_loop()
        listening = threading.Event()
        self.stop = None

        def on_listening(port):
            self.url = f"http://127.0.0.1:{port}"
            listening.set()

        async def run():
            self.stop = asyncio.Event()
            await serve(self.engine, "127.0.0.1", 0, on_listening=on_listening, stop=self.stop)

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(run(),), daemon=True)
        self.thread.start()
        assert listening.wait(HUNG_S)

    def get(self, path, timeout=HUNG_S):
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def post(self, path, body):
        request = urllib.request.Request(self.url + path, json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=HUNG_S) as answer:
            return answer.status, json.loads(answer.read())

    def close(self):
        self.post("/_sim/fault", {"kind": "clear"})
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(HUNG_S)


@pytest.fixture
def sim():
    server = LlamacppSim(startup=60.0)
    yield server
    server.close()


def test_the_simulator_answers_loading_model_then_its_metrics_and_slots_and_hangs_as_the_decode_loop_does(sim):
    status, body = sim.get("/health")
    assert (status, json.loads(body)["error"]["message"]) == (503, "Loading model")
    assert sim.get("/metrics")[0] == 503
    sim.engine._become_ready(sim.engine.clock.now())          # the model is loaded
    assert sim.get("/health")[0] == 200
    status, body = sim.get("/metrics")
    [state] = dialects.read_scrape(body).engines
    assert (state.dialect, state.running, state.counters.steps) == ("llamacpp", 0, 0)
    status, body = sim.get("/slots")
    assert [s.busy for s in llamacpp.DIALECT.read_slots(json.loads(body))] == [False, False, False]
    assert sim.post("/v1/completions", {"prompt": "the sky is", "max_tokens": 4})[0] == 200
    [state] = dialects.read_scrape(sim.get("/metrics")[1]).engines
    assert state.counters.generation_tokens == 4 and state.counters.steps >= 4 and state.counters.prompt_tokens > 0

    sim.post("/_sim/fault", {"kind": "stall"})                # the decode loop hangs
    assert sim.get("/health")[0] == 200
    for path in ("/metrics", "/slots"):
        with pytest.raises(TimeoutError):
            sim.get(path, timeout=0.5)


# --- what the dialect needed ----------------------------------------------------------------------------------

# The lab (which builds and starts the real server) and the drill's real-engine plans run a llama-server process:
# they are tools for the real engine, not what reading one needs.
TOOLS_THAT_RUN_THE_REAL_SERVER = ("servewatch/lab/", "servewatch/commands/lab.py", "servewatch/drill/")


def test_the_dialect_needed_one_module_and_one_registry_line():
    """Under servewatch/, only its own module and one line of the registry name the engine: the sources, the
    detectors, the recorder, the bundle and the simulator serve it through the Dialect interface. A second file or
    line that names it fails here."""
    pattern = re.compile(r"llamacpp|llama\.cpp|llama-server", re.IGNORECASE)
    files: dict[str, list[str]] = {}
    for path in sorted((ROOT / "servewatch").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name.startswith(TOOLS_THAT_RUN_THE_REAL_SERVER):
            continue
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if pattern.search(line)]
        if lines:
            files[name] = lines
    assert set(files) == {"servewatch/dialects/llamacpp.py", "servewatch/dialects/__init__.py"}, sorted(files)
    [line] = files["servewatch/dialects/__init__.py"]
    assert re.search(r'BUILTINS = \("vllm", "sglang", "llamacpp"\)', line)


# --- the hang end to end: watch on the simulator -----------------------------------------------------------------

class ScrapesSeen:
    """Counts the simulator's /metrics renderings and says when `more` have come (an event, not a sleep)."""

    def __init__(self, engine):
        self.lock = threading.Lock()
        self.count = 0
        self.waiting: list[tuple[int, threading.Event]] = []
        render = engine.metrics_text

        def counted():
            text = render()
            with self.lock:
                self.count += 1
                for target, event in self.waiting:
                    if self.count >= target:
                        event.set()
            return text

        engine.metrics_text = counted

    def wait_for(self, more: int) -> bool:
        event = threading.Event()
        with self.lock:
            self.waiting.append((self.count + more, event))
        return event.wait(HUNG_S)


@pytest.fixture
def ready_sim():
    server = LlamacppSim(startup=0.0)
    yield server
    server.close()


def watch_until_hung(sim, out, capsys, *, load: int = 0):
    """`servewatch watch --json --out OUT --stop-on-incident` on `sim`, hung (the sim's stall) after 5 scrapes were
    seen, `load` streams under way first: (exit status, the JSON lines, the fired lines)."""
    from servewatch.cli import main
    from tests.test_seams import streams_under_way

    seen = ScrapesSeen(sim.engine)

    def hang_once_recorded():
        if load:
            streams_under_way(sim.url, n=load)
        seen.wait_for(5)
        sim.post("/_sim/fault", {"kind": "stall"})

    driver = threading.Thread(target=hang_once_recorded, daemon=True)
    driver.start()
    code = main(["watch", sim.url, "--interval", "0.2", "--json", "--out", str(out), "--stop-on-incident",
                 "--probe-interval", "1", "--probe-deadline", "1", "--duration", "40"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    driver.join(HUNG_S)
    return code, lines, [line for line in lines if line["event"] == "fired"]


@pytest.mark.parametrize("load, verdict", [(0, "not_serving"), (2, "alive_health_ok_no_progress")],
                         ids=["idle: /metrics silent, the probe names it", "under load: counters frozen"])
def test_watch_names_the_loop_hang_idle_and_under_load(ready_sim, load, verdict, tmp_path, capsys):
    """As the lab's real llama-server: hung outside a step (idle) /metrics and /slots stop answering while /health is
    200, and the probe's misses with /metrics silent are not_serving; hung inside a step (requests running) all three
    answer, the counters frozen with requests processing: alive_health_ok_no_progress. Both restart-class."""
    from servewatch.detectors import registry

    code, lines, fired = watch_until_hung(ready_sim, tmp_path, capsys, load=load)
    assert code == 1 and [line["verdict"] for line in fired] == [verdict], lines
    assert registry.action_of(verdict) == fired[0]["action"] == "restart"
    if verdict == "not_serving":
        assert "/metrics has not answered for" in fired[0]["why"] and "while /health answered 200" in fired[0]["why"]
    else:
        assert "with 2 running" in fired[0]["why"] and "/health 200" in fired[0]["why"]
    incident = json.loads((tmp_path / fired[0]["bundle"] / "incident.json").read_text())
    assert incident["target"]["dialect"] == "llamacpp"


# --- the slot picture: a bounded source --------------------------------------------------------------------------

def test_the_slots_source_says_which_slot_is_busy_and_for_how_long(ready_sim):
    from servewatch.clock import RealClock
    from servewatch.sources.http import http_transport
    from servewatch.sources.slots import SlotsSource
    from servewatch.transport.contract import Http1Transport
    from tests.test_seams import streams_under_way

    streams_under_way(ready_sim.url, n=2)
    clock = RealClock()

    async def readings(max_bytes=2**20):
        async with Http1Transport() as transport:
            source = SlotsSource(http_transport(transport, ready_sim.url + "/slots", timeout_s=0.5, max_bytes=max_bytes),
                                 clock, 0.2, llamacpp.DIALECT)
            first = (await source.poll())[0]
            second = (await source.poll())[0]
            ready_sim.post("/_sim/fault", {"kind": "stall"})
            hung = (await source.poll())[0]
            again = (await source.poll())[0]
            ready_sim.post("/_sim/fault", {"kind": "clear"})
            return first, second, hung, again

    first, second, hung, again = asyncio.run(readings())
    assert (first.error, first.busy, first.prefilling, len(first.slots)) == (None, 2, 0, 3)
    busy = [view for view in second.slots if view.slot.busy]
    assert [view.slot.id for view in busy] == [0, 1] and all(view.slot.decoded >= 1 for view in busy)
    # the same request on the same slot: busy since the first reading, so longer by the time between the two
    assert all(b.busy_s >= a.busy_s + (second.t - first.t) - 1e-6 for a, b in zip(first.slots, second.slots)
               if a.slot.busy)
    assert [view.busy_s for view in second.slots if not view.slot.busy] == [None]
    # stalled inside a step (requests running), the listing still answers, its numbers frozen (as the real server's
    # loop hung inside a decode: tests/fixtures/llamacpp/hang_in_decode_under_4_streams_endpoints.json)
    assert (hung.error, hung.busy, again.error) == (None, 2, None)
    assert [v.slot.decoded for v in again.slots] == [v.slot.decoded for v in hung.slots]
    [small] = asyncio.run(_one_reading(ready_sim.url + "/slots", max_bytes=64))
    assert small.error == "too_large"


async def _one_reading(url, max_bytes=2**20, timeout_s=2.0):
    from servewatch.clock import RealClock
    from servewatch.sources.http import http_transport
    from servewatch.sources.slots import SlotsSource
    from servewatch.transport.contract import Http1Transport

    async with Http1Transport() as transport:
        return await SlotsSource(http_transport(transport, url, timeout_s=timeout_s, max_bytes=max_bytes), RealClock(),
                                 0.2, llamacpp.DIALECT).poll()


def test_the_slots_source_reads_the_loading_503_a_body_of_another_shape_and_a_hung_loop_as_failures(sim):
    [loading] = asyncio.run(_one_reading(sim.url + "/slots"))
    assert (loading.error, loading.slots) == ("http_503", ())
    sim.engine._become_ready(sim.engine.clock.now())
    [ready] = asyncio.run(_one_reading(sim.url + "/slots"))
    assert (ready.error, ready.busy, len(ready.slots)) == (None, 0, 3)
    [not_json] = asyncio.run(_one_reading(sim.url + "/metrics"))
    assert (not_json.error, not_json.slots) == ("parse", ())
    [no_listing] = asyncio.run(_one_reading(sim.url + "/v1/models"))      # JSON, but not a slot array
    assert no_listing.error == "parse"
    sim.post("/_sim/fault", {"kind": "stall"})           # the loop hung outside a step: the listing waits on it
    [hung] = asyncio.run(_one_reading(sim.url + "/slots", timeout_s=0.5))
    assert (hung.error, hung.slots) == ("timeout", ())


def test_inspect_shows_the_engine_and_its_slot_picture(ready_sim, capsys):
    from servewatch.cli import main
    from tests.test_seams import streams_under_way

    streams_under_way(ready_sim.url, n=2)
    assert main(["inspect", ready_sim.url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["dialect"], report["engines"][0]["running"]) == ("llamacpp", 2)
    slots = report["slots"]
    assert (slots["error"], slots["busy"], [s["busy"] for s in slots["slots"]]) == (None, 2, [True, True, False])
    assert all(s["decoded"] >= 1 and s["prompt_processed"] > 0 for s in slots["slots"][:2])
    assert main(["inspect", ready_sim.url]) == 0
    out = " ".join(capsys.readouterr().out.split())          # the console folds long lines
    assert re.search(r"slots: 2 of 3 busy: slot 0 generating \(\d+ tokens\); slot 1 generating \(\d+ tokens\)", out)


# --- the demo speaks it -----------------------------------------------------------------------------------------

def test_the_demo_plan_expects_what_this_engine_can_show():
    from servewatch.demo.plan import demo_plan

    def expects(fast, dialect):
        return {p.name: p.expect for p in demo_plan(fast, dialect) if p.is_fault}

    # one process: its death is the process's exit; a stall under load is inside a step, its counters frozen
    assert expects(False, "llamacpp") == expects(True, "llamacpp") == {
        "stall": ("alive_health_ok_no_progress",), "idle-wedge": ("not_serving",), "engine-death": ("process_exit",)}
    assert expects(False, "vllm") == expects(False, None) == {
        "stall": ("alive_health_ok_no_progress",), "idle-wedge": ("not_serving",),
        "engine-death": ("engine_dead", "process_exit")}


def test_the_fast_demo_runs_on_the_simulator_speaking_llamacpp(tmp_path, capsys):
    from servewatch.cli import main

    assert main(["demo", "--fast", "--dialect", "llamacpp", "--json", "--out", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dialect"] == "llamacpp"
    assert {(v["phase"], v["verdict"]) for v in report["verdicts"]} >= {
        ("stall", "alive_health_ok_no_progress"), ("idle-wedge", "not_serving"), ("engine-death", "process_exit")}
    assert "exports no latency histograms" in (tmp_path / "report.html").read_text()


# --- the real llama-server's outputs (tests/fixtures/llamacpp, captured from the lab's build) -------------------

REAL = ROOT / "tests" / "fixtures" / "llamacpp"


def test_a_real_scrape_reads_as_its_totals_and_a_second_scraper_changes_nothing_servewatch_reads():
    first = (REAL / "metrics_after_completions.txt").read_text()
    second = (REAL / "metrics_after_completions_second_scrape.txt").read_text()
    gauge = re.compile(r"^llamacpp:predicted_tokens_seconds (\S+)$", re.MULTILINE)
    assert (float(gauge.search(first)[1]), float(gauge.search(second)[1])) == (2505.95, 0.0)   # reset by the scrape
    [state] = dialects.read_scrape(first).engines
    assert (state.running, state.waiting) == (0, 0)
    assert (state.counters.prompt_tokens, state.counters.generation_tokens, state.counters.steps) == (21, 103, 103)
    assert dialects.read_scrape(second).engines == [state]


def test_the_real_loading_answer_is_the_dialects_and_the_simulators():
    status, body = (REAL / "health_loading.txt").read_text().split("\n", 1)
    real = json.loads(body)
    assert (int(status), real["error"]["message"]) == (503, llamacpp.DIALECT.loading_message)
    assert real == {"error": {"message": "Loading model", "type": llamacpp.LOADING_ERROR_TYPE, "code": 503}}
    server = LlamacppSim(startup=60.0)
    try:
        code, simulated = server.get("/health")
        assert (code, json.loads(simulated)) == (503, real)
    finally:
        server.close()


def test_the_real_servers_log_reads_as_its_start_and_its_stop():
    found = []
    for line in (REAL / "server_start_and_requests.log").read_text().splitlines():
        match = llamacpp.LOG_PREFIX.match(line)
        if match:
            found += llamacpp.DIALECT.parse_log_message(match.group("msg"))
    assert found == [("startup", {"stage": "weights_loading"}),
                     ("startup", {"stage": "kv_cache_size", "max_running": 4, "per_request": 2048}),
                     ("startup", {"stage": "ready"}), ("startup", {"stage": "api_listening"}),
                     ("shutdown", {"reason": "requested"})]


def test_real_slot_listings_read_as_numbers():
    idle = llamacpp.DIALECT.read_slots(json.loads((REAL / "slots_idle.json").read_text()))
    assert [(s.id, s.busy, s.n_ctx) for s in idle] == [(0, False, 2048), (1, False, 2048), (2, False, 2048),
                                                        (3, False, 2048)]
    # a slot after its request keeps that request's numbers (server-context.cpp:734, task_prev): idle all the same
    after = llamacpp.DIALECT.read_slots(json.loads((REAL / "slots_after_request.json").read_text()))
    assert [(s.busy, s.prefilling, s.prompt_tokens, s.remaining) for s in after] == [
        (False, False, None, None), (False, False, 511, -1)]


def test_the_real_hang_endpoints_make_the_verdict():
    """The lab's llama-server with its main thread hung: /health 200 at once, /metrics and /slots with no answer
    in 3 s. Those answers, every second, with the probes missing, are the not_serving verdict."""
    seen = json.loads((REAL / "hang_idle_endpoints.json").read_text())
    assert (seen["/health"]["status"], seen["/metrics"]["status"], seen["/slots"]["status"]) == (200, None, None)
    timeout = seen["/metrics"]["seconds"]
    good = tuple(MetricsSample(T0 + t, "llamacpp", "llamacpp", (_state(),)) for t in range(10))
    silent = tuple(MetricsSample(T0 + t, None, None, error="timeout") for t in range(10 + int(timeout), 24, 3))
    window = Window(health=tuple(HealthSample(T0 + t, seen["/health"]["status"], seen["/health"]["seconds"])
                                 for t in range(24)), metrics=good + silent,
                    probe=tuple(ProbeSample(T0 + a + 3.0, DEADLINE, None, 3.0, error="timeout") for a in (12, 20)))
    [verdict] = N.detect(window, DetectorConfig())
    assert verdict.details["timed_out"] == "/metrics" and verdict.details["metrics_timeouts"] == 4   # 13, 16, 19, 22
