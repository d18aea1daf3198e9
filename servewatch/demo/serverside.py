"""The server's view of one phase, from the recorder's /metrics samples, in the load generator's shape."""

from __future__ import annotations

from collections.abc import Sequence

from servewatch.load.server_view import ServerSample, ServerView, aggregate
from servewatch.timeline.samples import HealthSample, MetricsSample


def server_summary(samples: Sequence[MetricsSample], interval_s: float) -> dict:
    view = ServerView(client=None, now=lambda: 0.0, sleep=None, interval_s=interval_s)
    for m in samples:
        if m.error is not None or not m.engines:
            view.add(ServerSample(m.t, m.scrape_s, error=m.error or "no_engine"))
        else:
            view.add(aggregate(ServerSample(m.t, m.scrape_s, dialect=m.dialect, naming=m.naming,
                                            engines=m.engines)))
    return view.summary()


def health_answers(samples: Sequence[HealthSample]) -> dict[str, int]:
    """How /health answered: {"200": n, "503": n, "no answer": n}."""
    counts: dict[str, int] = {}
    for s in samples:
        key = str(s.status) if s.status is not None else "no answer"
        counts[key] = counts.get(key, 0) + 1
    return counts


def blindness_findings(samples: Sequence[MetricsSample]) -> list[dict]:
    """Blindness of what the server's histograms recorded during the phase (the delta of the first and
    last good scrapes, never the cumulative since start)."""
    from servewatch.engine.histogram import delta
    from servewatch.engine.served import labels_key
    from servewatch.engine.summary import summarize

    good = [m for m in samples if m.error is None and m.engines]
    if len(good) < 2:
        return []
    before = {labels_key(e): e for e in good[0].engines}
    findings = []
    for engine in good[-1].engines:
        old = before.get(labels_key(engine))
        if old is None:
            continue
        for kind, h in engine.histograms.items():
            if kind not in old.histograms:
                continue
            d = delta(h, old.histograms[kind])
            if d is None or d.count <= 0:
                continue
            line = summarize(kind, d).finding()
            if line:
                findings.append({"histogram": kind, "finding": line})
    return findings
