"""Gaps in sampling: the time a process ran nothing of its own, measured by waking at a fixed interval.

One arithmetic for two meters. The recorder's own heartbeat (`SamplingGaps`, fed by `Recorder.run`) wakes every
interval; when it wakes much later than that, the recorder was not scheduled (a node under CPU pressure starves
the watcher too) and every verdict it concluded across that gap was concluded late. The lab's freeze meter
(`servewatch.lab.freeze`, a process of its own beside a test) records the host's gaps in a file; both ask the
same questions of their gaps here: the longest overlapping a window, the time within it spent in gaps.

A gap counts as starvation when it is longer than twice the interval (one wake missed entirely) plus
ALLOWANCE_S, the scheduling noise measured on this project's CI machines (the freeze meter's threshold: five of
its 50 ms steps; below it a loaded host's ordinary wake-up jitter), and never shorter than FLOOR_S: at the
sub-second intervals of tests and `--fast` runs twice the interval is within a loaded host's noise, and a gap
under a second is not called starvation (at the drills' and the default 0.5 s interval the bound is 1.25 s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from servewatch.clock import iso8601

ALLOWANCE_S = 0.25       # scheduling noise, not a freeze (measured: the freeze meter's REPORT_OVER_S)
FLOOR_S = 1.0            # the shortest gap called starvation, whatever the interval
KEPT = 256               # gaps a long-running recorder remembers (the newest)


@dataclass(frozen=True, slots=True)
class Gap:
    start: float      # the last wake before it (the recorder's clock: epoch seconds; the meter's: monotonic)
    end: float        # the wake after it

    @property
    def seconds(self) -> float:
        return self.end - self.start


def starved_over(interval_s: float, allowance_s: float = ALLOWANCE_S) -> float:
    """The length a gap between two wakes must pass to be a starved recorder: twice the interval plus the
    allowance, and at least FLOOR_S."""
    return max(2 * interval_s + allowance_s, FLOOR_S)


def overlapping(gaps: Iterable[Gap], since: float, until: float) -> list[Gap]:
    """The gaps that overlap [since, until] (touching counts: a gap that ends at a sample's time delayed it)."""
    return [g for g in gaps if g.end >= since and g.start <= until]


def longest(gaps: Iterable[Gap], since: float, until: float) -> float:
    """The longest gap overlapping [since, until], in seconds; 0.0 if none."""
    return max((g.seconds for g in overlapping(gaps, since, until)), default=0.0)


def frozen(gaps: Iterable[Gap], since: float, until: float) -> float:
    """How long [since, until] was spent in gaps (each clipped to it), in seconds."""
    return sum(max(0.0, min(g.end, until) - max(g.start, since)) for g in gaps)


class SamplingGaps:
    """The recorder's record of its own sampling: `beat(now)` at every wake of a loop that sleeps `interval_s`;
    the gaps between two wakes longer than `threshold_s` (starved_over) are kept, the newest KEPT."""

    def __init__(self, interval_s: float, allowance_s: float = ALLOWANCE_S, keep: int = KEPT):
        if interval_s <= 0:
            raise ValueError("the sampling interval must be positive")
        self.interval_s = interval_s
        self.threshold_s = starved_over(interval_s, allowance_s)
        self.gaps: deque[Gap] = deque(maxlen=keep)
        self.beats = 0
        self._last: float | None = None

    def beat(self, now: float) -> Gap | None:
        """A wake at `now`: the gap since the previous one when it is a starved recorder's, else None."""
        last, self._last = self._last, now
        self.beats += 1
        if last is None or now - last <= self.threshold_s:
            return None
        gap = Gap(last, now)
        self.gaps.append(gap)
        return gap

    def across(self, since: float, until: float) -> Gap | None:
        """The longest starved gap overlapping [since, until], or None."""
        return max(overlapping(self.gaps, since, until), key=lambda g: g.seconds, default=None)

    def to_dict(self, since: float | None, until: float | None) -> dict:
        """What a bundle stores of them (window.recorder): the interval, the threshold, and the gaps that overlap
        the bundle's window (all of them for a window without times)."""
        held = list(self.gaps) if since is None or until is None else overlapping(self.gaps, since, until)
        return {"interval_s": self.interval_s, "threshold_s": self.threshold_s,
                "gaps": [{"start_t": g.start, "end_t": g.end} for g in held]}


def gaps_from_dict(stored: dict | None) -> list[Gap]:
    """The gaps a bundle's window.recorder holds (none for a bundle without it)."""
    if not stored:
        return []
    return [Gap(float(g["start_t"]), float(g["end_t"])) for g in stored["gaps"]]


def starved_words(gap: Gap, interval_s: float) -> str:
    """A gap as the recorder says it on stderr: "recorder starved: 7.0 s gap at 2026-12-06T12:03:04.123Z,
    interval 0.5 s" (the drill reads the gap back from this line: STARVED_LINE)."""
    return f"recorder starved: {gap.seconds:.1f} s gap at {iso8601(gap.start)}, interval {interval_s:g} s"


STARVED_LINE = r"recorder starved: (\d+(?:\.\d+)?) s gap at (\S+), interval"


def across_words(seconds: float) -> str:
    """What a verdict concluded across a gap adds to its explanation."""
    return f"concluded across a {seconds:.1f} s gap in the recorder's own sampling"
