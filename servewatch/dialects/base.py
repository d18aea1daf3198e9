"""The `Dialect` interface every engine implements, and the helpers dialects share (grouping families
into per-engine values, reading grammar matches)."""

from __future__ import annotations

import difflib
import math
import re
from abc import ABC, abstractmethod
from array import array
from functools import lru_cache
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FunctionType, ModuleType

from servewatch.engine.histogram import Plan, apply_compiled, apply_plan, compile_plan, histogram_plan
from servewatch.interning import Interner
from servewatch.engine.state import EngineState, Histogram, PackedHistograms
from servewatch.exposition.model import Family

Key = tuple[tuple[str, str], ...]


def identity(labels: Mapping[str, str], identity_labels: Iterable[str]) -> Key:
    return tuple((name, labels[name]) for name in identity_labels if name in labels)


def first_family(families: Mapping[str, Family], *names: str) -> Family | None:
    """The first of `names` present (a dialect lists a metric's names across versions, newest first)."""
    for name in names:
        family = families.get(name)
        if family is not None and family.values:
            return family
    return None


def sum_by(family: Family | None, identity_labels: Iterable[str], *, sample_name: str | None = None,
           label: str | None = None) -> dict[Key, float] | dict[Key, dict[str, float]]:
    """Sum a family's samples per identity; with `label`, per identity and per value of that label."""
    wanted = tuple(identity_labels)
    if family is None:
        return {}
    if family.shape is not None:      # read through a known scrape layout: where each value goes, planned once
        plan = _PLANS.made((family.shape, family.name, "sum_by", sample_name, label, wanted),
                           lambda: _sum_plan(family.samples, wanted, sample_name, label))
        return _sum_planned(plan, family.values, label is not None)
    out: dict = defaultdict(lambda: defaultdict(float)) if label else defaultdict(float)
    for sample in family.samples:
        if sample_name is not None and sample.name != sample_name:
            continue
        if math.isnan(sample.value):
            continue
        key = identity(sample.labels, wanted)
        if label:
            out[key][sample.labels.get(label, "")] += sample.value
        else:
            out[key] += sample.value
    if label:
        return {k: dict(v) for k, v in out.items()}
    return dict(out)


# A family read through a scrape layout (`exposition.layout`) has the same sample names and labels, in the same
# order, as every other family of its shape: only the values differ. What a reader makes of the labels (which
# sample goes into which sum) is planned once per shape and applied to each scrape's values, without making a
# Sample object per series; a fleet's targets of one engine version share the layout, so they share the plans.
# Each plan gives the same sums, added in the same order, as the loop over the samples.

def _sum_plan(samples, wanted: tuple[str, ...], sample_name: str | None, label: str | None) -> tuple:
    """(value index, identity key, `label`'s value or None) of each sample `sum_by` adds, in order."""
    return tuple((index, identity(sample.labels, wanted), sample.labels.get(label, "") if label else None)
                 for index, sample in enumerate(samples)
                 if sample_name is None or sample.name == sample_name)


def _sum_planned(plan: tuple, values: Sequence[float], by_label: bool) -> dict:
    out: dict = {}
    if by_label:
        for index, key, sub in plan:
            value = values[index]
            if value != value:            # NaN: left out, as sum_by leaves it out
                continue
            inner = out.get(key)
            if inner is None:
                inner = out[key] = {}
            inner[sub] = inner.get(sub, 0.0) + value
        return out
    for index, key, _ in plan:
        value = values[index]
        if value != value:
            continue
        out[key] = out.get(key, 0.0) + value
    return out


def histograms_by(family: Family | None, identity_labels: Iterable[str]) -> dict[Key, Histogram]:
    """One cumulative histogram per identity, adding up label sets that differ only in other labels
    (e.g. SGLang's `is_streaming`); label sets with other bucket edges than the first are left out."""
    if family is None:
        return {}
    wanted = tuple(identity_labels)
    if family.shape is None:
        return apply_plan(_histogram_plan(family, wanted), family.values)
    return apply_compiled(_compiled(family, wanted), family.values)     # through a known layout: last time's plan


def _histogram_plan(family: Family, wanted: tuple[str, ...]) -> Plan:
    return histogram_plan(family.samples, family.name, lambda labels: identity(dict(labels), wanted))


_PLANS: Interner[tuple] = Interner(kept=1024)    # each reader's plan of a layout's family (histograms, sums)


def histograms_by_kind(families: Mapping[str, Family], kinds: Mapping[str, tuple[str, ...]],
                       identity_labels: Iterable[str]) -> dict[Key, Mapping[str, Histogram]]:
    """Each identity's histograms by kind (in `kinds`' order; a kind's family is the first of its names present):
    `histograms_by` of each kind's family, gathered per identity. Where every family was read through a scrape
    layout and each histogram is the usual one (a sample a bucket, one for the count, at most one for the sum),
    an identity's histograms come packed as the ring holds them (engine.state.PackedHistograms: the same values,
    the same layout as `pack_histograms` gives): each family's buckets read by one C-level getter, with no
    Histogram, array or dict made a kind."""
    wanted = tuple(identity_labels)
    found = [(kind, first_family(families, *names)) for kind, names in kinds.items()]
    if all(family is None or family.shape is not None for _, family in found):
        plan = _PLANS.made(("packed", wanted, *((kind, family.shape, family.name) for kind, family in found
                                                  if family is not None)),
                           lambda: _packed_plan(found, wanted))
        if plan is not False:
            return _apply_packed(plan, [family.values for _, family in found if family is not None])
    out: dict[Key, dict[str, Histogram]] = {}
    for kind, family in found:
        for key, histogram in histograms_by(family, wanted).items():
            out.setdefault(key, {})[kind] = histogram
    return out


def _compiled(family: Family, wanted: tuple[str, ...]) -> tuple:
    """The compiled plan of a family read through a layout, made once per layout."""
    return _PLANS.made((family.shape, family.name, wanted), lambda: compile_plan(_histogram_plan(family, wanted)))


def _packed_plan(found: list[tuple[str, Family | None]], wanted: tuple[str, ...]) -> tuple | bool:
    """((identity, its PackedHistograms layout, (family number, buckets getter, count index, sum index or None)
    per kind), ...) in the order `histograms_by_kind` meets the identities; False (kept as the plan: not made again
    at each scrape) where one histogram is not the usual one (read as Histograms then)."""
    layouts: dict[Key, tuple[dict, list]] = {}
    number = 0
    for kind, family in found:
        if family is None:
            continue
        for into, edges, per_edge, count, total, getter in _compiled(family, wanted):
            if getter is None or len(count) != 1 or len(count[0]) != 1 or (
                    total is not None and (len(total) != 1 or len(total[0]) != 1)):
                return False
            layout, parts = layouts.setdefault(into, ({}, []))
            start = sum(n + 2 for _, _, n in layout.values())
            layout[kind] = (edges, start, len(per_edge))
            parts.append((number, getter, count[0][0], None if total is None else total[0][0]))
        number += 1
    return tuple((key, layout, tuple(parts)) for key, (layout, parts) in layouts.items())


def _apply_packed(plan: tuple, values: list[Sequence[float]]) -> dict[Key, PackedHistograms]:
    out = {}
    for key, layout, parts in plan:
        packed: list[float] = []
        for number, getter, count, total in parts:
            read = values[number]
            packed += getter(read)
            # 0.0 plus each: the count and sum as `histograms_by` adds them up (a -0.0 comes out 0.0)
            packed.append(0.0 + read[count])
            packed.append(0.0 + read[total] if total is not None else math.nan)
        out[key] = PackedHistograms(layout, array("d", packed))     # (from a list: no room to spare)
    return out


def counter_names(exposed: str) -> tuple[str, ...]:
    """The family names a counter may be filed under: `x_total` in text 0.0.4, `x` in OpenMetrics."""
    return (exposed, exposed[:-len("_total")]) if exposed.endswith("_total") else (exposed,)


def sum_counter(families: Mapping[str, Family], exposed: str, identity_labels: Iterable[str], *,
                label: str | None = None):
    """`sum_by` over a counter's `_total` samples, whichever format filed them (never its `_created`)."""
    family = first_family(families, *counter_names(exposed))
    return sum_by(family, identity_labels, sample_name=exposed, label=label)


def responses_by_status(families: Mapping[str, Family], exposed: str, *, handler_label: str, status_label: str,
                        skip_handlers: Iterable[str] = (), unrouted_handler: str | None = None,
                        only_handlers: Iterable[str] | None = None) -> dict[str, float]:
    """An HTTP response counter summed per status over the request handlers (`skip_handlers`, e.g. the
    health and metrics endpoints a watcher polls itself, left out; or just `only_handlers`); responses of
    `unrouted_handler` (the label a server gives paths it has no route for) are counted under "unrouted"."""
    family = first_family(families, *counter_names(exposed))
    if family is None:
        return {}
    skip = frozenset(skip_handlers)
    only = None if only_handlers is None else frozenset(only_handlers)

    def plan() -> tuple:
        """(value index, the status it counts under) of each sample added, in order."""
        out = []
        for index, sample in enumerate(family.samples):
            if sample.name != exposed:
                continue
            handler = sample.labels.get(handler_label, "")
            if handler in skip or (only is not None and handler not in only):
                continue
            status = sample.labels.get(status_label, "")
            if unrouted_handler is not None and handler == unrouted_handler:
                out.append((index, "unrouted"))
            elif STATUS_KEY.match(status):
                out.append((index, status))
        return tuple(out)

    planned = plan() if family.shape is None else _PLANS.made(
        (family.shape, family.name, "responses", exposed, handler_label, status_label, skip, unrouted_handler, only),
        plan)
    values = family.values
    out: dict[str, float] = {}
    for index, status in planned:
        value = values[index]
        if value == value:                # NaN left out
            out[status] = out.get(status, 0.0) + value
    return out


def summary_by_handler(families: Mapping[str, Family], name: str, *, handler_label: str,
                       skip_handlers: Iterable[str] = ()) -> tuple[float | None, float | None]:
    """(sum, count) of a summary over the request handlers; (None, None) when it is not exported."""
    family = families.get(name)
    if family is None or not family.values:
        return None, None
    skip = frozenset(skip_handlers)

    def plan() -> tuple:
        """(value index, whether it is a _sum) of each sample added, in order."""
        return tuple((index, sample.name == name + "_sum") for index, sample in enumerate(family.samples)
                     if sample.labels.get(handler_label, "") not in skip
                     and sample.name in (name + "_sum", name + "_count"))

    planned = plan() if family.shape is None else _PLANS.made(
        (family.shape, family.name, "summary", name, handler_label, skip), plan)
    values = family.values
    total = count = 0.0
    for index, is_sum in planned:
        value = values[index]
        if value != value:                # NaN left out
            continue
        if is_sum:
            total += value
        else:
            count += value
    return total, count


STATUS_KEY = re.compile(r"^[1-5](?:xx|[0-9][0-9])$")     # "4xx" (a class) or "404" (a code)


def model_key(key: Key) -> str | None:
    return dict(key).get("model_name")


def engine_state(dialect: str, naming: str, key: Key, per_engine: Mapping[str, Mapping[Key, object]],
                 **fields) -> EngineState:
    """One engine's EngineState from the readings a dialect keyed by engine: its labels from its identity `key`,
    each `per_engine` field (field name -> {key: value}) at `key` (None where this engine has none), the other
    `fields` as given."""
    return EngineState(dialect=dialect, naming=naming, labels=dict(key),
                       **{name: by_key.get(key) for name, by_key in per_engine.items()}, **fields)


def numbers(match: re.Match, names: Mapping[str, type]) -> dict[str, float | int]:
    """The named groups of a grammar match that are present, converted ("1,024" reads as 1024)."""
    out: dict[str, float | int] = {}
    for name, kind in names.items():
        value = match.group(name)
        if value is not None:
            out[name] = kind(value.replace(",", ""))
    return out


LogFinding = tuple[str, dict]      # (event kind, fields) — fields hold numbers and grammar literals only


def startup_stage(msg: str, literal_stages: Iterable[tuple[str, str]],
                  timed_stages: Iterable[tuple[re.Pattern, str]]) -> list[LogFinding]:
    """The startup stage a message announces: by a literal (literal, stage), or by a pattern whose
    `seconds` group says how long the stage took (pattern, stage); [] for neither."""
    for literal, stage in literal_stages:
        if literal in msg:
            return [("startup", {"stage": stage})]
    for pattern, stage in timed_stages:
        match = pattern.search(msg)
        if match:
            return [("startup", {"stage": stage, "seconds": float(match.group("seconds"))})]
    return []


@dataclass(frozen=True)
class StatsReading:
    """One stats line in the units of a log's timeline."""

    source: str                 # the line's shape in words: "stats line", "decode batch", "engine dump at death"
    naming: str | None      # the log naming that writes this shape; None when the shape tells none
    values: Mapping[str, float | int | None]   # of running, waiting, kv_pct, prompt_tps, gen_tps, preemptions,
    #                                            prefix_hit_pct: those the line states
    # The identity labels of the engine the line is about, as its /metrics states them ({"engine": "0"}):
    # what ties a stats line to that engine's scrapes. Empty when the line names no engine.
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot of an engine's slot listing, in numbers only: never its prompt, text, task or sampling settings."""

    id: int
    busy: bool                          # processing a request (prompt or generation)
    n_ctx: int | None = None            # the slot's context size
    prompt_tokens: int | None = None    # tokens in the slot's cache (its prompt and, once generating, its output)
    prompt_processed: int | None = None   # prompt tokens computed for its current (or last) request
    prompt_cached: int | None = None    # prompt tokens reused from the cache
    decoded: int | None = None          # tokens generated for its current (or last) request
    remaining: int | None = None        # tokens it may still generate (-1: no limit)

    @property
    def prefilling(self) -> bool:
        """Busy with no token generated yet: still computing its prompt."""
        return self.busy and self.decoded == 0


@dataclass(frozen=True)
class RecordGrammar:
    """What reading a whole log after the fact (the postmortem) needs of an engine's log beyond
    `Dialect.parse_log_message`. Every pattern yields numbers and fixed literals, never free text."""

    # Line prefixes other than `Dialect.log_prefix` (older versions, other processes); named groups as
    # there, all optional but `msg`: process, pid, level, ts.
    older_prefixes: tuple[re.Pattern, ...] = ()
    engine_processes: tuple[str, ...] = ()   # process names (or their prefixes) in line prefixes that are the engine
    api_process: str | None = None           # the API server's process name, for the exit line that names none
    packages: tuple[str, ...] = ()           # top-level Python packages whose traceback frames are the engine's
    # (stage, pattern): a `seconds` group for the stage's duration, other named groups are numbers.
    startup_stages: tuple[tuple[str, re.Pattern], ...] = ()
    settings_marker: str | None = None       # a literal of the line that lists the launch settings
    settings: tuple[tuple[str, re.Pattern, type], ...] = ()   # (setting, pattern with a `value` group, type)
    oom_exceptions: tuple[str, ...] = ()     # exception type names that mean out of memory
    oom_literals: tuple[str, ...] = ()       # message literals that mean out of memory
    oom_details: re.Pattern | None = None    # sizes: requested, total, free (each with a `_unit`), device
    signal_lines: tuple[re.Pattern, ...] = ()       # a `signal` group
    shutdown_lines: tuple[str, ...] = ()
    force_kill_line: re.Pattern | None = None       # a `process` group: the process killed
    exit_code_lines: tuple[re.Pattern, ...] = ()    # a `code` group
    # (literal, exit status): a line the engine writes when a stop signal repeated during its stop makes it exit at
    # once, without waiting for what the first one left waiting (the requests of clients still connected).
    forced_stop_lines: tuple[tuple[str, int], ...] = ()
    timeout_lines: tuple[re.Pattern, ...] = ()


class Dialect(ABC):
    """Everything servewatch knows about one engine's outside. `sources/`, `detectors/`, `bundle/`, `sinks/` and
    `watch/` reach an engine only through this interface (via the registry in `servewatch.dialects`).

    A new engine is one module defining a subclass and one `servewatch.dialects.register(...)` call.
    A subclass declared with `module=` takes from that module every attribute below whose upper-cased name
    it defines (NAME, LOG_PREFIX, ...), every method below it defines as a function of the same name, and
    its upper-case string constants as `grammar_literals`; the class body states only what differs.
    A name that is almost one of the interface's (`IDENTITY_LABEL`, `parse_log_messages`) is taken for a
    misspelling: the class is not created.
    """

    name: str                                   # "vllm", "sglang": stored in samples and bundles
    title: str = ""                             # the engine's name in words ("vLLM"); `name` when empty
    identity_labels: tuple[str, ...] = ()       # labels that tell one engine of a server from another
    # Process titles the engine sets (setproctitle), by prefix → role ("engine_core", "worker", "api").
    process_roles: Mapping[str, str] = {}
    # The engine's own processes under the API server as a real one titles them: (title, role), in order.
    engine_process_titles: tuple[tuple[str, str], ...] = ()
    # Title stems of the engine's ranked processes → their kind ("engine_core", "worker", "coordinator", ...);
    # a title is the stem plus rank suffixes such as "_DP1_TP0" (see `dialects.ranks`).
    rank_titles: Mapping[str, str] = {}
    slot_limit_flag: str | None = None          # the command-line flag that caps running requests
    context_length_flag: str | None = None      # the flag that caps one request's tokens
    # The engine's share of device memory: (its key in the log's settings, its flag, its default or None).
    memory_budget: tuple[str, str, float | None] | None = None
    # The /health status that means "the engine died behind a live API server"; None where the engine
    # has no such status (its /health fails the same way for a slow, a stalled and a dead engine).
    health_dead_status: int | None = None
    # True where /health itself waits on the engine (SGLang 0.5.23 runs a one-token generation through its
    # scheduler): a stalled engine then takes /health down with it, so a failed probe is no sign of life
    # or death, and the stall is told by the progress counters alone.
    health_runs_through_engine: bool = False
    # True where the engine is a thread of the API server's one process (no engine process of its own): a dead
    # engine takes the process and its port with it, so its death shows as a refused connection, not a status.
    engine_in_api_process: bool = False
    # What a live engine shows from outside, in words: diagnose's expected range for "the engine died" (None: the
    # engine-neutral words).
    engine_alive_signs: str | None = None
    # Where a first SIGTERM ends the engine's work at once but the process then waits on clients still connected,
    # and the same signal again ends it at once (the engine's own forced exit): how long a stop that waits on the
    # server (guard's drain) gives it to exit by itself before it sends SIGTERM again. None: one SIGTERM drains.
    stop_signal_again_after_s: float | None = None
    # The request header that sends a request to one data-parallel rank's engine (value: the rank), where the
    # API server honours one; None where it does not. The urgent probe aims with it at the rank that looks
    # stalled: the API server balances by load, so an idle data-parallel server sends every request to engine
    # 0, and a probe that engine 0 answers says nothing about engine 1.
    dp_rank_header: str | None = None
    # The metrics label that says which data-parallel rank's engine a series is (None: the engine has none).
    dp_rank_label: str | None = None
    # Whether the engine's own key of a series already words its DP rank (so a verdict need not add it again).
    dp_rank_in_key_words: bool = False
    # Latency histograms by kind ("ttft", "itl", "e2e", ...) → the engine's default bucket edges.
    latency_edges: Mapping[str, tuple[float, ...]] = {}
    # Latency histograms by kind → the command-line flag that replaces their bucket edges.
    bucket_flags: Mapping[str, str] = {}
    # A known engine bug behind "exit 0 after the engine died" (said in process_exit's verdict), if any.
    exit_zero_after_death_note: str | None = None
    # Log: the line prefix, a regex with a `msg` group (and, where the prefix states them, process, pid,
    # level and ts groups).
    log_prefix: re.Pattern | None = None
    # How the prefix's `ts` group writes the time (strptime; no year where the engine writes none): a line's
    # own time tells when it was written however late a starved watcher reads it.
    log_clock_format: str | None = None
    # Metric namings alert rules and dashboards can be written for (newest first).
    alert_namings: tuple[str, ...] = ()
    # Where /metrics (and the slot listing) are answered by the engine's own loop, not by the HTTP server (a task
    # posted to the loop that decodes): a loop hung outside a step leaves them unanswered while /health is 200.
    metrics_wait_on_engine: bool = False
    # The path of the engine's slot listing (JSON, read by `read_slots`), where it has one.
    slots_path: str | None = None
    # The message of the 503 every endpoint answers while the model loads, where the server listens meanwhile.
    loading_message: str | None = None
    record_grammar: RecordGrammar = RecordGrammar()

    @abstractmethod
    def detect(self, families: Mapping[str, Family]) -> str | None:
        """The metric naming of this engine's exposition, or None when it is not this engine's."""

    @abstractmethod
    def wanted_families(self) -> tuple[str, ...]:
        """The families `read` needs (the parser skips every other one)."""

    @abstractmethod
    def read(self, families: Mapping[str, Family], naming: str) -> list[EngineState]:
        """One canonical state per engine."""

    def parse_log_message(self, msg: str) -> list[LogFinding]:
        """The events one log message (prefix already stripped) carries, by this engine's grammar."""
        return []

    def describe_startup_failure(self, fields: Mapping) -> str:
        """The engine's own startup-failure message, rebuilt from the grammar literal and parsed numbers."""
        return str(fields.get("reason", "unknown"))

    def stats_reading(self, fields: Mapping) -> StatsReading | None:
        """A `stats` finding of `parse_log_message` in a log timeline's units (None: not a timeline point)."""
        return None

    def record_stats(self, msg: str) -> StatsReading | None:
        """A stats line only a whole-log reading knows (an older naming's, a dump at death)."""
        return None

    def bucket_args(self, edges: Mapping[str, Sequence[float]]) -> list[str]:
        """The command-line arguments that install `edges` (by histogram kind): each kind's flag followed by
        its edges, in the order of `bucket_flags`."""
        args: list[str] = []
        for kind, flag in self.bucket_flags.items():
            if kind in edges:
                args += [flag, *(repr(edge) for edge in edges[kind])]
        return args

    def alert_series(self, naming: str):
        """The series rules and dashboards read at `naming` (a `dialects.series.EngineSeries`)."""
        raise KeyError(naming)

    def read_slots(self, data: object) -> tuple[Slot, ...]:
        """The slot listing's JSON (at `slots_path`) → one Slot per slot; ValueError for a body of another shape."""
        raise ValueError(f"{self.name} has no slot listing")

    def simulator_series(self):
        """The series the simulator writes for this engine (a `dialects.series.EngineSeries`), None for none: by
        default its alert series at its newest naming."""
        return self.alert_series(self.alert_namings[0]) if self.alert_namings else None

    def grammar_literals(self) -> frozenset[str]:
        """Fixed strings of this dialect's grammar: the only free text a bundle may keep from a log."""
        return frozenset()

    def __init_subclass__(cls, module: ModuleType | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _refuse_misspellings(cls, module)
        if module is None:
            return
        declared = vars(module)
        for attr in Dialect.__annotations__:
            if attr not in vars(cls) and attr.upper() in declared:
                setattr(cls, attr, declared[attr.upper()])
        for method in _METHODS:
            if method not in vars(cls) and isinstance(declared.get(method), FunctionType):
                setattr(cls, method, staticmethod(declared[method]))
        if "grammar_literals" not in vars(cls):
            def grammar_literals(self) -> frozenset[str]:
                return module_literals(module)

            cls.grammar_literals = grammar_literals

    def rank_of(self, title: str):
        """(kind, ((axis, rank), ...)) for a title this engine gives a ranked process, else None (not guessed)."""
        from servewatch.dialects.ranks import parse_title

        return parse_title(title, self.rank_titles)

    def role_of(self, title: str) -> str | None:
        for prefix, role in self.process_roles.items():
            if title.startswith(prefix) or (len(title) == COMM_LEN and prefix.startswith(title)):
                return role
        return None


_METHODS = tuple(name for name, value in vars(Dialect).items()
                 if isinstance(value, FunctionType) and not name.startswith("_") and name != "grammar_literals")
_INTERFACE = (*Dialect.__annotations__, *_METHODS, "grammar_literals")


def _refuse_misspellings(cls: type, module: ModuleType | None) -> None:
    """TypeError for a class-body name, a module constant or a module function that is not one of the
    interface's names but nearly is (it would silently leave the default in place)."""
    candidates = [(name, _INTERFACE, name) for name in vars(cls) if not name.startswith("_")]
    if module is not None:
        for name, value in vars(module).items():
            if name.isupper():
                candidates.append((name, tuple(a.upper() for a in Dialect.__annotations__), name))
            elif (isinstance(value, FunctionType) and not name.startswith("_")
                  and value.__module__ == module.__name__):
                candidates.append((name, _METHODS, name))
    for name, interface, said in candidates:
        if name in interface:
            continue
        close = difflib.get_close_matches(name, interface, n=1, cutoff=0.85)
        if close:
            where = f"{module.__name__}.{said}" if module is not None and said not in vars(cls) else said
            raise TypeError(f"{cls.__name__}: {where} is not a Dialect name; did you mean {close[0]}?")


COMM_LEN = 15          # Linux truncates a process's kernel name to 15 bytes ("sglang::schedul")


@lru_cache(maxsize=None)
def module_literals(module) -> frozenset[str]:
    """Every upper-case string constant (or tuple of them) of a dialect module."""
    found: set[str] = set()
    for attr, value in vars(module).items():
        if not attr.isupper():
            continue
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, (tuple, list, frozenset, set)):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)
