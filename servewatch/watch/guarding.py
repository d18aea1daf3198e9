"""`servewatch guard`'s process handling: the server started (or attached to) and proven, SIGTERM and ^C
draining it, the recording whose verdicts the guard acts on, and the ledger of the server's lives.
`commands/guard.py` parses the arguments and calls `guard_session`; starting the server and the stacks
directory are `servewatch.actions.launch`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from servewatch.actions.launch import stacks_dir as checked_stacks_dir, start_server


@dataclass(frozen=True)
class GuardRun:
    """What `guard` takes beyond its recording options and GuardConfig (commands/guard.py builds it from the flags)."""
    pid: int | None = None                # --pid: attach to this server (None: `command` is started)
    unverified_pid_ok: bool = False       # act although the PID cannot be proven, from here, to hold the URL's port
    json: bool = False                    # JSON lines on stdout
    server_nice: int | None = None        # the started server's session nice
    stacks_dir: str | None = None         # where py-spy dumps go (None: the default, actions.launch)
    lives: str | None = None              # the ledger of the server's lives (None: one file per URL and command)
    # guard on a deployment (--prefill, --decode, --instance): every instance (watch.deployment.PairMember) is
    # recorded and the pair judged together; the server held is the instance at the recording's URL, proven to
    # serve that URL before every signal, and acted on only for verdicts about its side (GuardConfig.instance)
    deployment: tuple = ()


async def guard_session(run: GuardRun, options, command: list[str], config) -> int:
    import asyncio
    import subprocess
    import sys
    import time

    from servewatch import stopping
    from servewatch.actions.identity import ServerIdentityError, prove_server, unverifiable_reason
    from servewatch.actions.supervisor import Guard
    from servewatch.actions.tree import Member
    from servewatch.sources.process import PsutilProbe
    from servewatch.watch.event_lines import EventLines
    from servewatch.watch.session import bundles_kept, bundles_written, record

    loop = asyncio.get_running_loop()
    started = time.time()
    signalled: list[int] = []       # a signal before the guard exists is acted on once it does
    guard = None

    def stop_asked() -> None:       # ^C, SIGTERM or SIGHUP (servewatch.stopping); a second one too
        if guard is None:
            signalled.append(1)
        else:
            guard.drain()

    remove_stop = stopping.on_stop(loop, stop_asked, again=stop_asked)
    server = None
    override = run.unverified_pid_ok
    stacks_dir = checked_stacks_dir(run.stacks_dir, check=config.stacks and not config.dry_run)
    if command and not override and (why := unverifiable_reason(options.url)):    # before starting anything
        raise ServerIdentityError(f"cannot prove that the server started will serve {options.url}: {why} "
                                  f"(pass --unverified-pid-ok to go on anyway)", unverifiable=True)
    try:
        if command:
            server = start_server(command, json_lines=run.json, nice=run.server_nice)
        pid = server.pid if server is not None else run.pid
        probe = PsutilProbe(pid, exit_status=server.poll if server is not None else None)  # wrong PID: one line
        # An attached server is proven now (a mismatch: one line, exit 2); a started one once it listens.
        proof = prove_server(pid, options.url, allow_unverifiable=override) if server is None else None
        guard = Guard(Member(pid, probe.create_time, "api"), config, stacks_dir,
                      returncode=server.poll if server is not None else None, url=options.url, proof=proof,
                      override=override, json_lines=run.json)
        guard.say_policy(options.probe)
        if proof is not None:
            guard.say_proof()
        else:
            guard.prove_when_listening()
        if signalled:
            guard.drain()
        # The output contract (watch.event_lines): a line per verdict fired (with its bundle's path), cleared
        # and evidenced, on stderr with guard's own lines (its stdout may be the server's), or JSON on stdout.
        lines = (EventLines(json_lines=True) if run.json
                 else EventLines(stream=sys.stderr, prefix="servewatch guard: ", bundles=bool(options.out)))
        recorder = await record(options, probe, tool="guard",
                                listeners=[lines.fired, guard.on_fired, _hold_first_bundle(options.out)],
                                clear_listeners=[lines.cleared], on_recorder=_attach(guard),
                                evidence_listeners=[lines.evidence], identity=guard.identity_record,
                                # plain: the session's own stderr line already says it, with guard's prefix
                                bundle_listeners=[lines.on_demand] if run.json else [],
                                build=_pair_build(run.deployment, probe, options.url))
        if not guard.done.is_set():          # --duration ran out
            guard.drain()
        await guard.done.wait()
        while guard.tasks:
            await asyncio.gather(*list(guard.tasks), return_exceptions=True)
    except BaseException:     # e.g. an unwritable --out: a server guard started does not outlive it
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        raise
    finally:
        remove_stop()
    if server is not None:
        try:
            server.wait(timeout=5)     # reap a killed server (its status is already decided)
        except subprocess.TimeoutExpired:
            pass
    code, why = guard.result()
    if stopping.received() is not None:      # guard's own exit status (actions/policy.py), not 128 + N
        stopping.say("guard", bundles_kept(bundles_written([recorder]), options.out))
    _remember_life(run, options, command, guard, started, code, why)
    return code


def _remember_life(run, options, command, guard, started: float, code: int, why: str) -> None:
    """Add this run to the ledger of the server's lives; a crash loop across guard's restarts is said once,
    with the first failure named and its bundle pinned."""
    import sys
    import time

    from servewatch.actions import lives
    from dataclasses import replace

    from servewatch.detectors import registry

    from servewatch.bundle.writer import repin

    path = Path(run.lives) if run.lives else lives.default_path(options.url, command)
    past, problem = lives.load(path)
    first_verdict, bundle = guard.first or (None, None)
    life = lives.Life(started, time.time(), code, why, stopped=guard.outcome.drain is not None,
                      first_verdict=first_verdict, bundle=os.path.basename(bundle) if bundle else None)
    history = [*past, life]
    count, window_s = options.detectors.crash_loop_count, options.detectors.crash_loop_window_s
    loop = lives.crash_loop(history, count=count, window_s=window_s)
    if loop is not None:
        history = [replace(x, loop_first=True) if x is loop[0] else x for x in history]
    problems = [problem]
    if options.out:
        hold, release = lives.pins(history, count=count, window_s=window_s)
        problems.append(repin(options.out, add=hold, remove=release))
    problems.append(lives.save(path, history))
    if loop is not None:
        guard.say(f"{registry.CRASH_LOOP}: {lives.describe(loop)}", event=registry.CRASH_LOOP, failures=len(loop),
                  first_exit=loop[0].exit_status, first_verdict=loop[0].first_verdict, first_bundle=loop[0].bundle)
    for line in filter(None, problems):
        print(f"servewatch guard: {line}", file=sys.stderr, flush=True)


def _hold_first_bundle(out: str | None):
    """Pin this life's first bundle as soon as it is written: if the life fails it may be the first failure
    of a crash loop, and the same life's later bundles must not rotate it out. `_remember_life` releases
    it when the life ends clean or a loop names another first."""
    import sys

    from servewatch.bundle.writer import repin

    held = False

    def hold(fired) -> None:
        nonlocal held
        first, held = not held, True
        if not first or not out or not fired.bundle:
            return
        problem = repin(out, add={os.path.basename(fired.bundle)})
        if problem:
            print(f"servewatch guard: {problem}", file=sys.stderr, flush=True)
    return hold


def _pair_build(members, probe, url: str):
    """guard on a deployment: its recorder's builder (watch.deployment.build), the held instance (the one at `url`)
    with its process tree; None for one server."""
    if not members:
        return None
    from functools import partial

    from servewatch.watch.deployment import build
    from servewatch.watch.targets import base_url

    held = next(m.name for m in members if m.url == base_url(url))
    return partial(build, members, held=(held, probe))


def _attach(guard):
    def attach(recorder) -> None:
        guard.recorder = recorder
        recorder.evidence_listeners.append(guard.on_evidence)
        if guard.outcome.drain is not None:      # asked to stop before the recording began
            recorder.hold_verdicts()
        if guard.done.is_set():
            recorder.stop()
    return attach
