"""The cyclic garbage collector tuned for a process holding many targets' history.

A fleet's rings hold millions of small objects (scrapes, engine states, histograms) that refcounting
frees as the rings turn; none of them form cycles. With CPython's default thresholds the collector
still walks all of them every few seconds: watching 300 fake vLLM targets at a 2 s cadence, its full
collections took 9 % of serve's CPU, 0.1–0.25 s each, with 0.5 M objects alive after 150 s.
"""

from __future__ import annotations

import gc

# Young collections 700x rarer than the default (700). What a young collection costs is not the young objects
# but what the objects alive at that moment reach: every target's current window, split and columns (a tuple
# of its whole ring, lists of its lookback's points), made at each scrape and alive until the next, so each
# collection walks about every target's history; and it finds no cycle (serve makes none: 0 collected in 84
# collections of a 10-minute run at 1,000 targets). At 50,000 a young collection ran every 8 s while the rings
# filled, 100 to 370 ms each (growing with the rings), 20 s of serve's 350 s of CPU (2026-12-07,
# benchmarks/fleet.py --targets 1000 --duration 600); at 500,000 one in about 100 s. The full collection (which
# also waits for 25 % of the heap to be new) needs 100 middle-generation collections instead of 10.
THRESHOLDS = (500_000, 20, 100)


def settle() -> tuple[int, int, int]:
    """Freeze what start-up built (modules, classes: never garbage) out of every later collection and
    set THRESHOLDS; returns the thresholds in force before."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return before
