"""`servewatch guard URL -- COMMAND...` (or `--pid PID`): the watchdog that acts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from servewatch.commands import add_command
from servewatch.errors import ServewatchError
from servewatch.watch.options import RecordingOptions, add_recording_arguments, duration

HELP = "supervise a server: when only a restart helps (a stall, a dead engine), dump its stacks and kill its tree"
DESCRIPTION = ("Start the server (`-- COMMAND...`) or attach to it (--pid), record it like `watch` (the active "
               "probe on, as in watch and serve), and act on the verdicts named by --act-on once their evidence "
               "holds: py-spy stacks of every process in the tree (to a private file, never into a bundle), then "
               "SIGKILL of the tree. By default it acts on every verdict whose action class is `restart` (only a "
               "restart helps) or `drain` (a hardware fault: guard then exits 6, which a restart policy must not "
               "restart), and says the set and the evidence each waits for when it starts; verdicts a person "
               "must decide on (overload, KV pressure, errors, a stalled start) are reported, never acted on. An "
               "engine_dead server first gets --exit-grace to exit by itself. SIGTERM or ^C to guard: a server it "
               "started is sent SIGTERM and given --drain-timeout to finish its requests; an attached server is "
               "left alone.")

# guard's recording defaults (the URL is the argument): the probe on, since a rank stalled while the engine reads
# idle and an engine wedged while idle are told only by a request's answer.
DEFAULTS = RecordingOptions(url="", interval=0.5, probe=True)

EPILOG = """\
exit status (what a restart policy should see):
  N    the server exited N by itself (128+S when signal S ended it)
  3    guard killed the server after a verdict (stall, dead engine)
  4    the server exited 0 although its engine had died (vLLM #48966)
  5    after SIGTERM, the server was still up at the drain timeout and was killed
  6    guard killed the server after a hardware fault (gpu_fault: an Xid, ECC or bus fault whose NVIDIA action is
       a GPU reset or a reboot); its last line says "hardware: GPU ... Xid ..., do not restart on this GPU".
       Do not restart on that GPU: systemd RestartPreventExitStatus=6 (deploy/systemd/servewatch-guard@.service)
  1    an attached server exited and its status could not be read
  0    the server exited 0, or guard stopped watching an attached server that still runs
  2    bad arguments or input
"""


def default_stacks_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "servewatch" / "stacks"


def register(subparsers) -> None:
    parser = add_command(subparsers, "guard", HELP, DESCRIPTION, run,
                         usage="servewatch guard URL [options] (-- COMMAND... | --pid PID)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    add_recording_arguments(parser, DEFAULTS)
    parser.add_argument("--pid", type=int, help="attach to a running server (its API server's PID) instead")
    parser.add_argument("--unverified-pid-ok", action="store_true",
                        help="act on the server although its PID cannot be proven, from here, to hold the URL's port "
                             "(another host or network namespace); said in guard's output and kept in every bundle. "
                             "A PID proven NOT to serve the URL is refused all the same")
    parser.add_argument("--act-on", default=",".join(_default_act_on()), metavar="VERDICTS",
                        help="comma-separated verdicts that make guard act, each once its evidence holds (default: "
                             "the restart and drain classes, %(default)s)")
    parser.add_argument("--exit-grace", type=duration, default=10.0, metavar="S",
                        help="engine_dead: time the server gets to exit by itself before the kill (default 10s)")
    parser.add_argument("--drain-timeout", type=duration, default=30.0, metavar="S",
                        help="after SIGTERM, time the server gets to finish its requests (default 30s); set it "
                             "from your e2e latency p99, not a platform default")
    parser.add_argument("--stacks-dir", metavar="DIR", help=f"where py-spy dumps go (private; default "
                                                            f"{default_stacks_dir()})")
    parser.add_argument("--no-stacks", action="store_true", help="kill without dumping stacks first")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done; send no signal")
    parser.add_argument("--server-nice", type=int, metavar="N",
                        help="with -- COMMAND: set the started server's session to CPU priority N (its autogroup's "
                             "nice, -20..19; 10 lets guard, in another session, have a CPU first on a host the "
                             "server keeps busy; below 0 needs CAP_SYS_NICE). Default: left as it is")
    add_recording_arguments(parser, DEFAULTS, ("duration",),
                            help={"duration": "stop after S seconds (a server guard started is then drained)"})
    parser.add_argument("--json", action="store_true", help="JSON lines on stdout: verdicts and guard's actions "
                                                            "(a started server's stdout then goes to stderr)")
    parser.add_argument("--lives", metavar="FILE",
                        help="guard's private record of this server's earlier runs, kept across guard's own restarts "
                             "so that repeated failed starts are reported once as crash_loop (crash_loop_count "
                             "failures within crash_loop_window_s, see --set) naming the first failure, whose bundle "
                             "in --out is then pinned against rotation (default: one file per URL and command "
                             "under $XDG_STATE_HOME/servewatch/guard)")


def _default_act_on() -> tuple[str, ...]:
    from servewatch.actions.policy import default_act_on

    return default_act_on()


def parse_act_on(text: str) -> tuple[str, ...]:
    from servewatch.detectors import registry

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if registry.spec(n) is None]
    if unknown or not names:
        raise ServewatchError(f"--act-on {text!r}: unknown verdict(s) {', '.join(unknown) or '(none given)'} "
                              f"(known: {', '.join(registry.names())})")
    return names


def run(args) -> int:
    import asyncio

    from servewatch.actions.policy import GuardConfig

    command = args.server_command     # what followed `--` (servewatch.cli)
    if bool(command) == (args.pid is not None):
        raise ServewatchError("give either -- COMMAND (start the server) or --pid PID (attach), not both or neither")
    if args.server_nice is not None and not command:
        raise ServewatchError("--server-nice applies to a server guard starts (-- COMMAND); an attached server's "
                              "priority is its owner's to set (echo N > /proc/PID/autogroup)")
    from servewatch.sched import NICE_RANGE

    if args.server_nice is not None and args.server_nice not in NICE_RANGE:
        raise ServewatchError(f"--server-nice {args.server_nice}: a nice is between {NICE_RANGE[0]} and {NICE_RANGE[-1]}")
    if args.lives:      # a file that is not a ledger is not replaced by one: it may be anything (a wrong path)
        from servewatch.actions import lives

        why = lives.unreadable(Path(args.lives))
        if why is not None:
            raise ServewatchError(f"--lives {args.lives}: not a guard ledger ({why}); give a new file or one guard "
                                  "wrote")
    config = GuardConfig(act_on=parse_act_on(args.act_on), exit_grace_s=args.exit_grace,
                         drain_timeout_s=args.drain_timeout, stacks=not args.no_stacks, dry_run=args.dry_run)
    from servewatch.watch.options import options_from_args

    return asyncio.run(_guard(args, options_from_args(args, DEFAULTS), command, config))


async def _guard(args, options, command: list[str], config) -> int:
    import asyncio
    import signal
    import subprocess
    import time

    from servewatch.actions.identity import ServerIdentityError, prove_server, unverifiable_reason
    from servewatch.actions.supervisor import Guard
    from servewatch.actions.tree import Member
    from servewatch.sources.process import PsutilProbe
    from servewatch.watch.output import evidence_printer
    from servewatch.watch.session import record

    loop = asyncio.get_running_loop()
    started = time.time()
    signalled: list[int] = []       # a signal before the guard exists is acted on once it does
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled.append, sig)
    server = None
    override = args.unverified_pid_ok
    stacks_dir = _stacks_dir(args, check=config.stacks and not config.dry_run)
    if command and not override and (why := unverifiable_reason(options.url)):    # before starting anything
        raise ServerIdentityError(f"cannot prove that the server started will serve {options.url}: {why} "
                                  f"(pass --unverified-pid-ok to go on anyway)", unverifiable=True)
    try:
        if command:
            server = _start(command, json_lines=args.json, nice=args.server_nice)
        pid = server.pid if server is not None else args.pid
        probe = PsutilProbe(pid, exit_status=server.poll if server is not None else None)  # wrong PID: one line
        # An attached server is proven now (a mismatch: one line, exit 2); a started one once it listens.
        proof = prove_server(pid, options.url, allow_unverifiable=override) if server is None else None
        guard = Guard(Member(pid, probe.create_time, "api"), config, stacks_dir,
                      returncode=server.poll if server is not None else None, url=options.url, proof=proof,
                      override=override, json_lines=args.json)
        guard.say_policy(options.probe)
        if proof is not None:
            guard.say_proof()
        else:
            guard.prove_when_listening()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, guard.drain)
        if signalled:
            guard.drain()
        await record(options, probe, tool="guard", listeners=[_verdict_printer(args.json), guard.on_fired, _hold_first_bundle(options.out)],
                     clear_listeners=[_cleared_printer(args.json)], on_recorder=_attach(guard),
                     evidence_listeners=[evidence_printer(args.json, "guard")],
                     identity=guard.identity_record)
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
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if server is not None:
        try:
            server.wait(timeout=5)     # reap a killed server (its status is already decided)
        except subprocess.TimeoutExpired:
            pass
    code, why = guard.result()
    _remember_life(args, options, command, guard, started, code, why)
    return code


def _stacks_dir(args, *, check: bool) -> Path:
    """--stacks-dir, checked now: an unwritable one is one line and exit 2 before anything runs (the dump is
    evidence a kill destroys; finding out at the kill is too late)."""
    from servewatch.sinks.bundle_sink import check_writable

    path = Path(args.stacks_dir) if args.stacks_dir else default_stacks_dir()
    if check:
        check_writable(path, "--stacks-dir")
    return path


def _remember_life(args, options, command, guard, started: float, code: int, why: str) -> None:
    """Add this run to the ledger of the server's lives; a crash loop across guard's restarts is said once,
    with the first failure named and its bundle pinned."""
    import sys
    import time

    from servewatch.actions import lives
    from dataclasses import replace

    from servewatch.bundle.writer import repin

    path = Path(args.lives) if args.lives else lives.default_path(options.url, command)
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
        guard.say(f"crash_loop: {lives.describe(loop)}", event="crash_loop", failures=len(loop),
                  first_exit=loop[0].exit_status, first_verdict=loop[0].first_verdict, first_bundle=loop[0].bundle)
    for line in filter(None, problems):
        print(f"servewatch guard: {line}", file=sys.stderr, flush=True)


def _start(command: list[str], *, json_lines: bool, nice: int | None = None):
    import subprocess
    import sys

    # Its own session: a ^C in guard's terminal reaches guard, which drains the server. With --json,
    # guard's stdout carries only JSON lines: the server's stdout goes to stderr with its logs.
    try:
        server = subprocess.Popen(command, start_new_session=True, stdout=sys.stderr if json_lines else None)
    except OSError as exc:
        raise ServewatchError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    print(f"servewatch guard: started {os.path.basename(command[0])} as pid {server.pid}", file=sys.stderr, flush=True)
    if nice is not None:
        from servewatch.sched import set_session_nice

        why = set_session_nice(server.pid, nice)
        print(f"servewatch guard: the server's session runs at CPU priority nice {nice} (its autogroup)" if why is None
              else f"servewatch guard: --server-nice {nice} not applied: {why}", file=sys.stderr, flush=True)
    return server


def _verdict_printer(json_lines: bool):
    import sys

    from servewatch.watch.output import json_line

    def show(fired) -> None:
        if json_lines:
            print(json_line(fired), flush=True)
        else:
            print(f"servewatch guard: {fired.verdict.name}: {fired.verdict.why}", file=sys.stderr, flush=True)
    return show


def _cleared_printer(json_lines: bool):
    import sys

    from servewatch.watch.output import cleared_line

    def show(cleared) -> None:
        if json_lines:
            print(cleared_line(cleared), flush=True)
        else:
            print(f"servewatch guard: {cleared.verdict.name} cleared after {cleared.duration_s:.1f} s",
                  file=sys.stderr, flush=True)
    return show


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


def _attach(guard):
    def attach(recorder) -> None:
        guard.recorder = recorder
        recorder.evidence_listeners.append(guard.on_evidence)
        if guard.outcome.drain is not None:      # asked to stop before the recording began
            recorder.hold_verdicts()
        if guard.done.is_set():
            recorder.stop()
    return attach
