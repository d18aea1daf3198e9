"""What a recording session takes (`RecordingOptions`), and the one argument builder `watch`, `guard`
and `serve` share to fill it from a command line."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from servewatch.detectors.config import DetectorConfig
from servewatch.sources.probe import DEFAULT_DEADLINE_S, DEFAULT_EVERY_S

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

# The recording defaults, written once: watch, guard, diagnose and serve (and the recorder itself) read these.
DEFAULT_HISTORY_S = 600.0            # how much of the timeline the ring keeps
DEFAULT_PROBE_INTERVAL_S = DEFAULT_EVERY_S      # at most one probe per this many seconds (sources.probe)
DEFAULT_PROBE_DEADLINE_S = DEFAULT_DEADLINE_S   # a probe without a token after this long has missed


def duration(text: str) -> float:
    """"0.5", "500ms", "1s", "10m" → seconds (> 0)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 0.5, 500ms, 1s, 10m)")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than zero")
    return seconds


@dataclass(frozen=True)
class RecordingOptions:
    url: str
    interval: float = 1.0               # health, /metrics and process cadence, seconds
    history_s: float = DEFAULT_HISTORY_S
    out: str | None = None              # incident bundles go here
    duration: float | None = None       # stop after this long (None: until stopped)
    log_file: str | None = None         # the server's log, tailed and parsed
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    probe: bool = False                 # ask an idle server for one token now and then (sources.probe)
    probe_interval: float = DEFAULT_PROBE_INTERVAL_S
    probe_deadline: float = DEFAULT_PROBE_DEADLINE_S
    gpu: bool = True                    # sample this machine's GPUs (NVML): only when the server runs here


def add_recording_arguments(parser: argparse.ArgumentParser, *, interval: float, probe_default: bool = False) -> None:
    parser.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--interval", type=duration, default=interval,
                        help=f"health/metrics/process cadence (default {interval:g}s)")
    parser.add_argument("--history", type=duration, default=DEFAULT_HISTORY_S,
                        help=f"seconds of history kept (default {DEFAULT_HISTORY_S:g})")
    parser.add_argument("--out", metavar="DIR", help="write an incident bundle per verdict into DIR")
    parser.add_argument("--log-file", metavar="F", help="the server's log file, tailed and parsed")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="detector_settings",
                        help="a detector threshold, e.g. --set stall.floor_s=5 (repeatable; names as in "
                             "servewatch/detectors/config.py)")
    parser.add_argument("--detectors", metavar="FILE", dest="detectors_file",
                        help="detector thresholds from a TOML file ([stall] floor_s = 5); --set wins")
    cost = ("Cost: one 1-token request per interval on an idle server, none on a busy one (the counters already "
            "prove it serves), plus one with a 3 s deadline at once when --pid shows an engine rank stopped or "
            "starved beside its spinning siblings (at most one per 10 s)")
    if probe_default:
        parser.add_argument("--probe", action="store_true", help="the active probe (on by default here)")
        parser.add_argument("--no-probe", action="store_false", dest="probe",
                            help="turn off the active probe. It is on by default: when the counters have not moved "
                                 "for --probe-interval, it asks the server for one token (a fixed few-token prompt, "
                                 "max_tokens 1, the model /v1/models names) and fires not_serving (or rank_stalled, "
                                 "naming the rank) if none comes back within --probe-deadline while /health is 2xx: "
                                 "a server that hangs while idle reads exactly like an idle one otherwise. " + cost)
        parser.set_defaults(probe=True)
    else:
        parser.add_argument("--probe", action="store_true",
                            help="actively probe: when the counters have not moved for --probe-interval, ask the "
                                 "server for one token (a fixed few-token prompt, max_tokens 1, the model /v1/models "
                                 "names) and fire not_serving if none comes back within --probe-deadline while "
                                 "/health is 2xx. " + cost + ". Off by default")
    parser.add_argument("--probe-interval", type=duration, default=DEFAULT_PROBE_INTERVAL_S, metavar="S",
                        help=f"at most one probe per S seconds (default {DEFAULT_PROBE_INTERVAL_S:g}s: at most "
                             f"{3600 / DEFAULT_PROBE_INTERVAL_S:g} requests an hour)")
    parser.add_argument("--probe-deadline", type=duration, default=DEFAULT_PROBE_DEADLINE_S, metavar="S",
                        help=f"a probe without a token after S seconds has missed (default {DEFAULT_PROBE_DEADLINE_S:g}s)")


def options_from_args(args) -> RecordingOptions:
    """Raises ServewatchError naming a bad detector setting."""
    from servewatch.detectors import settings

    return RecordingOptions(url=args.url, interval=args.interval, history_s=args.history, out=args.out,
                            duration=args.duration, log_file=args.log_file,
                            detectors=settings.build(args.detector_settings, args.detectors_file),
                            probe=args.probe, probe_interval=args.probe_interval,
                            probe_deadline=args.probe_deadline)
