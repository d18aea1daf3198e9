"""Values of a bundle's Markdown summary, servewatch/bundle/summarize.py (issue 50): the whole summary of a
hand-built incident (its header lines, the timeline's min, max, last and sparkline, a verdict's onset and evidence,
its details and runbook, the window's latency histograms, the startup stages, the process tree, the ranks'
collective positions and the log), a deployment's (an instance's timeline each, the side at fault, no window start),
the GPU panel's lines, and the pieces: the sparkline's cells, a series row, the recorder's line. Each figure of the
expected text follows from the samples (waiting 1 then 4: the sparkline's cells 1/4 * 7 + 0.5 -> 2 and 7; the
token rate (300 - 100) / 2 s = 100/s; the TTFT histogram's window 5 observations, 4.5 s: mean 0.9 s, 2 of 5 = 40.0 %
in the first bucket)."""

from __future__ import annotations

from array import array
from types import SimpleNamespace

from servewatch.bundle import summarize as S
from servewatch.bundle.incident import Incident
from servewatch.bundle.summarize import markdown_runbook, render_markdown
from servewatch.detectors.registry import runbook_for
from servewatch.detectors.verdict import Evidence, RunbookBranch, Verdict
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.timeline.samples import HealthSample, LogEvent, MetricsSample, ProcessMember, ProcessSample
from tests.test_gpu_panel import _samples as gpu_samples

T0 = 1_800_000_000.0

def meta(**kw):
    m = {"incident_id": "abc123", "trigger": {"verdict": "overload"},
         "target": {"url": "http://127.0.0.1:8000", "dialect": "vllm", "generation": "vllm-0.32", "versions": {"vllm": "0.32.0", "torch": "2.9"}},
         "window": {"start_t": T0, "end_t": T0 + 20.5, "samples": {"health": 3, "metrics": 3},
                    "thinned": {"applied": True, "samples_before": 900, "samples_after": 450},
                    "recorder": {"interval_s": 0.5, "threshold_s": 2.0, "gaps": [{"start_t": T0 + 3, "end_t": T0 + 6.25}]}},
         "writer": {"write_failures": 2}, "servewatch_version": "9.9.9"}
    m.update(kw)
    return m

def h(c, s):
    return Histogram((0.1, 1.0), array("d", c), c[-1] + 1, s)

def eng(w, toks, hist):
    return EngineState("vllm", "vllm-0.32", {"engine": "0", "model_name": "m"}, running=2, waiting=w, kv_usage=0.5,
                       counters=Counters(generation_tokens=toks), histograms={"ttft": hist})

samples = [HealthSample(T0, 200, 0.01), MetricsSample(T0 + 1, "vllm", "vllm-0.32", (eng(1, 100, h([1, 2], 1.0)),)),
           MetricsSample(T0 + 3, "vllm", "vllm-0.32", (eng(4, 300, h([3, 7], 5.5)),)),
           LogEvent(T0 + 2.5, "startup", {"stage": "process_up"}), LogEvent(T0 + 4, "startup", {"stage": "weights_loaded", "seconds": 1.5}),
           ProcessSample(T0 + 5, 100, 1.0, True, (ProcessMember(100, 1.0, "api", "vllm|serve", "sleeping", 2**21, 4, 1.5),)),
           LogEvent(T0 + 6, "collective", {"state": "position", "group": 0, "rank": 1, "completed": 3, "entered": 4, "op": "all_reduce"}),
           ]
v = Verdict("overload", T0 + 10, T0 + 4.5, "waiting 4 > 2", (Evidence("metrics", T0 + 3, "waiting|x", "4\nfive"),),
            {"cause": "slots", "engine": "engine=0", "queue_s": 1.25})
inc = Incident("bundle-1", meta(), tuple(sorted(samples, key=lambda s: s.t)), (v,))

HEAD = r"""# servewatch incident: overload

- bundle: `bundle-1`
- incident id: `abc123` (trigger: overload)
- target: http://127.0.0.1:8000 (vllm vllm-0.32)
- target versions: vllm 0.32.0, torch 2.9
- window: 2027-01-15 08:00:00.000Z → 2027-01-15 08:00:20.500Z; samples: health 3, metrics 3
- samples kept: 450 of 900 (thinned to fit the bundle)
- recorder starved: 3.2 s gap at 2027-01-15 08:00:03.000Z, interval 0.5 s (a verdict concluded across a gap says so)
- bundle writes that failed before this one: 2
- servewatch 9.9.9

## Timeline

| series | min | max | last | shape |
|---|---:|---:|---:|---|
| health (1 = 2xx) | 1 | 1 | 1 | `█` |
| running | 2 | 2 | 2 | `██` |
| waiting | 1 | 4 | 4 | `▃█` |
| KV cache % | 50 | 50 | 50 | `██` |
| generated tokens/s | 100 | 100 | 100 | ` █` |

## Verdicts

### overload

**Why:** waiting 4 > 2

Onset at +4.5 s, concluded at +10 s (5.5 s after onset).

| evidence source | sample time (s) | field | value |
|---|---:|---|---|
| metrics | 3 | `waiting\|x` | 4 five |

Details: cause slots, engine engine 0, queue s 1.25

"""
TAIL = r"""
## Server latency histograms over the window

| histogram | engine | observations | mean (s) | in the first bucket |
|---|---|---:|---:|---|
| ttft | engine 0 | 5 | 0.9 | 40.0% (≤ 0.1 s) |

## Startup stages

| stage | at (s from the start) | since the previous stage (s) | the log said |
|---|---:|---:|---|
| process up | 0.0 | 0.0 | – |
| weights loaded | 1.5 | 1.5 | took 1.5 s |

## Process tree at +5 s (newest sample)

| pid | role | title | status | RSS (MiB) | threads | CPU % |
|---|---|---|---|---|---|---|
| 100 | api | vllm\|serve | sleeping | 2 | 4 | 1.5 |

## Collectives (Flight Recorder) at +6 s

| group | rank | last completed | last entered | waiting in |
|---:|---:|---:|---:|---|
| 0 | 1 | 3 | 4 | all_reduce |

## Log events (newest 3)

| time (s) | kind | fields |
|---:|---|---|
| 2.5 | startup | stage process_up |
| 4.0 | startup | took 1.5 s, stage weights_loaded |
| 6.0 | collective | completed 3, entered 4, group 0, op all_reduce, rank 1, state position |
"""

HEAD2 = r"""# servewatch incident: kv_transfer_stall

- bundle: `b2`
- incident id: `abc123` (trigger: overload)
- target: a deployment (sglang-0.5)
- deployment: prefill p:1, decode d:2
- target versions: unknown
- window: – → –; samples: 
- samples kept: all (none thinned)
- the recorder's own sampling: every 0.5 s, no gap over 2 s
- bundle writes that failed before this one: 2
- servewatch 9.9.9

## Timeline

### prefill p:1

| series | min | max | last | shape |
|---|---:|---:|---:|---|
| health (1 = 2xx) | – | – | – | (no data) |
| running | 2 | 2 | 2 | `█` |
| waiting | 1 | 1 | 1 | `█` |
| KV cache % | 50 | 50 | 50 | `█` |
| generated tokens/s | – | – | – | (no data) |

### decode d:2

| series | min | max | last | shape |
|---|---:|---:|---:|---|
| health (1 = 2xx) | – | – | – | (no data) |
| running | – | – | – | (no data) |
| waiting | – | – | – | (no data) |
| KV cache % | – | – | – | (no data) |
| generated tokens/s | – | – | – | (no data) |

## Verdicts

### kv_transfer_stall

**Why:** decode waits

**Side at fault:** prefill p:1: the side to restart; decode d:2 is not acted on

Onset at +0 s, concluded at +2 s (2 s after onset).

Details: act on p:1, decode d:2, prefill p:1

"""
TAIL2 = r"""
## Process tree (newest sample)

| pid | role | title | status | RSS (MiB) | threads | CPU % |
|---|---|---|---|---|---|---|
| 100 | root | – | gone | – | – | – |

## Collectives (Flight Recorder)

| group | rank | last completed | last entered | waiting in |
|---:|---:|---:|---:|---|
| 0 | 0 | 1 | 1 |  |

## Log events (newest 1)

| time (s) | kind | fields |
|---:|---|---|
| 1800000002.0 | collective | completed 1, entered 1, group 0, op x, rank 0, state position |
"""

GPUS = r"""## GPUs per rank

Each rank's GPU as NVML read it (the GPU source's readings).

### TP rank 0 of 2 (VLLM::Worker_TP0, pid 111): GPU 0 (GPU-11111111-2222-3333-4444-555555555555, bus 00000000:17:00.0, NVIDIA H100 80GB HBM3)

| reading | min | max | last | shape |
|---|---:|---:|---:|---|
| utilisation (%) | 97 | 97 | 97 | `████` |
| power (W) | 610 | 610 | 610 | `████` |
| SM clock (MHz) | 1,980 | 1,980 | 1,980 | `████` |
| temperature (°C) | 64 | 64 | 64 | `████` |
| clocks held (1 = yes) | 0 | 0 | 0 | `▁▁▁▁` |

- throttle reasons: none

### TP rank 1 of 2 (VLLM::Worker_TP1, pid 112): GPU 1 (GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, bus 00000000:18:00.0, NVIDIA H100 80GB HBM3)

| reading | min | max | last | shape |
|---|---:|---:|---:|---|
| utilisation (%) | 97 | 97 | 97 | `███ ` |
| power (W) | 610 | 610 | 610 | `███ ` |
| SM clock (MHz) | 1,100 | 1,980 | 1,100 | `█▅▅ ` |
| temperature (°C) | 64 | 64 | 64 | `███ ` |
| clocks held (1 = yes) | 0 | 1 | 1 | `▁██ ` |

- throttle reasons: HW thermal slowdown from +5.0 s to +10.0 s
- Xid 79 at +14.8 s (GPU has fallen off the bus; NVIDIA: reboot the node)
- lost (NVML: GPU is lost) from +15.0 s
"""


def test_the_whole_summary():
    runbook = "\n".join(markdown_runbook(runbook_for("overload"), "slots"))
    assert render_markdown(inc) == HEAD + runbook + TAIL


def _deployment():
    m = meta(target={"url": None, "dialect": None, "generation": "sglang-0.5", "versions": {},
                     "deployment": [{"role": "prefill", "name": "p:1"}, {"role": "decode", "name": "d:2"}]})
    m["window"] = {"start_t": None, "end_t": None, "samples": {}, "thinned": {"applied": False},
                   "recorder": {"interval_s": 0.5, "threshold_s": 2.0, "gaps": []}}
    v2 = Verdict("kv_transfer_stall", T0 + 3, T0 + 1, "decode waits", (),
                 {"prefill": "p:1", "decode": "d:2", "act_on": "p:1"})
    samples = (ProcessSample(T0 + 2, 100, 1.0, False, ()),
               LogEvent(T0 + 2, "collective", {"state": "position", "group": 0, "rank": 0, "completed": 1,
                                                "entered": 1, "op": "x"}))
    instances = (("prefill p:1", (MetricsSample(T0, "vllm", "v", (eng(1, 1, h([0, 0], 0)),)),)), ("decode d:2", ()))
    return Incident("b2", m, samples, (v2,), instances)


def test_a_deployment_summary_without_a_window_start():
    runbook = "\n".join(markdown_runbook(runbook_for("kv_transfer_stall"), None))
    assert render_markdown(_deployment()) == HEAD2 + runbook + TAIL2


def test_the_gpu_lines():
    assert "\n".join(S._gpus(SimpleNamespace(samples=gpu_samples()), T0)) == GPUS
    assert S._gpus(SimpleNamespace(samples=gpu_samples()), None)[14] == \
        "- throttle reasons: none"
    lost = S._gpus(SimpleNamespace(samples=gpu_samples()), None)
    assert "- lost (NVML: GPU is lost) from +1800000015.0 s" in lost           # no start: from 0
    assert S._gpus(SimpleNamespace(samples=[]), T0) == []


def test_the_header_lines_of_other_targets():
    def header(target, window=None, verdicts=()):
        m = meta(target=target)
        if window:
            m["window"] = window
        return render_markdown(Incident("b", m, (), tuple(verdicts))).split("\n## Timeline")[0]

    base = {"url": "http://h:1", "dialect": "vllm", "generation": None, "versions": {"vllm": "1"}}
    assert "- target: http://h:1 (vllm)\n" in header(base)
    assert "- target: http://h:1\n" in header({**base, "dialect": None})
    assert "- target: http://h:1 (v2)\n" in header({**base, "dialect": "", "generation": "v2"})
    assert "- target: unknown\n" in header({**base, "url": None, "dialect": None})
    assert "- target: a deployment\n" in header({**base, "url": "", "dialect": None,
                                                "deployment": [{"role": "decode", "name": "d"}]})
    assert "\n- deployment: decode d\n" in header({**base, "deployment": [{"role": "decode", "name": "d"}]})
    assert "- deployment" not in header(base)
    no_recorder = {"start_t": T0, "end_t": T0, "samples": {"health": 1}, "thinned": {"applied": False}}
    text = header(base, no_recorder)
    assert "recorder" not in text and "- samples kept: all (none thinned)\n" in text
    two_gaps = {**no_recorder, "recorder": {"interval_s": 0.25, "threshold_s": 1.0,
                                            "gaps": [{"start_t": T0, "end_t": T0 + 1.04},
                                                     {"start_t": T0 + 5, "end_t": T0 + 7.96}]}}
    assert ("- recorder starved: 1.0 s gap at 2027-01-15 08:00:00.000Z; 3.0 s gap at 2027-01-15 08:00:05.000Z, "
            "interval 0.25 s (a verdict concluded across a gap says so)\n") in header(base, two_gaps)


def test_no_verdict():
    text = render_markdown(Incident("b", meta(), (), ()))
    assert text.startswith("# servewatch incident: no verdict\n")
    assert "## Verdicts\n\nNo verdict: nothing the detectors look for happened in this window.\n" in text
    assert text.endswith("nothing the detectors look for happened in this window.\n")
    two = render_markdown(Incident("b", meta(), (), (Verdict("overload", T0, T0, "a"),
                                                      Verdict("no_such", T0 + 1, T0, "b"))))
    assert two.startswith("# servewatch incident: overload, no_such\n")
    # a verdict with no runbook, evidence or details: its why and times only
    assert two.endswith("### no_such\n\n**Why:** b\n\nOnset at +0 s, concluded at +1 s (1 s after onset).\n")


def test_sparkline():
    assert S.sparkline([]) == ""
    assert S.sparkline([0.0, 7.0, 3.5, None, 1.0]) == "▁█▅ ▂"          # 3.5/7*7+0.5 = 4 -> ▅; 1/7*7+0.5 = 1 -> ▂
    assert S.sparkline([None, None]) == "  "
    assert S.sparkline([0.0, None, -1.0]) == "▁ ▁"                      # nothing above 0: the floor
    assert S.sparkline([float(i) for i in range(96)], width=48) == S.sparkline([float(2 * i) for i in range(48)])
    assert len(S.sparkline([1.0] * 100)) == 48 and len(S.sparkline([1.0] * 100, width=10)) == 10
    assert S.sparkline([1.0, 2.0, 3.0], width=2) == "▅█"                 # cells 0 and int(1 * 3 / 2) = 1: 1 and 2; 1/2*7+0.5 = 4 -> ▅


def test_a_series_row_and_a_cell():
    assert S._series_row("x", [None, None]) == "| x | – | – | – | (no data) |"
    assert S._series_row("x", [3.0, None, 1.5, None]) == "| x | 1.5 | 3 | 1.5 | `█ ▅ ` |"
    assert S._cell("a|b\nc") == "a\\|b c"
    assert S._md_row(["a", None, 1]) == "| a | – | 1 |"


def test_the_runbook_in_markdown():
    branch = RunbookBranch("It means this.", ("look here", "then there"), "0 to 1", "wait", "undo it", "the cache",
                           {"slots": "Out of slots."})
    assert markdown_runbook(branch, "slots") == [
        "#### Runbook", "", "It means this.", "", "**Out of slots.**", "", "Check next:", "1. look here",
        "2. then there", "", "- **Expected range:** 0 to 1", "- **Safe action:** wait",
        "- **Rollback (and when):** undo it", "- **What a restart would destroy:** the cache", ""]
    assert markdown_runbook(branch, "kv")[:5] == ["#### Runbook", "", "It means this.", "", "Check next:"]
    assert markdown_runbook(branch)[4] == "Check next:"


def test_the_latency_table():
    def engine(labels, hist):
        return EngineState("vllm", "vllm-0.32", labels, histograms={"e2e": hist})

    first = MetricsSample(T0, "vllm", "v", (engine({"engine": "0"}, Histogram((), array("d", []), 0, 0.0)),
                                           engine({}, Histogram((0.5,), array("d", [0]), 0, 0.0))))
    last = MetricsSample(T0 + 1, "vllm", "v", (engine({"engine": "0"}, Histogram((), array("d", []), 4, 10.0)),
                                              engine({}, Histogram((0.5,), array("d", [1]), 3, 3.0))))
    lines = S._latency(Incident("b", meta(), (first, last), ()))
    assert lines == ["## Server latency histograms over the window", "",
                     "| histogram | engine | observations | mean (s) | in the first bucket |",
                     "|---|---|---:|---:|---|",
                     "| e2e | engine | 3 | 1 | 33.3% (≤ 0.5 s) |",
                     "| e2e | engine 0 | 4 | 2.5 | 0.0% (–) |", ""]
    assert S._latency(Incident("b", meta(), (first,), ())) == []


def test_the_gpu_panel_in_the_summary_counts_from_the_window_start():
    m = meta()
    text = render_markdown(Incident("g", m, tuple(gpu_samples()), ()))
    assert "- throttle reasons: HW thermal slowdown from +5.0 s to +10.0 s\n" in text
    assert "- lost (NVML: GPU is lost) from +15.0 s\n" in text
