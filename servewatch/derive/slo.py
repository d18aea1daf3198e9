"""The SLO file: what a service promises, read and checked before any rule is written.

    service: chat                  # names the SLO (label slo="chat" on every SLO series)
    budget: 30d                    # the period the error budget covers
    selector: {job: vllm}          # optional: exact label values every series must carry
    objectives:
      availability: 99.9           # % of requests answered without a 5xx
      success: 99.5                # % of requests finished without abort or error
      ttft: {target: 99, threshold: 2.5}    # % of requests with time to first token <= 2.5 s
      tpot: {target: 99, threshold: 0.1}    # % of requests with time per output token <= 0.1 s
      e2e: {target: 95, threshold: 30}      # % of requests finished within 30 s
    min_requests: 100              # fewer requests in an alert's long window page nothing
    engine:
      slot_limit: 256              # --max-num-seqs (vLLM) / --max-running-requests (SGLang)
      buckets: {ttft: [...]}       # only when the engine runs with custom bucket edges
    windows:                       # optional: replaces the standard multi-window pairs
      - {severity: page, long: 1h, short: 5m, budget_spent: 2}
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from dataclasses import dataclass, field

from servewatch.derive.engine_series import EngineSeries
from servewatch.errors import ServewatchError
from servewatch.words import DURATION_UNITS_S, duration_s

LATENCY_KINDS = ("ttft", "tpot", "e2e")
RATIO_KINDS = ("availability", "success")
OBJECTIVE_KINDS = RATIO_KINDS + LATENCY_KINDS
SEVERITIES = ("page", "ticket")
_TOP_KEYS = ("service", "budget", "selector", "objectives", "min_requests", "engine", "windows")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SERVICE = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")


class SloInvalid(ServewatchError):
    """An SLO file that cannot become rules: str() names the key and the reason."""


@dataclass(frozen=True)
class Objective:
    kind: str                       # availability | success | ttft | tpot | e2e
    target: float                   # percent, 0 < target < 100
    threshold_s: float | None = None  # latency kinds: the bucket edge in seconds

    @property
    def error_budget(self) -> float:
        """Allowed bad fraction, e.g. 0.001 for 99.9 %."""
        return round(1 - self.target / 100, 12)


@dataclass(frozen=True)
class BurnWindow:
    severity: str                   # page | ticket
    long_s: int
    short_s: int
    budget_spent: float             # percent of the whole budget spent within the long window

    def burn_rate(self, budget_s: int) -> float:
        """How many times faster than sustainable the budget burns when this share goes in `long_s`."""
        return round(self.budget_spent / 100 * budget_s / self.long_s, 6)


# Page at 14.4x over 1 h and 5 m (2 % of a 30-day budget) and at 6x over 6 h and 30 m (5 %); ticket at 3x
# over 1 d and 2 h and at 1x over 3 d and 6 h (10 % each). Other budgets keep the shares and windows,
# so their burn rates scale with the budget's length.
STANDARD_WINDOWS = (
    BurnWindow("page", 3600, 300, 2.0),
    BurnWindow("page", 6 * 3600, 1800, 5.0),
    BurnWindow("ticket", 86400, 2 * 3600, 10.0),
    BurnWindow("ticket", 3 * 86400, 6 * 3600, 10.0),
)


@dataclass(frozen=True)
class Slo:
    service: str
    budget_s: int
    objectives: tuple[Objective, ...]
    selector: dict[str, str] = field(default_factory=dict)
    min_requests: int = 100
    slot_limit: int | None = None
    buckets: dict[str, tuple[float, ...]] = field(default_factory=dict)
    windows: tuple[BurnWindow, ...] = STANDARD_WINDOWS

    def objective(self, kind: str) -> Objective | None:
        return next((o for o in self.objectives if o.kind == kind), None)


def duration_text(seconds: int) -> str:
    """A Prometheus duration in its largest exact unit: 300 -> 5m, 86400 -> 1d."""
    for unit in ("d", "h", "m"):
        if seconds % int(DURATION_UNITS_S[unit]) == 0:
            return f"{seconds // int(DURATION_UNITS_S[unit])}{unit}"
    return f"{seconds}s"


def load_slo(text: str, where: str) -> Slo:
    """Read an SLO file's text (`where` names it in errors). Raises SloInvalid."""
    from servewatch.textfile import TextFileError, yaml_value

    try:
        data = yaml_value(text)
    except TextFileError as exc:
        line = f" line {exc.line}" if exc.line is not None else ""
        raise SloInvalid(f"{where}:{line} not valid YAML ({exc.problem})") from None
    return parse_slo(data, where)


def parse_slo(data: object, where: str) -> Slo:
    def fail(key: str, reason: str) -> SloInvalid:
        return SloInvalid(f"{where}: {key}: {reason}")

    if not isinstance(data, dict):
        raise SloInvalid(f"{where}: expected a mapping with keys {', '.join(_TOP_KEYS)}")
    _no_unknown(data, _TOP_KEYS, "", fail)
    service = data.get("service")
    if not isinstance(service, str) or not _SERVICE.match(service):
        raise fail("service", "required: 1-64 letters, digits, '_', '.', '-'")
    budget_s = _duration(data.get("budget", "30d"), "budget", fail)
    selector = _selector(data.get("selector") or {}, fail)
    objectives = _objectives(data.get("objectives"), fail)
    min_requests = data.get("min_requests", 100)
    if isinstance(min_requests, bool) or not isinstance(min_requests, int) or min_requests < 1:
        raise fail("min_requests", f"{min_requests!r} is not a whole number >= 1")
    slot_limit, buckets = _engine(data.get("engine") or {}, fail)
    windows = _windows(data.get("windows"), fail) if data.get("windows") is not None else STANDARD_WINDOWS
    for i, window in enumerate(windows):
        key = f"windows[{i}].long" if data.get("windows") is not None else "budget"
        if window.long_s > budget_s:
            raise fail(key, f"window {duration_text(window.long_s)} is longer than the budget "
                            f"{duration_text(budget_s)}" + ("" if data.get("windows") is not None else
                                                            " (give windows: that fit the budget)"))
    return Slo(service=service, budget_s=budget_s, objectives=objectives, selector=selector,
               min_requests=min_requests, slot_limit=slot_limit, buckets=buckets, windows=windows)


def check_thresholds(slo: Slo, series: EngineSeries, where: str) -> None:
    """Every latency threshold must be a bucket edge of that engine's histogram, or the SLI cannot be
    read from it. Raises SloInvalid naming the nearest edges and the flag that adds one."""
    for objective in slo.objectives:
        if objective.kind in RATIO_KINDS:
            ratio = series.availability if objective.kind == "availability" else series.success
            if ratio is None:
                raise SloInvalid(f"{where}: objectives.{objective.kind}: {series.naming} exports no series "
                                 f"for it")
            continue
        hist = series.histogram(objective.kind)
        if hist is None:
            raise SloInvalid(f"{where}: objectives.{objective.kind}: {series.naming} exports no "
                             f"{objective.kind} histogram")
        edges = slo.buckets.get(objective.kind, hist.edges)
        if not any(math.isclose(objective.threshold_s, e, rel_tol=1e-9) for e in edges):
            i = bisect_left(edges, objective.threshold_s)
            near = [f"{edges[j]:g}" for j in (i - 1, i) if 0 <= j < len(edges)]
            raise SloInvalid(
                f"{where}: objectives.{objective.kind}.threshold: {objective.threshold_s:g} s is not a bucket edge "
                f"of {hist.name} (nearest: {' and '.join(near)} s); use one of those, or add the edge with "
                f"{hist.edge_flag} and list the edges under engine.buckets.{objective.kind}")


def check_selector(slo: Slo, series: EngineSeries, where: str) -> None:
    """An engine label in the selector would make the availability SLI match nothing: the HTTP counter
    does not carry it."""
    if slo.objective("availability") is None or series.availability is None:
        return
    for label in slo.selector:
        if label in series.engine_labels:
            raise SloInvalid(f"{where}: selector.{label}: {series.availability.counter} has no {label} label, so "
                             f"the availability SLI would match nothing; select by a scrape label (job, instance)")


# --- pieces -------------------------------------------------------------------------------------
def _no_unknown(data: dict, known, prefix: str, fail) -> None:
    for key in data:
        if key not in known:
            raise fail(f"{prefix}{key}", f"unknown key (known: {', '.join(known)})")


def _duration(value: object, key: str, fail) -> int:
    try:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return int(duration_s(str(value).strip(), whole=True))
    except ValueError:
        pass
    raise fail(key, f"{value!r} is not a duration like 5m, 1h, 30d")


def _percent(value: object, key: str, fail, *, whole_allowed: bool = False) -> float:
    text = value.strip().rstrip("%") if isinstance(value, str) else value
    try:
        number = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise fail(key, f"{value!r} is not a percentage") from None
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise fail(key, f"{value!r} is not a percentage above 0")
    if number > 100:
        raise fail(key, f"{number:g} % is over 100 %")
    if number == 100 and not whole_allowed:
        raise fail(key, "100 % leaves no error budget to burn")
    return number


def _selector(value: object, fail) -> dict[str, str]:
    if not isinstance(value, dict):
        raise fail("selector", "expected a mapping of label name to value")
    out = {}
    for name, label_value in value.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise fail(f"selector.{name}", "not a Prometheus label name")
        if not isinstance(label_value, (str, int)) or isinstance(label_value, bool):
            raise fail(f"selector.{name}", "expected a string value")
        out[name] = str(label_value)
    return out


def _objectives(value: object, fail) -> tuple[Objective, ...]:
    if not isinstance(value, dict) or not value:
        raise fail("objectives", f"required: a mapping with some of {', '.join(OBJECTIVE_KINDS)}")
    _no_unknown(value, OBJECTIVE_KINDS, "objectives.", fail)
    out = []
    for kind in OBJECTIVE_KINDS:
        if kind not in value:
            continue
        spec = value[kind]
        key = f"objectives.{kind}"
        if kind in RATIO_KINDS:
            if isinstance(spec, dict):
                _no_unknown(spec, ("target",), key + ".", fail)
                spec = spec.get("target")
            out.append(Objective(kind, _percent(spec, key, fail)))
            continue
        if not isinstance(spec, dict):
            raise fail(key, "expected {target: PERCENT, threshold: SECONDS}")
        _no_unknown(spec, ("target", "threshold"), key + ".", fail)
        threshold = spec.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0 \
                or not math.isfinite(threshold):
            raise fail(key + ".threshold", f"{threshold!r} is not a latency in seconds above 0")
        out.append(Objective(kind, _percent(spec.get("target"), key + ".target", fail), float(threshold)))
    return tuple(out)


def _engine(value: object, fail) -> tuple[int | None, dict[str, tuple[float, ...]]]:
    if not isinstance(value, dict):
        raise fail("engine", "expected a mapping with slot_limit and/or buckets")
    _no_unknown(value, ("slot_limit", "buckets"), "engine.", fail)
    slot_limit = value.get("slot_limit")
    if slot_limit is not None and (isinstance(slot_limit, bool) or not isinstance(slot_limit, int) or slot_limit < 1):
        raise fail("engine.slot_limit", f"{slot_limit!r} is not a whole number >= 1")
    buckets_in = value.get("buckets") or {}
    if not isinstance(buckets_in, dict):
        raise fail("engine.buckets", "expected a mapping of histogram (ttft, tpot, e2e) to its edges")
    _no_unknown(buckets_in, LATENCY_KINDS, "engine.buckets.", fail)
    buckets = {}
    for kind, edges in buckets_in.items():
        if not isinstance(edges, list) or not edges or not all(
                isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in edges):
            raise fail(f"engine.buckets.{kind}", "expected a list of numbers")
        if sorted(set(edges)) != list(edges):
            raise fail(f"engine.buckets.{kind}", "edges must be strictly increasing")
        buckets[kind] = tuple(float(e) for e in edges)
    return slot_limit, buckets


def _windows(value: object, fail) -> tuple[BurnWindow, ...]:
    if not isinstance(value, list) or not value:
        raise fail("windows", "expected a list of {severity, long, short, budget_spent}")
    out = []
    for i, spec in enumerate(value):
        key = f"windows[{i}]"
        if not isinstance(spec, dict):
            raise fail(key, "expected {severity, long, short, budget_spent}")
        _no_unknown(spec, ("severity", "long", "short", "budget_spent"), key + ".", fail)
        severity = spec.get("severity")
        if severity not in SEVERITIES:
            raise fail(key + ".severity", f"{severity!r} is not one of {', '.join(SEVERITIES)}")
        long_s = _duration(spec.get("long"), key + ".long", fail)
        short_s = _duration(spec.get("short"), key + ".short", fail)
        if short_s >= long_s:
            raise fail(key + ".short", "must be shorter than long")
        spent = _percent(spec.get("budget_spent"), key + ".budget_spent", fail, whole_allowed=True)
        out.append(BurnWindow(severity, long_s, short_s, spent))
    return tuple(out)
