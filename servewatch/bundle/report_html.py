"""Single-file HTML reports: inline SVG charts and inline CSS, no scripts, no external assets.

Reusable pieces (the demo's report composes the same ones):
- `render_timeline_svg(series, markers)` — small multiples sharing one time axis, verdicts as bands;
- `render_histogram_svg(edges, counts)` — per-bucket bars of a latency distribution (+ `bucket_counts`,
  `bin_values` to get the counts from a cumulative histogram or from exact values);
- `render_table(headers, rows)`, `runbook_html(branch)`, `verdicts_html(verdicts)`;
- `render_report(title, sections)` — the page; `incident_section(incident)` — one incident as a section.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from servewatch.detectors.verdict import Verdict
from servewatch.engine.state import Histogram
from servewatch.detectors.registry import runbook_for
from servewatch.detectors.verdict import RunbookBranch
from servewatch.bundle.series import LABELS, SERIES, Marker, Point

PALETTE = ("#1f6feb", "#8250df", "#bf3989", "#1a7f37", "#9a6700", "#cf222e")
MARKER_COLOUR = "#cf222e"
HISTOGRAM_BLINDNESS_NOTE = (
    "Histogram blindness: when almost every observation falls in one bucket, histogram_quantile returns a "
    "bucket edge, not a measurement (real vLLM on CPU: 23,955 of 23,984 inter-token latencies in le=0.01, so "
    "p99 reads ~9.9 ms whatever the truth). Read such quantiles as bounds and measure client-side.")

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:960px;
color:#1f2328;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.3rem;border-bottom:1px solid #d0d7de;padding-bottom:.2rem;
margin-top:2.2rem}h3{font-size:1.05rem;margin-top:1.4rem}
.sub{color:#59636e;margin-top:0}table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-weight:600;color:#cf222e}.note{background:#fff8c5;border:1px solid #d4a72c;padding:.5rem .7rem;
border-radius:6px;font-size:.9rem}.runbook{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;
padding:.5rem .9rem;margin:.6rem 0}.runbook dt{font-weight:600;margin-top:.4rem}.runbook dd{margin-left:1rem}
figure{margin:.8rem 0}figcaption{color:#59636e;font-size:.85rem}code{font-size:.85rem}
svg text{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif}
nav ul{padding-left:1.2rem}.charts{display:flex;flex-wrap:wrap;gap:.5rem}
.warn{background:#ffebe9;border:1px solid #ff8182;padding:.5rem .7rem;border-radius:6px}
"""


@dataclass(frozen=True)
class Section:
    title: str
    body_html: str
    anchor: str | None = None


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) < 1e-2 or abs(value) >= 1e4:
        return f"{value:.{digits}g}"
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".")


def utc(t: float | None) -> str:
    if t is None:
        return "–"
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


# --- charts -----------------------------------------------------------------------------------------

def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exponent:
            return step * exponent
    return 10 * exponent


def _segments(points: Sequence[Point]) -> list[list[tuple[float, float]]]:
    """Runs of points without gaps (None breaks the line)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for t, v in points:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((t, float(v)))
    return [r for r in runs if r]


def render_timeline_svg(series: Mapping[str, Sequence[Point]], markers: Sequence[Marker] = (), *,
                        labels: Mapping[str, str] | None = None, width: int = 880, panel_height: int = 64,
                        t0: float | None = None, title: str = "timeline") -> str:
    """One panel per series (in the mapping's order) on a shared time axis in seconds from `t0`; each marker is
    a band from its onset to its time with a line at its time, labelled in the top panel."""
    labels = {**LABELS, **(labels or {})}
    names = [n for n in series]
    all_t = [t for n in names for t, _ in series[n]] + [x for m in markers for x in (m.t, m.onset)]
    if not names:
        return ""
    lo = min(all_t) if all_t else 0.0
    hi = max(all_t) if all_t else 1.0
    t0 = lo if t0 is None else t0
    if hi <= lo:
        hi = lo + 1.0
    left, right, gap = 150, 36, 10
    top = 10 + 13 * max(1, min(len(markers), 4))
    plot_w = width - left - right
    height = top + len(names) * (panel_height + gap) + 30

    def x(t: float) -> float:
        return left + (t - lo) / (hi - lo) * plot_w

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-size="11"><title>{esc(title)}</title>',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>']
    for i, m in enumerate(markers):
        x0, x1 = x(max(m.onset, lo)), x(min(m.t, hi))
        y_end = top + len(names) * (panel_height + gap) - gap
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(2.0, x1 - x0):.1f}" height="{y_end - top}" '
                     f'fill="{MARKER_COLOUR}" fill-opacity="0.10"/>')
        parts.append(f'<line x1="{x1:.1f}" y1="{top}" x2="{x1:.1f}" y2="{y_end}" stroke="{MARKER_COLOUR}" '
                     f'stroke-width="1.5" stroke-dasharray="4 2"/>')
        parts.append(f'<text x="{x1 - 3:.1f}" y="{top - 4 - 13 * (i % 4)}" text-anchor="end" fill="{MARKER_COLOUR}" '
                     f'font-weight="600">{esc(m.label)}</text>')
    for row, name in enumerate(names):
        y0 = top + row * (panel_height + gap)
        values = [v for _, v in series[name] if v is not None and math.isfinite(v)]
        vmax = _nice_max(max(values) if values else 1.0)
        colour = PALETTE[row % len(PALETTE)]
        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel_height}" fill="none" '
                     f'stroke="#d0d7de"/>')
        parts.append(f'<text x="{left - 8}" y="{y0 + panel_height / 2 + 4:.1f}" text-anchor="end" '
                     f'fill="#1f2328">{esc(labels.get(name, name))}</text>')
        parts.append(f'<text x="{left - 4}" y="{y0 + 9}" text-anchor="end" font-size="9" fill="#59636e">'
                     f'{esc(fmt(vmax))}</text>')
        parts.append(f'<text x="{left - 4}" y="{y0 + panel_height}" text-anchor="end" font-size="9" '
                     f'fill="#59636e">0</text>')
        step = name == "health"
        for run in _segments(series[name]):
            coords = []
            for j, (t, v) in enumerate(run):
                y = y0 + panel_height - (v / vmax) * (panel_height - 4) - 2
                if step and j:
                    coords.append(f"{x(t):.1f},{coords[-1].split(',')[1]}")
                coords.append(f"{x(t):.1f},{y:.1f}")
            if len(coords) == 1:
                cx, cy = coords[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            else:
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" '
                             f'points="{" ".join(coords)}"/>')
    axis_y = top + len(names) * (panel_height + gap) - gap
    for t in _time_ticks(lo, hi, t0):
        parts.append(f'<line x1="{x(t):.1f}" y1="{axis_y}" x2="{x(t):.1f}" y2="{axis_y + 4}" stroke="#59636e"/>')
        parts.append(f'<text x="{x(t):.1f}" y="{axis_y + 16}" text-anchor="middle" fill="#59636e">'
                     f'{esc(fmt(t - t0, 3))} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _time_ticks(lo: float, hi: float, t0: float, target: int = 6) -> list[float]:
    """Round tick times (relative to t0) covering lo..hi."""
    raw = (hi - lo) / target
    exponent = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * exponent for m in (1, 2, 5, 10) if m * exponent >= raw)
    first = math.ceil((lo - t0) / step - 1e-9) * step
    ticks, k = [], 0
    while first + k * step <= hi - t0 + 1e-9 and k < 50:
        ticks.append(t0 + first + k * step)
        k += 1
    return ticks


def bucket_counts(h: Histogram) -> list[float]:
    """Per-bucket counts of a cumulative histogram: one per finite edge, then the +Inf overflow."""
    counts, previous = [], 0.0
    for c in h.cumulative:
        counts.append(max(0.0, c - previous))
        previous = c
    counts.append(max(0.0, h.count - previous))
    return counts


def bin_values(values: Sequence[float], edges: Sequence[float]) -> list[float]:
    """Exact values binned like a Prometheus histogram (le = upper bound inclusive), plus an overflow bin."""
    counts = [0.0] * (len(edges) + 1)
    for v in values:
        for i, edge in enumerate(edges):
            if v <= edge:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
    return counts


def render_histogram_svg(edges: Sequence[float], counts: Sequence[float], *, title: str = "distribution",
                         unit: str = "s", width: int = 420, height: int = 170,
                         colour: str = PALETTE[0]) -> str:
    """Bars per bucket; the x labels are the buckets' upper bounds ("+Inf" for the overflow bucket)."""
    if len(counts) != len(edges) + 1:
        raise ValueError("counts needs one entry per edge plus the +Inf bucket")
    left, right, top, bottom = 40, 10, 22, 42
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(counts)
    total = sum(counts)
    cmax = max(counts) if counts and max(counts) > 0 else 1.0
    bar_w = plot_w / n
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-size="10"><title>{esc(title)}</title>',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
             f'<text x="{left}" y="14" font-size="12" font-weight="600" fill="#1f2328">{esc(title)}</text>',
             f'<text x="{width - right}" y="14" text-anchor="end" fill="#59636e">n = {esc(fmt(total))}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#59636e"/>']
    label_every = max(1, math.ceil(n / 12))
    for i, c in enumerate(counts):
        h = (c / cmax) * (plot_h - 2)
        bx = left + i * bar_w
        parts.append(f'<rect x="{bx + 1:.1f}" y="{top + plot_h - h:.1f}" width="{max(1.0, bar_w - 2):.1f}" '
                     f'height="{h:.1f}" fill="{colour}"><title>le {esc(_edge(edges, i, unit))}: '
                     f'{esc(fmt(c))}</title></rect>')
        if i % label_every == 0 or i == n - 1:
            parts.append(f'<text x="{bx + bar_w / 2:.1f}" y="{top + plot_h + 12}" text-anchor="end" '
                         f'transform="rotate(-35 {bx + bar_w / 2:.1f} {top + plot_h + 12})" fill="#59636e">'
                         f'{esc(_edge(edges, i, unit))}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" fill="#59636e">{esc(fmt(cmax))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _edge(edges: Sequence[float], i: int, unit: str) -> str:
    return "+Inf" if i >= len(edges) else f"{fmt(edges[i], 3)}{unit}"


# --- blocks -------------------------------------------------------------------------------------------

def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, caption: str | None = None) -> str:
    """An HTML table; numbers are right-aligned and formatted, anything else escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, (int, float)) and not isinstance(cell, bool):
                cells.append(f'<td class="num">{esc(fmt(cell))}</td>')
            else:
                cells.append(f"<td>{esc('–' if cell is None else cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_facts(rows: Sequence[tuple[str, object]]) -> str:
    """A two-column key/value table without a header row."""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc('–' if v is None else v)}</td></tr>" for k, v in rows)
    return f'<table class="facts"><tbody>{body}</tbody></table>'


def runbook_html(branch: RunbookBranch, cause: object = None) -> str:
    steps = "".join(f"<li>{esc(s)}</li>" for s in branch.check_next)
    note = branch.for_cause(cause)
    lead = f"<p><b>{esc(note)}</b></p>" if note else ""
    return (f'<div class="runbook"><p>{esc(branch.meaning)}</p>{lead}<dl>'
            f"<dt>Check next</dt><dd><ol>{steps}</ol></dd>"
            f"<dt>Expected range</dt><dd>{esc(branch.expected_range)}</dd>"
            f"<dt>Safe action</dt><dd>{esc(branch.safe_action)}</dd>"
            f"<dt>Rollback (and when)</dt><dd>{esc(branch.rollback)}</dd>"
            f"<dt>What a restart would destroy</dt><dd>{esc(branch.restart_destroys)}</dd></dl></div>")


def verdicts_html(verdicts: Sequence[Verdict], t0: float | None = None, *, with_runbook: bool = True) -> str:
    if not verdicts:
        return "<p>No verdict: nothing the detectors look for happened in this window.</p>"
    base = t0 if t0 is not None else min(v.onset for v in verdicts)
    out = [render_table(
        ("verdict", "onset (s)", "concluded (s)", "since (s)", "why"),
        [(v.name, round(v.onset - base, 3), round(v.t - base, 3), round(v.since_s, 3), v.why) for v in verdicts])]
    for v in verdicts:
        out.append(f'<h3><span class="verdict">{esc(v.name)}</span> — {esc(v.why)}</h3>')
        if v.evidence:
            out.append(render_table(("source", "sample time (s)", "field", "value"),
                                    [(e.source, round(e.t - base, 3), e.field, _plain(e.value))
                                     for e in v.evidence], caption="evidence (pointers into the stored samples)"))
        if v.details:
            from servewatch.bundle.incident import detail_words

            out.append(render_table(("detail", "value"), [(k.replace("_", " "), detail_words(k, x))
                                                          for k, x in sorted(v.details.items())]))
        branch = runbook_for(v.name)
        if with_runbook and branch is not None:
            out.append(runbook_html(branch, v.details.get("cause")))
    return "".join(out)


def _plain(value: object) -> object:
    return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else str(value)


def render_report(title: str, sections: Sequence[Section], *, subtitle: str | None = None) -> str:
    """The whole page: one file, inline CSS, inline SVG, no scripts, nothing fetched."""
    nav = ""
    if len(sections) > 1:
        items = "".join(f'<li><a href="#{esc(_anchor(s, i))}">{esc(s.title)}</a></li>' for i, s in enumerate(sections))
        nav = f"<nav><ul>{items}</ul></nav>"
    body = "".join(f'<section id="{esc(_anchor(s, i))}"><h2>{esc(s.title)}</h2>{s.body_html}</section>'
                   for i, s in enumerate(sections))
    sub = f'<p class="sub">{esc(subtitle)}</p>' if subtitle else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>"
            f"<body><h1>{esc(title)}</h1>{sub}{nav}{body}</body></html>\n")


def _anchor(section: Section, i: int) -> str:
    return section.anchor or f"section-{i + 1}"


# --- one incident -----------------------------------------------------------------------------------

def incident_section(incident, *, title: str | None = None, anchor: str | None = None) -> Section:
    """A bundle (servewatch.bundle.incident.Incident) as one report section."""
    from servewatch.bundle.incident import deployment_words, fault_words

    meta = incident.meta
    window = meta["window"]
    t0 = window["start_t"]
    chart = zoom = ""
    for whose, series in incident.timelines:      # a deployment: each instance's own chart
        ordered = {name: series[name] for name in SERIES}
        of = f"{whose} in {incident.name}" if whose else incident.name
        chart += render_timeline_svg(ordered, incident.markers, t0=t0, title=f"timeline of {of}")
        zoom += _zoom_chart(ordered, incident.markers, t0, window["end_t"], of)
    target = meta["target"]
    facts = render_facts([
        ("incident id", meta["incident_id"]),
        ("trigger", meta["trigger"]["verdict"]),
        ("target", target["url"] or ("a deployment" if target.get("deployment") else "unknown")),
        *([("deployment", pair)] if (pair := deployment_words(meta)) else []),
        *((f"side at fault ({v.name})", fault) for v in incident.verdicts if (fault := fault_words(v))),
        ("engine", " ".join(x for x in (target["dialect"], target["generation"]) if x) or "unknown"),
        ("target versions", ", ".join(f"{k} {v}" for k, v in target["versions"].items()) or "unknown"),
        ("window", f"{utc(window['start_t'])} → {utc(window['end_t'])}"),
        ("samples", ", ".join(f"{k} {v}" for k, v in window["samples"].items())),
        ("samples kept", "{samples_after} of {samples_before} (thinned to fit the bundle)".format(**window["thinned"])
         if window["thinned"]["applied"] else "all (none thinned)"),
        ("bundle writes that failed before this one", meta["writer"]["write_failures"]),
        ("servewatch", meta["servewatch_version"]),
    ])
    caption = ("Health, running, waiting, KV cache and generation rate; red bands run from each verdict's onset "
               f"to the moment it was concluded. Time in seconds from {utc(t0)}.")
    body = (f"{facts}<figure>{chart}<figcaption>{esc(caption)}</figcaption></figure>{zoom}"
            f"<h3>Verdicts</h3>{verdicts_html(incident.verdicts, t0)}{gpu_html(incident.samples, t0)}"
            f"{_latency_html(incident)}"
            f"{_process_and_logs_html(incident, t0)}")
    return Section(title=title or f"Incident {incident.name}", body_html=body, anchor=anchor)


def _zoom_chart(series: Mapping[str, Sequence[Point]], markers: Sequence[Marker], t0: float | None,
                end: float | None, name: str) -> str:
    """A close-up of the verdicts when they are a sliver of a long window."""
    if not markers or t0 is None or end is None or end <= t0:
        return ""
    onset = min(m.onset for m in markers)
    span = max(m.t for m in markers) - onset
    if span > 0.1 * (end - t0):
        return ""
    lo = max(t0, onset - max(10.0, 3 * span))
    if lo <= t0:
        return ""
    close = {k: [(t, v) for t, v in points if t >= lo] for k, points in series.items()}
    chart = render_timeline_svg(close, markers, t0=t0, title=f"close-up of {name}")
    return (f"<figure>{chart}<figcaption>Close-up of the last {esc(fmt(end - lo))} s, around the verdicts "
            f"(same time origin).</figcaption></figure>")


def _latency_html(incident) -> str:
    from servewatch.bundle.incident import latency_histograms

    found = latency_histograms(incident)
    if not found:
        return ""
    from servewatch.detectors.series import engine_words

    charts = "".join(render_histogram_svg(h.edges, bucket_counts(h),
                                          title=f"{kind} ({engine_words(name) if '=' in name else name})")
                     for name, kind, h in found)
    note = ""
    if any(v.name == "histogram_blind" for v in incident.verdicts):
        note = f'<p class="note">{esc(HISTOGRAM_BLINDNESS_NOTE)}</p>'
    return ("<h3>Server latency histograms over the window</h3><p>Observations between the oldest and the newest "
            f"scrape in the bundle, per bucket.</p><div class=\"charts\">{charts}</div>{note}")


def gpu_html(samples, t0: float | None) -> str:
    """The GPU panel: per rank, its GPU over the window (utilisation, power, SM clock, temperature, whether a
    throttle reason held its clocks), its Xid events and the moment it was lost marked; empty without GPU samples."""
    from servewatch.bundle.gpu_panel import LABELS as GPU_LABELS
    from servewatch.bundle.gpu_panel import gpu_panels, panel_title, throttle_words, xid_words

    panels = gpu_panels(samples)
    if not panels:
        return ""
    base = t0 if t0 is not None else min((p[0] for g in panels for p in g.series["utilization_pct"]), default=0.0)
    out = ["<h3>GPUs per rank</h3><p>Each rank's GPU as NVML read it (the GPU source's readings); Xid events and "
           "a GPU lost are marked in red. Time in seconds from " + esc(utc(base)) + ".</p>"]
    for panel in panels:
        title = panel_title(panel)
        chart = render_timeline_svg(panel.series, panel.markers, labels=GPU_LABELS, panel_height=40, t0=base,
                                    title=f"GPU panel of {title}")
        said = [f"throttle reasons: {throttle_words(panel, base)}" if panel.throttles else "no throttle reason",
                *(xid_words(x, base) for x in panel.xids)]
        if panel.lost_at is not None:
            said.append(f"lost (NVML: GPU is lost) from +{panel.lost_at - base:.1f} s")
        out.append(f"<h3>{esc(title)}</h3><figure>{chart}<figcaption>{esc('; '.join(said))}</figcaption></figure>")
        if panel.xids:
            out.append(render_table(("time (s)", "Xid", "meaning", "NVIDIA's action"),
                                    [(round(x.t - base, 3), x.xid, x.meaning, x.action) for x in panel.xids]))
    return "".join(out)


def _process_and_logs_html(incident, t0: float | None) -> str:
    from servewatch.bundle.incident import (COLLECTIVE_HEADERS, LOG_HEADERS, PROCESS_HEADERS, STAGE_HEADERS,
                                           collective_rows, log_rows, process_rows, stage_rows)

    out = []
    stages = stage_rows(incident)
    if stages:
        out.append(f"<h3>Startup stages</h3>{render_table(STAGE_HEADERS, stages)}")
    t, rows = process_rows(incident)
    if rows:
        at = f" at +{fmt(t - t0)} s" if t0 is not None else ""
        out.append(f"<h3>Process tree{esc(at)} (newest sample)</h3>{render_table(PROCESS_HEADERS, rows)}")
    t, rows = collective_rows(incident)
    if rows:
        at = f" at +{fmt(t - t0)} s" if t0 is not None else ""
        out.append(f"<h3>Collectives (Flight Recorder){esc(at)}</h3>{render_table(COLLECTIVE_HEADERS, rows)}")
    logs = log_rows(incident)
    if logs:
        out.append(f"<h3>Log events (newest {len(logs)})</h3>{render_table(LOG_HEADERS, logs)}")
    return "".join(out)


def render_incident_page(incident) -> str:
    verdicts = ", ".join(v.name for v in incident.verdicts) or "no verdict"
    return render_report(f"servewatch incident: {verdicts}", [incident_section(incident, title="Incident")],
                         subtitle=f"bundle {incident.name}")
