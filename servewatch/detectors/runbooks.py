"""The runbook branch each verdict supports: what to check next, the expected range, the safe action and
its rollback (and when), and what a restart would destroy.

Written from a symptom, branching on evidence: each step names the metric or trace, its expected range,
the safe action and its rollback, and never says "restart" without naming the state it loses. The
figures are measured: the built-in engine's four workloads on an RTX 3060 7B profile, and real vLLM 0.32
runs on a 2-core CPU machine with a tiny model.
"""

from __future__ import annotations

from servewatch.detectors.verdict import RunbookBranch

STALL = RunbookBranch(
    meaning="/health answers 2xx and the process is alive with admitted work, but no progress counter "
            "(engine steps, generation tokens, prompt tokens) moved for longer than the step cadence allows. "
            "Alive is not making progress; health green is not serving healthy.",
    check_next=(
        "Process states in the bundle: an engine core or worker in status 'stopped' or 'zombie', or "
        "running at ~0% CPU, explains a frozen engine (a SIGSTOPped vLLM worker gives exactly this "
        "signature: /health 200, /metrics answering, running 4-8, tokens frozen).",
        "Take a stack of the engine-core process before touching it (e.g. `py-spy dump --pid PID`; needs "
        "ptrace rights): a blocked queue put or collective names the fault domain (vLLM #53859: "
        "EngineCore blocked in ZmqEventPublisher.publish).",
        "num_requests_running at onset vs now: unchanged means admitted requests are parked, not finishing.",
        "num_requests_waiting and queue age: rising waiting with flat tokens means users are queueing "
        "behind a frozen engine.",
        "GPU utilisation when present: ~0% with running > 0 points at a blocked host thread; pinned "
        "at 100% points at a hung kernel or collective.",
    ),
    expected_range="While running > 0, generation_tokens_total and the engine step count advance at every "
                   "scrape (a long prefill still steps). A zero delta across the adaptive window is outside "
                   "the range; idle (running = waiting = 0) is not a stall.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router / load balancer). Draining is reversible and keeps the evidence alive.",
    rollback="Return the replica to routing once tokens move again for at least three consecutive scrapes "
             "(e.g. after the blocked consumer recovers or a stopped process is continued).",
    restart_destroys="Every in-flight request (the running count at the verdict) and its partial output, the KV "
                     "and prefix cache contents (they must re-warm), and the frozen process state that "
                     "shows where it blocked: take the stack before any restart.",
)

ENGINE_DEAD = RunbookBranch(
    meaning="The engine is gone while the API may still answer: /health returned 503, or the engine child "
            "disappeared under a living API process.",
    check_next=(
        "The log tail: EngineDeadError, 'Executor failed.', 'Worker proc ... died unexpectedly', "
        "out-of-memory lines ('Tried to allocate N MiB') and the stack that raised them.",
        "Running count and KV usage at the last good scrape. KV well below 100% at death rules the KV "
        "cache out (a vLLM serving Qwen2.5-7B-Instruct-AWQ on one RTX 3060 died under overload with 193 running and KV at 15.9%).",
        "Multiply before guessing: running x vocabulary x 4 bytes against the bytes the OOM asked for "
        "(193 x 152,064 x 4 = 112 MiB: a logits-sized temporary in the sampler, an activation limit).",
        "Client side: in-flight requests may have received HTTP 200 with short bodies (real vLLM: 4 requests "
        "'succeeded' after 1.8 s instead of ~15 s) - lost work that a status-code count calls success.",
        "The API process's exit code when it goes: exit 0 after an engine death defeats "
        "Restart=on-failure (vLLM #48966).",
    ),
    expected_range="/health 200, the engine-core process present in the tree, no ERROR lines in the log.",
    safe_action="Take the replica out of routing and keep its log. If the cause is an activation OOM, restart "
                "with more memory left outside the engine's budget (e.g. memory utilisation 0.9 -> 0.85) or "
                "a lower max-num-seqs, which bounds logits-sized temporaries.",
    rollback="Restore the previous memory settings if the restarted server shows lower throughput and no "
             "deaths across a full normal-day peak; the change is a flag, reversible at the next restart.",
    restart_destroys="The dead engine's KV and prefix cache are already lost. A restart also discards the API "
                     "process's in-memory state, its /metrics history and any response still being "
                     "streamed; make sure the log is persisted first - if it dies with the server you "
                     "must reproduce the incident to diagnose it.",
)

PROCESS_EXIT = RunbookBranch(
    meaning="The watched process exited (with its exit code or signal when knowable).",
    check_next=(
        "Exit code and signal: SIGKILL without an operator usually means the kernel OOM killer "
        "(check the kernel log); exit 0 right after an engine death is vLLM #48966.",
        "Whether an engine_dead verdict or error lines preceded the exit in this window.",
        "The supervisor's restart policy: Restart=on-failure does not restart an exit 0.",
        "The last metrics before the exit: running, waiting and KV, to size the lost work.",
    ),
    expected_range="A serving process does not exit; exit 0 only on an intended shutdown.",
    safe_action="Let the supervisor bring it back, with a policy that also restarts after exit 0 that "
                "follows an engine death (Restart=always, rate-limited), and keep routing away until ready.",
    rollback="Revert the supervisor policy if it causes a restart loop (cap the restart rate and alert).",
    restart_destroys="The process is already gone: its KV and prefix cache and any graphs not cached on "
                     "disk must re-warm; startup takes tens of seconds (30-50 s for the small CPU lab "
                     "server) to minutes for large models, and requests during it fail or queue.",
)

HEALTH_LOSS = RunbookBranch(
    meaning="/health stopped answering 2xx (refused, timed out, or an error status) while it had been fine.",
    check_next=(
        "Connection refused vs 503 vs timeout: refused with the process alive means it is shutting down "
        "(real vLLM refused ~5 s after an engine death); 503 means the engine is dead; timeouts mean a "
        "saturated API server.",
        "Whether /metrics still answers, and how long scrapes take (a saturated API answers slowly).",
        "Process states and exit information in the same window.",
    ),
    expected_range="/health 2xx within well under a second on every probe.",
    safe_action="Remove the replica from routing and keep this bundle. Decide between engine death "
                "(see engine_dead) and saturation (see overload) before restarting anything.",
    rollback="Put it back in routing after /health is 2xx for several consecutive probes.",
    restart_destroys="In-flight requests, KV and prefix cache, and the evidence of why the probe failed.",
)

OVERLOAD = RunbookBranch(
    meaning="Requests wait for a sustained period; the cause names the limit: slots (running at the slot "
            "limit), kv (cache full) or deferred (the scheduler deferred admission).",
    check_next=(
        "Queue wait (request_queue_time) and waiting count over time: overload is the only signature "
        "with a queue (vLLM serving Qwen2.5-7B-Instruct-AWQ on one RTX 3060: 0.472 s wait and 44 waiting under overload, 0 otherwise).",
        "Running vs the slot limit (max-num-seqs, default 256) and KV usage: running pinned at the limit "
        "with KV well below 100% means out of slots, not memory (256 running, KV 28%).",
        "Inter-token latency: a full batch slows every token (x9.2 at 256 running on the RTX 3060 above).",
        "Arrival rate against the capacity measured on a normal day.",
    ),
    expected_range="Waiting 0 and queue wait ~0 under normal load (RTX 3060, normal load: 0.000 s, max 0 waiting); "
                   "alert on waiting > 0 sustained, or on queue age against the TTFT budget.",
    safe_action="Shed or limit admission at the router early, with an actionable rejection class, or add "
                "replicas. Raising max-num-seqs when KV is low adds slots but also activation memory "
                "(193 running crashed at 0.9 memory utilisation).",
    rollback="Remove temporary capacity or admission limits once the waiting count has drained to 0 and "
             "stayed there for one full window - not 'eventually'.",
    restart_destroys="A restart adds no capacity: it drops every queued and running request and the prefix "
                     "cache, so the queue returns larger.",
    by_cause={
        "slots": "Cause slots: running sits at the slot limit while KV has room - the engine ran out of "
                 "sequence slots, not memory. Add replicas or shed load; raise max-num-seqs only with "
                 "memory headroom for the larger batch's activations.",
        "kv": "Cause kv: the KV cache is full - admission waits for memory. Expect preemptions; cap output "
              "length or concurrency, or add KV capacity (see kv_pressure).",
        "deferred": "Cause deferred: requests wait although there is room - the scheduler deferred them "
                    "(waiting_by_reason=deferred). Find what they wait for (a KV transfer, an adapter, a "
                    "dependency) before adding capacity, which would not help.",
        "unknown": "Cause unknown: nothing is admitted though slots and KV are free - an admission deadlock "
                   "or a frozen scheduler. Treat it like a stall: check the step counters and take a stack of "
                   "the engine before restarting.",
    },
)

KV_PRESSURE = RunbookBranch(
    meaning="The KV cache is near full: admission stalls and the engine starts preempting.",
    check_next=(
        "KV usage and its trend, with the preemption delta in the same window.",
        "Output and input token sizes: long outputs hold KV longer (1,024-token outputs on an RTX 3060 "
        "serving a 7B model: KV 26.1% vs 1.4% for 128-token outputs).",
        "Running and waiting: KV-bound waiting shows free slots but no memory.",
    ),
    expected_range="KV maximum well below 100% under normal load (RTX 3060, 7B: 1.4% normal, 28% overload; real "
                   "vLLM CPU reached 95% with 16 long requests on 8,192 tokens of cache).",
    safe_action="Limit concurrency or max output tokens at admission, or add replicas / KV capacity.",
    rollback="Revert the limits when KV stays below the threshold for a full window at peak.",
    restart_destroys="The KV and prefix cache (hit rate restarts at zero) and every in-flight request.",
)

PREEMPTION = RunbookBranch(
    meaning="The engine preempted (vLLM) or retracted (SGLang) running requests within this window.",
    check_next=(
        "The preemption counter's delta in the window - never its cumulative value, which carries old "
        "traffic (a peer tool reports cumulative preemptions as current pressure).",
        "Whether tokens still progress: a preemption burst that still steps is degraded, not stalled.",
        "KV usage at the same time, and recompute cost: a preempted request redoes its prefill.",
    ),
    expected_range="0 preemptions per window under normal load (real vLLM CPU: +16 at KV 95%, with 10 waiting).",
    safe_action="Lower concurrency (max-num-seqs) or add KV capacity; cap max output tokens.",
    rollback="Restore the previous limits after the preemption delta stays 0 across a peak window.",
    restart_destroys="KV state of running and preempted requests, and the counters' baseline.",
)

HISTOGRAM_BLIND = RunbookBranch(
    meaning="A latency histogram's buckets cannot resolve the latencies observed: almost every observation "
            "sits in one bucket, so a quantile reads a bucket edge, not a measurement.",
    check_next=(
        "Which histogram, and the share of observations in its first (or last finite) bucket.",
        "Measure the same latency another way: client-side per-request timings from the load "
        "generator or the application's own logs.",
    ),
    expected_range="Observations spread over several buckets. Real vLLM CPU: 23,955 of 23,984 ITL "
                   "observations in the first bucket (le=0.01), so histogram_quantile(0.99) reads ~9.9 ms "
                   "whatever the true latency.",
    safe_action="No action on the server. Do not alert on that quantile; use client-side measurements.",
    rollback="Nothing to roll back: this branch is read-only.",
    restart_destroys="A restart changes nothing about bucket layout; it only resets the counters.",
)

TARGET_RESTARTED = RunbookBranch(
    meaning="The target's identity changed (PID + create time) or its counters reset: it restarted.",
    check_next=(
        "Whether a previous bundle shows an engine death, an exit or a stall just before: the restart "
        "may have been the supervisor's answer to it.",
        "Readiness after the restart: startup stages and the time to /health 200.",
        "Counter deltas across the reset are meaningless: compare from the new baseline only.",
    ),
    expected_range="A stable identity between planned deploys.",
    safe_action="Confirm the restart was intended; if not, read the previous bundle before anything else.",
    rollback="Nothing to roll back: the restart already happened.",
    restart_destroys="Already destroyed: KV and prefix cache, in-flight requests, cumulative counters.",
)

REQUESTS_NO_TOKEN = RunbookBranch(
    meaning="Requests are in flight through `servewatch proxy` and none of them got a byte from the engine "
            "for far longer than the recent time to first token (scaled up for a long prompt): the engine "
            "accepted the work and stopped answering. The engine's own gauges may show nothing running "
            "(a stopped tensor-parallel rank leaves vLLM reporting 0 running, 0 waiting) while clients wait.",
    check_next=(
        "The requests samples in the bundle: in-flight count, the oldest request waiting for its first "
        "token and how long no byte came; a queue that grows while quiet_s grows confirms a wedge.",
        "Process states in the bundle: an engine core or worker in status 'stopped' or at ~0% CPU while "
        "requests wait names the fault domain; take a stack (`py-spy dump --pid PID`) before touching it.",
        "Send one request yourself with a timeout (`curl -m 20 URL/v1/completions` with max_tokens 1) "
        "directly to the engine, past the proxy: no answer confirms the engine, an answer points at the "
        "proxy's upstream connection.",
    ),
    expected_range="A served request gets its first token within a few times the recent TTFT p99 (a long "
                   "prompt within a few times its expected prefill); an overload served in turn delivers "
                   "tokens to some request every step.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router); the requests waiting on it will not finish by themselves.",
    rollback="Return the replica to routing once requests through the proxy get tokens again.",
    restart_destroys="The requests waiting on the engine, the KV and prefix cache contents, and the frozen "
                     "process state that shows where it hung: take the stack before any restart.",
)


NOT_SERVING = RunbookBranch(
    meaning="/health answers 2xx, but a one-token completion sent by the probe got no token within its "
            "deadline (or failed) and no progress counter moved. An engine that hangs while idle keeps its "
            "gauges at 0 running and 0 waiting and its counters flat, which reads exactly like an idle "
            "server; every request that arrives waits forever.",
    check_next=(
        "Process states in the bundle: an engine core or worker in status 'stopped' or at ~0% CPU while "
        "requests wait explains it (a SIGSTOPped vLLM worker with nothing running gives this signature: "
        "/health 200, /metrics answering with 0 running, 0 waiting, frozen counters).",
        "Take a stack of the engine-core process and its workers before touching them (e.g. `py-spy dump "
        "--pid PID`): a blocked queue, collective or kernel launch names the fault domain.",
        "Send one request yourself with a timeout (`curl -m 20 URL/v1/completions` with max_tokens 1): "
        "no answer confirms the probe; an answer with a 4xx means the probe's request is wrong, not the "
        "server.",
        "The probe's latency over time in the bundle: answers that got slower before the first miss point "
        "at a degrading engine; a sudden miss at a wedge.",
    ),
    expected_range="An idle server answers a one-token completion in well under a second (a real vLLM on "
                   "a 2-core CPU with a tiny model: tens of milliseconds); the deadline (10 s by default) "
                   "is far outside that range.",
    safe_action="Keep this bundle and a stack dump, then stop routing new traffic to this replica (drain it at "
                "the router / load balancer); the requests already waiting on it will not finish by "
                "themselves. Draining is reversible and keeps the evidence alive.",
    rollback="Return the replica to routing once probes are served again for several intervals in a row.",
    restart_destroys="The requests waiting on the hung engine (they are lost either way), the KV and prefix "
                     "cache contents, and the frozen process state that shows where it hung: take the stack "
                     "before any restart.",
)

SERVER_ERRORS = RunbookBranch(
    meaning="A share of the requests of the last minute ended in a 5xx (or the engine finished them with "
            "reason error): the server, not the client, failed them.",
    check_next=(
        "Which status: 500 is an exception in the API server or the engine; 503 is a server that refuses "
        "work (starting, draining, its engine dead, or SGLang's own request timeouts); 502/504 come from a "
        "proxy in front of the server.",
        "Whether engine_dead, health_loss or a stall fired at the same time: 5xx that follow an engine "
        "death are its consequence; 5xx on a healthy engine point at a request pattern or a software fault.",
        "The log tail at the verdict's onset for tracebacks (the bundle keeps the engine's grammar "
        "literals, not the request text).",
        "Whether the errors follow one client or one kind of request (the client's own logs).",
    ),
    expected_range="0 5xx responses per window on a healthy server.",
    safe_action="Keep the bundle and the log; take the replica out of routing if other replicas serve, so "
                "clients stop receiving errors while the cause is read.",
    rollback="Return it to routing once a window passes with no 5xx.",
    restart_destroys="In-flight requests and the KV and prefix cache; an exception that repeats on the next "
                     "request of the same kind survives a restart.",
)

CLIENT_ERRORS = RunbookBranch(
    meaning="A share of the requests of the last minute were refused as the client's error (4xx): the server "
            "works and is doing its job; the clients send what it cannot serve.",
    check_next=(
        "The cause the verdict names: inputs over the model's maximum length (a real vLLM answers 400 "
        "before the engine sees the request), an unknown model name (404), a path without a route (404), "
        "max_tokens out of range (400), credentials (401/403), a rate limit (429).",
        "The model's maximum length (vLLM's 'Maximum concurrency for N tokens per request' startup line) "
        "against what the clients send: prompt plus max_tokens must fit.",
        "Which client or release started sending them: the onset time against deploys of the clients.",
    ),
    expected_range="A few 4xx are normal; a quarter of all responses in a minute is not.",
    safe_action="No action on the server. Tell the clients' owners the cause; if longer inputs are "
                "intended, raise the maximum length only where the KV cache still fits it.",
    rollback="Nothing to roll back on the server: this branch is read-only.",
    restart_destroys="A restart fixes nothing here and drops in-flight requests and the KV cache.",
    by_cause={
        "input_too_long": "Clients send prompts over the model's maximum length: truncate or chunk on the "
                          "client, or raise --max-model-len where the KV cache still holds it.",
        "unknown_path": "Clients call a path the server has no route for: check the client's base URL and "
                        "API version (/v1/...).",
        "not_found": "Clients name a model the server does not serve, or call a path it has no route for: "
                     "compare the client's model name with GET /v1/models.",
        "rate_limited": "The server's own limit refuses work: read it together with overload.",
    },
)

REQUESTS_ABORTED = RunbookBranch(
    meaning="A share of the requests the engine finished in the last minute were aborted: the client went "
            "away (a timeout, a cancel, a disconnect) before the answer was complete.",
    check_next=(
        "Latency at the same time (TTFT and queue time): clients give up when the wait exceeds their "
        "timeout, so aborts usually follow overload or a slow engine.",
        "The clients' timeout against the e2e latency p99: a timeout below it aborts normal requests.",
        "Whether an engine death or a restart is in the window: requests it ends count as aborted too.",
    ),
    expected_range="Close to 0 aborted per window; a quarter of the finished requests is not normal.",
    safe_action="Relieve the latency that makes clients give up (see overload); align client timeouts "
                "with the measured latency.",
    rollback="Restore previous limits once the abort share stays low across a peak window.",
    restart_destroys="The requests still running, which would then be aborted too.",
)

STARTUP_STALLED = RunbookBranch(
    meaning="The target is starting and has not reached its next startup stage for longer than its earlier "
            "stages allow: the start is stuck at the stage the verdict names (it is not 'health lost': it was "
            "never healthy since it started).",
    check_next=(
        "The stage it stopped after and what comes next: loading weights (storage, a download, a full "
        "disk), compiling (a compile cache that fails to load makes every start compile again: ~20 s on a "
        "2-core CPU for a tiny model), sizing the KV cache (memory profiling), capturing graphs, or the API "
        "server's start.",
        "Process states in the bundle: a member in status 'stopped' or at 0% CPU is not working; one "
        "at 100% is still working and the bound may be too tight for this model (raise "
        "startup_stall_floor_s).",
        "A stack of the engine process (e.g. `py-spy dump --pid PID`) shows where it waits.",
        "The previous starts of the same deployment: how long each stage took then (the stage table of "
        "the report).",
    ),
    expected_range="Each stage follows the previous one within a few times the longest earlier stage; a real "
                   "vLLM 0.32 on 2 CPU cores reached /health 200 in 30–50 s (imports ~16 s, compile ~20 s).",
    safe_action="Keep the bundle and a stack, then stop the start and start again; if the same stage hangs "
                "again, fix its cause (storage, memory, compile cache) before retrying.",
    rollback="Nothing to roll back: the replica never served.",
    restart_destroys="Only the progress of this start (weights already read, compile results not yet cached); "
                     "no request was served yet.",
)

CRASH_LOOP = RunbookBranch(
    meaning="The target died or was restarted several times within a few minutes: one failure repeating "
            "under a supervisor (systemd, Kubernetes, a wrapper script), not unrelated restarts.",
    check_next=(
        "The first failure the verdict names (its engine-death or startup-failure line, or its exit code): "
        "the later ones usually repeat it, and later restarts overwrite its log and counters.",
        "How far each start gets (the startup stages): dying at the same stage every time is a "
        "configuration or resource fault (KV sizing, memory, a missing file), not load.",
        "Whether the deaths follow traffic: an engine that dies a fixed time after ready under load points "
        "at a request pattern (an activation out-of-memory at high concurrency).",
        "The supervisor's restart policy and back-off: a loop without back-off hides the cause in churn.",
    ),
    expected_range="No restart between planned deploys.",
    safe_action="Stop the supervisor from restarting this replica (or give it a back-off), keep its log and "
                "the first failure's bundle, and fix the cause before the next start.",
    rollback="Re-enable the restarts once one start has stayed up through a peak window.",
    restart_destroys="Each restart already destroyed the previous start's evidence: in-flight requests, the "
                     "KV cache, counters and the tail of the log if it is not kept.",
)


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

GPU_FAULT = RunbookBranch(
    meaning="A GPU that a process of this engine holds reported a fault: an Xid critical error (NVML's event), an "
            "uncorrectable ECC error, a row-remap failure, or it no longer answers NVML at all (fallen off the "
            "bus). The why line names the GPU (index, UUID, PCI bus id), the rank on it, the Xid with its meaning "
            "and NVIDIA's immediate action from the Xid catalogue "
            "(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). Where that action needs the "
            "hardware (reset the GPU, reboot the node), restarting the server puts it back on the same broken GPU.",
    check_next=(
        "`nvidia-smi -q -i UUID` for the named GPU: ECC errors, retired pages / remapped rows (pending, failure), "
        "and whether it answers at all.",
        "The kernel log where it can be read (`dmesg | grep -i xid`): the Xid's own line, with its pid and the "
        "codes that came with it (a 48 followed by 63/64, a 154 naming the recovery action).",
        "The other GPUs of the node: one Xid on one GPU is that GPU; the same Xid on every GPU is the node "
        "(power, PCIe switch, driver).",
    ),
    expected_range="No Xid beyond informational ones (63 a page retired as designed, 92 a high corrected-error "
                   "rate), 0 uncorrectable volatile ECC errors, no row-remap failure, every GPU answering NVML.",
    safe_action="For a hardware action (reset_gpu, reboot): drain the node (cordon it, stop routing to it) and do not "
                "restart the server on that GPU; reset the GPU (`nvidia-smi -r -i UUID`) or reboot as NVIDIA's "
                "action says, then run a diagnostic (dcgmi diag) before returning it. For restart_app: restart the "
                "process.",
    rollback="Return the node to scheduling once the GPU has been reset or replaced and a diagnostic passes.",
    restart_destroys="Nothing the fault has not already destroyed: the requests on that GPU are lost with it. A "
                     "restart onto the same GPU makes a crash loop out of a hardware fault.",
    by_cause={},
)

GPU_THROTTLED = RunbookBranch(
    meaning="A GPU the engine holds runs with its SM clock held down by a thermal, power-brake or hardware-"
            "slowdown reason (NVML's clock-event reasons), and the engine's token rate fell since: the slowdown "
            "is the GPU, not more demand. Without the GPU's reasons it reads as overload.",
    check_next=(
        "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i UUID`: which reason is active, the temperature and "
        "the power draw against its limit.",
        "The node's cooling and power: fans, inlet temperature, a PSU or power-brake signal (HW power brake is "
        "asserted by the system, not the GPU).",
        "Whether other GPUs of the node are throttled too (the node's cooling) or only this one (its slot, its "
        "heatsink).",
    ),
    expected_range="Under load a GPU runs at or near its maximum SM clock; a software power cap at full load is "
                   "normal, thermal and HW slowdown are not.",
    safe_action="Page the owner of the hardware; move load away from the node if the rate it serves no longer "
                "meets the SLO. Adding replicas elsewhere helps; adding load here does not.",
    rollback="Return load once the clocks are back at their maximum under load for several readings.",
    restart_destroys="The KV and prefix caches; a restart does not cool a GPU.",
)

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
