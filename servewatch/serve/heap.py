"""The cyclic garbage collector tuned for a process holding many targets' history.

A fleet's rings hold millions of small objects (scrapes, engine states, histograms) that refcounting
frees as the rings turn; none of them form cycles. With CPython's default thresholds the collector
still walks all of them every few seconds: watching 300 fake vLLM targets at a 2 s cadence, its full
collections took 9 % of serve's CPU, 0.1–0.25 s each, with 0.5 M objects alive after 150 s.
"""

from __future__ import annotations

import gc

# Young collections 700x rarer than the default (700). Measured at 1,000 targets (2026-12-07, benchmarks/fleet.py
# --targets 1000 --duration 600, a gc.callbacks log): at 50,000 one ran every 8 s while the rings filled, 100 to
# 370 ms each, growing with the rings rather than with its 50,000 objects (likely: what the young objects alive
# then reach is walked too, and every target's current window, split and columns, made at each scrape and kept
# until the next, reach its whole lookback), 20 s of serve's 350 s of CPU, and none found a cycle (0 collected in
# 84); at 500,000, 7 in the run, 3.4 s. What it costs: cycles wait longer. A failing target's exceptions made
# some (benchmarks/serve_hostile.py's peak 94.5-101.9 MB against 86 alone) until the transport let go of their
# tracebacks (transport.http1.without_traceback): 86.3-86.4 MB since, 1.00x alone (2026-12-07 17:33-18:05, 3 runs
# of each tree). The full collection (which also waits for 25 % of the heap to be new) needs 100 middle-generation
# collections instead of 10.
THRESHOLDS = (500_000, 20, 100)


def settle() -> tuple[int, int, int]:
    """Freeze what start-up built (modules, classes: never garbage) out of every later collection and
    set THRESHOLDS; returns the thresholds in force before."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return before
