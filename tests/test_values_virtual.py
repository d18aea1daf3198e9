"""Values of load's virtual-time driver, servewatch/load/virtual.py (issue 50): against a stand-in engine whose
token times are known (first token 0.1 s after the request, then one every 0.05 s), each record's times (sent
exactly when scheduled, START_MARGIN_S after the first scrape; TTFT, E2E), its errors (rejected: HTTP 400, a dead
engine: HTTP 500, a server not answering: connect, one that never ends: a timeout once the drain is over, and the
engine told to abort it), the server view's scrape times, the run's wall time, and a trace replayed at its rows'
times and lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servewatch.clock import VirtualClock
from servewatch.errors import ServewatchError
from servewatch.load import records as R
from servewatch.load import virtual as V
from servewatch.load.scenarios import LoadConfig
from servewatch.sim import EngineDeadError, RequestRejected

START = 1_000.0
METRICS = (Path(__file__).resolve().parent / "fixtures" / "metrics" / "vllm_kv_pressure_t0.prom").read_text()
TTFT, GAP = 0.1, 0.05


class Handle:
    def __init__(self, engine, sent, max_tokens, hang, what="ok"):
        self.engine, self.hang = engine, hang
        self.prompt_len = None if what == "no-usage" else 7
        count = 1 if hang else 2 if what == "short" else max_tokens
        start = sent + (100.0 if what == "slow" else 0.0)
        self.times = [start + TTFT + k * GAP for k in range(count)]

    @property
    def token_times(self):
        return [t for t in self.times if t <= self.engine.clock.now()]

    @property
    def output_len(self):
        return len(self.token_times)

    @property
    def finished_ts(self):
        return None if self.hang else self.times[-1]

    @property
    def finished(self):
        return not self.hang and self.engine.clock.now() >= self.times[-1]

    @property
    def finish_reason(self):
        return ("stop" if len(self.times) == 2 else "length") if self.finished else None


class Engine:
    def __init__(self, behaviours=(), down=()):
        self.clock = VirtualClock(START)
        self.config = type("C", (), {"model_name": "fake-model"})()
        self.behaviours = list(behaviours)
        self.down = down                      # (from, to) times when /health answers nothing
        self.submitted, self.aborted, self.steps = [], [], []

    def health(self):
        return 0 if self.down and self.down[0] <= self.clock.now() < self.down[1] else 200

    def metrics_text(self):
        return METRICS

    def submit(self, prompt, max_tokens, ignore_eos):
        i = len(self.submitted)
        self.submitted.append((self.clock.now(), prompt, max_tokens, ignore_eos))
        what = self.behaviours[i] if i < len(self.behaviours) else "ok"
        if what == "reject":
            raise RequestRejected("too long")
        if what == "dead":
            raise EngineDeadError()
        return Handle(self, self.clock.now(), max_tokens, what == "hang", what)

    def run_until(self, t):
        self.steps.append(t)
        self.clock.set(max(t, self.clock.now()))

    def abort(self, handle):
        self.aborted.append(handle)


def _config(**kw):
    base = dict(url="sim://", scenario="custom", rate=4.0, arrival="constant", requests=3, prompt_tokens=20,
                output_tokens=5, tokenizer="approx", metrics_interval_s=0.5)
    base.update(kw)
    return LoadConfig(**base)


def test_records_sent_when_scheduled_with_the_engines_token_times():
    engine = Engine()
    result = V.run_load_virtual(_config(), engine)
    t0 = START + V.START_MARGIN_S
    assert V.START_MARGIN_S == 0.05
    recs = result.records
    assert [r.id for r in recs] == [0, 1, 2]
    assert [r.scheduled for r in recs] == [t0, t0 + 0.25, t0 + 0.5]
    assert [r.sent for r in recs] == [r.scheduled for r in recs]
    assert [s[0] for s in engine.submitted] == [r.scheduled for r in recs]
    assert all(s[2] == 5 and s[3] is True for s in engine.submitted)
    for r in recs:
        assert r.ok and r.http_status == 200 and r.error is None
        assert r.ttft_s == pytest.approx(TTFT) and r.e2e_s == pytest.approx(TTFT + 4 * GAP)
        assert r.output_tokens == 5 and r.input_tokens == 7 and r.finish_reason == "length"
        assert r.max_tokens == 5 and r.prompt_tokens_target > 0 and r.prompt is None
        assert r.tpot_s == pytest.approx(GAP) and list(r.chunk_tokens) == [1] * 5
    # the view: a scrape before the start, one each 0.5 s after t0 while requests are live, one at the end
    times = [s.t for s in result.server_samples]
    assert times[0] == START and times[1:-1] == [t0 + 0.5, t0 + 1.0] and times[-1] == pytest.approx(t0 + 1.0)
    assert all(s.error is None and s.running == 7 for s in result.server_samples)
    s = result.summary
    assert s["model"] == "fake-model" and s["notes"] == ["virtual time against the in-process simulator"]
    assert result.notes == s["notes"] and result.model == "fake-model" and result.prompt_source == "tokenizer"
    assert s["wall_s"] == pytest.approx(1.0) and s["ok"] == 3 and s["server_view"]["samples"] == 4
    assert s["client"] == "virtual"
    assert s["prompt_token_source"] == "tokenizer" and s["prompts_exact"] is True
    assert result.config.requests == 3


def test_errors_of_a_rejecting_a_dead_and_a_silent_engine():
    engine = Engine(behaviours=["reject", "dead", "ok", "ok"], down=(START + 0.8, START + 0.9))
    result = V.run_load_virtual(_config(requests=4), engine)
    r = result.records
    assert (r[0].http_status, r[0].error, r[0].error_detail, r[0].e2e_s) == (400, R.HTTP_4XX, "HTTP 400", 0.0)
    assert (r[1].http_status, r[1].error, r[1].error_detail, r[1].e2e_s) == (500, R.HTTP_5XX, "HTTP 500", 0.0)
    assert r[2].ok
    # request 3 is due at t0 + 0.75 = START + 0.8: the server answers nothing then
    assert (r[3].error, r[3].error_detail, r[3].sent, r[3].http_status) == \
        ("connect", "the simulated server is not answering", None, None)
    assert len(engine.submitted) == 3
    assert result.summary["errors"]["http_4xx"] == 1 and result.summary["errors"]["http_5xx"] == 1


def test_a_silent_server_is_a_connect_error_in_the_view():
    engine = Engine(down=(START, START + 100))
    result = V.run_load_virtual(_config(requests=1), engine)
    assert [s.error for s in result.server_samples] == ["connect"] * 3       # before, at t0 + 0.5, at the end
    assert result.records[0].error == "connect" and engine.submitted == []


def test_a_request_that_never_ends_times_out_after_the_drain():
    engine = Engine(behaviours=["hang"])
    result = V.run_load_virtual(_config(requests=1, request_timeout_s=3.0), engine)
    [r] = result.records
    t0 = START + V.START_MARGIN_S
    assert (r.error, r.error_detail) == (R.TIMEOUT, "no end within 3 s")
    assert len(engine.aborted) == 1 and engine.aborted[0].hang
    # give up at the first scrape at or past the last arrival (t0) plus the drain (3 s): t0 + 3.5
    assert r.e2e_s == pytest.approx(3.5) and r.ttft_s == pytest.approx(TTFT) and r.output_tokens == 1
    assert result.summary["wall_s"] == pytest.approx(3.5)
    assert [s.t for s in result.server_samples][1:] == pytest.approx([t0 + 0.5 * k for k in range(1, 8)] + [t0 + 3.5])
    # a drain of its own, shorter
    engine = Engine(behaviours=["hang"])
    [r] = V.run_load_virtual(_config(requests=1, request_timeout_s=3.0), engine, drain_s=1.0).records
    assert r.e2e_s == pytest.approx(1.5) and r.error_detail == "no end within 3 s"


def test_without_a_server_view_the_engine_is_stepped_to_the_end():
    engine = Engine()
    result = V.run_load_virtual(_config(metrics_interval_s=0.0), engine)
    assert result.server_samples == [] and result.summary["server_view"] is None
    assert all(r.ok for r in result.records)
    assert result.summary["wall_s"] == pytest.approx(1.5)          # stepped in whole seconds past the last arrival
    assert [r.e2e_s for r in result.records] == pytest.approx([TTFT + 4 * GAP] * 3)   # each at its own end
    engine = Engine(behaviours=["ok", "ok", "hang"])
    result = V.run_load_virtual(_config(metrics_interval_s=0.0, request_timeout_s=2.5), engine)
    t0 = START + V.START_MARGIN_S
    assert [r.error for r in result.records] == [None, None, R.TIMEOUT]
    # the last arrival at t0 + 0.5, then steps of 1 s up to its drain of 2.5 s
    assert engine.steps[-3:] == pytest.approx([t0 + 1.5, t0 + 2.5, t0 + 3.0])
    assert result.records[2].e2e_s == pytest.approx(2.5)


def test_text_kept_when_asked():
    engine = Engine()
    [r] = V.run_load_virtual(_config(requests=1, keep_text=True), engine).records
    assert r.prompt == engine.submitted[0][1] and len(r.prompt) > 0


def test_the_driver_refuses_what_it_cannot_run():
    with pytest.raises(ServewatchError) as err:
        V.run_load_virtual(LoadConfig(url="sim://", concurrency=2, tokenizer="approx"), Engine())
    assert str(err.value) == "the virtual-time driver runs rate-based scenarios only (no --concurrency)"
    with pytest.raises(ServewatchError) as err:
        V.run_load_virtual(LoadConfig(url="sim://", scenario="custom"), Engine())
    assert str(err.value) == "scenario custom needs --rate R or --concurrency C" and err.value.__cause__ is None


def test_run_coro():
    async def value():
        return 5

    assert V._run_coro(value()) == 5

    class Pending:
        def __await__(self):
            yield

    async def waits():
        await Pending()

    coro = waits()
    with pytest.raises(RuntimeError) as err:
        V._run_coro(coro)
    assert str(err.value) == "virtual driver: unexpected await"
    coro.close()
    from servewatch.sim import tokens

    assert V._run_coro(V.SimCounter().count("hello world")) == tokens.count_tokens("hello world")
    assert V.SimCounter.source == "tokenizer"


def test_a_trace_replayed_at_its_times(tmp_path):
    rows = [{"timestamp": 0, "input_length": 30, "output_length": 2},
            {"timestamp": 500, "input_length": 0, "output_length": 0},
            {"timestamp": 1500, "input_length": 64, "output_length": 4}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    engine = Engine()
    cfg = LoadConfig(url="sim://", trace=str(path), speed=2.0, tokenizer="approx", metrics_interval_s=0.5,
                     trace_block=16)
    result = V.run_load_virtual(cfg, engine)
    t0 = START + V.START_MARGIN_S
    recs = result.records
    assert [r.scheduled for r in recs] == pytest.approx([t0, t0 + 0.25, t0 + 0.75])
    assert [r.max_tokens for r in recs] == [2, 1, 4]                   # at least one token
    assert [r.prompt_tokens_target for r in recs] == [30, 1, 64]
    assert [s[2] for s in engine.submitted] == [2, 1, 4]
    s = result.summary
    assert s["scenario"] == "trace" and s["arrival"] == "trace"
    assert s["trace"]["rows"] == 3 and s["requested_rate"] == s["trace"]["mean_rate"]
    assert s["notes"][0] == "virtual time against the in-process simulator"


def test_the_survivors_of_the_first_run():
    from servewatch.dialects import read_scrape as default_read
    from servewatch.load.scenarios import arrival_times

    # a request that ends early (finish reason stop, 2 of 5 tokens) is truncated: every request ignores EOS
    # one whose usage says no prompt count takes the prompt builder's; no text kept unless asked
    seen = []

    def spy(text, max_bytes):
        seen.append(max_bytes)
        return default_read(text, max_bytes=max_bytes)

    engine = Engine(behaviours=["short", "no-usage", "slow"], down=(START + 1.05, START + 1.06))
    result = V.run_load_virtual(_config(request_timeout_s=2.0), engine, read_scrape=spy)
    short, no_usage, slow = result.records
    assert (short.error, short.error_detail, short.output_tokens) == (R.TRUNCATED, "2 of 5 tokens", 2)
    assert no_usage.ok and no_usage.input_tokens == no_usage.prompt_tokens_target > 0
    assert short.text is None and no_usage.text is None
    # one that would end long after its timeout: timed out at the give-up time (the scrape at the last arrival,
    # t0 + 0.5, plus the 2 s drain), not at its own end
    assert slow.error == R.TIMEOUT and slow.e2e_s == pytest.approx(2.5 - 0.5)
    assert len(seen) >= 2                                               # the scrapes went through the reader given
    # the scrape at t0 + 1.0 = START + 1.05 found no server: an error sample at that time
    [down] = [x for x in result.server_samples if x.error]
    assert down.t == pytest.approx(START + 1.05)
    # each request its own prompt (the pool cycled), at the seeded arrival times
    engine = Engine()
    result = V.run_load_virtual(_config(arrival="poisson", seed=3, requests=4), engine)
    t0 = START + V.START_MARGIN_S
    offsets = arrival_times("poisson", 4.0, seed=3, requests=4)
    assert [r.scheduled for r in result.records] == pytest.approx([t0 + o for o in offsets])
    assert len({p for _, p, _, _ in engine.submitted}) == 4
    # a run of a duration: its arrivals within it
    result = V.run_load_virtual(_config(requests=None, duration_s=1.0), Engine())
    assert [r.scheduled - t0 for r in result.records] == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_a_trace_read_by_the_caller_and_its_prompts(tmp_path):
    from servewatch.load import trace as T
    from servewatch.sim import tokens

    rows = [{"timestamp": 0, "input_length": 30, "output_length": 2},
            {"timestamp": 1000, "input_length": 64, "output_length": 3}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = T.read_trace(str(path), block=16)
    engine = Engine()
    cfg = LoadConfig(url="sim://", trace=str(tmp_path / "gone.jsonl"), tokenizer="approx", metrics_interval_s=0.5,
                     trace_block=16)
    result = V.run_load_virtual(cfg, engine, trace=trace)               # the file named is not read
    assert [r.max_tokens for r in result.records] == [2, 3]
    prompts = [p for _, p, _, _ in engine.submitted]
    assert all(isinstance(p, str) for p in prompts)
    assert [tokens.count_tokens(p) for p in prompts] == [30, 64]         # built to the rows' lengths
