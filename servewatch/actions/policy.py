"""What `servewatch guard` does about a verdict, and the exit status it ends with: pure decisions,
no I/O (the command carries them out).

Exit status, so that an orchestrator's restart policy sees the truth:
  the server's own code   it exited by itself (128 + N when signal N ended it); 0 only when that is true
  3  EXIT_KILLED           guard killed the tree after a verdict (a stall, a dead engine)
  4  EXIT_MASKED_FAILURE   the server exited 0 although its engine had died (vLLM #48966): a failure
  5  EXIT_DRAIN_TIMEOUT    asked to stop (SIGTERM), the server was still up after the drain timeout
  6  EXIT_HARDWARE         guard killed the tree after a hardware fault (gpu_fault, the drain class): a restart
                           policy must not start the server on that GPU again (systemd: RestartPreventExitStatus=6)
  1  EXIT_GONE_UNKNOWN     an attached server (not our child) exited; its status could not be read
  0                        an attached server is still running when guard stops (SIGTERM, --duration)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servewatch.detectors import registry
from servewatch.detectors.verdict import DRAIN, RESTART

EXIT_GONE_UNKNOWN = 1
EXIT_KILLED = 3
EXIT_MASKED_FAILURE = 4
EXIT_DRAIN_TIMEOUT = 5
EXIT_HARDWARE = 6


def default_act_on() -> tuple[str, ...]:
    """What guard acts on when not told: the verdicts of the `restart` and `drain` action classes (the registry's
    one declaration), each once its evidence holds; after a drain-class verdict guard exits EXIT_HARDWARE."""
    return registry.by_action(RESTART, DRAIN)


@dataclass(frozen=True, slots=True)
class GuardConfig:
    act_on: tuple[str, ...] = field(default_factory=default_act_on)
    # engine_dead: the time a server gets to exit by itself (a real vLLM's API server does, 1–5 s after
    # its engine died) before guard kills it; a stalled server never will, so a stall is acted on at once.
    exit_grace_s: float = 10.0
    drain_timeout_s: float = 30.0
    stacks: bool = True
    dry_run: bool = False
    # The deployment instance whose process tree this guard holds (a prefill or a decode server of a pair), by the
    # name its verdicts give it; None: a single server. Guard acts only on verdicts about its own side
    # (registry.may_act_on): a verdict about the pair names the one instance whose tree may be acted on.
    instance: str | None = None


@dataclass(frozen=True, slots=True)
class Action:
    verdict: str
    wait_for_exit_s: float      # let the server exit by itself first
    stacks: bool                # py-spy dump of the tree before the kill
    kill: bool                  # False in a dry run: say what would be done
    hardware: str | None = None  # a drain-class verdict: the one line guard ends with ("hardware: GPU ...")


def action_for(verdict: str, config: GuardConfig, details: dict | None = None,
               action: str | None = None) -> Action | None:
    """What guard does about a verdict of --act-on; `action`: this firing's own class (registry.action_for), which
    decides over its spec's: a firing whose own class is neither restart nor drain (gpu_fault for a fault a person
    decides) is reported, not acted on; a drain ends with the hardware line (EXIT_HARDWARE)."""
    if verdict not in config.act_on:
        return None
    if not registry.may_act_on(verdict, details or {}, config.instance):
        return None         # the other side's fault, or a verdict about the pair that names no side to act on
    cls = action or registry.action_of(verdict)
    if cls != registry.action_of(verdict) and cls not in (RESTART, DRAIN):
        return None
    wait = config.exit_grace_s if verdict == registry.ENGINE_DEAD else 0.0
    hardware = hardware_line(details or {}) if cls == DRAIN else None
    return Action(verdict, wait, config.stacks and not config.dry_run, not config.dry_run, hardware)


FAULT_WORDS = {"lost": "lost (fallen off the bus)", "remap_failure": "row remapping failed",
               "ecc_uncorrectable": "uncorrectable ECC errors",
               "recovery_action": "NVML's recovery action asks for a reset or a reboot"}


def hardware_line(details: dict) -> str:
    """"hardware: GPU 1 (GPU-..., bus 00000000:2A:00.0) Xid 79 (GPU has fallen off the bus), do not restart on
    this GPU", from a gpu_fault's details."""
    index = details.get("gpu_index")
    gpu = f"GPU {index}" if index is not None else "a GPU"
    ids = [str(x) for x in (details.get("gpu_uuid"), f"bus {details['gpu_bus_id']}" if details.get("gpu_bus_id")
                            else None) if x]
    if ids:
        gpu += f" ({', '.join(ids)})"
    from servewatch.detectors.xid import lookup

    xid = details.get("xid")
    fault = (f"Xid {xid} ({lookup(xid).meaning})" if isinstance(xid, int)
             else FAULT_WORDS.get(str(details.get("fault")), "hardware fault"))
    return f"hardware: {gpu} {fault}, do not restart on this GPU"


@dataclass(frozen=True, slots=True)
class Outcome:
    server_exit: int | None = None    # Popen.returncode style: >= 0 exit code, < 0 minus the signal
    server_gone: bool = False         # the root process is gone (its status may be unknown)
    engine_died: bool = False         # an engine_dead verdict, or process_exit after an engine death
    killed_for: str | None = None     # the verdict guard killed the tree for
    hardware: str | None = None       # ... when it was a hardware fault: the line guard ends with
    drain: str | None = None          # None, "drained", "forced" (a second SIGTERM ended it) or "timeout"


def exit_status(outcome: Outcome) -> tuple[int, str]:
    """(guard's exit status, the one line that says why)."""
    if outcome.killed_for is not None and outcome.hardware is not None:
        return EXIT_HARDWARE, outcome.hardware
    if outcome.killed_for is not None:
        return EXIT_KILLED, f"killed the server after {outcome.killed_for}"
    if outcome.drain == "timeout":
        return EXIT_DRAIN_TIMEOUT, "the server did not stop within the drain timeout; killed"
    code = outcome.server_exit
    if code is None:
        if outcome.server_gone:
            return EXIT_GONE_UNKNOWN, "the server exited; its exit status is unknown (not guard's child)"
        return 0, "stopped watching; the server is still running"
    drained = " after the drain" if outcome.drain == "drained" else \
        " after a second SIGTERM" if outcome.drain == "forced" else ""
    if code < 0:
        return 128 - code, f"the server was ended by signal {-code}{drained}"
    if code == 0 and outcome.engine_died and outcome.drain is None:
        return EXIT_MASKED_FAILURE, ("the server exited 0 although its engine had died (vLLM #48966); "
                                     "reported as a failure")
    return code, f"the server exited {code}{drained}"
