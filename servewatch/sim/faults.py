"""Faults the simulator can inject, from a CLI spec or a JSON body.

Spec grammar (CLI `--fault`): ``KIND[@TIME][:key=value[,key=value...]]`` where TIME is seconds after
start (``30``, ``30s``, ``500ms``, ``2m``). Keys: ``exit`` (exit code), ``factor`` (slow-down),
``budget`` (MiB free for crash-oom), ``for`` (stall duration before it clears itself).
JSON (``POST /_sim/fault``): ``{"kind": "stall"}``, ``{"kind": "engine-death", "exit_code": 0}``,
``{"kind": "slow", "factor": 3}``, ``{"kind": "crash-oom", "budget_mib": 100}``, ``{"kind": "clear"}``,
optionally with ``"at"`` (seconds after start) or ``"duration"``.

Kinds and their external signatures:
  stall               steps stop; /health stays 200 (vLLM), /metrics answers, counters freeze.
                      SGLang: /health turns 503 after its probe timeout; after --watchdog-timeout the
                      scheduler watchdog kills the server. An engine whose /metrics and slot listing
                      wait on its loop (Dialect.metrics_wait_on_engine): stalled with nothing running,
                      they stop answering while /health stays 200 (the loop hung outside a step).
  engine-death        /health 503; in-flight requests end HTTP 200 with a short body (finish "abort");
                      the process exits with ``exit_code`` (default 1; 0 allowed) after ``exit_delay``.
  crash-oom           armed: the first step whose running x vocab x 4 bytes exceeds the budget dies
                      with the OOM traceback naming that allocation, then as engine-death (as a vLLM
                      on an RTX 3060 with Qwen2.5-7B-AWQ died with 193 running: 193 x 152,064 x 4 bytes
                      = 112 MiB asked for in the sampler).
  slow                step time x factor.
  admission-deadlock  nothing is admitted; waiting grows while KV is free.
  startup-hang        the engine never becomes ready (vLLM: the port never opens; SGLang: /health 503).
                      ``startup-hang@STAGE``: its log goes as far as that startup stage (e.g. ``compiling``,
                      ``weights_loading``) and no further.
  error-storm         every completion request fails: ``error-storm:5xx`` (HTTP 500, the default; or an
                      exact code such as ``503``) or ``error-storm:4xx`` (HTTP 400: prompts over the
                      model's maximum length, as a real vLLM rejects them); ``for`` ends it.
  crash-loop          once ready, the engine dies every ``every`` seconds (default 10) and its supervisor
                      starts it again at once: a new process, counters from zero, the startup log again.
  startup-oom         startup fails with the dialect's KV sizing error; exit code 1.
  wedge-idle          the engine stops stepping once it is idle (at once if it is idle now): /health stays
                      200 (vLLM), /metrics answers with 0 running, 0 waiting and frozen counters, and new
                      requests wait forever without showing in any gauge. Only a request that needs a
                      token (an active probe) tells it from an idle server. SGLang: its generating /health
                      turns 503 after its probe timeout.
  kv-stall            (a P/D decode) KV transfers never finish: requests pile up waiting for KV (vLLM: waiting,
                      reason "deferred"; SGLang: the decode transfer queue), /health stays 200.
  kv-expire           (a P/D prefill) every lease on its blocks runs out before decode reads them: vLLM counts
                      them expired and decode still answers 200 (from released blocks); SGLang's prefill
                      fails their bootstrap.
  kv-fail             (a P/D decode) every KV transfer fails: the request fails (HTTP 500), the failure counted.
  pd-bypass           (a P/D decode) the router went decode-only: transfer parameters ignored, every prompt
                      computed locally, the prefill left idle.
  clear               ends stall, slow, admission-deadlock, wedge-idle and the P/D faults, disarms crash-oom.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servewatch.words import duration_s

KINDS = ("stall", "engine-death", "crash-oom", "slow", "admission-deadlock", "startup-hang", "startup-oom",
         "clear", "wedge-idle", "error-storm", "crash-loop", "kv-stall", "kv-expire", "kv-fail", "pd-bypass")
PD_KINDS = {"kv-stall": "decode", "kv-expire": "prefill", "kv-fail": "decode", "pd-bypass": "decode"}
STARTUP_KINDS = ("startup-hang", "startup-oom")
_STATUS = re.compile(r"^[45](?:xx|[0-9][0-9])$")


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class SimFault:
    kind: str
    at: float | None = None          # seconds after engine start; None = immediately
    exit_code: int | None = None     # engine-death / crash-oom; default 1
    factor: float = 4.0              # slow
    budget_mib: float | None = None  # crash-oom; default: the profile's free memory
    duration: float | None = None    # stall, wedge-idle, error-storm: clears itself after this long
    status: int | None = None        # error-storm: the HTTP status every request gets (default 500)
    stage: str | None = None         # startup-hang: the last startup stage the log reaches
    every: float | None = None       # crash-loop: seconds from ready to the next death (default 10)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FaultSpecError(f"unknown fault kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.factor <= 0:
            raise FaultSpecError("slow factor must be positive")
        if self.exit_code is not None and not 0 <= self.exit_code <= 255:
            raise FaultSpecError("exit code must be 0..255")
        if self.status is not None and not 400 <= self.status <= 599:
            raise FaultSpecError("error-storm status must be 400..599")
        if self.every is not None and self.every <= 0:
            raise FaultSpecError("crash-loop every must be positive")


def parse_seconds(text: str) -> float:
    """A fault's time (servewatch.words.duration_s; zero is a time here: at the start)."""
    try:
        return duration_s(text.strip(), zero_ok=True)
    except ValueError:
        raise FaultSpecError(f"bad time {text!r} (use e.g. 30s, 500ms, 2m)") from None


def _is_time(text: str) -> bool:
    try:
        parse_seconds(text)
    except FaultSpecError:
        return False
    return True


def parse_fault_spec(spec: str) -> SimFault:
    head, _, options = spec.partition(":")
    kind, _, when = head.partition("@")
    kwargs: dict = {"kind": kind.strip()}
    if when and kwargs["kind"] == "startup-hang" and not _is_time(when):
        kwargs["stage"] = when.strip()
    else:
        kwargs["at"] = parse_seconds(when) if when else None
    for item in filter(None, (part.strip() for part in options.split(","))):
        key, sep, value = item.partition("=")
        if not sep and kwargs["kind"] == "error-storm" and _STATUS.match(item):
            kwargs["status"] = _status(item)
            continue
        if not sep:
            raise FaultSpecError(f"bad fault option {item!r} in {spec!r} (use key=value)")
        try:
            if key == "exit":
                kwargs["exit_code"] = int(value)
            elif key == "factor":
                kwargs["factor"] = float(value)
            elif key == "budget":
                kwargs["budget_mib"] = float(value)
            elif key == "for":
                kwargs["duration"] = parse_seconds(value)
            elif key == "every":
                kwargs["every"] = parse_seconds(value)
            else:
                raise FaultSpecError(f"unknown fault option {key!r} in {spec!r}")
        except ValueError as exc:
            if isinstance(exc, FaultSpecError):
                raise
            raise FaultSpecError(f"bad value for {key!r} in {spec!r}") from None
    return SimFault(**kwargs)


def _status(text: str) -> int:
    """ "5xx" → 500, "4xx" → 400, "503" → 503."""
    return int(text[0]) * 100 if text.endswith("xx") else int(text)


def fault_from_json(body: object) -> SimFault:
    if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
        raise FaultSpecError('body must be a JSON object with a string "kind"')
    allowed = {"kind", "at", "exit_code", "factor", "budget_mib", "duration", "status", "stage", "every"}
    unknown = set(body) - allowed
    if unknown:
        raise FaultSpecError(f"unknown field(s): {', '.join(sorted(unknown))}")
    try:
        return SimFault(kind=body["kind"], at=_opt(body, "at", float), exit_code=_opt(body, "exit_code", int),
                     factor=float(body.get("factor", 4.0)), budget_mib=_opt(body, "budget_mib", float),
                     duration=_opt(body, "duration", float), status=_opt(body, "status", int),
                     stage=_opt(body, "stage", str), every=_opt(body, "every", float))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, FaultSpecError):
            raise
        raise FaultSpecError(f"bad fault field: {exc}") from None


def _opt(body: dict, key: str, cast):
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise FaultSpecError(f"{key} must be a number")
    return cast(value)
