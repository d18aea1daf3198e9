"""histogram_blind: the window's latency observations all land in the first bucket.

A decode step can be far faster than a histogram's first edge (Llama-3-8B on an H100 streams its
weights in ~4.5 ms, under vLLM's 10 ms first ITL edge): every healthy token lands in bucket one and
histogram_quantile prints ~9.9 ms whatever the truth. Judged on the window's delta (what happened
while we watched), not on the cumulative histogram since process start.
"""

from __future__ import annotations

from servewatch.detectors.config import DetectorConfig
from servewatch.detectors.series import engine_series, num, where
from servewatch.detectors.verdict import Evidence, Verdict
from servewatch.timeline.window import Window


def detect(window: Window, config: DetectorConfig) -> list[Verdict]:
    from servewatch.engine.histogram import delta
    from servewatch.engine.summary import summarize

    verdicts = []
    for key, points in sorted(engine_series(window.metrics).items()):
        for kind in config.blind_kinds:
            having = [p for p in points if kind in p[1].histograms]
            if len(having) < 2:
                continue
            (old_sample, old), (new_sample, new) = having[0], having[-1]
            diff = delta(new.histograms[kind], old.histograms[kind])
            if diff is None or diff.count < config.blind_min_count:
                continue
            summary = summarize(kind, diff)
            if not summary.blind:
                continue
            why = (f"{summary.finding()}{where(key)} — over {new_sample.t - old_sample.t:.0f} s, "
                   f"{num(diff.count)} observations")
            evidence = (Evidence("metrics", old_sample.t, f"histograms.{kind}.count", old.histograms[kind].count),
                        Evidence("metrics", new_sample.t, f"histograms.{kind}.count", new.histograms[kind].count),
                        Evidence("metrics", new_sample.t, f"histograms.{kind}.cumulative[0]",
                                 new.histograms[kind].cumulative[0] if new.histograms[kind].cumulative else None))
            verdicts.append(Verdict("histogram_blind", new_sample.t, old_sample.t, why, evidence,
                                    {"engine": key, "histogram": kind, "count": diff.count,
                                     "first_bucket_fraction": summary.first_bucket_fraction,
                                     "first_bucket_le": summary.first_bucket_le, "mean_s": summary.mean_s,
                                     "p50_s": summary.p50_s, "p99_s": summary.p99_s}))
    return verdicts
