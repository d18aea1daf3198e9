"""The flight recorder: sources on their own cadences → bounded ring → detectors → verdicts that fire once."""

from servewatch.watch.firing import Latch
from servewatch.watch.recorder import Recorder

__all__ = ["Latch", "Recorder"]
