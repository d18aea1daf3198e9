"""What `watch` prints: one JSON line per fired and per cleared verdict (and when a verdict's evidence came after its
firing), or a live table."""

from __future__ import annotations

import json

from servewatch.clock import iso8601
from servewatch.detectors import registry
from servewatch.detectors.verdict import Verdict
from servewatch.sinks.base import Cleared, Fired
from servewatch.bundle.serialize import verdict_to_dict
from servewatch.timeline.window import Window


def cleared_line(cleared: Cleared) -> str:
    """One JSON line when a verdict stops holding: its onset, how long it held, and the samples that ended it."""
    v = cleared.verdict
    return json.dumps({"event": "cleared", "t": iso8601(cleared.t), "verdict": v.name, "onset": iso8601(v.onset),
                       "duration_s": round(cleared.duration_s, 3),
                       "ended_by": [{"source": e.source, "t": iso8601(e.t), "field": e.field, "value": e.value}
                                    for e in cleared.ended_by]}, ensure_ascii=False)


def json_line(fired: Fired) -> str:
    """One JSON line per fired verdict; `details` are the detector's own figures (e.g. the stall's
    `threshold_s`), cleaned as a bundle cleans them; `action` its action class, `evidence_held` whether the evidence
    that class waits for already holds (when not, an "evidence_held" line follows once it does)."""
    v = fired.verdict
    return json.dumps({"event": "fired", "t": iso8601(v.t), "verdict": v.name, "onset": iso8601(v.onset),
                       "since_s": round(v.since_s, 3), "why": v.why, "details": verdict_to_dict(v)["details"],
                       "action": registry.action_for(v), "evidence_held": registry.evidence_holds(v),
                       "bundle": fired.bundle}, ensure_ascii=False)


def evidence_line(verdict: Verdict) -> str:
    """One JSON line when a verdict that fired without it gets the evidence its action class waits for (e.g.
    not_serving's second probe in a row with no token)."""
    return json.dumps({"event": "evidence_held", "t": iso8601(verdict.t), "verdict": verdict.name,
                       "onset": iso8601(verdict.onset), "action": registry.action_for(verdict),
                       "why": verdict.why, "details": verdict_to_dict(verdict)["details"]}, ensure_ascii=False)


def status_table(window: Window, fired: list[Fired], active_names: list[str], elapsed_s: float, wide: bool = False):
    """A rich renderable: the target's current picture and the verdicts so far, the verdicts' table fitted to
    the terminal (servewatch.table; whole with `wide`). Every cell is plain text (rich would read a str
    cell's "[...]" as a style): label values, process titles and the verdicts' words come from the server."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from servewatch import table as tables

    health = window.health[-1] if window.health else None
    metrics = next((m for m in reversed(window.metrics) if m.error is None and m.engines), None)
    last_metrics = window.metrics[-1] if window.metrics else None
    process = window.process[-1] if window.process else None
    rows = [("watching", f"{elapsed_s:.0f} s"),
            ("health", "—" if health is None else (f"{health.status}" if health.status is not None
                                                   else f"down ({health.error})"))]
    if last_metrics is not None and last_metrics.error is not None:
        rows.append(("metrics", f"scrape failed ({last_metrics.error})"))
    if metrics is not None:
        for state in metrics.engines:
            kv = "n/a" if state.kv_usage is None else f"{state.kv_usage:.0%}"
            c = state.counters
            rows.append((f"engine {state.labels.get('engine', state.labels.get('tp_rank', ''))}".strip(),
                         f"running {_n(state.running)}  waiting {_n(state.waiting)}  KV {kv}  "
                         f"steps {_n(c.steps)}  gen tokens {_n(c.generation_tokens)}"))
    if process is not None:
        alive = "alive" if process.alive else "gone"
        titles = ", ".join(f"{m.title}:{m.status}" for m in process.members[:6])
        rows.append(("process", f"{process.root_pid} {alive}  {titles}"))
    rows.append(("active", ", ".join(active_names) or "none"))
    bundles = [record.bundle for record in fired if record.bundle]
    if bundles:                  # where the newest incident was frozen (--out), by path
        before = f" (and {len(bundles) - 1} before it)" if len(bundles) > 1 else ""
        rows.append(("bundle", f"{bundles[-1]}{before}"))
    now = Table.grid(padding=(0, 2))
    for row in rows:
        now.add_row(*map(Text, row))

    verdicts = tables.Table([tables.Column("time", priority=20, justify="left"),
                             tables.Column("verdict", priority=tables.ALWAYS, justify="left"),
                             tables.Column("after", priority=30),
                             tables.Column("why", priority=tables.ALWAYS, justify="left", shrink="fold", min_width=20)],
                            dict(title="verdicts", expand=True))
    for record in fired[-12:]:
        v = record.verdict
        verdicts.add_row(*map(Text, (iso8601(v.t)[11:23], v.name, f"{v.since_s:.1f} s", v.why)))
    return Group(now, tables.renderable(verdicts, wide=wide))


def _n(value) -> str:
    if value is None:
        return "n/a"
    return f"{int(value)}" if float(value).is_integer() else f"{value:.2f}"
