"""`servewatch collectives --pid PID ...`: the collective truth of a multi-rank job, from outside: what each rank's
environment says about NCCL RAS and PyTorch's Flight Recorder (said once), the Flight Recorder dumps asked for
through each rank's documented pipe (or read from files given), and a bounded NCCL RAS query: per process
group, the last collective each rank completed and entered, the rank(s) behind, an op or size mismatch at one
sequence number.

Exit status (servewatch/errors.py's table): 0 when the sources read show no rank behind and no mismatch, 1 when
they name one, 2 on bad input or when no source could be read (one line on stderr saying which)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from servewatch.errors import CHECKED_BAD, OK, USAGE, ServewatchError

HELP = "name the rank behind in a collective, from Flight Recorder dumps and NCCL RAS (given the ranks' PIDs)"
DESCRIPTION = ("Read each rank's collective sources from outside: /proc/PID/environ for NCCL RAS and the Flight "
               "Recorder (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DEBUG_INFO_PIPE_FILE, TORCH_FR_DUMP_TEMP_FILE, RANK), a "
               "dump asked of every rank through its pipe (JSON only: a pickle is never unpickled), and a bounded "
               "RAS status query; then per process group the rank(s) behind and any mismatch.")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                        help="a rank's process (repeat for every rank)")
    parser.add_argument("--dump", action="append", default=[], metavar="RANK=FILE",
                        help="a Flight Recorder JSON dump already taken, as RANK=FILE (repeat); no pipe is written")
    parser.add_argument("--ras", metavar="HOST:PORT",
                        help="query NCCL RAS here (default: where the ranks' environment says, when NCCL is loaded)")
    parser.add_argument("--no-ras", action="store_true", help="do not query NCCL RAS")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds to wait for the dumps, and for the RAS answer (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _dump_arg(text: str) -> tuple[int, str]:
    rank, sep, path = text.partition("=")
    if not sep or not rank.isdigit() or not path:
        raise ServewatchError(f"--dump {text!r}: not RANK=FILE (e.g. --dump 0=rank0.json)")
    return int(rank), path


def run(args: argparse.Namespace) -> int:
    from servewatch.sources import collective_env, flight_recorder, nccl_ras

    if not args.pid and not args.dump and not args.ras:
        raise ServewatchError("give --pid for every rank, --dump RANK=FILE, or --ras HOST:PORT")
    out: dict = {"discovery": None, "flight_recorder": None, "ras": None, "failures": []}
    lines: list[str] = []
    ranks = collective_env.discover(args.pid) if args.pid else ()
    if ranks:
        out["discovery"] = collective_env.summary(ranks)
        lines.append(out["discovery"])
    t0 = time.monotonic()
    dumps: dict[int, flight_recorder.Dump] = {}
    if args.dump:
        analysis, failures = flight_recorder.analyse_files([_dump_arg(d) for d in args.dump])
        dumps = {}
        out["failures"] += [f"rank {r}: {why}" for r, why in sorted(failures.items())]
    else:
        wanted = {}
        for r in ranks:
            if not r.readable or not r.dump_wanted:
                continue
            if r.rank is None:
                out["failures"].append(f"pid {r.pid}: no RANK in its environment: its dump is not known")
            elif r.pipe is None:
                out["failures"].append(f"rank {r.rank}: no dump trigger pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE unset)")
            elif r.dump is None:
                out["failures"].append(f"rank {r.rank}: TORCH_FR_DUMP_TEMP_FILE unset: where torch writes its dump "
                                       "depends on its version; set it")
            else:
                wanted[r.rank] = (r.pipe, r.dump)
        analysis = None
        if wanted:
            got = flight_recorder.collect(wanted, timeout_s=args.timeout)
            dumps = got.dumps
            if dumps and ranks:          # a dump read is the evidence that its rank records: the line says so
                held = {rank: flight_recorder.collectives_held(dump) for rank, dump in dumps.items()}
                out["discovery"] = lines[0] = collective_env.summary(ranks, held)
            out["failures"] += [f"rank {r}: {why}" for r, why in sorted(got.failures.items())]
            analysis = flight_recorder.analyse(dumps) if dumps else None
    named = False
    if analysis is not None and analysis.groups:
        out["flight_recorder"] = {
            "why": analysis.why(), "notes": list(analysis.notes),
            "groups": [{"group": g.group, "desc": g.desc, "behind": list(g.behind), "waiting": list(g.waiting),
                        "seq": g.seq, "op": g.op,
                        "positions": [{"rank": p.rank, "completed": p.completed, "started": p.started,
                                       "entered": p.entered, "pending_op": p.pending_op} for p in g.positions],
                        "mismatches": [{"seq": m.seq, "by_rank": {str(k): v for k, v in m.by_rank.items()}}
                                       for m in g.mismatches]} for g in analysis.groups]}
        lines.append(analysis.why())
        lines += analysis.notes
        named = bool(analysis.behind or analysis.mismatched)
    out["seconds_to_named"] = round(time.monotonic() - t0, 3)
    addrs = [args.ras] if args.ras else sorted({r.ras_addr for r in ranks if r.nccl_loaded and r.ras_enabled})
    if not args.no_ras:
        for addr in addrs:
            try:
                report = nccl_ras.query(addr, total_s=max(args.timeout, 1.0) + 5.0)
            except nccl_ras.RasError as exc:
                out["failures"].append(str(exc))
                continue
            out["ras"] = {"why": report.why(), "version": report.nccl_version, "known_version": report.known_version,
                          "notes": list(report.notes)}
            lines.append(report.why())
            lines += list(report.notes)
            named = named or any(c.behind() is not None for c in report.comms)
    lines += out["failures"]
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print("\n".join(lines))
    if out["flight_recorder"] is None and out["ras"] is None:     # nothing read: nothing checked
        why = out["failures"][0] if out["failures"] else "no rank's environment names a source"
        more = f" (and {len(out['failures']) - 1} more above)" if len(out["failures"]) > 1 else ""
        print(f"servewatch collectives: no Flight Recorder dump or NCCL RAS answer could be read: {why}{more}",
              file=sys.stderr)
        return USAGE
    return CHECKED_BAD if named else OK
