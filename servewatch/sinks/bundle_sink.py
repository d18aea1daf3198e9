"""The incident bundle writer as a sink: a bundle per fired verdict.

Stores the evidence window (the slice the detectors read) with every verdict of that detection run and
the detector config, so `servewatch verify` can recompute the verdicts from the bundle alone.
"""

from __future__ import annotations

import os
import tempfile
import threading

from servewatch.errors import ServewatchError


class BundleSink:
    def __init__(self, writer, target: str | None, config):
        self.writer = writer
        self.target = target
        self.config = config
        self.recorder = None          # set once the recorder exists: the ring's overwrite counts go in
        self.identity = None          # () -> {"verified", "override", "how"} | None: how --pid was tied to the URL
        self._writing = threading.Lock()   # verdict and on-demand bundles come from worker threads: one at a time

    @property
    def failures(self) -> int:
        return self.writer.failures

    def on_fired(self, fired):
        """A bundle for the verdict with every verdict of its detection run."""
        return self._write(fired.window, list(fired.verdicts), fired.verdict)   # the firing itself: its instance

    def on_cleared(self, cleared) -> None:
        """A bundle freezes an onset; the end of a condition writes nothing."""

    def close(self) -> None:
        """Every bundle is complete (fsynced) when its write returns."""

    def write_on_demand(self, window):
        """A bundle of the current window whatever it shows (trigger `on_demand`), with the verdicts the
        window supports now; `verify` checks it like any other."""
        from servewatch.detectors import run_detectors
        from servewatch.bundle.layout import ON_DEMAND

        return self._write(window, run_detectors(window, self.config), ON_DEMAND)

    def _write(self, window, verdicts, trigger):
        from servewatch.detectors import evidence_window
        from servewatch.bundle.writer import BundleContext

        recent = evidence_window(window, self.config)
        scrapes = [*recent.metrics, *(m for i in recent.instances for m in i.window.metrics)]   # a deployment's
        metrics = next((m for m in sorted(scrapes, key=lambda m: m.t, reverse=True) if m.dialect), None)
        context = BundleContext(target_url=self.target, detector_config=self.config,
                                dialect=metrics.dialect if metrics else None,
                                naming=metrics.naming if metrics else None, trigger=trigger,
                                overwritten=dict(self.recorder.ring.overwritten) if self.recorder else {},
                                identity=self.identity() if self.identity is not None else None,
                                recorder=self._gaps(recent, verdicts))
        with self._writing:
            return self.writer.write(recent, verdicts, context)

    def _gaps(self, window, verdicts):
        """The recorder's own sampling gaps over the bundle's window (from the earliest onset among its verdicts):
        None without a recorder that measures them (a virtual-time run)."""
        gaps = getattr(self.recorder, "gaps", None)
        if gaps is None or not gaps.beats:
            return None
        starts = [t for t in (window.start, *(v.onset for v in verdicts)) if t is not None]
        return gaps.to_dict(min(starts) if starts else None, window.end)


def bundle_sink(out: str, target: str | None, config, *, keep: int | None = None) -> BundleSink:
    """A sink writing into `out`; one clear error now if `out` cannot be written at all (later failures
    are counted by the writer and watching continues)."""
    from servewatch.bundle.writer import BundleWriter

    check_writable(out)
    writer = BundleWriter(out) if keep is None else BundleWriter(out, keep=keep)
    return BundleSink(writer, target, config)


def check_writable(path: str | os.PathLike, flag: str = "--out") -> None:
    """Create `path` (private) and write a file in it now: one line naming `flag` and exit 2 when it
    cannot be written, before anything is watched or acted on."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".servewatch-probe-"):
            pass
    except OSError as exc:
        raise ServewatchError(f"{flag} {path}: not writable ({exc.strerror or exc})") from None
