"""rank_stalled: one engine rank stopped, in uninterruptible sleep or not scheduled, while the last published
stats read idle, and a one-token probe asked since then got nothing.

On a real vLLM with --tensor-parallel-size 2, `VLLM::Worker_TP1` SIGSTOPped under load left the gauges at
0 running and 0 waiting (the step in flight blocked before its stats were published), every counter still and
/health 200, while every stream hung: to anything that reads /metrics, an idle server. What is still visible is
the process view — one rank in state T while its sibling keeps spinning — and the answer to a request. The
probe source asks at once when the process view looks like this (`suspects`), instead of waiting for its
interval; this verdict fires when that probe gets no token.

With work admitted and frozen, the stall verdict (alive_health_ok_no_progress) speaks, naming the rank too.
With work admitted and the counters still moving, a stopped process is this verdict's: on a real SGLang
0.5.23 whose detokenizer was stopped under load, the scheduler kept stepping, /health answered 200, and no
client got a token.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.evidence.engine_signs import engine_death_evidence
from servewatch.detectors.evidence.gpus import rank_gpu_evidence
from servewatch.detectors.probes import asked_at, trailing_failures
from servewatch.detectors.rank_words import dp_rank_of
from servewatch.detectors.series import once_per_window, progress_totals
from servewatch.detectors.verdict import (INCIDENT, RESTART, Evidence, RunbookBranch, Settings, Thresholds, Verdict,
                                          VerdictSpec)
from servewatch.timeline.ranks import Aim, Rank, dp_aim, engine_ranks, rank_view, rank_words, siblings
from servewatch.timeline.samples import DEADLINE, STOPPED, MetricsSample, ProcessSample
from servewatch.timeline.window import Window


@dataclass(frozen=True, slots=True)
class RankSettings(Settings):
    """rank_stalled's thresholds."""

    # rank_stalled: an engine rank stopped (T), or in uninterruptible sleep (D) or under rank_idle_cpu_percent
    # for rank_quiet_s while a sibling rank used at least stall_busy_cpu_percent; a probe asked no earlier than
    # rank_probe_slack_s before that began got no token; the engine's gauges read idle. A real vLLM TP=2 CPU
    # worker spins at ~50 % idle; a SIGSTOPped one reads 0 %.
    rank_quiet_s: float = 2.0
    rank_idle_cpu_percent: float = 5.0
    rank_probe_slack_s: float = 1.0


NAME = "rank_stalled"
DISK = ("disk-sleep",)
# Kinds whose stop stops the serving (a coordinator or detokenizer stopped stalls the streams too).
_KINDS = ("engine_core", "worker", "scheduler", "detokenizer", "coordinator", "dp_controller")


_HOW_TOKENS = {"stopped": "stopped", "in uninterruptible sleep": "disk_sleep", "not scheduled": "not_scheduled"}


@dataclass(frozen=True, slots=True)
class Suspect:
    rank: Rank
    how: str                   # "stopped", "in uninterruptible sleep", "not scheduled"
    onset: float               # the first process sample of the current run showing it
    t: float                   # the newest process sample
    ranks: tuple[Rank, ...]    # the whole rank view of the newest sample
    busy_siblings: tuple[tuple[Rank, float], ...]   # siblings and their mean CPU % over the run


def _samples(window: Window) -> list[ProcessSample]:
    """The newest run of readable samples of the live target with one identity."""
    out: list[ProcessSample] = []
    for sample in reversed(window.process):
        if sample.error is not None:
            continue
        if not sample.alive or (out and (sample.root_pid, sample.root_create_time)
                                != (out[0].root_pid, out[0].root_create_time)):
            break
        out.append(sample)
    out.reverse()
    return out


def _member_run(samples: list[ProcessSample], pid: int, create_time: float, predicate) -> list:
    """The trailing run of (sample, member) in which that process satisfies predicate."""
    run = []
    for sample in reversed(samples):
        member = next((m for m in sample.members if m.pid == pid and m.create_time == create_time), None)
        if member is None or not predicate(member):
            break
        run.append((sample, member))
    run.reverse()
    return run


def _mean_cpu(samples: list[ProcessSample], pid: int, since: float) -> float | None:
    values = [m.cpu_percent for s in samples if s.t >= since for m in s.members
              if m.pid == pid and m.cpu_percent is not None]
    return sum(values) / len(values) if values else None


@once_per_window
def suspects(window: Window, config: Thresholds) -> tuple[Suspect, ...]:
    """`_suspects`, computed once per window (undecorated there: mutmut mutates no decorated function)."""
    return _suspects(window, config)


def _suspects(window: Window, config: Thresholds) -> tuple[Suspect, ...]:
    """Engine ranks that look stalled in the newest process sample: stopped (any time), in uninterruptible
    sleep or under rank_idle_cpu_percent for rank_quiet_s while a sibling of theirs of the same data-parallel
    rank used at least stall_busy_cpu_percent on average over that time (the CPU backend's idle workers spin:
    idle tensor-parallel siblings are alike, a stalled one is not; data-parallel engines are balanced by load,
    so one idling beside a busy one is no sign)."""
    samples = _samples(window)
    if not samples:
        return ()
    newest = samples[-1]
    ranks = rank_view(newest)
    found = []
    for rank in ranks:
        if rank.kind not in _KINDS:
            continue
        m = rank.member
        run = _member_run(samples, m.pid, m.create_time, lambda x: x.status in STOPPED)
        how = "stopped"
        if not run:
            run = _member_run(samples, m.pid, m.create_time, lambda x: x.status in DISK)
            how = "in uninterruptible sleep"
        if not run:
            run = _member_run(samples, m.pid, m.create_time,
                              lambda x: x.cpu_percent is not None and x.cpu_percent < config.rank_idle_cpu_percent)
            how = "not scheduled"
        if not run:
            continue
        onset = run[0][0].t
        busy = []
        for sibling in siblings(rank, ranks):
            # data-parallel engines are balanced by load: one may idle while another computes
            if sibling.member.status in STOPPED or sibling.axis("DP") != rank.axis("DP"):
                continue
            cpu = _mean_cpu(samples, sibling.pid, onset)
            if cpu is not None and cpu >= config.stall_busy_cpu_percent:
                busy.append((sibling, cpu))
        if how != "stopped":
            # asleep or starved is only strange beside a spinning sibling, and only once it has lasted
            if not busy or newest.t - onset < config.rank_quiet_s or len(run) < 2:
                continue
        found.append(Suspect(rank, how, onset, newest.t, ranks, tuple(busy)))
    return tuple(found)


SUSPICION_READS = "process"      # suspicion finds nothing in a window without a process sample (`_samples`)


def suspicion(window: Window, config: Thresholds) -> tuple[float, Aim | None] | None:
    """When the newest suspicion began (the probe source asks at once after it), and how to aim the probe at
    that rank's data-parallel engine (None where it needs no aim or none is known); None without one."""
    found = suspects(window, config)
    if not found:
        return None
    newest = max(found, key=lambda s: s.onset)
    return newest.onset, dp_aim(newest.rank)


def _rank_engines(sample: MetricsSample, rank: Rank) -> list:
    """The engines of a scrape that a rank serves: its DP rank's where the engines are data-parallel ranks."""
    dp = rank.axis("DP")
    return [e for e in sample.engines if dp is None or dp_rank_of(e.labels) in (None, str(dp))]


def _moved_lately(window: Window, rank: Rank, config: Thresholds) -> bool:
    """Whether the progress counters of the rank's engine(s) moved over the last stall_floor_s of good scrapes."""
    good = window.good_metrics()
    if len(good) < 2:
        return False
    recent = [m for m in good if m.t >= good[-1].t - config.stall_floor_s]
    if len(recent) < 2:
        recent = good[-2:]
    return progress_totals(_rank_engines(recent[0], rank)) != progress_totals(_rank_engines(recent[-1], rank))


def _gauges(window: Window, rank: Rank):
    """(sample, running, waiting) of the newest good scrape over the rank's engine (its DP rank's, where the
    engines are data-parallel ranks), or None without one."""
    good = window.good_metrics()
    if not good:
        return None
    sample = good[-1]
    engines = _rank_engines(sample, rank)
    running = sum(e.running or 0 for e in engines)
    waiting = sum(e.waiting or 0 for e in engines)
    return sample, running, waiting


def detect(window: Window, config: Thresholds) -> list[Verdict]:
    if not any(p.failed for p in window.probe):
        return []
    if engine_death_evidence(window, config)[0] is not None:
        return []   # a dead rank is engine_dead's verdict
    for suspect in suspects(window, config):
        probe = _newest_probe_of(window, suspect.rank)
        verdict = _verdict(window, suspect, probe, config) if probe is not None and probe.failed else None
        if verdict is not None:
            return [verdict]
    return []


def _probes_of(window: Window, rank: Rank) -> tuple:
    """The probes that asked the rank's engine: on a data-parallel server whose probes are aimed, those aimed at
    its DP rank (engine 0 answering says nothing of engine 1); else all of them."""
    dp = rank.axis("DP")
    if dp is not None and any(p.engine is not None for p in window.probe):
        return tuple(p for p in window.probe if p.engine == str(dp))
    return window.probe


def _newest_probe_of(window: Window, rank: Rank):
    """The newest probe that asked the rank's engine (`_probes_of`)."""
    probes = _probes_of(window, rank)
    return probes[-1] if probes else None


def _failed_since(window: Window, rank: Rank, since: float) -> int:
    """How many probes of the rank's engine in a row, the newest last, got no token, asked after `since`."""
    return len(trailing_failures(_probes_of(window, rank), after=since))


def _verdict(window: Window, suspect: Suspect, probe, config: Thresholds) -> Verdict | None:
    asked = asked_at(probe)
    if asked < suspect.onset - config.rank_probe_slack_s:
        return None     # asked before the rank looked stalled: it says nothing about it
    gauges = _gauges(window, suspect.rank)
    # Only a stopped process outweighs moving counters: asleep or starved beside them, a probe that got
    # nothing may just have queued behind the work.
    moving = suspect.how == "stopped" and _moved_lately(window, suspect.rank, config)
    if gauges is not None and (gauges[1] > 0 or gauges[2] > 0) and not moving:
        return None     # admitted work that does not move: the stall verdict's, which names the rank too
    rank, ranks = suspect.rank, suspect.ranks
    lasted = suspect.t - suspect.onset
    why = f"{rank_words(rank, ranks)} {suspect.how} {lasted:.1f} s"
    for sibling, cpu in suspect.busy_siblings:
        name = " ".join(f"{a} rank {n}" for a, n in sibling.own_axes) or sibling.title
        why += f"; {name} busy {cpu:.0f} %"
    if gauges is not None:
        why += f"; engine reports {gauges[1]:g} running, {gauges[2]:g} waiting"
        if moving:
            # On a real SGLang 0.5.23 with its detokenizer stopped under load, the scheduler went on stepping
            # (its counters moved, /health 200) while no client got a token: neither the stall verdict
            # (counters still) nor anything else reading /metrics could tell.
            why += (f" and its counters moved in the last {config.stall_floor_s:g} s: the engine works, "
                    f"yet its answers reach no client")
    else:
        why += "; no engine gauges read"
    what = (f"got nothing in {probe.deadline_s:g} s" if probe.outcome == DEADLINE
            else f"failed ({probe.error or probe.status})")
    why += f"; a 1-token probe {what}"
    health = window.health[-1] if window.health else None
    if health is not None:
        why += f"; /health {health.status if health.status is not None else health.error or 'no answer'}"

    gpu_clause, gpu_token = rank_gpu_evidence(window, window.process[-1] if window.process else None)
    why += gpu_clause
    evidence = [Evidence("process", suspect.onset, f"members[{rank.pid}].status", rank.member.status),
                Evidence("process", suspect.t, f"members[{rank.pid}].status", rank.member.status),
                Evidence("probe", probe.t, "outcome", probe.outcome)]
    evidence += [Evidence("process", suspect.t, f"members[{s.pid}].cpu_percent", s.member.cpu_percent)
                 for s, _ in suspect.busy_siblings]
    if gauges is not None:
        evidence += [Evidence("metrics", gauges[0].t, "running", gauges[1]),
                     Evidence("metrics", gauges[0].t, "waiting", gauges[2])]
    if health is not None:
        evidence.append(Evidence("health", health.t, "status" if health.status is not None else "error",
                                 health.status if health.status is not None else health.error))
    details = {"pid": rank.pid, "title": rank.title, "kind": rank.kind, "how": _HOW_TOKENS[suspect.how],
               "rank": ",".join(f"{a}{n}" for a, n in rank.axes) or "none", "lasted_s": lasted,
               "probe_deadline_s": probe.deadline_s,
               "failed_probes": _failed_since(window, rank, suspect.onset - config.rank_probe_slack_s)}
    if gpu_token is not None:
        details["gpus"] = gpu_token
    t = max(probe.t, suspect.t, health.t if health is not None else probe.t)
    return Verdict(NAME, t, suspect.onset, why, tuple(evidence), details)


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

RANK_STALLED = RunbookBranch(
    meaning="One process of a multi-process engine (a tensor-, pipeline- or data-parallel rank, or the engine "
            "core) is stopped, stuck in uninterruptible sleep or not scheduled while its sibling ranks keep "
            "spinning, the engine's last published stats read idle (0 running, 0 waiting), and a one-token probe "
            "got no token. The step in flight blocked before its stats were published, so every counter and "
            "gauge reads like an idle server while every request routed there hangs.",
    check_next=(
        "The named rank's state in the bundle: T (stopped: a SIGSTOP, a debugger, a job-control stop), D (a "
        "driver, NFS or device wait) or R/S at ~0% CPU (starved, or blocked outside the collective its siblings "
        "spin in).",
        "Take stacks of every rank before touching them (e.g. `py-spy dump --pid PID` for each): the rank whose "
        "innermost frames differ from its siblings' is the fault domain.",
        "The host: `dmesg` for device, driver or OOM messages about that pid; on GPUs, NVML's view of the "
        "rank's device (utilisation pinned or at 0).",
        "Send one request yourself with a timeout (`curl -m 20 URL/v1/completions` with max_tokens 1): no "
        "answer confirms the probe.",
    ),
    expected_range="The ranks of one engine move together: idle they all sleep or all spin (a real vLLM TP=2 "
                   "CPU worker spins at ~50 %), busy they all compute; and an idle server answers a one-token "
                   "completion in well under a second.",
    safe_action="Keep this bundle and the stacks, then stop routing new traffic to this replica (drain it at the "
                "router / load balancer). A stopped rank continued with SIGCONT resumes the hung requests; "
                "draining is reversible and keeps the evidence alive.",
    rollback="Return the replica to routing once probes are served again and every rank's state is back to its "
             "siblings' for several intervals in a row.",
    restart_destroys="The requests waiting on the hung engine, the KV and prefix cache contents of every rank, "
                     "and the frozen process state of the named rank that shows where it hung: take the stacks "
                     "before any restart.",
)

SETTINGS = (RankSettings,)
SPECS = (
    VerdictSpec("rank_stalled", detect, INCIDENT, "page",
                "one engine process is stalled (stopped, or starved while the engine reads idle) and a probe gets no token",
                RANK_STALLED, ("process", "probe", "metrics", "health"), action=RESTART, probes=1),
)
