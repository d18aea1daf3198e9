"""The runbook branch every generated alert carries as annotations: what it means, what to check next,
the expected range, the safe action and its rollback. Static text (no templates), so a rule test can
compare it exactly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlertRunbook:
    summary: str
    check_next: str
    expected_range: str
    safe_action: str
    rollback: str

    def annotations(self) -> dict[str, str]:
        return {"summary": self.summary, "check_next": self.check_next, "expected_range": self.expected_range,
                "safe_action": self.safe_action, "rollback": self.rollback}


def burn(kind: str, severity: str) -> AlertRunbook:
    what = {
        "availability": "requests answered with a 5xx",
        "success": "requests that finished aborted or with an error",
        "ttft": "requests whose time to first token exceeded the threshold",
        "tpot": "requests whose time per output token exceeded the threshold",
        "e2e": "requests that took longer end to end than the threshold",
    }[kind]
    pace = ("fast enough to empty it within days" if severity == "page"
            else "faster than the budget allows over the SLO period")
    return AlertRunbook(
        summary=f"The {kind} SLO burns its error budget {pace} ({what}).",
        check_next="Which leading indicator fired first: requests waiting, queue time rising, preemptions, KV "
                   "full while waiting, slots at the limit, 5xx; then the servewatch verdicts for the same "
                   "target (stall, engine dead). A burn with none of them points at the clients or the model.",
        expected_range="Error ratio at or below the budget (1 - target) in every window; the short window "
                       "back under the threshold means the burn stopped.",
        safe_action="Stop the burn before finding the cause: shift traffic to healthy replicas or shed "
                    "load at the router; roll back a deploy that started it.",
        rollback="Restore routing when the short-window error ratio has stayed under the budget for one long "
                 "window; undo a rollback only with a fix.",
    )


ENGINE = {
    "LLMRequestsWaiting": AlertRunbook(
        summary="Requests have been waiting for a slot for minutes: the engine is at its admission limit.",
        check_next="Running against the slot limit and KV usage: running at the limit with KV low is out of "
                   "slots; KV near full is out of memory. Queue time and TTFT follow within a minute.",
        expected_range="0 waiting under normal load; brief spikes during bursts clear within one scrape.",
        safe_action="Shed or rate-limit at the router, or add replicas.",
        rollback="Remove the admission limit after waiting stays 0 for one full window at peak.",
    ),
    "LLMQueueTimeRising": AlertRunbook(
        summary="Mean queue wait over 5 minutes is over twice its 1-hour mean and above the floor.",
        check_next="Arrival rate against capacity measured on a normal day; running vs slot limit; KV usage.",
        expected_range="Queue wait near 0 s under normal load; never a large share of the TTFT budget.",
        safe_action="Shed or limit admission at the router, or add replicas.",
        rollback="Lift the limits once queue wait is back at its 1-hour mean for one window.",
    ),
    "LLMPreempting": AlertRunbook(
        summary="The engine keeps preempting (vLLM) or retracting (SGLang) running requests.",
        check_next="KV usage in the same window, output lengths (long outputs hold KV), running and waiting. "
                   "Each preempted request redoes its prefill: end-to-end latency follows within minutes.",
        expected_range="0 preemptions per second under normal load.",
        safe_action="Lower concurrency (the slot limit) or cap max output tokens at admission; add KV capacity.",
        rollback="Restore the previous limits after preemptions stay at 0 across a peak window.",
    ),
    "LLMKVCacheFullWithWaiting": AlertRunbook(
        summary="KV cache usage is at or above 90 % while requests wait: admission waits for memory.",
        check_next="Preemption rate, output and prompt lengths, prefix-cache hit rate.",
        expected_range="KV well below 90 % at normal peak, or no waiting while it is high.",
        safe_action="Limit concurrency or max output tokens at admission, or add replicas / KV capacity.",
        rollback="Revert the limits once KV stays below 90 % with nothing waiting for one window.",
    ),
    "LLMOutOfSlots": AlertRunbook(
        summary="Running sits at the slot limit while KV usage is below 50 %: out of slots, not memory.",
        check_next="Waiting count and queue time; memory headroom before raising the slot limit (a larger "
                   "batch needs more activation memory).",
        expected_range="Running below the slot limit at normal peak.",
        safe_action="Add replicas or shed load; raise the slot limit only with memory headroom, one step at a time.",
        rollback="Return to the previous slot limit if memory errors or deaths follow the change.",
    ),
    "LLMServerErrors": AlertRunbook(
        summary="The server answers some requests with a 5xx.",
        check_next="The server log around the first 5xx; engine health; whether the errors come from one "
                   "replica or all.",
        expected_range="0 server errors per second.",
        safe_action="Take a replica that returns 5xx out of routing and keep its log.",
        rollback="Return it to routing when it serves without 5xx for several minutes.",
    ),
    "LLMTargetDown": AlertRunbook(
        summary="Prometheus cannot scrape the server's /metrics.",
        check_next="Whether the process is alive and listening; whether /health answers; a restart loop.",
        expected_range="up == 1 on every scrape.",
        safe_action="Route traffic away from the replica; keep its log before any restart.",
        rollback="Return it to routing when /health and /metrics answer for several scrapes.",
    ),
    "LLMEngineSeriesAbsent": AlertRunbook(
        summary="No engine series at all for this selector: every target vanished or stopped exporting.",
        check_next="Service discovery and the scrape config; whether the servers run; whether metrics were "
                   "switched off (vLLM --disable-log-stats, SGLang without --enable-metrics).",
        expected_range="Engine series present from every target.",
        safe_action="Restore scraping before trusting any other alert: without series every rule is silent.",
        rollback="Nothing to roll back.",
    ),
    "LLMEngineMetricsMissing": AlertRunbook(
        summary="The target answers scrapes but exports no engine series.",
        check_next="Engine flags (vLLM --disable-log-stats, SGLang --enable-metrics); whether the engine "
                   "started at all (the API can run without it).",
        expected_range="Engine series on every target that is up.",
        safe_action="Fix the flags at the next planned restart; meanwhile watch it with servewatch.",
        rollback="Nothing to roll back.",
    ),
}

SERVEWATCH = {
    "target_up": AlertRunbook(
        summary="servewatch cannot reach the target.",
        check_next="Network path from servewatch to the target; the target's process.",
        expected_range="servewatch_target_up == 1.",
        safe_action="Treat the target as down until proven otherwise; route away from it.",
        rollback="Return it to routing when servewatch reaches it again.",
    ),
    "probe_failures": AlertRunbook(
        summary="servewatch's probes of the target keep failing.",
        check_next="Which probe (health, metrics), its timeout, the target's load.",
        expected_range="No probe failures.",
        safe_action="Check the target directly before acting on servewatch's other verdicts for it.",
        rollback="Nothing to roll back.",
    ),
    "absent": AlertRunbook(
        summary="servewatch serve exports no series: it stopped, or Prometheus stopped scraping it.",
        check_next="The servewatch serve process and its scrape job.",
        expected_range="servewatch_target_up present for every watched target.",
        safe_action="Restart servewatch serve; its alerts are silent until then.",
        rollback="Nothing to roll back.",
    ),
}


def for_verdict(spec) -> AlertRunbook:
    """A verdict's alert text, from its one declaration in the verdict registry."""
    branch = spec.runbook
    return AlertRunbook(summary=f"{spec.summary[0].upper()}{spec.summary[1:]}: {branch.meaning}",
                        check_next=" ".join(branch.check_next), expected_range=branch.expected_range,
                        safe_action=branch.safe_action, rollback=branch.rollback)
