"""Detector thresholds: derived from the target where the samples allow it, otherwise these defaults.

Every field is a plain number so a bundle can store the config it was judged with and `verify` can
recompute the verdicts with exactly the same thresholds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


# Settings earlier releases stored in bundles and that now live elsewhere: `verify` reads and ignores them
# (bundle.recompute.config_from_dict).
RETIRED = frozenset({"engine_dead_status"})    # now the dialect's health_dead_status


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    # Detectors only read samples newer than (window end - lookback_s). A bundle that stores that
    # slice (see detectors.evidence_window) lets `verify` recompute identical verdicts.
    lookback_s: float = 180.0

    # alive_health_ok_no_progress: no progress counter (steps, generation tokens, prompt tokens) moved
    # while work was admitted for at least
    #   clamp(stall_k x max(typical longest recent gap between counter movements (p90 of the last
    #         stall_recent_movements gaps, so one earlier stall does not raise the bar), scrape cadence),
    #         stall_floor_s, stall_ceiling_s).
    # A movement seen again at the very next scrape counts as a gap of 0 (the engine steps faster than
    # we look; a slow scrape of a saturated API server is not the engine's cadence).
    # The gap is learned from the target's own recent step cadence (busy periods only), so a slow
    # engine or a long prefill that still steps raises the bar; idle (running = waiting = 0) never counts.
    stall_k: float = 4.0
    stall_floor_s: float = 2.0
    stall_ceiling_s: float = 60.0
    stall_recent_movements: int = 32     # how many recent counter movements define "recent cadence"
    # Where /health itself waits on the engine (SGLang), a long step and a stall look alike from /health
    # and the counters; the engine's own CPU tells them apart. While an engine process used
    # at least this much CPU (% of one core) in the last stall_floor_s and none is stopped, the threshold
    # is stall_ceiling_s. A real SGLang computing one 170,000-token prefill step read 47-104 % per 0.5 s
    # sample on 2 shared cores (95-180 % alone); idle with --sleep-on-idle 3-18 %; SIGSTOPped 0 %.
    stall_busy_cpu_percent: float = 30.0

    # health_loss: this many consecutive failed probes (no answer or non-2xx).
    health_fail_count: int = 3

    # engine_dead: the /health status that means "engine dead" is the dialect's (vLLM 503; SGLang none).
    # log lines of an engine death count for this long after they were read.
    log_evidence_s: float = 30.0
    # ...and nothing is a death when the dialect's shutdown line was read (a requested stop: vLLM 0.32 stops
    # its engine core first, 0.4 s after SIGTERM, logging EngineDeadError with requests in flight, then the
    # API server). Where a log is read, a dead-status probe or a vanished engine waits this long for that
    # line (read a poll late) before it counts; the engine's own death lines count at once.
    shutdown_log_wait_s: float = 2.0

    # overload: waiting > 0 for at least overload_sustain_s while the engine still progresses; it holds
    # through dips to 0 shorter than overload_clear_s (so a queue hovering at 0/1 fires once).
    overload_sustain_s: float = 10.0
    overload_clear_s: float = 5.0
    # ...and a time-averaged queue of at least this many requests over that stretch: one request that
    # comes and goes while its prefill is admitted is not overload.
    overload_min_mean_waiting: float = 2.0
    # ...and its cause is `slots` when running sat at the slot limit for at least this share of the
    # stretch (a real vLLM dips below it for a step whenever a request finishes before the next is admitted).
    overload_slots_share: float = 0.5
    # ...counting running within this share of the limit as at it: SGLang publishes its running count after
    # a decode step has freed the slots of the requests that finished, before the next prefill refills them
    # (254 of 256 under a queue). Below 50 slots this is less than one request: the limit itself.
    overload_slots_slack: float = 0.02
    # ...and where /metrics gave no good answer for at least this long within such a stretch (a saturated
    # API server answers a scrape in seconds or not at all; a watcher starved of CPU asks late), the same
    # rules read the engine's own periodic stats lines in its log instead (vLLM's "Running: 4 reqs,
    # Waiting: 28 reqs, ..." every VLLM_LOG_STATS_INTERVAL s).
    overload_metrics_silent_s: float = 5.0
    # kv_pressure, either of two rules. Held: KV usage >= kv_high over at least kv_sustain_s, holding
    # through dips shorter than kv_grace_s, with a time-weighted mean of at least kv_clear over that
    # stretch. Queued: over the last kv_window_s (at least kv_sustain_s of it seen), requests waiting,
    # a peak >= kv_high and a time-weighted mean >= kv_clear (a real vLLM under pressure swings 60-100%
    # as requests finish or are preempted, with dips longer than any grace). kv_high is also where
    # overload's cause is "kv", not "slots".
    kv_high: float = 0.90
    kv_clear: float = 0.80
    kv_sustain_s: float = 5.0
    kv_grace_s: float = 5.0
    kv_window_s: float = 20.0

    # preemption: the counter rose by at least preemption_min within preemption_window_s
    # (the delta, never the cumulative value).
    preemption_window_s: float = 60.0
    preemption_min: float = 1.0

    # server_errors, client_errors, requests_aborted: increases over the last outcome_window_s (never the
    # cumulative counts). server_errors: at least server_error_min 5xx responses (or requests the engine
    # finished with reason error) and at least server_error_fraction of the responses; client_errors the
    # same for 4xx; requests_aborted: aborted requests against all finished ones.
    outcome_window_s: float = 60.0
    server_error_min: float = 3.0
    server_error_fraction: float = 0.05
    client_error_min: float = 5.0
    client_error_fraction: float = 0.25
    abort_min: float = 5.0
    abort_fraction: float = 0.25

    # startup_stalled: no new startup stage for max(startup_stall_k x the longest gap between the stages
    # so far, startup_stall_floor_s) while /health has not yet succeeded since the start. A target whose
    # process is younger than startup_max_s and was never healthy since counts as starting (no
    # health_loss then), also without a log.
    startup_stall_k: float = 4.0
    startup_stall_floor_s: float = 120.0
    startup_max_s: float = 900.0

    # crash_loop: at least crash_loop_count restarts or deaths within crash_loop_window_s (at most the
    # lookback); engine-death lines closer than crash_loop_burst_s are one death.
    crash_loop_count: int = 3
    crash_loop_window_s: float = 180.0
    crash_loop_burst_s: float = 10.0

    # histogram_blind: at least this many observations in the window's histogram delta.
    blind_min_count: float = 100.0
    blind_kinds: tuple[str, ...] = ("itl", "ttft", "tpot")

    # not_serving: this many active probes in a row got no token (deadline missed or an error) while
    # /health answered 2xx and no counter moved. Probes run only with --probe.
    probe_fail_count: int = 1

    # requests_no_token (needs `servewatch proxy`): requests are in flight and none of them got a byte
    # (and none ended) for longer than
    #   max(no_token_k x max(recent TTFT p99, the oldest waiting request's expected TTFT), no_token_floor_s)
    # where the expected TTFT scales the recent prefill speed (TTFT per request byte) by its size, so a
    # long prefill raises the bar; an overload served in turn keeps bytes flowing and never reaches it.
    no_token_k: float = 4.0
    no_token_floor_s: float = 2.0
    # rank_stalled: an engine rank stopped (T), or in uninterruptible sleep (D) or under rank_idle_cpu_percent
    # for rank_quiet_s while a sibling rank used at least stall_busy_cpu_percent; a probe asked no earlier than
    # rank_probe_slack_s before that began got no token; the engine's gauges read idle. A real vLLM TP=2 CPU
    # worker spins at ~50 % idle; a SIGSTOPped one reads 0 %.
    rank_quiet_s: float = 2.0
    rank_idle_cpu_percent: float = 5.0
    rank_probe_slack_s: float = 1.0
    # gpu_throttled: a GPU the engine holds has its SM clock under gpu_clock_held_share of its maximum for a
    # thermal, power-brake or HW-slowdown reason for gpu_throttle_sustain_s, and the token rate since is down by
    # gpu_throttle_drop (a share) against the rate over the gpu_throttle_baseline_s before, with requests running.
    gpu_throttle_sustain_s: float = 10.0
    gpu_throttle_drop: float = 0.2
    gpu_throttle_baseline_s: float = 30.0
    gpu_clock_held_share: float = 0.9

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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["blind_kinds"] = list(self.blind_kinds)
        return data
