"""The output contract of `watch`, `guard` and `serve`: one line per event, written and flushed the moment it
happens — a verdict fired (with the bundle written for it, by path), a verdict cleared (how long it held), a
verdict's evidence held after its firing, a bundle asked for with SIGUSR1 (by path). Plain English for a log or a person (`watch` and `serve` on
stdout when it is not a terminal, `serve` always, guard on stderr with its other lines), or one JSON object
per line with `--json` (the shape of `watch.output`'s lines; serve's carry the target's name).

The lines hold the detectors' own words and figures, the verdict's name and the bundle's path: never a prompt,
a completion, a header or a request id (a verdict's `why` never holds one)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, TextIO

from servewatch.clock import iso8601
from servewatch.watch.output import cleared_line, evidence_line, json_line

if TYPE_CHECKING:
    from servewatch.detectors.verdict import Verdict
    from servewatch.sinks.base import CallbackSink, Cleared, Fired


def clock_time(t: float) -> str:
    """An epoch-seconds stamp as the lines show it: UTC hours, minutes and seconds, as the live table's."""
    return iso8601(t)[11:19]


class EventLines:
    """Writes each event as one line to `stream` (stdout when None, looked up at each line), flushed at once.

    `json_lines`: the JSON line in place of the plain one. `prefix` starts every plain line (guard's
    "servewatch guard: " on stderr). `target`: the name of the target the events are of (serve's fleet), in
    every line. `bundles`: an --out was given, so a fired verdict without a bundle says that none could be
    written. A reader that went away (a closed pipe) ends the lines, never the recording."""

    def __init__(self, *, json_lines: bool = False, stream: TextIO | None = None, prefix: str = "",
                 target: str | None = None, bundles: bool = False):
        self.json_lines = json_lines
        self.stream = stream
        self.prefix = prefix
        self.target = target
        self.bundles = bundles
        self.closed = False

    def for_target(self, name: str, *, bundles: bool | None = None) -> EventLines:
        """The same lines for one target of a fleet, its name in each."""
        return EventLines(json_lines=self.json_lines, stream=self.stream, prefix=self.prefix, target=name,
                          bundles=self.bundles if bundles is None else bundles)

    # --- the events -----------------------------------------------------------------------------------

    def fired(self, fired: Fired) -> None:
        if self.json_lines:
            self._write(self._targeted(json_line(fired)))
            return
        v = fired.verdict
        if fired.bundle:
            bundle = f" — bundle {fired.bundle}"
        else:
            bundle = " — its bundle could not be written (said on stderr)" if self.bundles else ""
        self._write(f"{self.prefix}{clock_time(v.t)} {self._of()}verdict {v.name} fired: {v.why}{bundle}")

    def cleared(self, cleared: Cleared) -> None:
        if self.json_lines:
            self._write(self._targeted(cleared_line(cleared)))
            return
        self._write(f"{self.prefix}{clock_time(cleared.t)} {self._of()}verdict {cleared.verdict.name} cleared "
                    f"after {cleared.duration_s:.1f} s")

    def evidence(self, verdict: Verdict, fired_now: bool) -> None:
        """The recorder's evidence listener: a line only for a verdict whose evidence came after its firing
        (the fired line already said the rest)."""
        if fired_now:
            return
        line = evidence_line(verdict)
        if self.json_lines:
            self._write(self._targeted(line))
            return
        action = json.loads(line)["action"]        # the JSON line's own field: the two words never differ
        self._write(f"{self.prefix}{clock_time(verdict.t)} {self._of()}verdict {verdict.name}: the evidence for "
                    f"its action ({action}) now holds: {verdict.why}")

    def on_demand(self, path: str, t: float) -> None:
        """A bundle asked for with SIGUSR1 (no verdict needed), by path."""
        if self.json_lines:
            self._write(self._targeted(json.dumps({"event": "bundle", "t": iso8601(t), "asked_by": "SIGUSR1",
                                                   "bundle": path}, ensure_ascii=False)))
            return
        self._write(f"{self.prefix}{clock_time(t)} {self._of()}bundle on demand (SIGUSR1): {path}")

    def sink(self) -> CallbackSink:
        """The lines as an on-loop sink: heard after the bundle writer, so each fired line has its path."""
        from servewatch.sinks.base import CallbackSink

        return CallbackSink(self.fired, self.cleared, on_loop=True)

    # --- writing --------------------------------------------------------------------------------------

    def _of(self) -> str:
        return f"{self.target}: " if self.target else ""

    def _targeted(self, line: str) -> str:
        if self.target is None:
            return line
        return json.dumps({"target": self.target, **json.loads(line)}, ensure_ascii=False)

    def _write(self, line: str) -> None:
        if self.closed:
            return
        stream = self.stream if self.stream is not None else sys.stdout
        try:
            stream.write(line + "\n")
            stream.flush()
        except BrokenPipeError:
            # The reader is gone (`| head -1`): no more lines; the recording, bundles and actions go on.
            # Its descriptor points at /dev/null from here, so the interpreter's last flush does not fail.
            self.closed = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass
