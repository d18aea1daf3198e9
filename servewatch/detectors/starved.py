"""A verdict concluded across a gap in the recorder's own sampling says so (timeline.gaps): its explanation ends
"concluded across a 7.0 s gap in the recorder's own sampling" and its details carry `recorder_gap_s`, the longest
such gap between its onset and its conclusion. The recorder applies it to what the detectors return; a bundle
stores the gaps (window.recorder) and `verify` applies it again to its recomputation, so the note is checked
like every other word of a verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from servewatch.detectors.verdict import Verdict
from servewatch.timeline.gaps import Gap, across_words, overlapping

GAP_DETAIL = "recorder_gap_s"


def note_gaps(verdicts: Iterable[Verdict], gaps: Sequence[Gap]) -> list[Verdict]:
    """Each verdict, with the note when a starved gap overlaps [its onset, its conclusion]."""
    out = []
    for verdict in verdicts:
        held = overlapping(gaps, verdict.onset, verdict.t) if gaps else ()
        if not held or GAP_DETAIL in verdict.details:
            out.append(verdict)
            continue
        seconds = max(g.seconds for g in held)
        out.append(replace(verdict, why=f"{verdict.why}; {across_words(seconds)}",
                           details={**verdict.details, GAP_DETAIL: round(seconds, 2)}))
    return out
