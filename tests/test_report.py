"""Reports: inline-SVG charts, a self-contained HTML page, Markdown, the runbook, `servewatch summarize`."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from servewatch.cli import main
from servewatch.detectors import registry
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.detectors.registry import runbook_for
from servewatch.bundle import report_html
from servewatch.bundle.writer import BundleContext, BundleWriter
from servewatch.bundle.incident import load_incident
from servewatch.bundle.series import Marker, timeline_series
from servewatch.bundle.summarize import render_markdown, sparkline
from servewatch.timeline.samples import HealthSample, MetricsSample
try:  # tests/ imported as a package or as a plain directory
    from tests.sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts
except ModuleNotFoundError:
    from sinks_synthetic import stall_window, synthetic_recompute, synthetic_stall_verdicts

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def bundle(tmp_path):
    window = stall_window()
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, synthetic_stall_verdicts(window), BundleContext(
        target_url="http://127.0.0.1:8000", dialect="vllm", naming="vllm-0.32",
        target_versions={"vllm": "0.32.0"}, detector_config={"min_stall_s": 3.0}))
    assert path is not None
    return path


def test_timeline_svg_draws_each_series_breaks_gaps_and_marks_verdicts():
    series = {"running": [(0.0, 1.0), (1.0, 2.0), (2.0, None), (3.0, 4.0), (4.0, 3.0)],
              "waiting": [(0.0, 0.0), (4.0, 5.0)]}
    svg = report_html.render_timeline_svg(series, [Marker(t=4.0, onset=2.5, label="overload")], t0=0.0)
    root = ET.fromstring(svg)
    polylines = root.findall(f"{SVG}polyline")
    assert len(polylines) == 3                          # running split at the gap, waiting whole
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "overload" in texts and "running" in texts and "waiting" in texts
    bands = [r for r in root.findall(f"{SVG}rect") if r.get("fill") == report_html.MARKER_COLOUR]
    assert len(bands) == 1
    x_onset, width = float(bands[0].get("x")), float(bands[0].get("width"))
    assert x_onset > 150 and width > 10                  # a real band from onset to conclusion
    # higher values are drawn higher (smaller y) within a panel
    points = [tuple(map(float, p.split(","))) for p in polylines[1].get("points").split()]
    assert points[0][1] < points[1][1]                  # 4.0 is drawn above 3.0


def test_histogram_svg_bars_are_proportional():
    svg = report_html.render_histogram_svg((0.01, 0.1, 1.0), [10, 40, 0, 5], title="ITL")
    root = ET.fromstring(svg)
    bars = [r for r in root.findall(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == 4
    heights = [float(b.get("height")) for b in bars]
    assert heights[1] == max(heights) and heights[2] == 0 and heights[0] == pytest.approx(heights[1] / 4, rel=0.02)
    assert "+Inf" in svg and "n = 55" in svg
    with pytest.raises(ValueError):
        report_html.render_histogram_svg((0.01,), [1, 2, 3])


def test_bucket_counts_and_binning_agree():
    h = Histogram(edges=(0.01, 0.1, 1.0), cumulative=(3.0, 5.0, 9.0), count=10.0, sum=4.2)
    assert report_html.bucket_counts(h) == [3.0, 2.0, 4.0, 1.0]
    assert report_html.bin_values([0.01, 0.005, 0.05, 0.5, 0.9, 2.0], (0.01, 0.1, 1.0)) == [2, 1, 2, 1]


class TagCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_report_page_is_self_contained(bundle):
    incident = load_incident(bundle)
    page = report_html.render_report("Demo report", [
        report_html.incident_section(incident, anchor="incident-1"),
        report_html.Section("Latency", report_html.render_histogram_svg((0.01, 0.1), [5, 1, 0], title="ITL")
                            + f'<p class="note">{report_html.esc(report_html.HISTOGRAM_BLINDNESS_NOTE)}</p>'),
    ], subtitle="two sections")
    collector = TagCollector()
    collector.feed(page)
    tags = [t for t, _ in collector.tags]
    assert tags.count("svg") == 3 and "section" in tags and "nav" in tags    # timeline, window ITL, ITL
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(tags)
    for tag, attrs in collector.tags:
        assert "src" not in attrs
        if "href" in attrs:
            assert attrs["href"].startswith("#"), (tag, attrs)
        assert not any(k.startswith("on") for k in attrs)
    assert "url(" not in page and "@import" not in page
    assert page.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http://") == page.count(
        "http://127.0.0.1:8000")                         # the only URL is the (reduced) target, as text


def test_untrusted_text_is_escaped():
    verdict = Verdict(name="overload", t=2.0, onset=1.0, why="<script>alert(1)</script> & more",
                      evidence=(Evidence("metrics", 1.0, "waiting", "<b>"),))
    html = report_html.verdicts_html([verdict])
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;" in html


def test_incident_page_has_chart_verdicts_and_runbook(bundle):
    page = report_html.render_incident_page(load_incident(bundle))
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2     # timeline and the ITL histogram
    assert "<title>timeline of " in page and "Server latency histograms" in page
    assert "alive_health_ok_no_progress" in page
    for heading in ("Check next", "Expected range", "Safe action", "Rollback (and when)",
                    "What a restart would destroy"):
        assert heading in page
    assert "counters.generation_tokens" in page


def test_markdown_summary(bundle):
    md = render_markdown(load_incident(bundle))
    assert md.startswith("# servewatch incident: alive_health_ok_no_progress")
    assert "- target: http://127.0.0.1:8000 (vllm vllm-0.32)" in md
    assert "- target versions: vllm 0.32.0" in md
    assert "| metrics | 10.01 | `counters.generation_tokens` | 2000.0 |" in md
    assert "**What a restart would destroy:**" in md
    rate_row = next(line for line in md.splitlines() if line.startswith("| generated tokens/s"))
    assert "| 0 | 200 | 0 |" in rate_row


def test_summarize_command_writes_both_files(bundle, tmp_path, capsys):
    md, html = tmp_path / "s.md", tmp_path / "s.html"
    assert main(["summarize", str(bundle), "--md", str(md), "--html", str(html)]) == 0
    assert md.read_text().startswith("# servewatch incident")
    assert "<svg" in html.read_text()
    assert main(["summarize", str(bundle)]) == 0
    assert capsys.readouterr().out.count("# servewatch incident") == 1


def test_summarize_refuses_a_tampered_bundle(bundle, capsys):
    data = bytearray((bundle / "incident.json").read_bytes())
    data[10] ^= 0x20
    (bundle / "incident.json").write_bytes(bytes(data))
    assert main(["summarize", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "incident.json" in err


def test_summarize_unwritable_output_is_one_line(bundle, tmp_path, capsys):
    assert main(["summarize", str(bundle), "--md", str(tmp_path / "missing-dir" / "x.md")]) == 2
    assert capsys.readouterr().err.startswith("servewatch summarize: cannot write")


def test_every_verdict_has_a_complete_runbook_branch():
    for name in registry.names():
        branch = runbook_for(name)
        assert branch is not None
        assert len(branch.check_next) >= 2
        for text in (branch.meaning, branch.expected_range, branch.safe_action, branch.rollback,
                     branch.restart_destroys):
            assert len(text) > 20


def test_series_rate_and_counter_reset():
    def scrape(t, tokens):
        state = EngineState(dialect="vllm", naming="g", labels={}, running=1.0, waiting=0.0, kv_usage=0.5,
                            counters=Counters(generation_tokens=tokens))
        return MetricsSample(t=t, dialect="vllm", naming="g", engines=(state,))

    samples = [HealthSample(t=0.0, status=200, latency_s=0.0), scrape(0.0, 0.0), scrape(2.0, 100.0),
               scrape(3.0, 10.0), scrape(4.0, 30.0), HealthSample(t=4.0, status=503, latency_s=0.0)]
    series = timeline_series(samples)
    assert series["progress_rate"] == [(0.0, None), (2.0, 50.0), (3.0, None), (4.0, 20.0)]
    assert series["health"] == [(0.0, 1.0), (4.0, 0.0)]
    assert series["kv_pct"][0] == (0.0, 50.0)


def test_sparkline_shape():
    assert sparkline([0.0, 1.0, None, 2.0]) == "▁▅ █"
    assert len(sparkline([float(i) for i in range(500)], width=48)) == 48


def test_reports_show_the_process_tree_and_log_events(tmp_path):
    from servewatch.timeline.samples import LogEvent, ProcessMember, ProcessSample
    from servewatch.timeline.window import Window

    window = stall_window()
    stopped = ProcessSample(t=window.end + 0.5, root_pid=4242, root_create_time=1.0, alive=True, members=(
        ProcessMember(pid=4243, create_time=2.0, role="worker", title="VLLM::Worker_TP0", status="stopped",
                      rss_bytes=3 * 2**20, threads=7, cpu_percent=0.0),))
    died = LogEvent(t=window.end + 0.6, kind="engine_dead", fields={"dialect": "vllm", "reason": "EngineDeadError"})
    window = Window.from_samples([*window.samples(), stopped, died])
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, [Verdict("engine_dead", died.t, died.t, "log says the engine died",
                                         (Evidence("process", stopped.t, "members[4243].status", "stopped"),
                                          Evidence("log", died.t, "reason", "EngineDeadError")))],
                        BundleContext())
    incident = load_incident(path)
    assert incident.verdicts[0].evidence[0].field == "members[4243].status"
    md = render_markdown(incident)
    assert "| 4243 | worker | VLLM::Worker_TP0 | stopped | 3 | 7 | 0 |" in md
    assert "| engine dead | vllm log, EngineDeadError |" in md
    page = report_html.render_incident_page(incident)
    assert "Process tree" in page and "VLLM::Worker_TP0" in page and "vllm log, EngineDeadError" in page


def test_overload_runbook_branches_on_its_cause():
    branch = runbook_for("overload")
    assert set(branch.by_cause) == {"slots", "kv", "deferred", "unknown"}
    verdict = Verdict(name="overload", t=20.0, onset=5.0, why="31 waiting", details={"cause": "slots"})
    html = report_html.verdicts_html([verdict])
    assert "Cause slots:" in html and "Cause kv:" not in html
    assert "Cause deferred:" in report_html.verdicts_html([Verdict("overload", 2.0, 1.0, "w", (), {"cause": "deferred"})])


def test_a_short_verdict_in_a_long_window_gets_a_close_up(tmp_path):
    window = stall_window(n=400, stalled_from=390)          # 200 s of window, a 5 s stall at the end
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO(), recompute=synthetic_recompute)
    path = writer.write(window, synthetic_stall_verdicts(window), BundleContext())
    page = report_html.render_incident_page(load_incident(path))
    assert page.count("<title>close-up of ") == 1 and "Close-up of the last" in page
    close_up = page[page.rindex("<svg", 0, page.index("<title>close-up of ")):]
    close_up = close_up[:close_up.index("</svg>") + 6]
    root = ET.fromstring(close_up)
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.text and t.text.endswith(" s")]
    assert ticks and float(ticks[0].split()[0]) >= 170     # the close-up starts near the verdict


def test_incident_page_shows_window_latency_histograms_with_the_blindness_note(tmp_path):
    from servewatch.detectors import DetectorConfig, run_detectors

    try:
        from tests.sinks_synthetic import scenario
    except ModuleNotFoundError:
        from sinks_synthetic import scenario
    window = scenario("histogram_blind")
    verdicts = run_detectors(window, DetectorConfig())
    assert [v.name for v in verdicts] == ["histogram_blind"]
    writer = BundleWriter(tmp_path / "out", stderr=io.StringIO())
    path = writer.write(window, verdicts, BundleContext(detector_config=DetectorConfig()))
    incident = load_incident(path)
    from servewatch.bundle.incident import latency_histograms

    (name, kind, h), = latency_histograms(incident)
    assert (name, kind) == ("engine=0", "itl") and h.count == 800.0     # 20 ticks x 40 new observations
    page = report_html.render_incident_page(incident)
    assert "Server latency histograms" in page and "Histogram blindness" in page
    assert "| itl | engine 0 | 800 | 0.005 | 100.0% (≤ 0.01 s) |" in render_markdown(incident)
