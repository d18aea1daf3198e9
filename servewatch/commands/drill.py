"""`servewatch drill PLAN.yaml | --plan standard | --fault KIND --target URL --pid PID`: fault drills."""

from __future__ import annotations

import argparse
import json
import sys

from servewatch.errors import ServewatchError
from servewatch.table import WIDE_HELP

HELP = "fault drills: inject faults into a server, measure detection, impact and recovery"
DESCRIPTION = ("Run a drill plan against a server the drill starts itself (the built-in simulator, the lab "
               "vLLM or SGLang) or an existing one (URL and PID, proven to serve that URL, with --consent): "
               "each fault injected under a workload while servewatch records, then drill.json, drill.md and "
               "drill.html in --out.")

EPILOG = """\
exit status:
  0    every fault ran and met its expectations, nothing leaked
  1    an expectation failed, a fault could not run, or something leaked (see drill.md)
  2    bad arguments, a bad plan, a PID not proven to serve the URL, or no consent for an existing server
  4    inconclusive: nothing failed, but a fault missed an expectation while the
       recorder was starved (a gap in its own sampling; see drill.md)
"""


PARSER_OPTIONS = {"formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": EPILOG}


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan_file", nargs="?", metavar="PLAN.yaml", help="the plan (see --plan for shipped ones)")
    parser.add_argument("--plan", choices=("standard",), help="a shipped plan, for --engine")
    from servewatch.lab.recipe import RECIPES

    engines = (*RECIPES, "sim")
    parser.add_argument("--engine", choices=engines, default=engines[0],
                        help=f"the engine a shipped plan is for (default {engines[0]})")
    parser.add_argument("--fault", metavar="KIND", help="one fault against --target/--pid instead of a plan")
    parser.add_argument("--target", metavar="URL", help="the existing server's URL (with --fault)")
    parser.add_argument("--pid", type=int, help="the existing server's API server PID (with --fault)")
    parser.add_argument("--role", choices=("api", "engine_core", "worker"), help="the process --fault acts on")
    parser.add_argument("--hold", type=float, metavar="S", help="how long --fault holds (default 10 s)")
    parser.add_argument("--consent", action="store_true",
                        help="I own this server and accept that the drill signals its processes (recorded in the "
                             "report; needed for an existing server)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only the plan's fault of this name (repeatable; e.g. to run again the faults that "
                             "failed, each on a fresh start of its target)")
    parser.add_argument("--out", default="drill-out", metavar="DIR", help="where the report goes (default drill-out)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and the processes it would touch; touch nothing")
    parser.add_argument("--wide", action="store_true", help=WIDE_HELP)
    parser.add_argument("--json", action="store_true", help="print the report (drill.json) instead of the faults table")


def _plan(args):
    from servewatch.drill.plan import PlanError, load_plan, shipped_path, single_fault_plan

    given = [x for x in (args.plan_file, args.plan, args.fault) if x]
    if len(given) != 1:
        raise PlanError("give one of PLAN.yaml, --plan standard or --fault KIND")
    if args.fault:
        if args.only:
            raise PlanError("--only picks faults of a plan; --fault is one fault already")
        if not args.target or args.pid is None:
            raise PlanError("--fault needs --target URL and --pid PID of the server")
        from servewatch.transport.urls import resolve

        resolve(args.target, "--target")    # a bad URL, a host name that does not resolve: one line, status 2
        return single_fault_plan(args.fault, args.target, args.pid, consent=args.consent, role=args.role,
                                 hold_s=args.hold)
    if args.target or args.pid is not None:
        raise PlanError("--target and --pid go with --fault; a plan names its target itself")
    plan = load_plan(shipped_path(args.plan, args.engine) if args.plan else args.plan_file)
    if args.only:
        plan = plan.only(args.only)
    if plan.target.existing and args.consent and not plan.target.consent:
        from dataclasses import replace

        plan = replace(plan, target=replace(plan.target, consent=True))
    return plan


def run(args) -> int:
    from pathlib import Path

    plan = _plan(args)
    if args.dry_run:
        return dry_run(plan)
    from servewatch.drill import report
    from servewatch.drill.run import DrillRun
    from servewatch.lab.server import stop_servers_on_termination

    if plan.target.existing:
        from servewatch.drill.target import ExistingTarget

        ExistingTarget(plan.target).start()     # proof and consent before anything is written
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServewatchError(f"--out {args.out}: {exc.strerror or exc}") from None
    drill = DrillRun(plan, out, say=lambda line: print(f"servewatch drill: {line}", file=sys.stderr, flush=True))
    stop_servers_on_termination()       # a SIGTERM ends the drill as ^C does: its servers stopped, its report written
    paths, stopped = [], False
    try:
        drill.run()
    except KeyboardInterrupt:           # ^C, SIGTERM or SIGHUP (servewatch.stopping)
        stopped = True
    finally:
        if drill.results:
            doc = report.document(drill)
            paths = report.write(doc, out)
            if args.json:
                print(json.dumps(doc, indent=1, ensure_ascii=False))
            else:
                _print_faults(doc, args.wide)
            print(f"servewatch drill: report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if stopped:
        from servewatch import stopping

        done = f"{len(drill.results)} of {len(plan.steps)} fault(s) run"
        stopping.say("drill", f"{done}, the report in {paths[0]}" if paths else f"{done}, no report written")
        return stopping.status()
    doc = report.document(drill)
    return report.exit_status(doc)


# The faults table in a terminal, by what is kept as it narrows (servewatch.table): the fault and whether its
# expectations were met first, then what detected it, what /health said, the clients' harm, the recovery.
FAULT_PRIORITY = {"#": 1_000, "fault": 1_000, "expectations": 95, "target": 92, "detected by (s after injection)": 90,
                  "/health meanwhile": 70, "client impact": 60, "recovery": 50, "injected on": 40,
                  "demanded, and what acted": 30, "kubelet restart: livez": 25, "kubelet restart: /health": 20}


def _print_faults(doc: dict, wide: bool) -> list[str]:
    """drill.md's head and faults table, the table fitted to the terminal (the whole report is in drill.md);
    the names of the columns left out."""
    from servewatch import table as tables
    from servewatch.drill import report

    head = report.markdown(doc).split("\n## Checks")[0]
    console = tables.console(wide, highlight=False, markup=False)
    for line in head.splitlines():
        if not line.startswith("|"):
            console.print(line, soft_wrap=True)
    short = {"#": 2, "fault": 14, "expectations": 12}
    table = tables.Table([tables.Column(name, priority=FAULT_PRIORITY.get(name, 10),
                                        justify="right" if name == "#" else "left",
                                        shrink=None if name == "#" else "fold", min_width=short.get(name, 16))
                          for name in report.columns(doc)], dict(show_lines=True))
    for row in report.rows(doc):
        table.add_row(*row)
    return [column.said() for column in tables.print_table(console, table)]


def dry_run(plan) -> int:
    """The plan, and the processes each fault would touch (for an existing server: proven first)."""
    from servewatch.drill.faults import FAULTS
    from servewatch.drill.target import ExistingTarget

    print(f"plan: {plan.name}" + (f" — {plan.description}" if plan.description else ""))
    for name, target in plan.named_targets().items():
        print(f"target{' ' + name if plan.targets else ''}: {target.describe()}")
    print(f"workload: {_workload_words(plan.workload)}")
    print(f"recorder: every {plan.interval_s:g} s" + (f", {', '.join(plan.settings)}" if plan.settings else ""))
    processes = None
    if plan.target.existing:
        target = ExistingTarget(plan.target)
        target.start()          # proof and consent, as the real run: a wrong PID stops here
        processes = target.processes()
        print("processes:")
        for p in processes:
            print(f"  pid {p.pid}  {p.title}  role {p.role} rank {p.rank}")
    else:
        from servewatch.dialects import by_name

        titles = ", ".join(f"{title} ({role})" for title, role in
                           (by_name(plan.dialect).engine_process_titles if plan.target.engine != "sim" else ()))
        print(f"processes: started by the drill; the API server (api){', ' + titles if titles else ''}")
    print(f"faults ({len(plan.steps)}, about {plan.budget_s() / 60:.1f} min of fault windows):")
    for i, step in enumerate(plan.steps, 1):
        fault = FAULTS[step.kind](step)
        aim = ""
        if fault.default_role is not None or step.role != fault.default_role:
            aim = f" → {step.role} rank {step.rank}"
            if processes is not None:
                chosen = [p for p in processes if p.role == step.role and p.rank == step.rank] or processes[:1]
                aim += f" (pid {chosen[0].pid}, {chosen[0].title})"
        extra = "; ".join(filter(None, (fault.touches(), step.workload is not None
                                        and f"workload {_workload_words(step.workload)}",
                                        step.params and f"params {_workload_words(step.params)}")))
        expect = step.expect.to_json()
        probe = (f"; the recorder asks for one token when its counters stand still (every "
                 f"{plan.probe_interval_s:g} s at most)" if step.probe else "")
        on = f" (on {step.on})" if plan.targets else ""
        guard = ("" if step.guard is None else "; recorded by servewatch guard, which acts (stacks, then a kill of "
                 f"the tree) on {', '.join(step.guard) if step.guard else 'its default verdicts'}")
        if step.proxy:
            guard += "; recorded by servewatch proxy --watch in front of the server, the workload sent through it"
        if step.serve:
            guard += "; recorded by servewatch serve (by URL), its verdicts and livez read over its HTTP API"
        if step.at_start:
            when = f"when its log shows \u201c{step.on_log}\u201d" if step.on_log else "at once"
            timing = (f"at a fresh start of the server, recorded from its first second, injected {when}; "
                      f"hold {step.hold_s:g} s, then the start's end and {step.observe_s:g} s more")
        else:
            timing = f"warm-up {step.warmup_s:g} s, hold {step.hold_s:g} s, observe {step.observe_s:g} s"
        print(f"  {i:2d}. {step.name}{on}: {fault.summary}{aim}; {timing}" + (f"; {extra}" if extra else "")
              + probe + guard)
        if expect:
            print(f"      expect: {_expect_words(expect)}")
    return 0


def _workload_words(workload: dict) -> str:
    return ", ".join(f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(workload.items()))


def _names_words(names) -> str | None:
    from servewatch.drill.expect import names_words

    return names_words(names) if names else None


# Each plain expectation of a plan, in the order the dry run says them: its key and its words for the plan's value
# (None: nothing said, as for a flag set false).
_EXPECTATION_WORDS = (
    ("no_incident", lambda v: "no incident verdict" if v else None),
    ("no_verdict", lambda v: "no verdict at all" if v else None),
    ("names", _names_words),
    ("health", lambda v: "/health stays 200" if v == "ok" else "/health fails"),
    ("max_error_rate", "at most {:.0%} of requests fail".format),
    ("recover_within_s", "a good request within {:g} s after the fault".format),
    ("bundle_write_fails", lambda v: "unwritable bundles reported" if v else "every bundle written"),
    ("clear_within_s", "the verdict cleared within {:g} s once the fault ends and tokens move again".format),
    ("livez", lambda v: "servewatch serve's livez stays 200" if v == "ok" else "servewatch serve's livez fails"),
    ("ready_within_s", "/health 200 within {:g} s of the start".format),
    ("exit_within_s", "the server exits, process_exit within {:g} s with its real status".format),
    ("in_flight_cut", lambda v: "the requests it cut counted failed, none a success" if v else None),
    ("log_shows", lambda v: "its log shows " + ", ".join(f"\u201c{t}\u201d" for t in v) if v else None),
)


def _expect_words(expect: dict) -> str:
    parts = [f"{v} within {s:g} s" for v, s in expect.get("fire", {}).items()]
    if "fire_any" in expect:
        parts.append(f"one of {', '.join(expect['fire_any']['verdicts'])} within {expect['fire_any']['within_s']:g} s")
    parts += [f"{v} at its own threshold \u00b1 {a:g} s" for v, a in expect.get("fire_by_threshold", {}).items()]
    parts += [f"no {v}" for v in expect.get("not_fire", [])]
    parts += [words for key, say in _EXPECTATION_WORDS if key in expect and (words := say(expect[key]))]
    guard = expect.get("guard")
    if guard is not None and not guard["kills"]:
        parts.append("guard leaves the server alone")
    elif guard is not None:
        parts.append("guard kills the tree" + (f" within {guard['within_s']:g} s of its verdict" if "within_s" in guard
                                               else "") + f", exit {guard.get('exit', 3)}, nothing left"
                     + (f", stacks of {', '.join(guard['stacks_of'])}" if "stacks_of" in guard else "")
                     + (f", the dump naming {', '.join(guard['diverging'])} as diverging" if "diverging" in guard
                        else "")
                     + (", its last line saying " + "; ".join(f"\u201c{t}\u201d" for t in guard["says"])
                        if "says" in guard else ""))
    return "; ".join(parts)
