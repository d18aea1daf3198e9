"""A drill plan: the target, the workload, the recorder settings and the faults in order, each with its
timing and its expectations. Read from YAML, checked against schema/plan.schema.json, then against what
servewatch knows (fault kinds, verdict names, detector settings). Any problem is one line (PlanError)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from servewatch.errors import ServewatchError
from servewatch.lab.recipe import RECIPES
from servewatch.sim.config import SimConfig

SHIPPED = ("standard",)
DEFAULT_TIMING = {"warmup_s": 6.0, "hold_s": 10.0, "observe_s": 10.0}
# The recorder's active probe in a drill: a fault window lasts seconds, not the half-minute `watch --probe`
# waits by default between two probes of an idle server.
PROBE_INTERVAL_S = 4.0
PROBE_DEADLINE_S = 4.0
REQUEST_TIMEOUT_MARGIN_S = 10.0   # a workload request's timeout beyond the fault's hold and its traffic after it
# The traffic after a fault whose recovery bound is counted in requests (expect.recover_within: {requests: N}): the
# bound is known only once a request's length is measured, so the workload is planned to send this long after the
# fault and ends as soon as the recovery is seen (measure.Workload.end_at_recovery). A step that recovers costs
# nothing of it; one that never does gives up here.
RECOVERY_WINDOW_S = 90.0


class PlanError(ServewatchError):
    exit_code = 2


@dataclass(frozen=True)
class GuardExpect:
    """What `servewatch guard`, recording the step in the recorder's place, must have done."""
    kills: bool                       # it killed the tree (exit 3, nothing left), or did nothing at all
    within_s: float | None = None     # the kill, after the verdict guard acted on
    stacks_of: tuple[str, ...] = ()   # roles whose stacks it captured before the kill
    diverging: tuple[str, ...] = ()   # titles its stack dump names as the rank not where its siblings are
    exit: int = 3                     # its exit status after the kill: 3 (a stall, a dead engine), 6 (hardware)
    says: tuple[str, ...] = ()        # literals its last line (the exit's why) must hold

    def to_json(self) -> dict:
        out: dict = {"kills": self.kills}
        if self.exit != 3:
            out["exit"] = self.exit
        if self.says:
            out["says"] = list(self.says)
        if self.within_s is not None:
            out["within_s"] = self.within_s
        if self.stacks_of:
            out["stacks_of"] = list(self.stacks_of)
        if self.diverging:
            out["diverging"] = list(self.diverging)
        return out


@dataclass(frozen=True)
class Expect:
    fire: dict[str, float] = field(default_factory=dict)        # verdict -> must fire within S of injection
    fire_any: tuple[tuple[str, ...], float] | None = None         # one of these within S
    not_fire: tuple[str, ...] = ()                               # must not fire from injection to the end
    no_incident: bool = False                                    # no incident verdict at all after injection
    no_verdict: bool = False                                     # no verdict of any kind, warm-up included
    names: tuple[str, ...] = ()                                  # said by the verdict that met fire / fire_any
    health: str = "any"                                          # ok | failing | any, while the fault holds
    max_error_rate: float | None = None                          # failed / sent in the step
    recover_within_s: float | None = None                        # first good request after the fault ends
    recover_requests: float | None = None     # ... within N x a request's length measured outside the fault,
    recover_plus_s: float = 0.0               # plus this (expect.recover_within: {requests: N, plus_s: S})
    bundle_write_fails: bool | None = None                       # disk_full: the recorder says so
    guard: GuardExpect | None = None                             # what guard (a step with guard:) did
    clear_within_s: float | None = None                          # the verdicts met cleared after the fault ends
    exit_within_s: float | None = None                           # the server exits, process_exit says how
    ready_within_s: float | None = None                          # at_start: /health 200 this long after the start
    livez: str = "any"                                           # serve: ok | failing | any, while the fault holds
    readyz: str = "any"                                          # serve: ok | failing | any, while the fault holds
    in_flight_cut: bool = False                                  # requests caught by the fault all fail
    log_shows: tuple[str, ...] = ()                              # the server's log after the injection
    fire_by_threshold: dict[str, float] = field(default_factory=dict)   # verdict -> allowance beyond its own threshold
    restart_within_s: float | None = None     # guard's default and livez act (restart class, evidence held) within S
    no_restart: bool = False                  # neither acts from the injection to the end: a busy server is left be
    probe_preempted: bool = False             # a routine probe in flight gave way to an urgent one (the recorder says)
    side: str | None = None                   # a pair: the side fire/fire_any must name (None: the fault's side)

    @property
    def recovery_window_s(self) -> float | None:
        """How long the traffic after the fault is planned to go on for the recovery to be seen (it ends once it
        is): the fixed bound, or RECOVERY_WINDOW_S for one counted in requests; None without a recovery bound."""
        return RECOVERY_WINDOW_S if self.recover_requests is not None else self.recover_within_s

    def to_json(self) -> dict:
        out: dict = {}
        if self.fire:
            out["fire"] = dict(self.fire)
        if self.fire_any:
            out["fire_any"] = {"verdicts": list(self.fire_any[0]), "within_s": self.fire_any[1]}
        if self.not_fire:
            out["not_fire"] = list(self.not_fire)
        if self.no_incident:
            out["no_incident"] = True
        if self.no_verdict:
            out["no_verdict"] = True
        if self.names:
            out["names"] = list(self.names)
        if self.health != "any":
            out["health"] = self.health
        for key in ("max_error_rate", "recover_within_s", "bundle_write_fails"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.recover_requests is not None:
            out["recover_within"] = {"requests": self.recover_requests, "plus_s": self.recover_plus_s}
        if self.guard is not None:
            out["guard"] = self.guard.to_json()
        if self.livez != "any":
            out["livez"] = self.livez
        if self.readyz != "any":
            out["readyz"] = self.readyz
        for key in ("clear_within_s", "exit_within_s", "ready_within_s"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.in_flight_cut:
            out["in_flight_cut"] = True
        if self.log_shows:
            out["log_shows"] = list(self.log_shows)
        if self.fire_by_threshold:
            out["fire_by_threshold"] = dict(self.fire_by_threshold)
        if self.restart_within_s is not None:
            out["restart"] = {"within_s": self.restart_within_s}
        elif self.no_restart:
            out["restart"] = False
        if self.probe_preempted:
            out["probe_preempted"] = True
        if self.side is not None:
            out["side"] = self.side
        return out


@dataclass(frozen=True)
class FaultStep:
    kind: str
    name: str
    role: str | None
    rank: int
    warmup_s: float
    hold_s: float
    observe_s: float
    params: dict
    expect: Expect
    probe: bool = False          # the recorder asks the server for one token when its counters stand still
    on: str = "main"             # the plan's target it runs on (`target:` is main, `targets:` names the others)
    workload: dict | None = None # this fault's workload instead of the plan's
    guard: tuple[str, ...] | None = None   # `servewatch guard` records (and acts) instead of `watch`: its
                                           # --act-on verdicts (empty: guard's default)
    proxy: bool = False          # `servewatch proxy --watch` records instead, the workload sent through it
    at_start: bool = False       # the step starts its target afresh, recorded from the server's first second,
                                 # and injects during the start (no workload)
    on_log: str | None = None    # at_start: inject when the server's log first shows this (else at the start)
    serve: bool = False          # `servewatch serve` records instead (by URL), its verdicts and livez read over HTTP
    workload_first: bool = False # the workload starts before the recorder: its first probe queues behind it
    side: str | None = None      # a prefill/decode pair's target: the instance the fault aims at
    request_timeout: float | None = None   # the workload's timeout for one request, where the plan sets it

    @property
    def at_fault(self) -> str | None:
        """A pair: the side the verdicts must name and the only one guard and livez may act on."""
        return self.expect.side or self.side

    @property
    def traffic_after_revert_s(self) -> float:
        """How long the workload goes on sending after the fault ends: the observation, or the recovery
        window when that is longer — a good request *sent after* the fault can only be seen if traffic is
        still sent then (a closed loop sends its next request only when one of the requests stuck in the
        fault finishes)."""
        return max(self.observe_s, self.expect.recovery_window_s or 0.0)

    @property
    def watch_after_revert_s(self) -> float:
        """How long the recorder goes on after the fault ends: the observation, or longer when the plan waits
        for a verdict to clear or for the server to exit (exit_within_s counts from the injection)."""
        e = self.expect
        return max(self.observe_s, e.clear_within_s or 0.0, (e.exit_within_s or 0.0) - self.hold_s)

    @property
    def request_timeout_s(self) -> float:
        """The workload's timeout for one request: a request caught by the fault waits out the hold, then may
        take the whole recovery window to finish (as the expectation allows), plus REQUEST_TIMEOUT_MARGIN_S.
        Shorter, the drill's own client gave up on requests the engine was still serving: at DP=2, 3 of 14
        requests caught by a 12 s stop "timed out" after 28 s (hold + observation + 10 s) and finished after.
        A plan's request_timeout_s, where it gives one, instead (an overload whose requests take what the engine's
        speed makes them take: a client that gives up first counts the drill's impatience as the server's failure)."""
        if self.request_timeout is not None:
            return self.request_timeout
        return self.hold_s + self.traffic_after_revert_s + REQUEST_TIMEOUT_MARGIN_S

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "role": self.role, "rank": self.rank,
                "warmup_s": self.warmup_s, "hold_s": self.hold_s, "observe_s": self.observe_s,
                "params": self.params, "expect": self.expect.to_json(), "probe": self.probe, "target": self.on,
                **({"workload": shareable_workload(self.workload)} if self.workload is not None else {}),
                **({"guard": {"act_on": list(self.guard)}} if self.guard is not None else {}),
                **({"proxy": True} if self.proxy else {}),
                **({"at_start": {"on_log": self.on_log} if self.on_log else True} if self.at_start else {}),
                **({"serve": True} if self.serve else {}),
                **({"workload_first": True} if self.workload_first else {}),
                **({"side": self.side} if self.side else {}),
                **({"request_timeout_s": self.request_timeout} if self.request_timeout is not None else {})}


@dataclass(frozen=True)
class PairSpec:
    """A prefill/decode pair as a drill's target (`target: {engine: vllm, pd: {connector: nixl, lease_s: 30}}`)."""
    connector: str = "nixl"           # vllm: nixl or example (servewatch.lab.pd.CONNECTORS); the simulator has none
    lease_s: int = 30                 # the prefill's lease on the blocks it keeps (servewatch.lab.pd.DEFAULT_LEASE_S)
    kv_wait_timeout_s: float | None = None   # sim: decode's wait for KV before it fails the request (its own default)

    def to_json(self) -> dict:
        out = {"connector": self.connector, "lease_s": self.lease_s}
        if self.kv_wait_timeout_s is not None:
            out["kv_wait_timeout_s"] = self.kv_wait_timeout_s
        return out


@dataclass(frozen=True)
class Target:
    engine: str | None = None          # vllm | sglang | llamacpp | sim: the drill starts and stops it
    sim_dialect: str = SimConfig.dialect    # the dialect the simulator speaks (its own default)
    args: tuple[str, ...] = ()
    max_model_len: int = 2048
    url: str | None = None             # or an existing server: URL + PID (+ consent)
    pid: int | None = None
    consent: bool = False
    ready_timeout_s: float = 240.0
    env: tuple[tuple[str, str], ...] = ()   # extra environment of a lab engine the drill starts
    under_guard: tuple[str, ...] | None = None   # a lab engine started by `servewatch guard` (its extra options)
    pd: PairSpec | None = None         # a prefill/decode pair instead of one server (drill.pair)

    @property
    def existing(self) -> bool:
        return self.url is not None

    @property
    def dialect(self) -> str | None:
        """The dialect of the engine the drill starts (the simulator's own for sim); None for an existing server."""
        return self.sim_dialect if self.engine == "sim" else self.engine

    def describe(self) -> str:
        if self.existing:
            return f"existing server {self.url} (pid {self.pid})"
        what = f"built-in simulator ({self.sim_dialect})" if self.engine == "sim" else f"lab {self.engine}"
        if self.pd is not None:
            what = (f"a prefill/decode pair of the {what}"
                    + (f" joined by {self.pd.connector}" if self.engine != "sim" else "")
                    + (f", lease {self.pd.lease_s} s" if self.pd.connector != "example" else
                       " (KV through files in a shared directory)"))
        return (what + (f" {' '.join(self.args)}" if self.args else "")
                + (f" with {' '.join(f'{k}={v}' for k, v in self.env)}" if self.env else "")
                + (" started by servewatch guard" + (f" {' '.join(self.under_guard)}" if self.under_guard else "")
                   if self.under_guard is not None else ""))

    def to_json(self) -> dict:
        if self.existing:
            return {"url": self.url, "pid": self.pid, "consent": self.consent}
        out = {"engine": self.engine, "sim_dialect": self.sim_dialect if self.engine == "sim" else None,
               "args": list(self.args), "max_model_len": self.max_model_len}
        if self.env:
            out["env"] = dict(self.env)
        if self.under_guard is not None:
            out["under_guard"] = list(self.under_guard)
        if self.pd is not None:
            out["pd"] = self.pd.to_json()
        return out


@dataclass(frozen=True)
class Plan:
    name: str
    description: str
    target: Target
    workload: dict
    interval_s: float
    settings: tuple[str, ...]
    steps: tuple[FaultStep, ...]
    probe_interval_s: float = PROBE_INTERVAL_S
    probe_deadline_s: float = PROBE_DEADLINE_S
    targets: dict[str, Target] = field(default_factory=dict)    # the others, by name (a step says `target: NAME`)

    def named_targets(self) -> dict[str, Target]:
        return {"main": self.target, **self.targets}

    @property
    def dialect(self) -> str:
        return self.target.dialect or "unknown"

    def only(self, names) -> Plan:
        """The plan with just the faults named (in the plan's order), to run again the ones that failed; a
        name the plan does not hold is an error that lists the names it does."""
        from dataclasses import replace

        known = [s.name for s in self.steps]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise PlanError(f"--only {unknown[0]!r}: plan {self.name} has no such fault (its faults: "
                            f"{'; '.join(known)})")
        wanted = set(names)
        return replace(self, steps=tuple(s for s in self.steps if s.name in wanted))

    def budget_s(self) -> float:
        return sum(s.warmup_s + s.hold_s + max(s.traffic_after_revert_s, s.watch_after_revert_s) for s in self.steps)

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "target": self.target.to_json(),
                "targets": {name: t.to_json() for name, t in self.targets.items()},
                "workload": shareable_workload(self.workload),
                "recorder": {"interval_s": self.interval_s, "set": list(self.settings),
                             "probe_interval_s": self.probe_interval_s, "probe_deadline_s": self.probe_deadline_s},
                "faults": [s.to_json() for s in self.steps]}


def workload_headers(workload: dict, target: Target) -> tuple[tuple[str, str], ...]:
    """The headers a workload sends with each request: its `dp_rank` as the target engine's routing header.
    ValueError when the engine has none (or the drill does not know the engine: an existing server)."""
    rank = workload.get("dp_rank")
    if rank is None:
        return ()
    from servewatch.dialects import by_name

    if target.dialect is None:
        raise ValueError("dp_rank: the drill knows the engine's routing header only for a server it starts")
    dialect = by_name(target.dialect)
    header = dialect.dp_rank_header
    if header is None:
        raise ValueError(f"dp_rank: {dialect.title or dialect.name} has no header that sends a request to one "
                         f"data-parallel rank")
    return ((header, str(int(rank))),)


def _schema() -> dict:
    return json.loads(resources.files("servewatch.drill").joinpath("schema/plan.schema.json").read_text())


def shipped_path(name: str, engine: str) -> Path:
    path = Path(str(resources.files("servewatch.drill").joinpath(f"plans/{name}-{engine}.yaml")))
    if not path.is_file():
        raise PlanError(f"--plan {name}: no shipped plan for {engine} (known: vllm, sglang, llamacpp, sim)")
    return path


def load_plan(path: str | Path) -> Plan:
    from servewatch.textfile import TextFileError, read_text, yaml_value

    try:
        text = read_text(str(path))
    except TextFileError as exc:
        raise PlanError(f"plan {path}: {exc}") from None
    try:
        data = yaml_value(text)
    except TextFileError as exc:
        where = f" at line {exc.line}" if exc.line is not None else ""
        raise PlanError(f"plan {Path(path).name}: not valid YAML{where}") from None
    return plan_from_dict(_traces_from(data, Path(path).parent), source=Path(path).name)


def _traces_from(data, folder: Path):
    """The plan with each workload's relative `trace` path read from the plan's own folder."""
    if not isinstance(data, dict):
        return data

    def resolved(workload):
        if isinstance(workload, dict) and isinstance(workload.get("trace"), str) \
                and not Path(workload["trace"]).is_absolute():
            return {**workload, "trace": str(folder / workload["trace"])}
        return workload

    out = dict(data)
    if "workload" in out:
        out["workload"] = resolved(out["workload"])
    if isinstance(out.get("faults"), list):
        out["faults"] = [{**f, "workload": resolved(f["workload"])} if isinstance(f, dict) and "workload" in f
                         else f for f in out["faults"]]
    return out


TRACE_ONLY = ("speed", "start_s")


def shareable_workload(workload: dict) -> dict:
    """A workload as reports show it: a trace by its file name only (no folder)."""
    return {**workload, "trace": Path(workload["trace"]).name} if "trace" in workload else dict(workload)

NOT_WITH_TRACE = ("scenario", "rate", "concurrency", "prompt_tokens", "output_tokens", "arrival")


def _check_trace(workload: dict, where: str) -> None:
    """A trace workload sends the trace's own rows: no scenario beside it, and a file that reads as a trace."""
    if "trace" not in workload:
        given = [k for k in TRACE_ONLY if k in workload]
        if given:
            raise PlanError(f"{where}: {given[0]}: goes with trace: FILE")
        return
    clash = [k for k in NOT_WITH_TRACE if k in workload]
    if clash:
        raise PlanError(f"{where}: {clash[0]}: a trace workload sends the trace's own rows, at its own times and "
                        f"lengths; give trace or {clash[0]}, not both")
    from servewatch.load.trace import read_trace

    path = workload["trace"]
    try:
        trace = read_trace(path, max_rows=1, keep_bad=1)
    except OSError as exc:
        raise PlanError(f"{where}: trace: cannot read {Path(path).name}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PlanError(f"{where}: trace: {Path(path).name}: {exc}") from None
    if not trace.rows:
        raise PlanError(f"{where}: trace: {Path(path).name} holds no row to send")


def plan_from_dict(data, *, source: str = "plan") -> Plan:
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "top level"
        raise PlanError(f"{source}: {where}: {_readable(err)}")
    return _build(data, source)


def _readable(err) -> str:
    if err.validator == "oneOf" and list(err.absolute_path)[:1] in (["target"], ["targets"]):
        return "give either engine (vllm, sglang, llamacpp or sim) or url and pid of an existing server"
    if err.validator == "additionalProperties":
        return err.message.replace("Additional properties are not allowed", "unknown key(s)")
    if err.validator == "type":       # jsonschema says the value as Python does ("None is not of type 'object'")
        wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        return f"expected {' or '.join(_TYPE_WORDS.get(t, t) for t in wanted)}, got {_value_words(err.instance)}"
    return err.message


_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "a whole number",
               "number": "a number", "boolean": "true or false", "null": "nothing"}


def _value_words(value) -> str:
    """A YAML value as its reader wrote it: `null` (or nothing), `true`, a mapping, not Python's None or True."""
    if value is None:
        return "nothing (an empty or null value)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return f"the number {value}"


def _build(data: dict, source: str) -> Plan:
    from servewatch.detectors import registry
    from servewatch.detectors import settings as detector_settings
    from servewatch.drill.faults import FAULTS

    target = _target(data["target"], f"{source}: target")
    targets = {name: _target(t, f"{source}: targets/{name}") for name, t in data.get("targets", {}).items()}
    if "main" in targets:
        raise PlanError(f"{source}: targets/main: main is the plan's own target (target:); name the others otherwise")
    if targets and (target.existing or any(t.existing for t in targets.values())):
        raise PlanError(f"{source}: targets: an existing server is drilled alone; the targets of a plan with more "
                        f"than one are servers the drill starts itself")
    names = ["main", *targets]
    recorder = data.get("recorder", {})
    settings = tuple(recorder.get("set", ()))
    try:
        detector_settings.build(list(settings), None)
    except ServewatchError as exc:
        raise PlanError(f"{source}: recorder/set: {exc}") from None
    timing = {**DEFAULT_TIMING, **data.get("defaults", {})}
    known = set(registry.names())
    steps = []
    for i, f in enumerate(data["faults"]):
        where = f"{source}: faults/{i}"
        fault = FAULTS.get(f["kind"])
        if fault is None:
            raise PlanError(f"{where}: unknown fault kind {f['kind']!r} (known: {', '.join(sorted(FAULTS))})")
        e = f.get("expect", {})
        guard = _guard(f.get("guard"))
        named = [*e.get("fire", {}), *e.get("not_fire", []), *e.get("fire_any", {}).get("verdicts", []),
                 *e.get("fire_by_threshold", {}), *(guard or ())]
        unknown = [n for n in named if n not in known]
        if unknown:
            raise PlanError(f"{where}: unknown verdict(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        fire_any = e.get("fire_any")
        must_fire = e.get("fire") or fire_any or e.get("fire_by_threshold")
        if "recover_within" in e and "recover_within_s" in e:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect: recover_within_s is a fixed bound and "
                            f"recover_within one counted in requests; give one of them")
        if e.get("names") and not must_fire:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/names: says what the verdict of fire or "
                            f"fire_any must name; give one of those")
        if "clear_within_s" in e and not must_fire:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/clear_within_s: says when the verdict of "
                            f"fire or fire_any must clear; give one of those")
        if f.get("proxy") and (guard is not None or f.get("probe")):
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): proxy: servewatch proxy records the step in watch's "
                            f"place, with no {'guard' if guard is not None else 'probe'}; give one of them")
        if "guard" in e and guard is None:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/guard: says what guard did; give the "
                            f"fault guard: true (or guard: {{act_on: [...]}}) so that guard records it")
        at_start = f.get("at_start", False)
        if at_start:
            why = _at_start_problem(f, guard, e, target if f.get("target", "main") == "main"
                                    else targets.get(f.get("target")))
            if why:
                raise PlanError(f"{where} ({f.get('name', f['kind'])}): at_start: {why}")
        others = [k for k, on in (("proxy", f.get("proxy")), ("guard", guard is not None), ("at_start", at_start)) if on]
        if f.get("serve") and others:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): serve: servewatch serve records the step in "
                            f"watch's place; give serve or {others[0]}, not both")
        for endpoint in ("livez", "readyz"):
            if endpoint in e and not f.get("serve"):
                raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/{endpoint}: says what servewatch "
                                f"serve's {endpoint} answered; give the fault serve: true")
        if e.get("probe_preempted") and not (f.get("probe", recorder.get("probe", False)) or guard is not None):
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/probe_preempted: says what the recorder's "
                            f"probe did; give the fault probe: true")
        if f.get("workload_first") and at_start:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): workload_first: a step that starts its server "
                            f"sends no workload")
        if "ready_within_s" in e and not at_start:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/ready_within_s: says how soon the server "
                            f"is up after a start the step makes; give the fault at_start")
        g = e.get("guard")
        if g is not None and not g["kills"] and (g.keys() - {"kills"}):
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): expect/guard: within_s, stacks_of, diverging, "
                            f"exit and says describe a kill; with kills: false give none of them")
        expect = Expect(fire=dict(e.get("fire", {})),
                        fire_any=(tuple(fire_any["verdicts"]), float(fire_any["within_s"])) if fire_any else None,
                        not_fire=tuple(e.get("not_fire", ())), no_incident=bool(e.get("no_incident", False)),
                        no_verdict=bool(e.get("no_verdict", False)), names=tuple(e.get("names", ())),
                        health=e.get("health", "any"), max_error_rate=e.get("max_error_rate"),
                        recover_within_s=e.get("recover_within_s"),
                        recover_requests=(e.get("recover_within") or {}).get("requests"),
                        recover_plus_s=float((e.get("recover_within") or {}).get("plus_s", 0.0)),
                        bundle_write_fails=e.get("bundle_write_fails"),
                        guard=None if g is None else GuardExpect(
                            kills=bool(g["kills"]), within_s=g.get("within_s"), stacks_of=tuple(g.get("stacks_of", ())),
                            diverging=tuple(g.get("diverging", ())), exit=int(g.get("exit", 3)),
                            says=tuple(g.get("says", ()))),
                        clear_within_s=e.get("clear_within_s"), exit_within_s=e.get("exit_within_s"),
                        ready_within_s=e.get("ready_within_s"), livez=e.get("livez", "any"),
                        readyz=e.get("readyz", "any"),
                        in_flight_cut=bool(e.get("in_flight_cut", False)), log_shows=tuple(e.get("log_shows", ())),
                        fire_by_threshold=dict(e.get("fire_by_threshold", {})),
                        restart_within_s=(e["restart"] or {}).get("within_s") if e.get("restart") else None,
                        no_restart=e.get("restart") is False,
                        probe_preempted=bool(e.get("probe_preempted", False)), side=e.get("side"))
        params = dict(f.get("params", {}))
        try:
            fault.check_params(params)
        except ValueError as exc:
            raise PlanError(f"{where} ({f['kind']}): {exc}") from None
        role = f.get("role", fault.default_role)
        on = f.get("target", "main")
        if on not in names:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): target: unknown target {on!r} "
                            f"(known: {', '.join(names)})")
        why = _side_problem(f, e, guard, {"main": target, **targets}[on])
        if why:
            raise PlanError(f"{where} ({f.get('name', f['kind'])}): {why}")
        steps.append(FaultStep(kind=f["kind"], name=f.get("name", f["kind"]), role=role, rank=f.get("rank", 0),
                               warmup_s=float(f.get("warmup_s", timing["warmup_s"])),
                               hold_s=float(f.get("hold_s", timing["hold_s"])),
                               observe_s=float(f.get("observe_s", timing["observe_s"])),
                               params=params, expect=expect,
                               probe=bool(f.get("probe", recorder.get("probe", False))), on=on,
                               workload=dict(f["workload"]) if "workload" in f else None, guard=guard,
                               proxy=bool(f.get("proxy", False)), at_start=bool(at_start),
                               on_log=at_start.get("on_log") if isinstance(at_start, dict) else None,
                               serve=bool(f.get("serve", False)),
                               workload_first=bool(f.get("workload_first", False)), side=f.get("side"),
                               request_timeout=f.get("request_timeout_s")))
    workload = dict(data.get("workload", {"scenario": "custom", "rate": 2.0, "output_tokens": 64}))
    _check_trace(workload, f"{source}: workload")
    every = {"main": target, **targets}
    for i, step in enumerate(steps):
        if step.workload is not None:
            _check_trace(step.workload, f"{source}: faults/{i} ({step.name}): workload")
        try:
            workload_headers(step.workload if step.workload is not None else workload, every[step.on])
        except ValueError as exc:
            raise PlanError(f"{source}: faults/{i} ({step.name}): workload: {exc}") from None
    return Plan(name=data["name"], description=data.get("description", ""), target=target, workload=workload,
                interval_s=float(recorder.get("interval_s", 0.5)), settings=settings, steps=tuple(steps),
                probe_interval_s=float(recorder.get("probe_interval_s", PROBE_INTERVAL_S)),
                probe_deadline_s=float(recorder.get("probe_deadline_s", PROBE_DEADLINE_S)), targets=targets)


def _at_start_problem(f: dict, guard, expect: dict, target: Target | None) -> str | None:
    """Why a fault cannot run at the start of its target (None: it can)."""
    if target is not None and target.existing:
        return "the drill starts only a server of its own; an existing server is drilled as it runs"
    if f.get("proxy") or guard is not None:
        return (f"{'servewatch proxy' if f.get('proxy') else 'guard'} records a server that is up; a start is "
                f"recorded by watch, attached from the server's first second")
    if f.get("workload") is not None:
        return "no workload runs during a start (the server cannot answer yet); drop the fault's workload"
    if {"recover_within_s", "recover_within", "max_error_rate"} & expect.keys() \
            or "request_timeout_s" in f:
        return "no workload runs during a start, so there is no request to recover or fail; drop " \
               "recover_within_s, recover_within, max_error_rate and request_timeout_s"
    return None


def _side_problem(f: dict, expect: dict, guard, target: Target) -> str | None:
    """Why a fault's `side` does not fit its target (None: it does): a pair's faults each name the side they aim
    at; a single server has no sides."""
    if target.pd is None:
        if "side" in f or "side" in expect:
            return (f"{'side' if 'side' in f else 'expect/side'}: only for a prefill/decode pair's target "
                    f"(target: {{engine: ..., pd: {{...}}}})")
        return None
    if "side" not in f:
        return "side: a fault on a prefill/decode pair names the side it aims at (side: prefill or side: decode)"
    for key, why in (("proxy", "the pair's workload goes through servewatch proxy's pair mode already"),
                     ("at_start", "the pair is started as one, shaken hands before a fault"),
                     ("workload_first", "the pair's workload starts after the recorder")):
        if f.get(key):
            return f"{key}: not on a prefill/decode pair ({why})"
    return None


def _pair(t: dict, where: str) -> PairSpec | None:
    """A target's `pd:` checked against the engines and connectors that run a pair (one line on a bad value)."""
    given = t.get("pd")
    if given is None:
        return None
    from servewatch.lab.pd import CONNECTORS, DEFAULT_LEASE_S
    from servewatch.lab.recipe import VLLM

    engine = t.get("engine")
    vllm = VLLM.engine          # the one engine whose lab runs a pair (servewatch.lab.pd)
    if engine not in (vllm, "sim"):
        raise PlanError(f"{where}: pd: a prefill/decode pair runs on the lab vllm or the simulator (engine: vllm or "
                        f"sim), not {'an existing server' if t.get('url') else engine}")
    if t.get("under_guard") not in (None, False):
        raise PlanError(f"{where}: pd: a pair is started by the drill itself, not under guard")
    if engine == "sim" and "connector" in given:
        raise PlanError(f"{where}: pd/connector: the simulator's pair has no connector to choose")
    if engine == vllm and "kv_wait_timeout_s" in given:
        raise PlanError(f"{where}: pd/kv_wait_timeout_s: only the simulator's decode takes it (vLLM's is its own)")
    connector = given.get("connector", "nixl" if engine == vllm else "sim")
    if engine == vllm and connector not in CONNECTORS:
        raise PlanError(f"{where}: pd/connector: {connector!r} (known: {', '.join(CONNECTORS)})")
    return PairSpec(connector=connector, lease_s=int(given.get("lease_s", DEFAULT_LEASE_S)),
                    kv_wait_timeout_s=given.get("kv_wait_timeout_s"))


def _guard(given) -> tuple[str, ...] | None:
    """A fault's `guard:` (true, or {act_on: [...]}) as the verdicts guard acts on (empty: its default)."""
    if given is None or given is False:
        return None
    return tuple(given.get("act_on", ())) if isinstance(given, dict) else ()


def _target(t: dict, where: str) -> Target:
    if t.get("url") is not None:                # the one URL checker (servewatch.transport.urls)
        from servewatch.transport.urls import BadUrl, check

        try:
            check(t["url"])
        except BadUrl as exc:
            raise PlanError(f"{where}: url: {exc}") from None
    env = tuple(t.get("env", {}).items())
    if env and (t.get("url") is not None or t.get("engine") == "sim"):
        raise PlanError(f"{where}: env: only for a lab engine the drill starts ({' or '.join(RECIPES)}): "
                        + ("an existing server keeps the environment it was started with" if t.get("url") is not None
                           else "the simulator reads none"))
    guarded = t.get("under_guard")
    if guarded not in (None, False) and t.get("engine") not in RECIPES:
        raise PlanError(f"{where}: under_guard: only for a lab engine the drill starts ({' or '.join(RECIPES)})")
    return Target(engine=t.get("engine"), sim_dialect=t.get("sim_dialect", SimConfig.dialect),
                  args=tuple(t.get("args", ())),
                  max_model_len=t.get("max_model_len", 2048), url=t.get("url"), pid=t.get("pid"),
                  consent=bool(t.get("consent", False)), ready_timeout_s=t.get("ready_timeout_s", 240.0), env=env,
                  under_guard=None if guarded in (None, False) else tuple(guarded if isinstance(guarded, list) else ()),
                  pd=_pair(t, where))


def single_fault_plan(kind: str, url: str, pid: int, *, consent: bool, role: str | None, hold_s: float | None,
                      workload: dict | None = None) -> Plan:
    """`--fault KIND --target URL --pid PID`: one fault, no expectation but what the fault itself states."""
    from servewatch.drill.faults import FAULTS

    fault = FAULTS.get(kind)
    if fault is None:
        raise PlanError(f"--fault {kind}: unknown fault kind (known: {', '.join(sorted(FAULTS))})")
    entry: dict = {"kind": kind}
    if role:
        entry["role"] = role
    if hold_s is not None:
        entry["hold_s"] = hold_s
    data = {"name": f"single {kind}", "target": {"url": url, "pid": pid, "consent": consent}, "faults": [entry]}
    if workload:
        data["workload"] = workload
    return plan_from_dict(data, source=f"--fault {kind}")
