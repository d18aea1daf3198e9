"""The runbook branch every generated alert carries as annotations: what it means, what to check next,
the expected range, the safe action and its rollback. Static text (no templates), so a rule test can
compare it exactly."""

from __future__ import annotations

from collections.abc import Mapping
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


def runbooks(rows: Mapping[str, tuple[str, str, str, str, str]]) -> dict[str, AlertRunbook]:
    """A table of runbooks: one row an alert, its cells the fields of `AlertRunbook` in order (summary,
    check_next, expected_range, safe_action, rollback)."""
    return {name: AlertRunbook(*cells) for name, cells in rows.items()}


# What each SLI's burn counts as bad, and how fast each severity's windows see the budget go.
BURN_BAD_EVENTS = {
    "availability": "requests answered with a 5xx",
    "success": "requests that finished aborted or with an error",
    "ttft": "requests whose time to first token exceeded the threshold",
    "tpot": "requests whose time per output token exceeded the threshold",
    "e2e": "requests that took longer end to end than the threshold",
}
BURN_PACE = {"page": "fast enough to empty it within days",
             "ticket": "faster than the budget allows over the SLO period"}
# The burn alerts' fields after the summary, whatever the SLI.
BURN_STEPS = (
    "Which leading indicator fired first: requests waiting, queue time rising, preemptions, KV "
    "full while waiting, slots at the limit, 5xx; then the servewatch verdicts for the same "
    "target (stall, engine dead). A burn with none of them points at the clients or the model.",
    "Error ratio at or below the budget (1 - target) in every window; the short window "
    "back under the threshold means the burn stopped.",
    "Stop the burn before finding the cause: shift traffic to healthy replicas or shed "
    "load at the router; roll back a deploy that started it.",
    "Restore routing when the short-window error ratio has stayed under the budget for one long "
    "window; undo a rollback only with a fix.",
)


def burn(kind: str, severity: str) -> AlertRunbook:
    pace = BURN_PACE["page" if severity == "page" else "ticket"]
    return AlertRunbook(f"The {kind} SLO burns its error budget {pace} ({BURN_BAD_EVENTS[kind]}).", *BURN_STEPS)


# The leading-indicator and guard alerts on an engine's own series.
ENGINE = runbooks({
    "LLMRequestsWaiting": (
        "Requests have been waiting for a slot for minutes: the engine is at its admission limit.",
        "Running against the slot limit and KV usage: running at the limit with KV low is out of "
        "slots; KV near full is out of memory. Queue time and TTFT follow within a minute.",
        "0 waiting under normal load; brief spikes during bursts clear within one scrape.",
        "Shed or rate-limit at the router, or add replicas.",
        "Remove the admission limit after waiting stays 0 for one full window at peak.",
    ),
    "LLMQueueTimeRising": (
        "Mean queue wait over 5 minutes is over twice its 1-hour mean and above the floor.",
        "Arrival rate against capacity measured on a normal day; running vs slot limit; KV usage.",
        "Queue wait near 0 s under normal load; never a large share of the TTFT budget.",
        "Shed or limit admission at the router, or add replicas.",
        "Lift the limits once queue wait is back at its 1-hour mean for one window.",
    ),
    "LLMPreempting": (
        "The engine keeps preempting (vLLM) or retracting (SGLang) running requests.",
        "KV usage in the same window, output lengths (long outputs hold KV), running and waiting. "
        "Each preempted request redoes its prefill: end-to-end latency follows within minutes.",
        "0 preemptions per second under normal load.",
        "Lower concurrency (the slot limit) or cap max output tokens at admission; add KV capacity.",
        "Restore the previous limits after preemptions stay at 0 across a peak window.",
    ),
    "LLMKVCacheFullWithWaiting": (
        "KV cache usage is at or above 90 % while requests wait: admission waits for memory.",
        "Preemption rate, output and prompt lengths, prefix-cache hit rate.",
        "KV well below 90 % at normal peak, or no waiting while it is high.",
        "Limit concurrency or max output tokens at admission, or add replicas / KV capacity.",
        "Revert the limits once KV stays below 90 % with nothing waiting for one window.",
    ),
    "LLMOutOfSlots": (
        "Running sits at the slot limit while KV usage is below 50 %: out of slots, not memory.",
        "Waiting count and queue time; memory headroom before raising the slot limit (a larger "
        "batch needs more activation memory).",
        "Running below the slot limit at normal peak.",
        "Add replicas or shed load; raise the slot limit only with memory headroom, one step at a time.",
        "Return to the previous slot limit if memory errors or deaths follow the change.",
    ),
    "LLMServerErrors": (
        "The server answers some requests with a 5xx.",
        "The server log around the first 5xx; engine health; whether the errors come from one "
        "replica or all.",
        "0 server errors per second.",
        "Take a replica that returns 5xx out of routing and keep its log.",
        "Return it to routing when it serves without 5xx for several minutes.",
    ),
    "LLMTargetDown": (
        "Prometheus cannot scrape the server's /metrics.",
        "Whether the process is alive and listening; whether /health answers; a restart loop.",
        "up == 1 on every scrape.",
        "Route traffic away from the replica; keep its log before any restart.",
        "Return it to routing when /health and /metrics answer for several scrapes.",
    ),
    "LLMEngineSeriesAbsent": (
        "No engine series at all for this selector: every target vanished or stopped exporting.",
        "Service discovery and the scrape config; whether the servers run; whether metrics were "
        "switched off (vLLM --disable-log-stats, SGLang without --enable-metrics).",
        "Engine series present from every target.",
        "Restore scraping before trusting any other alert: without series every rule is silent.",
        "Nothing to roll back.",
    ),
    "LLMEngineMetricsMissing": (
        "The target answers scrapes but exports no engine series.",
        "Engine flags (vLLM --disable-log-stats, SGLang --enable-metrics); whether the engine "
        "started at all (the API can run without it).",
        "Engine series on every target that is up.",
        "Fix the flags at the next planned restart; meanwhile watch it with servewatch.",
        "Nothing to roll back.",
    ),
})

# The alerts on the series `servewatch serve` exports about itself and its targets.
SERVEWATCH = runbooks({
    "target_up": (
        "servewatch cannot reach the target.",
        "Network path from servewatch to the target; the target's process.",
        "servewatch_target_up == 1.",
        "Treat the target as down until proven otherwise; route away from it.",
        "Return it to routing when servewatch reaches it again.",
    ),
    "probe_failures": (
        "servewatch's probes of the target keep failing.",
        "Which probe (health, metrics), its timeout, the target's load.",
        "No probe failures.",
        "Check the target directly before acting on servewatch's other verdicts for it.",
        "Nothing to roll back.",
    ),
    "node_rank": (
        "An engine rank on this node has been stopped (T), in uninterruptible sleep (D) or a zombie for a minute: "
        "its siblings wait for it in every collective, so the engine serves nothing while /health may say 200.",
        "The process of that rank on that node (servewatch_node_rank_state's node, engine port, role and rank); "
        "its py-spy stack; the node's kernel log for a D state (storage, driver).",
        "No servewatch_node_rank_state series of that engine in T, D or Z.",
        "Dump its stacks (servewatch guard does, then restarts the whole engine); a rank stopped by a debugger or "
        "SIGSTOP resumes with SIGCONT.",
        "Nothing to roll back: restarting an engine whose rank is stuck loses only the requests it already lost.",
    ),
    "gpu_fault": (
        "A GPU under a target's engine reported a hardware fault whose NVIDIA action is a GPU reset or a reboot (an "
        "Xid such as 79 fallen off the bus, 95 uncontained ECC; an uncorrectable ECC count that rose; a row-remap "
        "failure): the gpu_uuid, xid and action labels name it.",
        "The GPU on that node: nvidia-smi -q -i GPU_UUID (ECC, remapped rows); the kernel log for the Xid's own "
        "line; whether other GPUs of the node report the same.",
        "No servewatch_gpu_fault series with action reset_gpu or reboot.",
        "Drain the node (cordon it, stop routing to it); do not restart the server on that GPU (servewatch guard "
        "exits 6 and its systemd unit does not restart it). Reset or replace the GPU, then run a diagnostic.",
        "Return the node to scheduling once the GPU is reset or replaced and a diagnostic passes.",
    ),
    "absent": (
        "servewatch serve exports no series: it stopped, or Prometheus stopped scraping it.",
        "The servewatch serve process and its scrape job.",
        "servewatch_target_up present for every watched target.",
        "Restart servewatch serve; its alerts are silent until then.",
        "Nothing to roll back.",
    ),
})


def for_verdict(spec) -> AlertRunbook:
    """A verdict's alert text, from its one declaration in the verdict registry."""
    branch = spec.runbook
    return AlertRunbook(summary=f"{spec.summary[0].upper()}{spec.summary[1:]}: {branch.meaning}",
                        check_next=" ".join(branch.check_next), expected_range=branch.expected_range,
                        safe_action=branch.safe_action, rollback=branch.rollback)
