"""What a recording session takes (`RecordingOptions`), and the recording flags `watch`, `guard`, `diagnose`,
`proxy` and `serve` share: each flag, whether it is a duration and where its value goes written once, in `FLAGS`
(`servewatch.commands.recording` adds them to a parser and turns the parsed flags into `RecordingOptions` laid over
a base: the command's defaults, or serve's config file). Below the commands only the typed options travel."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servewatch.detectors.config import DetectorConfig
from servewatch.sources.probe import (DEADLINE_CEILING_S, DEADLINE_FLOOR_S, DEFAULT_DEADLINE_S,
                                      DEFAULT_PROBE_INTERVAL_S, LEARN_FACTOR)

# The recording defaults, written once: watch, guard, diagnose and serve (and the recorder itself) read these.
DEFAULT_HISTORY_S = 600.0            # how much of the timeline the ring keeps
DEFAULT_PROBE_DEADLINE_S = DEFAULT_DEADLINE_S   # a probe without a token after this long has missed (None: learned)
LEARNED_DEADLINE_WORDS = (f"learned from the server's own answers: {LEARN_FACTOR:g} x the slowest of its last served "
                          f"probes, between {DEADLINE_FLOOR_S:g} s and {DEADLINE_CEILING_S:g} s")


@dataclass(frozen=True)
class RecordingOptions:
    url: str                            # "" in a template (serve's: each target puts its own URL in)
    interval: float = 1.0               # health, /metrics and process cadence, seconds
    history_s: float = DEFAULT_HISTORY_S
    out: str | None = None              # incident bundles go here
    duration: float | None = None       # stop after this long (None: until stopped)
    log_file: str | None = None         # the server's log, tailed and parsed
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    probe: bool = False                 # ask an idle server for one token now and then (sources.probe)
    probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S   # at most one probe per this many seconds (sources.probe)
    probe_deadline: float | None = DEFAULT_PROBE_DEADLINE_S
    gpu: bool = True                    # sample this machine's GPUs (NVML): only when the server runs here
    gpu_metrics: str | None = None      # dcgm-exporter's /metrics URL: the GPUs from there instead of NVML


@dataclass(frozen=True)
class _Flag:
    option: str                         # the command-line flag
    dest: str                           # its attribute on the parsed args
    field: str                          # the RecordingOptions field it fills
    help: str                           # the wording for one server (a command may give its own); {fields} filled
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


PROBE_COST = ("Cost: one 1-token request per interval on an idle server, none on a busy one (the counters already "
              "prove it serves), plus one with a 3 s deadline at once when --pid shows an engine rank stopped or "
              "starved beside its spinning siblings (at most one per 10 s), and one more at once after a probe that "
              "got no token, to confirm it (a restart waits for two in a row)")
NO_PROBE_HELP = ("turn off the active probe. It is on by default: when the counters have not moved for "
                 "--probe-interval, it asks the server for one token (a fixed few-token prompt, max_tokens 1, the model "
                 "/v1/models names) and fires not_serving (or rank_stalled, naming the rank) if none comes back within "
                 "--probe-deadline while /health is 2xx: a server that hangs while idle reads exactly like an idle one "
                 "otherwise. " + PROBE_COST)

# Every shared recording flag, in the order `watch` shows them. `url` is the positional URL; `probe` is
# `--probe` where the probe is off by default and `--no-probe` where it is on (serve).
FLAGS: dict[str, _Flag] = {flag.dest: flag for flag in (
    _Flag("url", "url", "url", "the server, e.g. http://127.0.0.1:8000", {"metavar": "URL"}),
    _Flag("--interval", "interval", "interval", "health/metrics/process cadence (default {interval:g}s)",
          {"seconds": True}),
    _Flag("--history", "history", "history_s", "seconds of history kept (default {history_s:g})",
          {"seconds": True}),
    _Flag("--out", "out", "out", "write an incident bundle per verdict into DIR", {"metavar": "DIR"}),
    _Flag("--log-file", "log_file", "log_file", "the server's log file, tailed and parsed", {"metavar": "F"}),
    _Flag("--gpu-metrics", "gpu_metrics", "gpu_metrics",
          "read the GPUs from dcgm-exporter's /metrics at URL (e.g. http://127.0.0.1:9400/metrics) instead of NVML",
          {"metavar": "URL"}),
    _Flag("--set", "detector_settings", "detectors",
          "a detector threshold, e.g. --set stall.floor_s=5 (repeatable; a wrong name is refused with the list of names)",
          {"action": "append", "default": [], "metavar": "KEY=VALUE"}),
    _Flag("--detectors", "detectors_file", "detectors",
          "detector thresholds from a TOML file ([stall] floor_s = 5); --set wins", {"metavar": "FILE", "default": None}),
    _Flag("--probe", "probe", "probe",
          "actively probe: when the counters have not moved for --probe-interval, ask the server for one token "
          "(a fixed few-token prompt, max_tokens 1, the model /v1/models names) and fire not_serving if none comes "
          "back within --probe-deadline while /health is 2xx. " + PROBE_COST + ". Off by default",
          {"action": "store_true"}),
    _Flag("--probe-interval", "probe_interval", "probe_interval_s",
          "at most one probe per S seconds (default {probe_interval_s:g}s: at most {probes_an_hour:g} requests an hour)",
          {"seconds": True, "metavar": "S"}),
    _Flag("--probe-deadline", "probe_deadline", "probe_deadline",
          "a probe without a token after S seconds has missed (default: {probe_deadline_words})",
          {"seconds": True, "metavar": "S"}),
    _Flag("--duration", "duration", "duration", "stop after S seconds (default: until ^C)",
          {"seconds": True, "metavar": "S"}),
)}

# What `watch` and `guard` take (the URL and every recording flag but --duration, which they place later).
ONE_SERVER = ("url", "interval", "history", "out", "log_file", "gpu_metrics", "detector_settings", "detectors_file",
              "probe", "probe_interval", "probe_deadline")
