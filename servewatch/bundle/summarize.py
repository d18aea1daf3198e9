"""A bundle as Markdown: what happened, the evidence, and the runbook branch for each verdict."""

from __future__ import annotations

from servewatch.detectors.registry import runbook_for
from servewatch.detectors.verdict import RunbookBranch
from servewatch.bundle.incident import (COLLECTIVE_HEADERS, LOG_HEADERS, PROCESS_HEADERS, STAGE_HEADERS,
                                       collective_rows, latency_histograms, log_rows, process_rows, stage_rows)
from servewatch.detectors.series import engine_words
from servewatch.bundle.incident import deployment_words, detail_words, fault_words
from servewatch.bundle.report_html import fmt, utc
from servewatch.bundle.series import LABELS, SERIES

_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int = 48) -> str:
    """A one-line picture of a series (blank where there is no value), resampled to `width` cells."""
    if not values:
        return ""
    n = min(width, len(values))
    cells = [values[int(i * len(values) / n)] for i in range(n)]
    present = [v for v in cells if v is not None]
    top = max(present) if present else 0.0
    if top <= 0:
        return "".join(" " if v is None else _SPARK[0] for v in cells)
    return "".join(" " if v is None else _SPARK[min(len(_SPARK) - 1, int(v / top * (len(_SPARK) - 1) + 0.5))]
                   for v in cells)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(incident) -> str:
    meta = incident.meta
    window = meta["window"]
    target = meta["target"]
    t0 = window["start_t"]
    names = ", ".join(v.name for v in incident.verdicts) or "no verdict"
    lines = [f"# servewatch incident: {names}", "",
             f"- bundle: `{incident.name}`",
             f"- incident id: `{meta['incident_id']}` (trigger: {meta['trigger']['verdict']})",
             f"- target: {target['url'] or ('a deployment' if target.get('deployment') else 'unknown')}"
             + (f" ({' '.join(x for x in (target['dialect'], target['generation']) if x)})"
                if target["dialect"] or target["generation"] else ""),
             *([f"- deployment: {pair}"] if (pair := deployment_words(meta)) else []),
             f"- target versions: {', '.join(f'{k} {v}' for k, v in target['versions'].items()) or 'unknown'}",
             f"- window: {utc(window['start_t'])} → {utc(window['end_t'])}; samples: "
             + ", ".join(f"{k} {v}" for k, v in window["samples"].items()),
             "- samples kept: " + ("{samples_after} of {samples_before} (thinned to fit the bundle)".format(
                 **window["thinned"]) if window["thinned"]["applied"] else "all (none thinned)"),
             *_recorder(window),
             f"- bundle writes that failed before this one: {meta['writer']['write_failures']}",
             f"- servewatch {meta['servewatch_version']}", ""]

    lines += ["## Timeline", ""]
    for whose, series in incident.timelines:      # a deployment: each instance's own
        lines += [*([f"### {whose}", ""] if whose else []),
                  "| series | min | max | last | shape |", "|---|---:|---:|---:|---|"]
        lines += [_series_row(LABELS[name], [v for _, v in series[name]]) for name in SERIES]
        lines.append("")

    lines += ["## Verdicts", ""]
    if not incident.verdicts:
        lines += ["No verdict: nothing the detectors look for happened in this window.", ""]
    for v in incident.verdicts:
        base = t0 if t0 is not None else v.onset
        lines += [f"### {v.name}", "", f"**Why:** {v.why}", "",
                  *([f"**Side at fault:** {fault}", ""] if (fault := fault_words(v)) else []),
                  f"Onset at +{fmt(v.onset - base)} s, concluded at +{fmt(v.t - base)} s "
                  f"({fmt(v.since_s)} s after onset).", ""]
        if v.evidence:
            lines += ["| evidence source | sample time (s) | field | value |", "|---|---:|---|---|"]
            lines += [f"| {e.source} | {fmt(e.t - base)} | `{_cell(e.field)}` | {_cell(e.value)} |"
                      for e in v.evidence]
            lines.append("")
        if v.details:
            lines.append("Details: " + ", ".join(f"{k.replace('_', ' ')} {detail_words(k, x)}"
                                                 for k, x in sorted(v.details.items())))
            lines.append("")
        branch = runbook_for(v.name)
        if branch is not None:
            lines += markdown_runbook(branch, v.details.get("cause"))
    lines += _gpus(incident, t0)
    lines += _latency(incident)
    lines += _process_and_logs(incident, t0)
    return "\n".join(lines).rstrip() + "\n"


def _recorder(window) -> list[str]:
    """The recorder's own sampling over the window (window.recorder: a real-time recorder's), in one line: each gap
    in which it was starved, or that there was none."""
    stored = window.get("recorder")
    if not stored:
        return []
    interval, gaps = stored["interval_s"], stored["gaps"]
    if not gaps:
        return [f"- the recorder's own sampling: every {fmt(interval)} s, no gap over {fmt(stored['threshold_s'])} s"]
    said = "; ".join(f"{g['end_t'] - g['start_t']:.1f} s gap at {utc(g['start_t'])}" for g in gaps)
    return [f"- recorder starved: {said}, interval {fmt(interval)} s (a verdict concluded across a gap says so)"]


def _gpus(incident, t0) -> list[str]:
    """The GPU panel in Markdown: per rank and GPU, each reading's range and shape, throttles and Xid events."""
    from servewatch.bundle.gpu_panel import LABELS as GPU_LABELS
    from servewatch.bundle.gpu_panel import SERIES as GPU_SERIES
    from servewatch.bundle.gpu_panel import gpu_panels, panel_title, throttle_words, xid_words

    panels = gpu_panels(incident.samples)
    if not panels:
        return []
    base = t0 if t0 is not None else 0.0
    lines = ["## GPUs per rank", "", "Each rank's GPU as NVML read it (the GPU source's readings).", ""]
    for panel in panels:
        lines += [f"### {panel_title(panel)}", "", "| reading | min | max | last | shape |", "|---|---:|---:|---:|---|"]
        lines += [_series_row(GPU_LABELS[name], [v for _, v in panel.series[name]]) for name in GPU_SERIES]
        lines.append("")
        lines.append("- throttle reasons: " + (throttle_words(panel, base) if panel.throttles else "none"))
        lines += [f"- {xid_words(x, base)}" for x in panel.xids]
        if panel.lost_at is not None:
            lines.append(f"- lost (NVML: GPU is lost) from +{panel.lost_at - base:.1f} s")
        lines.append("")
    return lines


def _latency(incident) -> list[str]:
    found = latency_histograms(incident)
    if not found:
        return []
    lines = ["## Server latency histograms over the window", "",
             "| histogram | engine | observations | mean (s) | in the first bucket |", "|---|---|---:|---:|---|"]
    for name, kind, h in found:
        first = h.cumulative[0] if h.cumulative else 0.0
        edge = f"≤ {fmt(h.edges[0])} s" if h.edges else "–"
        lines.append(f"| {kind} | {_cell(engine_words(name) if '=' in name else name)} | {fmt(h.count)} | {fmt(h.sum / h.count if h.count else None)} | "
                     f"{100 * first / h.count:.1f}% ({edge}) |")
    lines.append("")
    return lines


def _process_and_logs(incident, t0) -> list[str]:
    lines: list[str] = []
    stages = stage_rows(incident)
    if stages:
        lines += ["## Startup stages", "", _md_row(STAGE_HEADERS), "|---|---:|---:|---|"]
        lines += [_md_row(row) for row in stages]
        lines.append("")
    t, rows = process_rows(incident)
    if rows:
        at = f" at +{fmt(t - t0)} s" if t0 is not None else ""
        lines += [f"## Process tree{at} (newest sample)", "", _md_row(PROCESS_HEADERS),
                  "|" + "---|" * len(PROCESS_HEADERS)]
        lines += [_md_row(fmt(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else c for c in row)
                  for row in rows]
        lines.append("")
    t, rows = collective_rows(incident)
    if rows:
        at = f" at +{fmt(t - t0)} s" if t0 is not None else ""
        lines += [f"## Collectives (Flight Recorder){at}", "", _md_row(COLLECTIVE_HEADERS),
                  "|---:|---:|---:|---:|---|"]
        lines += [_md_row(row) for row in rows]
        lines.append("")
    logs = log_rows(incident)
    if logs:
        lines += [f"## Log events (newest {len(logs)})", "", _md_row(LOG_HEADERS), "|---:|---|---|"]
        lines += [_md_row(row) for row in logs]
        lines.append("")
    return lines


def _md_row(cells) -> str:
    return "| " + " | ".join(_cell("–" if c is None else c) for c in cells) + " |"


def markdown_runbook(branch: RunbookBranch, cause: object = None) -> list[str]:
    lines = ["#### Runbook", "", branch.meaning, ""]
    note = branch.for_cause(cause)
    if note:
        lines += [f"**{note}**", ""]
    lines.append("Check next:")
    lines += [f"{i}. {step}" for i, step in enumerate(branch.check_next, 1)]
    lines += ["", f"- **Expected range:** {branch.expected_range}",
              f"- **Safe action:** {branch.safe_action}",
              f"- **Rollback (and when):** {branch.rollback}",
              f"- **What a restart would destroy:** {branch.restart_destroys}", ""]
    return lines


def _series_row(label: str, values: list) -> str:
    """One Markdown row: the label, min, max and last of the values present, and their sparkline."""
    present = [v for v in values if v is not None]
    if not present:
        return f"| {label} | – | – | – | (no data) |"
    last = next(v for v in reversed(values) if v is not None)
    return f"| {label} | {fmt(min(present))} | {fmt(max(present))} | {fmt(last)} | `{sparkline(values)}` |"
