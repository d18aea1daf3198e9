"""Values of load's scenarios, servewatch/load/scenarios.py (issue 50): the four presets' figures, a configuration
resolved (the preset's values filled in, or each bad value refused in its own line), the goodput targets, the
trace options, and the seeded arrival and prompt-length draws (their offsets compared with the generator's own
draws). Each message is compared in full: it is what an operator reads."""

from __future__ import annotations

import random

import pytest

from servewatch.load import scenarios as S
from servewatch.load.scenarios import Goodput, LoadConfig


def test_presets():
    assert S.PRESETS == {
        "normal": S.Preset(2.0, 44, 128, 256), "overload": S.Preset(14.0, 44, 128, 256),
        "long-prompt": S.Preset(1.0, 2905, 64, 1), "long-output": S.Preset(1.0, 44, 1024, 256),
        "custom": S.Preset(None, 44, 128, 256)}
    assert S.Preset(1.0, 2, 3).prompt_pool == 256
    assert S.SCENARIOS == ("normal", "overload", "long-prompt", "long-output", "custom")
    assert S.DEFAULT_DURATION_S == 60.0 and S.MAX_ARRIVALS == 1_000_000


def test_defaults_of_a_config():
    c = LoadConfig(url="u")
    assert (c.scenario, c.rate, c.concurrency, c.arrival, c.duration_s, c.requests) == \
        ("normal", None, None, "poisson", None, None)
    assert (c.prompt_stdev, c.tokenizer, c.api, c.metrics_interval_s, c.seed, c.keep_text) == \
        (0.0, "auto", "completions", 0.5, 0, False)
    assert (c.request_timeout_s, c.idle_timeout_s, c.connect_timeout_s, c.client, c.event_loop) == \
        (600.0, 120.0, 10.0, "http1", "auto")
    assert (c.sender_priority, c.headers, c.extra, c.trace, c.speed, c.window, c.max_rows, c.trace_block) == \
        ("realtime", (), {}, None, 1.0, None, None, 512)


def test_a_preset_resolved():
    r = LoadConfig(url="u", scenario="long-prompt").resolved()
    assert (r.rate, r.duration_s, r.requests, r.prompt_tokens, r.output_tokens, r.prompt_pool) == \
        (1.0, 60.0, None, 2905, 64, 1)
    r = LoadConfig(url="u", scenario="overload", requests=5, prompt_tokens=10, output_tokens=3, prompt_pool=7,
                   rate=3.5).resolved()
    assert (r.rate, r.duration_s, r.requests, r.prompt_tokens, r.output_tokens, r.prompt_pool) == \
        (3.5, None, 5, 10, 3, 7)
    c = LoadConfig(url="u", concurrency=4).resolved()
    assert (c.rate, c.concurrency, c.duration_s) == (None, 4, 60.0)
    assert LoadConfig(url="u", scenario="custom", concurrency=1).resolved().rate is None
    assert LoadConfig(url="u", scenario="custom", rate=1e-9, requests=1).resolved().rate == 1e-9
    assert LoadConfig(url="u", duration_s=0.001).resolved().duration_s == 0.001
    assert LoadConfig(url="u", prompt_stdev=0.0, prompt_tokens=1, output_tokens=1).resolved().prompt_tokens == 1
    assert LoadConfig(url="u", client="aiohttp", event_loop="uvloop", sender_priority="normal",
                      api="chat", metrics_interval_s=0.0, headers=(("X-Key", " v "),)).resolved().client == "aiohttp"
    assert LoadConfig(url="u", event_loop="asyncio", arrival="gamma:2").resolved().event_loop == "asyncio"


@pytest.mark.parametrize("changes, message", [
    ({"scenario": "nope"}, "unknown scenario 'nope'; choose from normal, overload, long-prompt, long-output, custom"),
    ({"sender_priority": "high"}, "unknown sender priority 'high'; choose realtime or normal"),
    ({"scenario": "custom"}, "scenario custom needs --rate R or --concurrency C"),
    ({"rate": 2.0, "concurrency": 3}, "give --rate or --concurrency, not both"),
    ({"rate": 0.0}, "--rate must be a positive number, got 0.0"),
    ({"rate": -1.0}, "--rate must be a positive number, got -1.0"),
    ({"rate": float("inf")}, "--rate must be a positive number, got inf"),
    ({"rate": float("nan")}, "--rate must be a positive number, got nan"),
    ({"concurrency": 0}, "--concurrency must be >= 1, got 0"),
    ({"arrival": "burst"}, "--arrival must be poisson, constant or gamma:SHAPE, got 'burst'"),
    ({"duration_s": 5.0, "requests": 3}, "give --duration or --requests, not both"),
    ({"duration_s": 0.0}, "--duration must be a finite number > 0, got 0.0"),
    ({"duration_s": float("inf")}, "--duration must be a finite number > 0, got inf"),
    ({"requests": 0}, "--requests must be >= 1, got 0"),
    ({"prompt_tokens": 0}, "--prompt-tokens and --output-tokens must be >= 1"),
    ({"output_tokens": 0}, "--prompt-tokens and --output-tokens must be >= 1"),
    ({"prompt_stdev": -0.5}, "--prompt-tokens: the stdev after N: must be a number >= 0, got -0.5"),
    ({"prompt_stdev": float("inf")}, "--prompt-tokens: the stdev after N: must be a number >= 0, got inf"),
    ({"client": "curl"}, "client must be http1 or aiohttp, got 'curl'"),
    ({"prompt_pool": 0}, "--prompt-pool must be >= 1, got 0"),
    ({"event_loop": "trio"}, "event loop must be auto, asyncio or uvloop, got 'trio'"),
    ({"api": "embeddings"}, "--api must be completions or chat, got 'embeddings'"),
    ({"metrics_interval_s": -1.0}, "--metrics-interval must be >= 0, got -1.0"),
    ({"metrics_interval_s": float("nan")}, "--metrics-interval must be >= 0, got nan"),
    ({"request_timeout_s": 0.0}, "--timeout must be a positive number of seconds, got 0.0"),
    ({"request_timeout_s": float("inf")}, "--timeout must be a positive number of seconds, got inf"),
    ({"headers": (("Host", "x"),)}, "--header: header Host is the client's own"),
])
def test_a_bad_config_is_refused_in_one_line(changes, message):
    with pytest.raises(ValueError) as err:
        LoadConfig(url="u", **changes).resolved()
    assert str(err.value) == message
    assert err.value.__cause__ is None


def test_a_trace_config():
    r = LoadConfig(url="u", trace="t.jsonl", speed=2.0, window=(0.0, None), max_rows=1, trace_block=1).resolved()
    assert r.prompt_pool == 1 and r.rate is None and r.duration_s is None and r.speed == 2.0
    assert LoadConfig(url="u", trace="t", window=(5.0, 6.0)).resolved().window == (5.0, 6.0)


@pytest.mark.parametrize("changes, message", [
    ({"rate": 1.0}, "--trace sends at the trace's own times: not with --rate or --concurrency"),
    ({"concurrency": 1}, "--trace sends at the trace's own times: not with --rate or --concurrency"),
    ({"duration_s": 1.0}, "--trace: use --window A:B and --max-rows N, not --duration or --requests"),
    ({"requests": 1}, "--trace: use --window A:B and --max-rows N, not --duration or --requests"),
    ({"prompt_tokens": 1}, "--trace: the lengths come from the trace, not --prompt-tokens / --output-tokens"),
    ({"output_tokens": 1}, "--trace: the lengths come from the trace, not --prompt-tokens / --output-tokens"),
    ({"speed": 0.0}, "--speed must be a positive number, got 0.0"),
    ({"speed": float("inf")}, "--speed must be a positive number, got inf"),
    ({"max_rows": 0}, "--max-rows must be >= 1, got 0"),
    ({"trace_block": 0}, "--trace-block must be >= 1, got 0"),
    ({"window": (-1.0, None)}, "--window A:B needs 0 <= A < B, got -1.0:None"),
    ({"window": (float("inf"), None)}, "--window A:B needs 0 <= A < B, got inf:None"),
    ({"window": (5.0, 5.0)}, "--window A:B needs 0 <= A < B, got 5.0:5.0"),
    ({"api": "x"}, "--api must be completions or chat, got 'x'"),
    ({"scenario": "nope"}, "unknown scenario 'nope'; choose from normal, overload, long-prompt, long-output, custom"),
])
def test_a_bad_trace_config_is_refused_in_one_line(changes, message):
    with pytest.raises(ValueError) as err:
        LoadConfig(url="u", trace="t.jsonl", **changes).resolved()
    assert str(err.value) == message


def test_goodput():
    g = Goodput.parse("ttft=200, TPOT=50,e2e=1500.5")
    assert (g.ttft_s, g.tpot_s, g.e2e_s) == (0.2, 0.05, 1.5005)
    assert g.to_json() == {"ttft_ms": 200.0, "tpot_ms": 50.0, "e2e_ms": 1500.5}
    assert Goodput.parse("e2e=1").to_json() == {"ttft_ms": None, "tpot_ms": None, "e2e_ms": 1.0}
    for text, message in (("ttft", "goodput item 'ttft': expected ttft=MS, tpot=MS or e2e=MS"),
                          ("itl=5", "goodput item 'itl=5': expected ttft=MS, tpot=MS or e2e=MS"),
                          ("ttft=fast", "goodput item 'ttft=fast': 'fast' is not a number"),
                          ("ttft=0", "goodput item 'ttft=0': must be > 0 ms"),
                          ("ttft=nan", "goodput item 'ttft=nan': must be > 0 ms")):
        with pytest.raises(ValueError) as err:
            Goodput.parse(text)
        assert str(err.value) == message and err.value.__cause__ is None
    assert S._ms(None) is None and S._ms(0.25) == 250.0


def test_parse_window_and_arrival():
    assert S.parse_window("30:90") == (30.0, 90.0)
    assert S.parse_window(":60") == (0.0, 60.0) and S.parse_window("30:") == (30.0, None)
    assert S.parse_window(" : ") == (0.0, None)
    for text in ("30", "a:b"):
        with pytest.raises(ValueError) as err:
            S.parse_window(text)
        assert str(err.value) == f"--window {text!r}: expected A:B in seconds (30:90, :60, 30:)"
        assert err.value.__cause__ is None
    assert S.parse_arrival("poisson") == ("poisson", None) and S.parse_arrival("constant") == ("constant", None)
    assert S.parse_arrival("gamma:0.5") == ("gamma", 0.5)
    for text, message in (("poisson:2", "--arrival must be poisson, constant or gamma:SHAPE, got 'poisson:2'"),
                          ("gamma:x", "--arrival gamma:SHAPE needs a number, got 'gamma:x'"),
                          ("gamma:0", "--arrival gamma shape must be > 0, got 'gamma:0'"),
                          ("gamma:inf", "--arrival gamma shape must be > 0, got 'gamma:inf'")):
        with pytest.raises(ValueError) as err:
            S.parse_arrival(text)
        assert str(err.value) == message and err.value.__cause__ is None


def test_arrival_times():
    assert S.arrival_times("constant", 4.0, seed=0, requests=5) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert S.arrival_times("constant", 2.0, seed=0, duration_s=2.0) == [0.0, 0.5, 1.0, 1.5]   # stops before 2.0
    assert S.arrival_times("constant", 3.0, seed=0, requests=4) == [0.0, 1 / 3, 2 / 3, 1.0]   # i / rate: no drift
    rng = random.Random("arrivals:5")
    expected, t = [], 0.0
    for _ in range(4):
        expected.append(t)
        t += rng.expovariate(2.0)
    assert S.arrival_times("poisson", 2.0, seed=5, requests=4) == expected
    rng = random.Random("arrivals:5")
    expected, t = [], 0.0
    for _ in range(4):
        expected.append(t)
        t += rng.gammavariate(0.5, 1.0 / (2.0 * 0.5))
    assert S.arrival_times("gamma:0.5", 2.0, seed=5, requests=4) == expected
    assert len(S.arrival_times("constant", 1000.0, seed=0, duration_s=2.0)) == 2000
    assert S.arrival_times("constant", 1.0, seed=0, requests=3, duration_s=10.0) == [0.0, 1.0, 2.0]


def test_arrival_times_stop_at_the_cap(monkeypatch):
    monkeypatch.setattr(S, "MAX_ARRIVALS", 3)
    assert S.arrival_times("constant", 1.0, seed=0) == [0.0, 1.0, 2.0]


def test_prompt_lengths():
    assert S.prompt_lengths(44, 0.0, 3, seed=1) == [44, 44, 44]
    assert S.prompt_lengths(44, -1.0, 2, seed=1) == [44, 44]
    rng = random.Random("prompt-lengths:9")
    assert S.prompt_lengths(10, 3.0, 5, seed=9) == [max(1, round(rng.gauss(10, 3.0))) for _ in range(5)]
    assert min(S.prompt_lengths(1, 50.0, 200, seed=2)) == 1                  # clipped to >= 1


def test_the_survivors_of_the_first_run():
    with pytest.raises(ValueError) as err:
        Goodput.parse("ttft=5=6")                              # split at the first "="
    assert str(err.value) == "goodput item 'ttft=5=6': '5=6' is not a number"
    assert LoadConfig(url="u", request_timeout_s=0.5).resolved().request_timeout_s == 0.5
    rng = random.Random("arrivals:3")
    expected, t = [], 0.0
    for _ in range(4):
        expected.append(t)
        t += rng.gammavariate(0.5, 1.0 / (4.0 * 0.5))          # scale 1 / (rate * shape): mean interval 1 / rate
    assert S.arrival_times("gamma:0.5", 4.0, seed=3, requests=4) == expected
    rng = random.Random("prompt-lengths:4")
    drawn = S.prompt_lengths(10, 1.0, 20, seed=4)
    assert drawn == [max(1, round(rng.gauss(10, 1.0))) for _ in range(20)] and len(set(drawn)) > 1
