"""The verdict registry: every verdict declared once, as a `VerdictSpec`.

The detector list, the names a bundle may store, the schema enums, the output styles (incident or
finding), the runbook sections and the labels an exporter may use all derive from here. A new verdict
is its detector module and one `register(VerdictSpec(...))`.
"""

from __future__ import annotations

from servewatch.detectors import (blindness, capacity, collective, gpu, liveness, no_token, not_serving, outcomes,
                                  pd, progress, ranks, restart, runbooks, startup)
from servewatch.detectors.verdict import (ACTION_CLASSES, DRAIN, FINDING, INCIDENT, INFO, PAGE, RESTART, RunbookBranch,
                                          Verdict, VerdictSpec)

_REGISTRY: dict[str, VerdictSpec] = {}


def register(spec: VerdictSpec) -> VerdictSpec:
    """Add (or replace) a verdict; detection, bundles, verify, reports and output know it from now on."""
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def specs() -> tuple[VerdictSpec, ...]:
    """In declaration order, which is the order verdicts of one detection run are reported in."""
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def spec(name: str) -> VerdictSpec | None:
    return _REGISTRY.get(name)


def runbook_for(name: str) -> RunbookBranch | None:
    found = _REGISTRY.get(name)
    return found.runbook if found else None


def is_incident(name: str) -> bool:
    found = _REGISTRY.get(name)
    return found is not None and found.kind == INCIDENT


# --- the action policy: one declaration (each spec's action, hold_s, probes), read by guard, serve's
# livez/readyz, the rules and the drill ------------------------------------------------------------------

def action_of(name: str) -> str:
    """The action class (ACTION_CLASSES) a verdict of this name is declared with; an unknown name is only to be
    known. A firing may carry its own (gpu_fault: per fault): ask action_for(verdict) about a firing."""
    found = _REGISTRY.get(name)
    return found.action if found is not None else INFO


def action_for(verdict: Verdict) -> str:
    """This firing's action class: its own where its evidence decides it (Verdict.action), else its spec's. The one
    place the watch JSON line, livez/readyz, guard, the alerts and the bundle read a firing's action from."""
    own = verdict.action
    return own if own in ACTION_CLASSES else action_of(verdict.name)


def by_action(*classes: str) -> tuple[str, ...]:
    """The verdicts of these action classes, in declaration order: by_action(RESTART) is what guard acts on
    and what fails livez by default."""
    unknown = set(classes) - set(ACTION_CLASSES)
    if unknown:
        raise ValueError(f"unknown action class(es) {sorted(unknown)}")
    return tuple(name for name, found in _REGISTRY.items() if found.action in classes)


def acts(verdict: Verdict, *classes: str) -> bool:
    """Whether `verdict` is of one of these action classes and carries the evidence its spec waits for."""
    found = _REGISTRY.get(verdict.name)
    return found is not None and action_for(verdict) in classes and found.evidence_holds(verdict)


def evidence_holds(verdict: Verdict) -> bool:
    """Whether `verdict` carries the evidence its spec waits for before anything acts on it."""
    found = _REGISTRY.get(verdict.name)
    return found is not None and found.evidence_holds(verdict)


def may_act_on(name: str, details: dict, instance: str | None = None) -> bool:
    """Whether what holds `instance`'s process tree may act on a firing of `name` with these `details` (instance
    None: a single server, no deployment's instance). A verdict about a deployment names the one instance whose tree may be acted on (its
    `act_on` detail; none: a person decides); an instance's own verdict names that instance (`instance`). So a
    guard or a livez of one side never acts on the other side's fault."""
    found = _REGISTRY.get(name)
    if found is not None and found.pair:
        side = details.get("act_on")
        return side is not None and side == instance
    side = details.get("instance")
    return side is None or side == instance


def policy_lines(names: tuple[str, ...] | None = None) -> list[str]:
    """One line per verdict (all, or `names`): its action class and the evidence it waits for — what guard
    prints at its start and the README's tables say."""
    out = []
    for name in names if names is not None else tuple(_REGISTRY):
        found = _REGISTRY.get(name)
        if found is None:
            continue
        evidence = found.evidence_words()
        if found.action_by:        # the class is each firing's own: the words say how it is chosen
            out.append(f"{name} ({evidence})")
            continue
        out.append(f"{name} ({found.action}{': ' + evidence if evidence else ''})")
    return out


for _spec in (
    VerdictSpec("alive_health_ok_no_progress", progress.detect, INCIDENT, "page",
                "health is green but no token has moved", runbooks.STALL,
                ("metrics", "health", "process"), labels=("engine",), action=RESTART),
    VerdictSpec("engine_dead", liveness.detect_engine_dead, INCIDENT, "page",
                "the engine died behind a live API process", runbooks.ENGINE_DEAD,
                ("health", "process", "log"), action=RESTART),
    VerdictSpec("process_exit", liveness.detect_process_exit, INCIDENT, "page",
                "the server process exited", runbooks.PROCESS_EXIT, ("process", "health", "log"), action=PAGE),
    VerdictSpec("health_loss", liveness.detect_health_loss, INCIDENT, "page",
                "/health stopped answering 2xx", runbooks.HEALTH_LOSS, ("health",), action=PAGE),
    VerdictSpec("not_serving", not_serving.detect, INCIDENT, "page",
                "health is green but a one-token probe gets no token", runbooks.NOT_SERVING,
                ("probe", "health", "metrics"), action=RESTART, probes=2,
                yields_to=("rank_stalled",)),       # the same missed probe, with the stalled rank named
    VerdictSpec("rank_stalled", ranks.detect, INCIDENT, "page",
                "one engine process is stalled (stopped, or starved while the engine reads idle) and a probe gets no token",
                runbooks.RANK_STALLED, ("process", "probe", "metrics", "health"), action=RESTART, probes=1),
    # Restart once the same rank has stayed behind at the same collective for 30 s of observations (a RAS count
    # one behind that moves on is a race, not a hang).
    VerdictSpec("collective_hang", collective.detect, INCIDENT, "page",
                "ranks wait in a collective another rank has not entered (or the ranks issued different collectives)",
                collective.RUNBOOK, ("log", "process"), labels=("cause",), action=RESTART, hold_s=30.0),
    VerdictSpec("overload", capacity.detect_overload, INCIDENT, "ticket",
                "requests wait for a sustained period", runbooks.OVERLOAD, ("metrics", "log"),
                labels=("engine", "cause"), action=PAGE,
                yields_to=("gpu_throttled",)),      # a slower GPU, not more demand than capacity
    VerdictSpec("kv_pressure", capacity.detect_kv_pressure, INCIDENT, "ticket",
                "the KV cache is near full", runbooks.KV_PRESSURE, ("metrics",), labels=("engine", "rule"), action=PAGE),
    VerdictSpec("preemption", capacity.detect_preemption, INCIDENT, "ticket",
                "the engine preempted running requests", runbooks.PREEMPTION, ("metrics", "log"),
                labels=("engine",), action=PAGE),
    VerdictSpec("histogram_blind", blindness.detect, FINDING, "info",
                "a latency histogram's first bucket swallows the observations", runbooks.HISTOGRAM_BLIND,
                ("metrics",), labels=("engine", "histogram"), action=INFO),
    VerdictSpec("target_restarted", restart.detect, INCIDENT, "ticket",
                "the target restarted", runbooks.TARGET_RESTARTED, ("process", "metrics"), labels=("by",), action=INFO),
    VerdictSpec("server_errors", outcomes.detect_server_errors, INCIDENT, "page",
                "requests fail with server errors (5xx)", runbooks.SERVER_ERRORS, ("metrics",), action=PAGE),
    VerdictSpec("client_errors", outcomes.detect_client_errors, FINDING, "ticket",
                "clients send requests the server refuses (4xx)", runbooks.CLIENT_ERRORS, ("metrics",),
                labels=("cause",), action=PAGE),
    VerdictSpec("requests_aborted", outcomes.detect_requests_aborted, INCIDENT, "ticket",
                "clients abort their requests before the answer is complete", runbooks.REQUESTS_ABORTED,
                ("metrics",), action=PAGE),
    VerdictSpec("startup_stalled", startup.detect_startup_stalled, INCIDENT, "page",
                "the start stopped at a stage", runbooks.STARTUP_STALLED, ("log", "process", "health"),
                labels=("stage",), action=PAGE),
    VerdictSpec("crash_loop", restart.detect_crash_loop, INCIDENT, "page",
                "the target dies or restarts again and again", runbooks.CRASH_LOOP, ("process", "metrics", "log"),
                labels=("by",), action=PAGE),
    VerdictSpec("requests_no_token", no_token.detect, INCIDENT, "page",
                "requests in flight get no token from the engine", runbooks.REQUESTS_NO_TOKEN,
                ("requests", "health", "metrics"), action=PAGE),
    VerdictSpec("gpu_fault", gpu.detect_gpu_fault, INCIDENT, "page",
                "a GPU the engine holds reported a fault (an Xid, uncorrectable ECC, a row-remap failure, off the bus)",
                runbooks.GPU_FAULT, ("gpu", "process"), labels=("gpu_uuid", "xid", "action"), action=DRAIN,
                action_by="per fault: drain for a GPU reset or reboot, restart when a process restart helps, "
                          "else page", actions=(DRAIN, RESTART, PAGE)),
    VerdictSpec("gpu_throttled", gpu.detect_gpu_throttled, INCIDENT, "ticket",
                "the token rate fell while the GPU's clocks are held by a thermal, power-brake or HW-slowdown reason",
                runbooks.GPU_THROTTLED, ("gpu", "metrics", "process"), labels=("cause",), action=PAGE),
    # A deployment's verdicts (prefill and decode instances judged together, issue 52).
    VerdictSpec("kv_transfer_stall", pd.detect_kv_transfer_stall, INCIDENT, "page",
                "decode requests wait for KV from a prefill and no transferred token arrives",
                runbooks.KV_TRANSFER_STALL, ("metrics", "health", "process"),
                action=RESTART, action_by="restart the prefill when it is dead, stopped or not answering (decode "
                "never), else page", actions=(RESTART, PAGE), pair=True),
    VerdictSpec("kv_expired", pd.detect_kv_expired, INCIDENT, "page",
                "a prefill released KV blocks before decode read them: answers may be wrong", runbooks.KV_EXPIRED,
                ("metrics",), action=PAGE, pair=True),
    VerdictSpec("pd_bypass", pd.detect_pd_bypass, INCIDENT, "ticket",
                "decode computes every prompt itself while the prefill is idle: the router went decode-only",
                runbooks.PD_BYPASS, ("metrics",), action=PAGE, pair=True),
    VerdictSpec("kv_transfer_failures", pd.detect_kv_transfer_failures, INCIDENT, "page",
                "KV transfers between prefill and decode fail at a rate", runbooks.KV_TRANSFER_FAILURES,
                ("metrics",), action=PAGE, pair=True),
):
    register(_spec)
