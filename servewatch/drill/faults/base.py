"""What every fault has: its kind, what it touches, and inject/revert against a step's context."""

from __future__ import annotations

FAULTS: dict[str, type["Fault"]] = {}


def register(cls: type["Fault"]) -> type["Fault"]:
    assert cls.kind not in FAULTS, f"fault {cls.kind} registered twice"
    FAULTS[cls.kind] = cls
    return cls


class Fault:
    kind = ""
    summary = ""                    # one readable line for --dry-run and the report
    default_role: str | None = None # the process it signals (None: it signals no process)
    workload = True                 # the plan's workload runs through the step
    takes_server_down = False       # the server is gone after it: a target the drill owns is started again
    via_proxy = False               # the workload goes through the drill's TCP proxy
    full_bundle_dir = False         # the recorder writes bundles into a full filesystem
    params_known: dict[str, type | tuple[type, ...]] = {}
    # What the fault's truth demands, as an action class (detectors.verdict.ACTION_CLASSES) or "none": a stall or
    # a dead engine that does not end by itself is helped only by a restart; a busy server by nothing automatic.
    demands = "none"

    @classmethod
    def demands_of(cls, step) -> str:
        """What this fault demands in `step` (a fault during a start is the stalled start's: a person's)."""
        return "page" if step.at_start and cls.demands == "restart" else cls.demands

    def __init__(self, step):
        self.step = step
        self.params = step.params
        self.facts: dict = {}       # what the fault itself observed (no text, no ids): into the report

    @classmethod
    def check_params(cls, params: dict) -> None:
        for key, value in params.items():
            kind = cls.params_known.get(key)
            if kind is None:
                known = ", ".join(sorted(cls.params_known)) or "none"
                raise ValueError(f"unknown parameter {key!r} (known: {known})")
            if kind is bool:
                if not isinstance(value, bool):
                    raise ValueError(f"parameter {key!r} must be true or false")
            elif not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"parameter {key!r} must be a number" if kind in ((int, float), float, int)
                                 else f"parameter {key!r} has the wrong type")

    def param(self, key: str, default):
        return self.params.get(key, default)

    def touches(self) -> str:
        """For --dry-run: what the fault acts on, besides the processes it signals."""
        return ""

    def recorder_env(self, ctx, directory) -> dict[str, str]:
        """Variables the step's recorder (watch, serve, guard or proxy) starts with, from files under `directory`
        (none: its own environment)."""
        return {}

    def inject(self, ctx) -> None:
        raise NotImplementedError

    def revert(self, ctx) -> None:
        """Undo the fault at the end of its hold (nothing for one-shot faults)."""


class SignalFault(Fault):
    """One signal, once, to one process of the server (by role and rank); the server goes with it."""
    signum = 0
    takes_server_down = True

    def inject(self, ctx) -> None:
        ctx.signal(self.step.role, self.step.rank, self.signum)
