"""`servewatch diagnose (URL | BUNDLE | LOAD_DIR)`: from a complaint to the quantity that decides it."""

from __future__ import annotations

import argparse
import sys

from servewatch.commands.recording import add_recording_arguments
from servewatch.watch.options import RecordingOptions

HELP = "ranked hypotheses for a complaint, from a live server, a bundle or a load run"
DESCRIPTION = ("For a live server (URL) it records for --window seconds first (gauges must be sampled over "
               "time); for an incident bundle or a `servewatch load --out` directory it reads what was stored. "
               "It prints ranked hypotheses: the quantity read, its value and expected range, why it supports "
               "or rules out the hypothesis, the next check, the safe action and its rollback, and what a "
               "restart would destroy. For a dead server's log use `servewatch postmortem`.")

SYMPTOM_NAMES = ("slow-first-token", "slow-text", "long-answers", "hangs-under-load", "errors", "e2e-up")


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="URL|BUNDLE|LOAD_DIR",
                        help="a live server's URL (recorded for --window), an incident bundle, or a directory "
                             "`servewatch load --out` wrote")
    parser.add_argument("--symptom", choices=SYMPTOM_NAMES, metavar="NAME",
                        help="the complaint: slow-first-token, slow-text, long-answers, hangs-under-load, errors, "
                             "e2e-up (E2E up while TTFT and the queue look normal); none: say what it sees")
    parser.add_argument("--window", type=float, default=30.0, metavar="S",
                        help="seconds to record a live server before judging (default 30)")
    add_recording_arguments(parser, RecordingOptions(url=""), ("interval",), metavar={"interval": "S"},
                            help={"interval": "probe interval when recording"})
    parser.add_argument("--json", action="store_true", help="print the hypotheses as JSON")


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from servewatch.doctor.diagnose import SYMPTOMS, diagnose, looks_healthy
    from servewatch.errors import ServewatchError

    target = args.target
    if "://" in target:         # a URL: checked, its host name looked up, before the window starts
        from servewatch.transport.urls import resolve

        resolve(target)
        readings = _record(args)
    elif Path(target).is_dir() and (Path(target) / "summary.json").is_file():
        readings = _load_dir(Path(target))
    elif Path(target).is_dir():
        readings = _bundle(Path(target))
    else:
        raise ServewatchError(f"{target}: not a URL, a bundle directory or a load directory (with summary.json)")
    hypotheses = diagnose(readings, args.symptom)
    # A server that failed probes in the window is the first finding, and the exit says so.
    code = 1 if hypotheses and hypotheses[0].name == "not_answering" and hypotheses[0].verdict == "supported" else 0
    healthy = looks_healthy(readings, hypotheses)
    if args.json:
        json.dump({"symptom": args.symptom, "sources": readings.sources, "scrapes": readings.scrapes,
                   "seconds": readings.seconds, "verdicts": [v.name for v in readings.verdicts],
                   "looks_healthy": healthy, "hypotheses": [h.to_dict() for h in hypotheses]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return code
    _print(hypotheses, readings, SYMPTOMS.get(args.symptom), healthy)
    return code


def _record(args):
    import asyncio

    from servewatch.doctor import diagnose as diagnosis
    from servewatch.doctor.diagnose import readings_from_window
    from servewatch.errors import ServewatchError
    from servewatch.commands.recording import recording_from_args
    from servewatch.watch.options import DEFAULT_HISTORY_S
    from servewatch.watch.session import record

    if not 1.0 <= args.window <= 3600:
        raise ServewatchError(f"--window {args.window:g}: between 1 and 3600 seconds")
    session = recording_from_args(args, RecordingOptions(url=args.target, duration=args.window,
                                                         history_s=max(DEFAULT_HISTORY_S, args.window * 2)),
                                  ("interval",))
    grace = min(diagnosis.CONNECT_GRACE_S, args.window)
    if diagnosis.refused_throughout(args.target, grace):
        before = f" (the grace diagnose gives before its {args.window:g} s window)" if grace < args.window else ""
        raise ServewatchError(f"{args.target}: the server did not answer: could not connect (connection refused) "
                              f"for {grace:g} s{before}; nothing is listening there")
    print(f"servewatch diagnose: recording {args.target} for {args.window:g} s", file=sys.stderr)
    recorder = asyncio.run(record(session, None, tool="diagnose"))
    window = recorder.ring.window()
    if not window.good_metrics() and not any(h.status is not None for h in window.health):
        raise ServewatchError(f"{args.target}: the server did not answer in {args.window:g} s: "
                              f"{_failures(window)}")
    return readings_from_window(window, recorder.config)


def _failures(window) -> str:
    from servewatch.kinds import failure_words

    said = []
    for path, samples in (("/health", window.health), ("/metrics", window.metrics)):
        kinds: dict[str, int] = {}
        for s in samples:
            if s.error is not None:
                kinds[s.error] = kinds.get(s.error, 0) + 1
        said.append(f"{path} " + (", ".join(f"{failure_words(k)} ×{n}" for k, n in kinds.items()) or "no attempt"))
    return "; ".join(said)


def _bundle(path):
    from servewatch.doctor.diagnose import readings_from_window
    from servewatch.errors import ServewatchError
    from servewatch.bundle.incident import load_incident
    from servewatch.timeline.window import Window

    try:
        incident = load_incident(path)
    except ServewatchError as exc:
        raise ServewatchError(f"{path}: not a readable bundle ({exc})") from None
    main = incident.main_instance
    if main is None:
        readings = readings_from_window(Window.from_samples(incident.samples))
        readings.sources = [f"bundle ({len(incident.samples)} samples)"]
        return readings
    # A deployment's bundle: one instance's samples, never two servers' counters interleaved into one series.
    who, samples = main
    readings = readings_from_window(Window.from_samples(samples))
    others = ", ".join(name for name, _ in incident.instances if name != who)
    readings.sources = [f"bundle: {who}'s {len(samples)} samples ({others} not mixed in; "
                        f"servewatch summarize shows each instance)"]
    return readings


def _load_dir(path):
    import json

    from servewatch.doctor.diagnose import readings_from_load
    from servewatch.errors import ServewatchError

    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ServewatchError(f"{path / 'summary.json'}: unreadable ({exc})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("signature"), dict):
        raise ServewatchError(f"{path / 'summary.json'}: no signature row (not a `servewatch load` summary)")
    return readings_from_load(summary)


def _print(hypotheses, readings, complaint, healthy: str | None) -> None:
    from rich.text import Text

    from servewatch import table as tables

    console = tables.console(highlight=False, markup=False)   # the complaint, the sources and the figures as they are
    seen = f"{readings.scrapes} scrape(s) over {readings.seconds:.0f} s" if readings.seconds is not None else ""
    console.print(Text.assemble(("Diagnose", "bold"),
                                f" {('“' + complaint + '”') if complaint else '(no symptom: what it sees)'}"
                                f" from {', '.join(readings.sources)} {seen}".rstrip()))
    if readings.lifetime_means:
        console.print("no request finished in the window: the latency means are the server's lifetime ones")
    if healthy:
        console.print(Text(healthy, style="green"))
    if readings.verdicts:
        console.print("recorder verdicts: " + ", ".join(v.name for v in readings.verdicts))
    colour = {"supported": "red", "ruled out": "green", "not measured": "yellow"}
    for i, h in enumerate(hypotheses, 1):
        console.print(Text.assemble(f"\n{i}. ", (h.title, "bold"), " — ", (h.verdict, colour[h.verdict]),
                                    f" (confirmed by {h.confirmed_by})" if h.confirmed_by else ""))
        console.print(f"   quantity: {h.quantity} = {h.value} (expected: {h.expected})")
        console.print(f"   why: {h.why}")
        if h.verdict != "ruled out":
            console.print(f"   next check: {h.next_check}")
            console.print(f"   safe action: {h.safe_action}\n   rollback: {h.rollback}")
            console.print(f"   a restart would destroy: {h.restart_destroys}")
