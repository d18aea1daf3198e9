"""A postmortem as a shareable document (JSON), a terminal view and a single offline HTML page.

Allow-list: only parsed numbers, the grammar's own literals, exception type names and engine module.function
names leave here; never a log line's text, a prompt, a request id or a path.
"""

from __future__ import annotations

from servewatch.doctor.postmortem import Postmortem
from servewatch.words import field_words

SCHEMA = "servewatch.postmortem/1"
TIMELINE_FIELDS = ("running", "waiting", "kv_pct", "gen_tps", "prompt_tps", "preemptions", "prefix_hit_pct")
CHART_LABELS = {"running": "running", "waiting": "waiting", "kv_pct": "KV cache %", "gen_tps": "generation tok/s",
                "prefix_hit_pct": "prefix cache hit %"}


def to_dict(pm: Postmortem) -> dict:
    r, d = pm.record, pm.death
    return {
        "schema": SCHEMA,
        "dialect": r.dialect,
        "stats_line_generations": sorted(r.stats_namings),
        "lines_read": r.lines,
        "lines_recognised": r.recognised,
        "first_stamp": r.first_clock,
        "last_stamp": r.last_clock,
        "span_s": r.duration_s,
        "timeline": [{"t": s.t, "stamp": s.clock, "source": s.source,
                      **{k: getattr(s, k) for k in TIMELINE_FIELDS if getattr(s, k) is not None}} for s in r.stats],
        "startup": {"stages": [{"stage": s.name, "t": s.t, "stamp": s.clock, "seconds": s.seconds, **s.numbers}
                               for s in r.startup],
                    "ready_after_s": r.ready_t, "kv_cache_tokens": r.kv_cache_tokens,
                    "max_concurrency": r.max_concurrency, "settings": dict(r.settings)},
        "death": {"classification": d.classification, "label": d.label, "summary": d.summary, "t": d.t,
                  "stamp": d.clock, "process": d.process, "exception": d.exception,
                  "innermost_engine_frame": d.innermost_engine_frame, "engine_message": d.engine_message,
                  "signal": d.signal, "exit": d.exit},
        "at_death": None if pm.at_death is None else {
            "stamp": pm.at_death.clock, "source": pm.at_death.source,
            **{k: getattr(pm.at_death, k) for k in TIMELINE_FIELDS if getattr(pm.at_death, k) is not None}},
        "arithmetic": {"requested_bytes": pm.requested_bytes, "vocab_size": pm.vocab_size,
                       "vocab_source": pm.vocab_source, "suspects": [t.to_dict() for t in pm.arithmetic],
                       "conclusion": pm.conclusion},
        "actions": [{"action": a.action, "why": a.why, "rollback": a.rollback} for a in pm.actions],
        "partial": list(pm.partial),
    }


def _n(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def print_text(pm: Postmortem, console=None, wide: bool = False) -> None:
    from rich.text import Text

    from servewatch import table as tables

    Column = tables.Column
    # what the log said (its messages, frames, stamps) is printed as it is: never read as markup
    console = console or tables.console(wide, highlight=False, markup=False)
    r, d = pm.record, pm.death

    def head(word: str, rest: str = "", style: str = "bold") -> None:
        console.print(Text.assemble((word, style), rest))

    head("Postmortem", f" of a {r.dialect or 'unknown'} log: {r.lines:,} lines, "
                       f"{r.first_clock or '?'} → {r.last_clock or '?'} ({_n(r.duration_s, 0)} s)")
    if r.startup:
        table = tables.Table([Column("stage", priority=tables.ALWAYS, justify="left", shrink="fold"),
                              Column("stamp", priority=30, justify="left"), Column("took (s)", priority=80, justify="left"),
                              Column("numbers", priority=50, justify="left", shrink="fold", min_width=20)],
                             dict(title="Startup", title_justify="left"))
        for s in r.startup:
            numbers = field_words(s.numbers)
            table.add_row(s.name, s.clock or "–", _n(s.seconds, 2), numbers)
        tables.print_table(console, table)
    if r.stats:
        head("Timeline", f" ({len(r.stats)} stats points; {', '.join(sorted(r.stats_namings))})")
        console.print(ascii_chart(pm))
        table = tables.Table([Column("stamp", priority=tables.ALWAYS, justify="left"),
                              *(Column(col, priority=p) for col, p in (("running", 90), ("waiting", 85), ("KV %", 80),
                                                                      ("gen tok/s", 60), ("prefix hit %", 40))),
                              Column("source", priority=30, justify="left")])
        for s in _sampled(r.stats, 12):
            table.add_row(s.clock, _n(s.running), _n(s.waiting), _n(s.kv_pct), _n(s.gen_tps), _n(s.prefix_hit_pct),
                          s.source)
        tables.print_table(console, table)
    colour = "green" if d.classification in ("clean_shutdown", "still_running") else \
        "yellow" if d.classification == "forced_stop" else "red"
    console.print(Text.assemble(("Death", "bold"), ": ", (str(d.label), colour), f" — {d.summary}"))
    for label, value in (("when", d.clock), ("process", d.process), ("exception", d.exception),
                         ("innermost engine frame", d.innermost_engine_frame), ("engine's message", d.engine_message),
                         ("signal", d.signal), ("exit", d.exit)):
        if value:
            console.print(f"  {label}: {value}")
    if pm.at_death is not None:
        a = pm.at_death
        console.print(f"  at death ({a.clock}, {a.source}): running {_n(a.running)}, waiting {_n(a.waiting)}, "
                      f"KV {_n(a.kv_pct)} %")
    if pm.arithmetic:
        head("The arithmetic", f" ({_n(pm.requested_bytes)} B requested)" if pm.requested_bytes else "")
        for t in pm.arithmetic:
            mark = (str(t.verdict), "green" if t.verdict in ("matches", "ruled out") else "yellow")
            console.print(Text.assemble(f"  {t.suspect}: {t.formula} → ", mark, f": {t.why}"))
    if pm.conclusion:
        head("Verdict", f": {pm.conclusion}")
    if pm.actions:
        head("Safe actions")
        for i, a in enumerate(pm.actions, 1):
            console.print(f"  {i}. {a.action} — {a.why}\n     rollback: {a.rollback}")
    for note in pm.partial:
        head("partial", f": {note}", "yellow")


def _sampled(points: list, limit: int) -> list:
    """At most `limit` rows: evenly spread, always keeping the last points before the death."""
    if len(points) <= limit:
        return list(points)
    head = points[:-4]
    step = len(head) / (limit - 4)
    return [head[int(i * step)] for i in range(limit - 4)] + points[-4:]


def ascii_chart(pm: Postmortem, width: int = 60) -> str:
    """Running and KV % as two rows of block characters on a shared time axis."""
    blocks = " ▁▂▃▄▅▆▇█"
    stats = pm.record.stats
    if not stats:
        return ""
    lo, hi = stats[0].t, stats[-1].t
    span = hi - lo or 1.0
    rows = []
    for name, label in (("running", "running"), ("kv_pct", "KV %   ")):
        cells: list[float | None] = [None] * width
        for s in stats:
            value = getattr(s, name)
            if value is not None:
                i = min(width - 1, int((s.t - lo) / span * (width - 1)))
                cells[i] = value if cells[i] is None else max(cells[i], value)
        peak = max((c for c in cells if c is not None), default=0) or 1
        line = "".join(" " if c is None else blocks[max(1, round(c / peak * 8))] for c in cells)
        rows.append(f"  {label} |{line}| max {_n(peak)}")
    return "\n".join(rows)


def render_html(pm: Postmortem) -> str:
    from servewatch.bundle import report_html as h
    from servewatch.bundle.series import Marker

    r, d = pm.record, pm.death
    sections = []
    series = {name: [(s.t, getattr(s, name)) for s in r.stats] for name in ("running", "waiting", "kv_pct", "gen_tps")}
    series = {k: v for k, v in series.items() if any(x is not None for _, x in v)}
    markers = [Marker(t=d.t, onset=d.t, label=d.label)] if d.t is not None and r.stats else []
    if series:
        chart = h.render_timeline_svg(series, markers, labels=CHART_LABELS, t0=r.stats[0].t,
                                      title="stats lines over time")
        rows = [(s.clock, s.running, s.waiting, s.kv_pct, s.gen_tps, s.prefix_hit_pct, s.source)
                for s in _sampled(r.stats, 40)]
        sections.append(h.Section("Timeline", f"<figure>{chart}<figcaption>Seconds from the first stats point "
                                              f"({h.esc(r.stats[0].clock)}); the dashed line is the death."
                                              f"</figcaption></figure>" +
                                  h.render_table(("stamp", "running", "waiting", "KV %", "gen tok/s", "prefix hit %",
                                                  "source"), rows)))
    if r.startup:
        sections.append(h.Section("Startup", h.render_table(
            ("stage", "stamp", "took (s)", "numbers"),
            [(s.name, s.clock, s.seconds, field_words(s.numbers)) for s in r.startup])))
    facts = [("classification", d.label), ("summary", d.summary), ("when", d.clock), ("process", d.process),
             ("exception", d.exception), ("innermost engine frame", d.innermost_engine_frame),
             ("engine's message", d.engine_message), ("signal", d.signal), ("exit", d.exit)]
    if pm.at_death is not None:
        a = pm.at_death
        facts.append(("at death", f"{a.clock} ({a.source}): running {_n(a.running)}, waiting {_n(a.waiting)}, "
                                  f"KV {_n(a.kv_pct)} %"))
    sections.append(h.Section("The death", h.render_facts([(k, v) for k, v in facts if v is not None])))
    if pm.arithmetic:
        body = h.render_table(("suspect", "formula", "verdict", "why"),
                              [(t.suspect, t.formula, t.verdict, t.why) for t in pm.arithmetic],
                              caption=f"{_n(pm.requested_bytes)} bytes requested")
        if pm.conclusion:
            body += f'<p class="verdict">{h.esc(pm.conclusion)}</p>'
        sections.append(h.Section("The arithmetic", body))
    if pm.actions:
        sections.append(h.Section("Safe actions", "".join(
            f'<div class="runbook"><p><b>{h.esc(a.action)}</b></p><p>{h.esc(a.why)}</p>'
            f"<p>Rollback: {h.esc(a.rollback)}</p></div>" for a in pm.actions)))
    if pm.partial:
        sections.append(h.Section("Partial", "".join(f'<p class="warn">{h.esc(p)}</p>' for p in pm.partial)))
    subtitle = f"{r.dialect or 'unknown'} log, {r.first_clock} → {r.last_clock}: {d.label}"
    return h.render_report("servewatch postmortem", sections, subtitle=subtitle)
