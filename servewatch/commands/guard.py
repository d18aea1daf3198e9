"""`servewatch guard URL -- COMMAND...` (or `--pid PID`): the watchdog that acts."""

from __future__ import annotations

import argparse
from pathlib import Path

from servewatch.errors import ServewatchError
from servewatch.commands.recording import add_pair_arguments, add_recording_arguments, duration
from servewatch.watch.options import RecordingOptions

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


PARSER_OPTIONS = {"usage": "servewatch guard (URL | --prefill URL --decode URL --instance URL)\n"
                           "                        [options] (-- COMMAND... | --pid PID)",
                  "formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": EPILOG}


def arguments(parser: argparse.ArgumentParser) -> None:
    add_recording_arguments(parser, DEFAULTS, url_optional=True)
    parser.add_argument("--pid", type=int, help="attach to a running server (its API server's PID) instead")
    add_pair_arguments(parser, "instead of URL, a disaggregated deployment: a prefill instance (repeat for more); "
                               "all its instances are recorded and the pair judged together, and guard holds the "
                               "one --instance names", "a decode instance of the deployment (repeat for more)")
    parser.add_argument("--instance", metavar="URL",
                        help="with --prefill/--decode: the instance whose server guard holds (-- COMMAND or --pid), "
                             "proven to serve this URL; guard acts only on verdicts about its side (a stalled KV "
                             "transfer restarts the prefill, never decode)")
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
    parser.add_argument("--stacks-dir", metavar="DIR", help="where py-spy dumps go (private; default "
                                                            "$XDG_STATE_HOME/servewatch/stacks, else "
                                                            "~/.local/state/servewatch/stacks)")
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
    deployment, held = (), None
    if args.prefill or args.decode or args.instance:
        from servewatch.watch.deployment import held_member, members_from

        if args.url:
            raise ServewatchError("a URL names one server; a deployment (--prefill, --decode) is guarded through "
                                  "the one --instance guard holds")
        deployment = members_from(args.prefill or (), args.decode or ())
        held = held_member(deployment, args.instance)
        args.url = held.url
    elif not args.url:
        raise ServewatchError("give the server's URL, or a deployment: --prefill URL --decode URL --instance URL")
    config = GuardConfig(act_on=parse_act_on(args.act_on), exit_grace_s=args.exit_grace,
                         drain_timeout_s=args.drain_timeout, stacks=not args.no_stacks, dry_run=args.dry_run,
                         instance=held.name if held is not None else None)
    from servewatch.watch.guarding import GuardRun, guard_session
    from servewatch.commands.recording import options_from_args, resolve_at_start

    options = options_from_args(args, DEFAULTS)
    resolve_at_start(args)
    guard_run = GuardRun(pid=args.pid, unverified_pid_ok=args.unverified_pid_ok, json=args.json,
                         server_nice=args.server_nice, stacks_dir=args.stacks_dir, lives=args.lives, deployment=deployment)
    return asyncio.run(guard_session(guard_run, options, command, config))
