"""`servewatch watch`'s process handling: the PID's identity proof (now, or once the server listens), SIGTERM
ending the watch like ^C, the live table, and the exit status the session ends with. `commands/watch.py`
parses the arguments and calls `watch_session` with the recording options and a `WatchRun`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WatchRun:
    """What `watch` takes beyond its recording options (commands/watch.py builds it from the flags)."""
    pid: int | None = None                # --pid: the API server's process, proven to hold the URL's port
    replay: str | None = None             # --replay: the process view from this bundle instead
    unverified_pid_ok: bool = False       # record --pid although it cannot be proven from here
    json: bool = False                    # one JSON line per event
    stop_on_incident: bool = False
    wide: bool = False                    # the live table whole, however wide


async def watch_session(options, run: WatchRun) -> int:
    """`options`: the RecordingOptions, checked (servewatch.commands.recording.options_from_args)."""
    import sys
    import time

    from servewatch.errors import ServewatchError
    from servewatch.sources.process import PsutilProbe
    from servewatch.detectors.registry import is_incident
    from servewatch.watch.event_lines import EventLines
    from servewatch.watch.output import status_table
    from servewatch.watch.session import record

    probe = PsutilProbe(run.pid) if run.pid is not None else None   # wrong PID: one line, non-zero exit
    if run.replay is not None:
        from servewatch.sim.replay import ReplayError, attach

        if probe is not None:
            raise ServewatchError("--replay takes the process view from the bundle: leave out --pid")
        try:
            probe = await attach(options.url, run.replay)
        except ReplayError as exc:
            raise ServewatchError(f"--replay: {exc}") from None
    identity = None
    pending = False
    if probe is not None and run.replay is None:   # its tree is recorded only once it is proven to be the server
        from servewatch.actions.identity import ServerIdentityError, prove_server

        try:
            proof = prove_server(run.pid, options.url, allow_unverifiable=run.unverified_pid_ok)  # mismatch: exit 2
        except ServerIdentityError as error:
            if not error.not_listening:
                raise
            # A server watched from its first second listens only once it has loaded: nothing else holds
            # the port, so its tree is recorded as the server's, and proven as soon as something listens
            # (another process listening there ends the watch: exit 2).
            pending = True
            identity = {"verified": False, "override": False,
                        "how": f"pid {run.pid} did not listen on the URL's port yet when watch began; pending"}
            print(f"servewatch watch: identity: pid {run.pid} does not listen on the URL's port yet (nothing "
                  f"does): recorded as the server until it listens, then proven", file=sys.stderr, flush=True)
        else:
            identity = {"verified": proof.verified, "override": run.unverified_pid_ok, "how": proof.how}
            given = "; --unverified-pid-ok was given" if run.unverified_pid_ok else ""
            print(f"servewatch watch: identity: {proof.how}{given}", file=sys.stderr, flush=True)
    mismatch: list[str] = []
    # The output contract (watch.event_lines): one line per event with --json, or in plain words when stdout
    # is not a terminal (a log, a pipe, a service manager); on a terminal, the live table.
    lines = (EventLines(json_lines=True) if run.json
             else None if sys.stdout.isatty() else EventLines(bundles=bool(options.out)))
    listeners = [lines.fired] if lines else []
    clear_listeners = [lines.cleared] if lines else []
    stop_when = (lambda fired: is_incident(fired.verdict.name)) if run.stop_on_incident else None
    started = time.monotonic()
    terminated = []

    def on_recorder(recorder) -> None:
        terminated.append(StopOnSignal(recorder))
        if pending:
            import asyncio

            proving.append(asyncio.get_running_loop().create_task(
                prove_once_listening(run.pid, options.url, options.interval, identity, recorder, mismatch)))

    proving: list = []

    async def live(recorder) -> None:
        await run_live(recorder, started, lambda *view: status_table(*view, wide=run.wide), options.duration)

    try:
        recorder = await record(options, probe, tool="watch", listeners=listeners, clear_listeners=clear_listeners,
                                evidence_listeners=[lines.evidence] if lines else [],
                                bundle_listeners=[lines.on_demand] if lines else [],
                                stop_when=stop_when,
                                on_recorder=on_recorder, drive=None if lines else live,
                                identity=(lambda: identity) if identity else None)
    finally:
        for handler in terminated:
            handler.close()
        for task in proving:
            task.cancel()
    if mismatch:
        print(f"servewatch watch: {mismatch[0]}", file=sys.stderr)
        return 2
    if terminated and terminated[0].received:
        from servewatch import stopping
        from servewatch.watch.session import bundles_kept, bundles_written

        stopping.say("watch", bundles_kept(bundles_written([recorder]), options.out))
        return stopping.status()
    if recorder.stopped:
        return 1
    if options.duration is not None and never_answered(recorder.ring):      # a dead URL is bad input: non-zero, as every command
        print(f"servewatch watch: {options.url}: nothing answered /health or /metrics in {options.duration:g} s",
              file=sys.stderr)
        return 2
    return 0


async def prove_once_listening(pid: int, url: str, interval_s: float, identity: dict, recorder,
                                mismatch: list[str]) -> None:
    """Poll until something listens on the URL's port: the watched PID's tree (proven: said, and kept in
    every bundle from then on) or another process (the watch stops, exit 2). A PID that exits first leaves
    the watch to report its exit."""
    import asyncio
    import sys

    import psutil

    from servewatch.actions.identity import ServerIdentityError, prove_server

    while True:
        await asyncio.sleep(interval_s)
        if not psutil.pid_exists(pid):
            return
        try:
            proof = await asyncio.to_thread(prove_server, pid, url)
        except ServerIdentityError as error:
            if error.not_listening:
                continue
            if error.gone or not psutil.pid_exists(pid):
                # Exited before it listened (a zombie until its parent reaps it: pid_exists says yes): that
                # is the recorder's process_exit to report, not a mismatch. Seen on a real vLLM whose start
                # failed (an undersized KV cache): the watch ended with exit 2 before process_exit.
                return
            mismatch.append(str(error))
            recorder.stop()
            return
        identity.update(verified=proof.verified, how=proof.how)
        print(f"servewatch watch: identity: {proof.how}", file=sys.stderr, flush=True)
        return


def never_answered(ring) -> bool:
    """No /health status and no /metrics body in the whole session (all of it still in the ring)."""
    window = ring.window()
    if any(ring.overwritten.values()) or not window.health:
        return False
    return (all(h.status is None for h in window.health)
            and all(m.error is not None for m in window.metrics))


class StopOnSignal:
    """^C, SIGTERM (a service manager stopping the watch) or SIGHUP end it in order (servewatch.stopping):
    bundles being written are finished, then one line says what was kept; exit status 128 + the signal."""

    def __init__(self, recorder):
        import asyncio

        from servewatch import stopping

        self.received = False
        self.recorder = recorder
        self.close = stopping.on_stop(asyncio.get_running_loop(), self._stop)

    def _stop(self) -> None:
        self.received = True
        self.recorder.stop()


async def run_live(recorder, started, status_table, duration) -> None:
    import asyncio
    import time

    from rich.live import Live

    def view():
        return status_table(recorder.ring.window(), recorder.fired, [v.name for v in recorder.latch.active],
                            time.monotonic() - started)

    with Live(get_renderable=view, refresh_per_second=2, transient=False):
        await recorder.run(duration)
    await asyncio.sleep(0)
