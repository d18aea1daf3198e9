"""The demo's live view: the phase, a progress bar over the plan, and the verdicts as they fire."""

from __future__ import annotations

import time

from servewatch.demo.plan import Phase
from servewatch.demo.result import PhaseResult
from servewatch.sinks.base import Fired


class LiveView:
    def __init__(self, plan: list[Phase], console=None, enabled: bool = True):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.plan = plan
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("phases"), TimeElapsedColumn(), console=self.console,
                                 disable=not enabled)
        self.task = self.progress.add_task("starting the built-in engine", total=len(plan))
        self.current: PhaseResult | None = None
        self.started = time.monotonic()

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.update(self.task, description="done", completed=len(self.plan))
        return self.progress.__exit__(*exc)

    def on_phase(self, result: PhaseResult) -> None:
        index = self.plan.index(result.phase)
        self.current = result
        what = ("injecting " + result.phase.fault["kind"]) if result.phase.is_fault else "load scenario"
        self.progress.update(self.task, completed=index, description=f"{result.phase.name} ({what})")

    def on_fired(self, fired: Fired) -> None:
        if not self.enabled:
            return
        v = fired.verdict
        phase = self.current.phase.name if self.current else "?"
        detected = self.current.detection_s(fired) if self.current else None
        when = f"{detected:.1f} s after the fault" if detected is not None else f"{v.since_s:.1f} s after onset"
        self.progress.console.print(f"[red]verdict[/red] [bold]{v.name}[/bold] in {phase}, {when}: {v.why}")
