"""The verdicts of a deployment: prefill and decode instances joined by a KV connector, judged together.

Each instance is recorded as a target of its own (`Window.instances`, each with the role the deployment gives
it); these detectors read the instances' connector series side by side (`EngineState.kv_transfer`, summed over
an instance's engines) and say which side is at fault:

- kv_transfer_stall: decode requests wait for KV while no transferred token arrives; the prefill named, and
  whether it lives. A dead, stopped or silent prefill is the side to restart (the `act_on` detail); decode never.
- kv_expired: a prefill released blocks before decode read them: decode's answers to them may be wrong.
- pd_bypass: decode computes every prompt itself while no prefill computes one: the router went decode-only.
- kv_transfer_failures: failed transfers, notifications or bootstraps at a rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from servewatch.detectors.evidence.engine_signs import answer_problem, health_evidence
from servewatch.detectors.verdict import (INCIDENT, PAGE, RESTART, Evidence, RunbookBranch, Settings, Thresholds,
                                          Verdict, VerdictSpec)
from servewatch.timeline.samples import STOPPED
from servewatch.timeline.window import InstanceWindow, Window


@dataclass(frozen=True, slots=True)
class DeploymentSettings(Settings):
    """the deployment verdicts' thresholds: kv_transfer_stall, kv_expired, pd_bypass, kv_transfer_failures."""

    # A deployment (prefill and decode instances watched as one; issue 52).
    # kv_transfer_stall: decode has requests waiting for KV from a prefill for at least kv_stall_s while no
    # transferred prompt token (nor a finished transfer) arrives at decode. A healthy NIXL transfer over TCP took
    # 17-20 s to move 192 KiB on the loaded 2-core lab machine (nothing arrives until it ends); vLLM 0.32's decode
    # held a request ~50 s after its prefill died before failing it (NIXL_ERR_REMOTE_DISCONNECT, HTTP 500); SGLang
    # waits 300 s (SGLANG_DISAGGREGATION_WAITING_TIMEOUT). 30 s: half again the slowest healthy transfer seen,
    # and named 20 s before vLLM fails the request.
    kv_stall_s: float = 30.0
    # kv_expired, pd_bypass and kv_transfer_failures read the counters' increase over the last pd_window_s.
    pd_window_s: float = 60.0
    # kv_expired: the prefill's lease on the blocks it keeps for decode, said with the verdict (vLLM's
    # kv_lease_duration, default 30 s: the engine does not export it; set yours).
    kv_lease_s: float = 30.0
    # pd_bypass: decode computed at least pd_bypass_min_tokens prompt tokens itself over pd_window_s, none came by
    # transfer, and no prefill computed as many. The active probe's few-token prompt, at most one per 10 s by
    # default (about 60 tokens a minute), stays under it on either side.
    pd_bypass_min_tokens: float = 256.0
    # kv_transfer_failures: at least kv_failure_min failed transfers, notifications or bootstraps over pd_window_s,
    # and at least kv_failure_fraction of the transfers tried (as server_errors: one failure at a prefill's death
    # is the stall's end, not a rate).
    kv_failure_min: float = 3.0
    kv_failure_fraction: float = 0.05

    def validate(self) -> list[str]:
        # under 1 token, decode computing nothing at all would read as a bypass
        return self.shares("kv_failure_fraction") + self.counts("pd_bypass_min_tokens")


PREFILL, DECODE = "prefill", "decode"
_FIELDS = ("waiting_for_kv", "fetch_in_progress", "external_prompt_tokens", "local_prompt_tokens", "transfers",
           "failed_transfers", "failed_notifications", "bootstrap_failed", "expired")
_FAILURES = (("failed_transfers", "failed transfer"), ("failed_notifications", "failed notification"),
             ("bootstrap_failed", "failed bootstrap"))
# How an instance lives, as the stall's evidence says it; the first three are the side a restart helps.
DEAD, STOPPED_STATE, DOWN, ALIVE, UNKNOWN = "dead", "stopped", "silent", "alive", "unknown"
RESTARTABLE = (DEAD, STOPPED_STATE, DOWN)


@dataclass(frozen=True, slots=True)
class _Point:
    """One good scrape of an instance: its connector fields summed over its engines (None: none exports it)."""

    t: float
    kv: dict
    prompt_tokens: float | None        # the engines' prompt tokens, summed

    def waiting(self) -> float | None:
        found = self.kv["waiting_for_kv"]
        return found if found is not None else self.kv["fetch_in_progress"]

    def arrivals(self) -> tuple:
        return (self.kv["external_prompt_tokens"], self.kv["transfers"])

    def computed(self) -> float | None:
        """Prompt tokens this instance computed itself."""
        found = self.kv["local_prompt_tokens"]
        return found if found is not None else self.prompt_tokens


def _points(window: Window) -> list[_Point]:
    out = []
    for sample in window.good_metrics():
        sides = [e.kv_transfer for e in sample.engines if e.kv_transfer is not None]
        kv = {}
        for name in _FIELDS:
            values = [v for side in sides if (v := getattr(side, name)) is not None]
            kv[name] = sum(values) if values else None
        prompts = [v for e in sample.engines if (v := e.counters.prompt_tokens) is not None]
        out.append(_Point(sample.t, kv, sum(prompts) if prompts else None))
    return out


def _role(window: Window, role: str) -> list[InstanceWindow]:
    return [i for i in window.instances if i.role == role]


def _rise(points: list[_Point], read, since: float) -> tuple[float | None, float | None]:
    """(how much `read(point)` rose over the points at or after `since`, a counter reset counted from 0; the time
    of its first rise) — (None, None) when it is not read there."""
    values = [(p.t, v) for p in points if p.t >= since and (v := read(p)) is not None]
    if not values:
        return None, None
    total, first = 0.0, None
    for (_, before), (t, after) in zip(values, values[1:]):
        step = after - before if after >= before else after
        if step > 0:
            total += step
            first = t if first is None else first
    return total, first


def _lives(instance: InstanceWindow, config: Thresholds) -> tuple[str, str, list[Evidence]]:
    """(state, the words, the evidence) of how an instance lives now, from its own process, health and scrapes."""
    window = instance.window
    if window.process:
        process = window.process[-1]
        if not process.alive:
            return DEAD, "its process exited", [Evidence("process", process.t, "alive", False)]
        stopped = [m for m in process.members if m.status in STOPPED]
        if stopped:
            member = stopped[0]
            return (STOPPED_STATE, f"{member.title or 'a process'} (pid {member.pid}) is stopped",
                    [Evidence("process", process.t, "members.status", member.status)])
    health = window.health
    failed = []
    for sample in reversed(health):
        if sample.ok:
            break
        failed.append(sample)
    if failed and len(failed) >= config.health_fail_count:
        newest, oldest = failed[0], failed[-1]
        return (DOWN, f"/health has not answered 2xx for {newest.t - oldest.t:.0f} s ({answer_problem(newest)})",
                [health_evidence(newest)])
    if health and health[-1].ok:
        return ALIVE, "/health answers 2xx", [health_evidence(health[-1])]
    if health:
        return UNKNOWN, f"/health {answer_problem(health[-1])}", [health_evidence(health[-1])]
    return UNKNOWN, "nothing read from it yet", []


def _count(n: float, one: str) -> str:
    return f"{n:g} {one}{'' if n == 1 else 's'}"


# --- kv_transfer_stall -------------------------------------------------------------------------------------

def detect_kv_transfer_stall(window: Window, config: Thresholds) -> list[Verdict]:
    """Decode has had requests waiting for KV for at least kv_stall_s with no transferred token (nor a finished
    transfer) arriving; the prefill is named with how it lives. Action: restart that prefill when it is dead,
    stopped or not answering (its name in `act_on`); otherwise a person decides (the path between them). Decode is
    never the side acted on: its requests wait on the other side."""
    prefills = _role(window, PREFILL)
    out = []
    for decode in _role(window, DECODE):
        points = _points(decode.window)
        if not points or not (points[-1].waiting() or 0) > 0:
            continue
        newest = points[-1]
        i = len(points) - 1
        while i > 0 and (points[i - 1].waiting() or 0) > 0 and points[i - 1].arrivals() == newest.arrivals():
            i -= 1
        onset = points[i].t
        held = newest.t - onset
        if held < config.kv_stall_s:
            continue
        lives = [(p, *_lives(p, config)) for p in prefills]
        at_fault = next((x for x in lives if x[1] in RESTARTABLE), None)
        named = at_fault or (lives[0] if lives else None)
        waiting = newest.waiting()
        why = (f"decode {decode.name}: {_count(waiting, 'request')} waiting for KV for {held:.0f} s (bound "
               f"{config.kv_stall_s:g} s) and no transferred token arrived")
        details: dict = {"decode": decode.name, "waiting": waiting, "held_s": round(held, 3)}
        evidence = [Evidence("metrics", onset, "kv_transfer.waiting_for_kv", points[i].waiting()),
                    Evidence("metrics", newest.t, "kv_transfer.waiting_for_kv", waiting),
                    Evidence("metrics", newest.t, "kv_transfer.external_prompt_tokens",
                             newest.kv["external_prompt_tokens"])]
        action = PAGE
        if named is None:
            why += "; no prefill instance is known to this deployment"
        else:
            prefill, state, words, shown = named
            details.update(prefill=prefill.name, prefill_state=state)
            evidence.extend(shown)
            why += f"; prefill {prefill.name}: {words}"
            if at_fault is not None:
                action = RESTART
                details["act_on"] = prefill.name
                why += " — the prefill is the side to restart; decode is not restarted"
            elif state == ALIVE:
                why += " — the prefill lives: the transfer between them is at fault (a person decides; " \
                       "decode is not restarted)"
            else:
                why += (f" — whether the prefill lives is not known yet (it is counted down after "
                        f"{config.health_fail_count:g} /health misses in a row): a person decides; decode is not "
                        f"restarted")
        out.append(Verdict("kv_transfer_stall", newest.t, onset, why, tuple(evidence), details, action=action))
    return out


# --- kv_expired --------------------------------------------------------------------------------------------

def _longest_wait(decodes: list[InstanceWindow]) -> tuple[float | None, str | None]:
    """The longest stretch decode's gauges showed a request waiting for KV (its first to its last scrape with
    one waiting), and the decode instance; (None, None) when no scrape saw one waiting."""
    best, where = None, None
    for decode in decodes:
        start = None
        for point in _points(decode.window):
            if (point.waiting() or 0) > 0:
                start = point.t if start is None else start
                if best is None or point.t - start > best:
                    best, where = point.t - start, decode.name
            else:
                start = None
    return best, where


def detect_kv_expired(window: Window, config: Thresholds) -> list[Verdict]:
    """A prefill's expired-lease counter rose over the last pd_window_s: it released the blocks of requests
    decode had not read, and decode answers them anyway — possibly wrong. With the lease and decode's wait as
    its gauges measured it."""
    end = window.end
    if end is None:
        return []
    out = []
    for prefill in _role(window, PREFILL):
        points = _points(prefill.window)
        rose, first = _rise(points, lambda p: p.kv["expired"], end - config.pd_window_s)
        if not rose or first is None:
            continue
        wait, decode = _longest_wait(_role(window, DECODE))
        waited = (f"decode {decode} had a request waiting for KV for {wait:.0f} s" if wait is not None
                  else "decode's wait for KV was too short for its scrapes to see")
        why = (f"prefill {prefill.name} released the KV blocks of {_count(rose, 'request')} before decode read "
               f"them in the last {config.pd_window_s:g} s (its lease: {config.kv_lease_s:g} s, the kv_lease_s "
               f"setting; vLLM's kv_lease_duration); {waited}: decode's answers to them may be wrong")
        details = {"prefill": prefill.name, "expired": rose, "lease_s": config.kv_lease_s,
                   "decode_wait_s": round(wait, 3) if wait is not None else None}
        at_first = next(p for p in points if p.t == first)
        shown = (at_first,) if at_first is points[-1] else (at_first, points[-1])     # its first rise, the newest
        evidence = tuple(Evidence("metrics", p.t, "kv_transfer.expired", p.kv["expired"]) for p in shown)
        out.append(Verdict("kv_expired", points[-1].t, first, why, evidence, details))
    return out


# --- pd_bypass ---------------------------------------------------------------------------------------------

def detect_pd_bypass(window: Window, config: Thresholds) -> list[Verdict]:
    """Over the last pd_window_s decode computed at least pd_bypass_min_tokens prompt tokens itself, none came by
    transfer, and no prefill computed as many (the active probe's few tokens on an idle prefill are not work): the requests go to decode alone (a router fallen back to
    decode-only, a wrong prefill address). Every request still answers; the prefill's capacity is wasted and
    decode's TTFT carries every prefill."""
    end = window.end
    if end is None:
        return []
    since = end - config.pd_window_s
    prefills = _role(window, PREFILL)
    prefill_work = []
    for prefill in prefills:
        points = _points(prefill.window)
        rose, _ = _rise(points, lambda p: p.computed(), since)
        prefill_work.append((prefill, rose, any(p.t >= since for p in points)))
    # idle: under the bar decode is held to (the active probe's few tokens a minute on an idle prefill are not work)
    if not prefills or any(rose is not None and rose >= config.pd_bypass_min_tokens for _, rose, _ in prefill_work):
        return []
    out = []
    for decode in _role(window, DECODE):
        points = _points(decode.window)
        local, first = _rise(points, lambda p: p.computed(), since)
        external, _ = _rise(points, lambda p: p.kv["external_prompt_tokens"], since)
        if local is None or external is None or external > 0 or local < config.pd_bypass_min_tokens:
            continue
        idle = ", ".join(f"{p.name} {_idle_words(rose, scraped)}" for p, rose, scraped in prefill_work)
        why = (f"decode {decode.name} computed {local:g} prompt tokens itself in the last {config.pd_window_s:g} s "
               f"and none came by KV transfer, while the prefill was idle ({idle}): requests bypass the prefill "
               f"(a router gone decode-only, or a wrong prefill address)")
        details = {"decode": decode.name, "local_prompt_tokens": local, "prefill": prefills[0].name}
        evidence = (Evidence("metrics", points[-1].t, "kv_transfer.local_prompt_tokens", points[-1].computed()),
                    Evidence("metrics", points[-1].t, "kv_transfer.external_prompt_tokens",
                             points[-1].kv["external_prompt_tokens"]))
        out.append(Verdict("pd_bypass", points[-1].t, first if first is not None else points[0].t, why, evidence,
                           details))
    return out


def _idle_words(rose: float | None, scraped: bool) -> str:
    if rose is None:
        return "exports no prompt-token count" if scraped else "gave no good scrape"
    return "computed none" if rose == 0 else f"computed {rose:g} prompt tokens"


# --- kv_transfer_failures ----------------------------------------------------------------------------------

def detect_kv_transfer_failures(window: Window, config: Thresholds) -> list[Verdict]:
    """At least kv_failure_min failed transfers, notifications or bootstraps over the last pd_window_s (each
    instance's counters, both sides), and at least kv_failure_fraction of the transfers tried where the finished
    ones are counted."""
    end = window.end
    if end is None:
        return []
    since = end - config.pd_window_s
    failed, onset, newest = 0.0, None, None
    done: dict[str, float] = {}         # finished transfers by the role that counts them (one transfer, two sides)
    parts, evidence = [], []
    for instance in window.instances:
        points = _points(instance.window)
        if not points:
            continue
        newest = max(newest or points[-1].t, points[-1].t)
        for field, one in _FAILURES:
            rose, first = _rise(points, lambda p, f=field: p.kv[f], since)
            if rose:
                failed += rose
                onset = first if onset is None else min(onset, first)
                parts.append(f"{_count(rose, one)} at {instance.role} {instance.name}")
                evidence.append(Evidence("metrics", points[-1].t, f"kv_transfer.{field}", points[-1].kv[field]))
        finished, _ = _rise(points, lambda p: p.kv["transfers"], since)
        if finished is not None:
            done[instance.role] = done.get(instance.role, 0.0) + finished
    if failed < config.kv_failure_min or onset is None:
        return []
    share = ""
    done = done.get(DECODE, done.get(PREFILL))    # decode's count where it keeps one: it reads the blocks
    if done is not None:
        tried = done + failed
        if failed / tried < config.kv_failure_fraction:
            return []
        share = f", {failed / tried:.0%} of {tried:g} tried"
    why = (f"{_count(failed, 'KV transfer failure')} in the last {config.pd_window_s:g} s ({'; '.join(parts)}"
           f"{share}): the requests they carried fail or are recomputed")
    details = {"failed": failed, "transfers": done}
    return [Verdict("kv_transfer_failures", newest, onset, why, tuple(evidence), details)]


# --- the declaration: its settings, runbook and spec, which detectors/registry.py registers ------------

KV_TRANSFER_STALL = RunbookBranch(
    meaning="Decode holds requests that wait for their KV from a prefill instance, and no transferred token has "
            "arrived for longer than a healthy transfer takes. The prefill that should send it is named with how "
            "it lives: dead, stopped or not answering, it is the side at fault; alive, the path between them is.",
    check_next=(
        "The prefill's own state in the bundle: its process, /health and last scrape. A prefill killed or "
        "stopped after its step leaves decode waiting (vLLM #35943; vLLM 0.32 with NIXL held the request ~50 s, "
        "then failed it with NIXL_ERR_REMOTE_DISCONNECT and HTTP 500).",
        "Decode's kv_transfer gauges: requests waiting for KV (vLLM num_requests_waiting_by_reason{reason="
        "\"deferred\"}, num_requests_kv_fetch_by_stage{stage=\"in_progress\"}; SGLang's prealloc and transfer "
        "queues) against transferred prompt tokens (prompt_tokens_by_source_total{source=\"external_kv_transfer\"}).",
        "A live prefill: the connector's side channel and transport (NIXL's side-channel host and port, UCX_TLS; "
        "SGLang's bootstrap port and its 'timed out ... in KVPoll' lines).",
        "After a prefill restart, decode's log for a stale peer or a crash in the connector (vLLM #49238, "
        "llm-d #2187).",
    ),
    expected_range="A transfer ends within seconds (17-20 s at worst for NIXL over TCP on a loaded 2-core "
                   "machine); requests waiting for KV with no transferred token for 30 s are outside the range.",
    safe_action="Restart the prefill when it is dead, stopped or silent (guard and a kubelet on its livez do it); "
                "never restart decode for this: its blocks and in-flight requests are not at fault. A live "
                "prefill: take the pair out of routing and read the connector's logs.",
    rollback="Return the pair to routing once decode's waiting requests clear and transferred tokens move again.",
    restart_destroys="The prefill's in-flight prefills and the KV blocks it holds for decode: the requests decode "
                     "waits on fail and must be retried.",
)

KV_EXPIRED = RunbookBranch(
    meaning="A prefill released the KV blocks it kept for decode before decode read them (its lease ran out), "
            "and decode still answered those requests: their answers may be wrong (aws-samples/aws-do-eks#84: "
            "8 of 42 answered 200 from released blocks).",
    check_next=(
        "The prefill's lease (vLLM kv_lease_duration, default 30 s) against decode's measured wait for KV in the "
        "verdict: a wait longer than the lease expires blocks.",
        "The prefill's log: 'Releasing expired KV blocks ... retrieved by 0 remote worker(s)' and 'Potentially "
        "invalid KV blocks'; its counter nixl_num_kv_expired_reqs_total.",
        "Why decode waited: a busy decode, a slow transfer path, a router that delays the decode leg.",
    ),
    expected_range="0 expired leases: decode reads every block well within the lease.",
    safe_action="Raise the lease above decode's longest wait, or shorten the wait; tell the owners of the "
                "affected answers that they may be wrong.",
    rollback="Set the lease back once decode's waits are short again.",
    restart_destroys="Nothing is restarted for this: the blocks are already gone; a restart only adds failures.",
)

PD_BYPASS = RunbookBranch(
    meaning="Decode computes every prompt itself and no token comes by KV transfer, while the prefill computes "
            "nothing: the router sends requests to decode alone (llm-d-router #2427, #1461). Every request still "
            "answers; the prefill's capacity is wasted and decode's TTFT carries the prefill.",
    check_next=(
        "The router's view of the prefill: is it ready, is its address and port right?",
        "Decode's prompt_tokens_by_source_total: local_compute rising, external_kv_transfer flat.",
        "The prefill's request counters: flat while decode serves.",
    ),
    expected_range="On a working pair almost every prompt token at decode comes by transfer.",
    safe_action="Fix the router's prefill list (or make the prefill ready); nothing to restart.",
    rollback="None needed: the router going back to the pair is the fix.",
    restart_destroys="Nothing is restarted for this.",
)

KV_TRANSFER_FAILURES = RunbookBranch(
    meaning="KV transfers between the prefill and decode instances fail (transfers, completion notifications or "
            "bootstraps) at a rate: the requests they carried fail, or are recomputed where the connector's "
            "failure policy says so.",
    check_next=(
        "Which side counts them and which kind (the verdict says): vLLM nixl_num_failed_transfers_total and "
        "nixl_num_failed_notifications_total, SGLang num_transfer_failed_reqs_total and "
        "num_bootstrap_failed_reqs_total.",
        "The connector's log lines: 'NIXL transfer failure', 'Failing N request(s) due to KV load failure', "
        "SGLang's 'KVTransferError ... timed out'.",
        "The transport between the two hosts (UCX transports, the side-channel or bootstrap port, the network).",
    ),
    expected_range="0 failed transfers per window on a healthy pair.",
    safe_action="Keep the bundles of both sides; take the pair out of routing if other pairs serve.",
    rollback="Return it to routing once a window passes with no failed transfer.",
    restart_destroys="In-flight requests on the side restarted, and the KV blocks held for the other side.",
)

SETTINGS = (DeploymentSettings,)
SPECS = (
    # A deployment's verdicts (prefill and decode instances judged together, issue 52).
    VerdictSpec("kv_transfer_stall", detect_kv_transfer_stall, INCIDENT, "page",
                "decode requests wait for KV from a prefill and no transferred token arrives",
                KV_TRANSFER_STALL, ("metrics", "health", "process"),
                action=RESTART, action_by="restart the prefill when it is dead, stopped or not answering (decode "
                "never), else page", actions=(RESTART, PAGE), pair=True),
    VerdictSpec("kv_expired", detect_kv_expired, INCIDENT, "page",
                "a prefill released KV blocks before decode read them: answers may be wrong", KV_EXPIRED,
                ("metrics",), action=PAGE, pair=True),
    VerdictSpec("pd_bypass", detect_pd_bypass, INCIDENT, "ticket",
                "decode computes every prompt itself while the prefill is idle: the router went decode-only",
                PD_BYPASS, ("metrics",), action=PAGE, pair=True),
    VerdictSpec("kv_transfer_failures", detect_kv_transfer_failures, INCIDENT, "page",
                "KV transfers between prefill and decode fail at a rate", KV_TRANSFER_FAILURES,
                ("metrics",), action=PAGE, pair=True),
)
