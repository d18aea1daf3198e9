"""The verdict registry: every verdict declared once, as a `VerdictSpec`, in its own module.

A verdict module holds everything of its verdicts: their `SPECS` (each `VerdictSpec` names its detect function and
runbook branch, both in the module), their `SETTINGS` classes (composed into DetectorConfig by detectors/config.py)
and the detect functions. VERDICT_MODULES below is the one list of them: the detector list, the names a bundle may
store, the schema enums, the output styles (incident or finding), the runbook sections, the rules and alert names,
guard's --act-on choices, livez/readyz and the labels an exporter may use all derive from here. A new verdict is its
module and one line in VERDICT_MODULES.
"""

from __future__ import annotations

from types import ModuleType

from servewatch.detectors import (blindness, capacity, collective, crash_loop, gpu, liveness, no_token, not_serving,
                                  outcomes, pd, progress, ranks, restart, startup)
from servewatch.detectors.verdict import ACTION_CLASSES, INCIDENT, INFO, RunbookBranch, Settings, Verdict, VerdictSpec

# In the order verdicts of one detection run are reported in (each module's SPECS in its own order).
VERDICT_MODULES: tuple[ModuleType, ...] = (
    progress,       # alive_health_ok_no_progress
    liveness,       # engine_dead, process_exit, health_loss
    not_serving,
    ranks,          # rank_stalled
    collective,     # collective_hang
    capacity,       # overload, kv_pressure, preemption
    blindness,      # histogram_blind
    restart,        # target_restarted
    outcomes,       # server_errors, client_errors, requests_aborted
    startup,        # startup_stalled
    crash_loop,
    no_token,       # requests_no_token
    gpu,            # gpu_fault, gpu_throttled
    pd,             # a deployment's: kv_transfer_stall, kv_expired, pd_bypass, kv_transfer_failures
)

# The verdicts the packages above treat by what they mean, each named once here (tests/test_structure.py checks that
# each is registered and that no name is written in actions/ or derive/rules.py): the engine dead behind a live API
# process (guard gives the server --exit-grace to exit by itself first), the server process gone (guard's life ends
# there, nothing is left to kill), a GPU's hardware fault (its alerts go by GPU), a crash loop across guard's
# restarts, and the stall, whose alert keeps its short name (ALERT_NAMES; every other alert is "Servewatch" and the
# verdict's name in words).
ENGINE_DEAD, PROCESS_EXIT, GPU_FAULT, CRASH_LOOP, STALL = (
    "engine_dead", "process_exit", "gpu_fault", "crash_loop", "alive_health_ok_no_progress")
ALERT_NAMES = {STALL: "ServewatchStall"}

_REGISTRY: dict[str, VerdictSpec] = {}


def register(spec: VerdictSpec) -> VerdictSpec:
    """Add (or replace) a verdict; detection, bundles, verify, reports and output know it from now on."""
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def register_module(module: ModuleType) -> tuple[VerdictSpec, ...]:
    """Register a verdict module's SPECS (its SETTINGS are DetectorConfig's fields when the module is in
    VERDICT_MODULES; one registered later reads its defaults through Settings.of)."""
    found = tuple(module.SPECS)
    for each in found:
        if not isinstance(each, VerdictSpec):
            raise TypeError(f"{module.__name__}.SPECS holds {each!r}, not a VerdictSpec")
        register(each)
    return found


def unregister_module(module: ModuleType) -> None:
    for each in module.SPECS:
        unregister(each.name)


def settings_classes() -> tuple[type[Settings], ...]:
    """Every verdict module's settings classes, in VERDICT_MODULES' order: what DetectorConfig is composed of."""
    return tuple(cls for module in VERDICT_MODULES for cls in module.SETTINGS)


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


for _module in VERDICT_MODULES:
    register_module(_module)
