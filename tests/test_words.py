"""Words a user can read (issue 22, item 9): no internal token or Python field name in what servewatch prints."""

from __future__ import annotations

import io
import re

from servewatch.detectors.verdict import Verdict
from servewatch.bundle import report_html
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.bundle.incident import load_incident, stage_rows
from servewatch.bundle.summarize import render_markdown
from servewatch.timeline.samples import HealthSample, LogEvent
from servewatch.timeline.window import Window
from tests.sinks_synthetic import stall_window, synthetic_recompute

SGLANG_KEY = "dp_rank=0,engine_type=unified,moe_ep_rank=0,pp_rank=0,tp_rank=0"
TOKEN = re.compile(r"\w+=\w|\b(None|True|False)\b|\bper_request\b|\bgib \d|older stats line|before the engine index")


def test_engine_keys_in_words():
    from servewatch.detectors.series import engine_words, where

    assert engine_words("engine=0") == "engine 0"
    assert where("engine=0") == " on engine 0"
    said = engine_words(SGLANG_KEY)
    assert said == "the unified engine (DP rank 0, EP rank 0, PP rank 0, TP rank 0)"
    assert "=" not in said and "_" not in said


def _bundle(tmp_path, extra=(), verdict_details=None):
    window = stall_window()
    window = Window.from_samples([*window.samples(), *extra])
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    t = window.end
    path = writer.write(window, [Verdict("overload", t, t - 1, "why", (), verdict_details or {})], BundleContext())
    return load_incident(path)


def test_summary_and_page_say_details_thinning_and_log_fields_in_words(tmp_path):
    t = stall_window().end
    logs = (LogEvent(t + 0.1, "startup", {"stage": "weights_loaded", "gib": 5.2, "seconds": 3.48}),
            LogEvent(t + 0.2, "startup", {"stage": "kv_cache_size", "per_request": 4096, "concurrency": 14.94}))
    incident = _bundle(tmp_path, logs, {"engine": SGLANG_KEY, "cause": "slots", "process_known": False,
                                        "slot_limit": None})
    md = render_markdown(incident)
    page = report_html.render_incident_page(incident)
    for text in (md, page):
        assert "thinned: no" not in text and ">thinned<" not in text
        assert "engine_type=" not in text and "engine = engine" not in text
        assert "per_request" not in text and "gib 5" not in text and "gib=5" not in text
    assert "- samples kept: all (none thinned)" in md
    details = next(line for line in md.splitlines() if line.startswith("Details: "))
    assert not TOKEN.search(details), details
    assert "the unified engine (DP rank 0" in details and "slot limit unknown" in details
    assert "4,096 tokens per request" in md and "5.2 GiB" in md


def test_a_watch_that_began_on_a_running_server_lists_no_health_stage(tmp_path):
    """The first /health 200 of a watch attached to a running server is when the watch began, not a stage."""
    w = stall_window()
    start = w.start - 30.0
    stages = (LogEvent(start, "startup", {"stage": "process_up"}),
              LogEvent(start + 5, "startup", {"stage": "weights_loaded", "gib": 5.2}),
              LogEvent(start + 9, "startup", {"stage": "ready"}))
    attached = _bundle(tmp_path / "a", stages)
    rows = stage_rows(attached)
    assert rows and not any("health" in row[0] for row in rows), rows
    assert [row[0] for row in rows] == ["process up", "weights loaded", "ready"]
    # ... and a start the watch saw (its /health refused first) keeps it.
    seen = _bundle(tmp_path / "b", (*stages, HealthSample(start + 1, None, None, error="connect")))
    assert "first /health 200" in [row[0] for row in stage_rows(seen)]


def test_postmortem_says_its_numbers_in_words(capsys):
    from pathlib import Path

    from servewatch.cli import main

    log = Path(__file__).parent / "fixtures" / "postmortem" / "vllm_overload_oom_reconstructed.log"
    main(["postmortem", str(log), "--vocab-size", "152064"])
    out = capsys.readouterr().out
    assert "gib " not in out and "per_request" not in out and "older stats line" not in out
    assert "before the engine index" not in out
    assert "5.2 GiB" in out and "4,096 tokens per request" in out


def test_recorder_messages_name_the_running_command(capsys):
    import asyncio

    from servewatch.clock import VirtualClock
    from servewatch.watch.recorder import Recorder

    class Broken:
        kind, interval = "health", 1.0

        async def poll(self):
            raise RuntimeError("boom")

    recorder = Recorder([Broken()], VirtualClock(), tool="serve")
    asyncio.run(recorder.poll(recorder.sources[0]))
    err = capsys.readouterr().err
    assert err.startswith("servewatch serve: health source failed") and "servewatch watch" not in err


def test_demo_report_states_the_blindness_note_once():
    from types import SimpleNamespace

    from servewatch.demo.report import latency_section
    from servewatch.bundle.report_html import HISTOGRAM_BLINDNESS_NOTE, esc

    def phase(name):
        return SimpleNamespace(phase=SimpleNamespace(name=name), records=[],
                               summary={"server_blindness": [{"histogram": "itl", "finding": f"{name}: itl blind"}]})

    html = latency_section(SimpleNamespace(dialect="vllm", scenarios=[phase("normal"), phase("overload")]))
    assert html.count(esc(HISTOGRAM_BLINDNESS_NOTE)) == 1
    assert "normal: itl blind" in html and "overload: itl blind" in html
