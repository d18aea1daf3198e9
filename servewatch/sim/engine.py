"""The simulated engine: scheduler + roofline step time + faults + metrics + logs, on one clock.

Everything happens in `poll()`: fire what is due (faults, readiness, the periodic log line, exit),
commit the in-flight step if its end time has passed, and start the next step if there is work. It
returns the next time something will be due. Virtual time drives it with `run_until(t)` (jump the
clock from due time to due time; no sleeping); real time drives it with `run_realtime()` (one
asyncio task that sleeps until the next due time or until a submission wakes it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servewatch.clock import Clock, VirtualClock
from servewatch.sim import roofline, tokens
from servewatch.sim.behaviour import behaviour_for
from servewatch.sim.config import SimConfig
from servewatch.sim.faults import PD_KINDS, STARTUP_KINDS, SimFault, FaultSpecError, fault_from_json, parse_fault_spec
from servewatch.sim.kvcache import BlockPool
from servewatch.sim.logs import LogSink
from servewatch.sim.pd import PdSide
from servewatch.sim.request import FINISH_ABORT, RUNNING, Request
from servewatch.sim.scheduler import Scheduler, StepPlan, SimStep

STARTING, READY, DEAD, EXITED = "starting", "ready", "dead", "exited"
NO_ANSWER = 0   # health(): the server would not answer at all (not listening)
MAX_CARRY_S = 0.05


class RequestRejected(ValueError):
    """A request the real server would refuse with HTTP 400 (message in the server's words)."""

    status = 400


class RequestFailed(RuntimeError):
    """A request the server fails with a 5xx (the error-storm fault)."""

    def __init__(self, status: int = 500):
        super().__init__("Internal Server Error" if status == 500 else f"HTTP {status}")
        self.status = status


class EngineDeadError(RuntimeError):
    def __init__(self) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.")


@dataclass
class _InFlight:
    plan: StepPlan
    t_start: float
    t_end: float


class SimEngine:
    def __init__(self, config: SimConfig | None = None, clock: Clock | None = None, *, log_stream=None):
        self.config = cfg = dataclasses.replace(config) if config is not None else SimConfig()  # ours to adjust
        self.clock = clock if clock is not None else VirtualClock()
        self.started_at = self.clock.now()
        self._auto_fit_from: int | None = None
        if cfg.num_blocks * cfg.block_size < cfg.max_model_len and not _has_startup_oom(cfg.faults):
            self._auto_fit_from = cfg.max_model_len
            cfg.max_model_len = cfg.num_blocks * cfg.block_size
        self.pool = BlockPool(cfg.num_blocks, enable_prefix_caching=cfg.enable_prefix_caching)
        self.scheduler = Scheduler(pool=self.pool, block_size=cfg.block_size, max_num_seqs=cfg.max_num_seqs,
                                   max_batched_tokens=cfg.max_batched_tokens, max_model_len=cfg.max_model_len)
        self.behaviour = behaviour = behaviour_for(cfg.dialect)
        self.pd = PdSide(self) if cfg.pd_role else None     # a prefill or decode instance's KV connector side
        self.metrics = behaviour.make_metrics(self, self.started_at)
        self.log = behaviour.make_log(self, LogSink(log_stream))
        self.state = STARTING
        self.exit_code: int | None = None
        self.exit_at: float | None = None
        self.death_reason: str | None = None
        self.stalled_since: float | None = None
        self.stall_until: float | None = None
        self._aborts_unreported: list[Request] = []    # client aborts a stopped scheduler has not yet counted
        self.slow_factor = 1.0
        self.oom_budget_mib: float | None = None
        self.oom_exit_code = 1
        self._startup_hang = False
        self._wedge_when_idle = False
        self._wedge_duration: float | None = None
        self._startup_oom = False
        self._stages = self._stage_plan()      # (due, stage): the startup log lines still to write
        self.error_status: int | None = None   # error-storm: what every completion request gets
        self.error_until: float | None = None
        self.crash_every: float | None = None  # crash-loop: ready → death interval
        self._crash_at: float | None = None
        self.restarts = 0                      # crash-loop: how often the supervisor started it again
        self._pending: list[tuple[float, int, SimFault]] = []
        self._inbox: list[Request] = []       # submitted, not yet seen by the scheduler (mid-step arrivals)
        self._polling = False
        self._inflight: _InFlight | None = None
        self._next_rid = 0
        self._next_log_at = self.started_at + cfg.log_stats_interval
        self.steps = 0
        self.last_result: SimStep | None = None
        self.last_output_at = self.started_at
        self.max_lag = 0.0
        self.total_lag = 0.0
        self._wake_event: asyncio.Event | None = None
        self.on_exit: list[Callable[[SimEngine], None]] = []
        for spec in cfg.faults:
            self.inject(parse_fault_spec(spec))
        self.poll()

    # --- observation ---------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    @property
    def kv_used_tokens(self) -> int:
        return self.pool.num_used * self.config.block_size

    @property
    def kv_evictable_tokens(self) -> int:
        return self.pool.num_evictable * self.config.block_size

    @property
    def running_context_tokens(self) -> int:
        return sum(r.num_tokens for r in self.scheduler.running)

    @property
    def stalled(self) -> bool:
        return self.stalled_since is not None

    @property
    def in_flight(self) -> int:
        return self.num_running + self.num_waiting + len(self._inbox)

    def health(self) -> int:
        """The status GET /health would return now; NO_ANSWER (0) when nothing listens.

        No answer after exit; 503 once dead. While starting: 503 if the server already listens (SGLang),
        else no answer (vLLM). Once ready: 200, except that a generation probe (SGLang) is 503 once a
        stall has lasted its timeout (`health_timeout`); vLLM's stays 200 through a stall."""
        if self.state == EXITED:
            return NO_ANSWER
        if self.state == DEAD:
            return 503
        if self.state == STARTING:
            return 503 if self.behaviour.listens_while_starting else NO_ANSWER
        if (self.behaviour.health_generates and self.stalled
                and self.clock.now() - self.stalled_since >= self.config.health_timeout):
            return 503
        return 200

    def metrics_text(self) -> str:
        return self.metrics.text()

    # --- requests --------------------------------------------------------------------------------
    def submit(self, prompt_tokens: int | None = None, max_tokens: int = 16, *,
               prompt: str | Sequence[str] | None = None, ignore_eos: bool = False,
               prefix_key: object = None, is_streaming: bool = True,
               listener: Callable[[Request], None] | None = None, count_in_metrics: bool = True,
               greedy: bool = False, external_tokens: int = 0) -> Request:
        """Queue a request. Give `prompt_tokens` (with an optional `prefix_key`: requests with the same
        key share their prompt's leading blocks, i.e. prefix-cache hits), or `prompt` text / pre-split
        pieces (hashed for real prefix matching). `greedy` (temperature 0): the completion depends only
        on the prompt and the engine's seed (its "weights"), as greedy decoding does. `external_tokens`: prompt
        tokens whose KV came by transfer (a P/D decode), not computed here. Returns the live Request (the handle)."""
        if self.state in (DEAD, EXITED):
            raise EngineDeadError()
        cfg = self.config
        if self.error_status is not None and self.error_status >= 500:
            raise RequestFailed(self.error_status)
        if self.error_status is not None:
            rejected = RequestRejected(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, your prompt contains "
                "more tokens. Please reduce the length of the input prompt.")
            rejected.status = self.error_status
            rejected.prompt_tokens = cfg.max_model_len + 1     # the storm: clients send prompts over the limit
            raise rejected
        rid = self._next_rid
        self._next_rid += 1
        if prompt is not None:
            pieces = tokens.pieces(prompt) if isinstance(prompt, str) else list(prompt)
            prompt_len = len(pieces)
            hashes = _chain(pieces[i * cfg.block_size:(i + 1) * cfg.block_size]
                            for i in range(prompt_len // cfg.block_size))
        else:
            if prompt_tokens is None:
                raise ValueError("give prompt_tokens or prompt")
            prompt_len = int(prompt_tokens)
            key = prefix_key if prefix_key is not None else ("unique", rid)
            hashes = _chain((key, i) for i in range(prompt_len // cfg.block_size))
        if prompt_len < 1:
            raise RequestRejected("The prompt cannot be empty.")
        if max_tokens < 1:
            raise RequestRejected("max_tokens must be at least 1, got %d." % max_tokens)
        if prompt_len + max_tokens > cfg.max_model_len:
            raise RequestRejected(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.")
        stream_seed = cfg.seed * 7919 + rid
        rng = random.Random(cfg.seed * 1_000_003 + rid)
        if greedy and prompt is not None:
            stream_seed = _greedy_seed(cfg.seed, pieces)
            rng = random.Random(stream_seed)
        eos_at = rng.randint(max(1, max_tokens // 2), max(1, max_tokens * 3 // 2))
        request = Request(rid=rid, arrival=self.clock.now(), prompt_len=prompt_len, max_tokens=max_tokens,
                          ignore_eos=ignore_eos, eos_at=eos_at, block_hashes=hashes,
                          stream_seed=stream_seed, is_streaming=is_streaming,
                          count_in_metrics=count_in_metrics, listener=listener,
                          external_tokens=min(max(0, int(external_tokens)), prompt_len))
        self._inbox.append(request)
        if self._inflight is None and not self._polling:
            self.poll()          # an idle engine core picks a request up at once
        self._wake()
        return request

    def record_response(self, status: int, request_bytes: int = 0) -> None:
        """Count one completion request's HTTP status, as the server's middleware does: for drivers that
        call `submit` in-process, bypassing HTTP."""
        http = getattr(self.metrics, "http", None)
        if http is not None:
            http.observe("/v1/completions", "POST", status, 0.0, request_bytes)

    def abort(self, request: Request) -> bool:
        """Abort a request (client disconnect). Its KV is freed; finish reason `abort`, counted in /metrics
        only where the engine counts client aborts."""
        if request in self._inbox:
            self._inbox.remove(request)
            self.scheduler.finish(request, FINISH_ABORT, self.clock.now())
        elif not self.scheduler.abort(request, self.clock.now()):
            return False
        if self.behaviour.counts_client_aborts:
            if self.stalled_since is not None:
                # The abort reaches the metrics through the scheduler, which is stopped: counted once it runs
                # again (a real SGLang's prompt_tokens_total does not move while its scheduler is stopped).
                self._aborts_unreported.append(request)
            else:
                self.metrics.on_finished(request)
        self._wake()
        return True

    # --- faults ----------------------------------------------------------------------------------
    def inject(self, fault: SimFault | dict | str) -> None:
        """Apply a fault now, or at `fault.at` seconds after start if that is still ahead."""
        if isinstance(fault, str):
            fault = parse_fault_spec(fault)
        elif isinstance(fault, dict):
            fault = fault_from_json(fault)
        if fault.kind in PD_KINDS and (self.pd is None or self.pd.role != PD_KINDS[fault.kind]):
            raise FaultSpecError(f"{fault.kind} applies to a {PD_KINDS[fault.kind]} instance (--pd-role "
                                 f"{PD_KINDS[fault.kind]}), not to this one")
        if fault.kind in STARTUP_KINDS:
            if self.state != STARTING:
                raise ValueError(f"{fault.kind} only applies at startup")
            names = [name for _, name in self._stages]
            if fault.kind == "startup-hang":
                self._startup_hang = True
                last = fault.stage or "weights_loaded"
                if last not in names:
                    raise FaultSpecError(f"startup-hang@{last}: not a startup stage of this engine "
                                         f"(known: {', '.join(names)})")
                self._stages = self._stages[:names.index(last) + 1]
            else:
                self._startup_oom = True
                if self.log.FAILS_AT in names:
                    self._stages = self._stages[:names.index(self.log.FAILS_AT)]
            return
        due = self.started_at + fault.at if fault.at is not None else self.clock.now()
        if due > self.clock.now():
            self._pending.append((due, len(self._pending), fault))
            self._pending.sort(key=lambda item: (item[0], item[1]))
        else:
            self._apply(fault)
        self._wake()

    def _apply(self, fault: SimFault) -> None:
        now = self.clock.now()
        kind = fault.kind
        if self.state in (DEAD, EXITED):
            return
        if self.pd is not None and (kind in PD_KINDS or kind == "clear"):
            self.pd.apply(kind)
        if kind == "stall":
            if self.stalled_since is None:
                self.stalled_since = now
            self.stall_until = now + fault.duration if fault.duration else None
        elif kind == "wedge-idle":
            self._wedge_when_idle = True
            self._wedge_duration = fault.duration
            self._wedge_if_idle(now)
        elif kind == "clear":
            self._wedge_when_idle = False
            self._clear_stall(now)
            self.error_status = self.error_until = None
            self.slow_factor = 1.0
            self.scheduler.admission_blocked = False
            self.oom_budget_mib = None
        elif kind == "slow":
            self.slow_factor = fault.factor
        elif kind == "admission-deadlock":
            self.scheduler.admission_blocked = True
        elif kind == "crash-oom":
            self.oom_budget_mib = fault.budget_mib if fault.budget_mib is not None else self.config.hw.oom_budget_mib
            self.oom_exit_code = fault.exit_code if fault.exit_code is not None else 1
        elif kind == "error-storm":
            self.error_status = fault.status if fault.status is not None else 500
            self.error_until = now + fault.duration if fault.duration else None
        elif kind == "crash-loop":
            self.crash_every = fault.every if fault.every is not None else 10.0
            if self.state == READY:
                self._crash_at = now + self.crash_every
        elif kind == "engine-death":
            self._die("engine-death", fault.exit_code if fault.exit_code is not None else 1, self.log.engine_death)

    def _wedge_if_idle(self, now: float) -> None:
        """An armed idle wedge takes hold once nothing runs, waits or is in flight: the engine stops
        stepping (as a stall does), so what arrives next stays in its input queue, in no gauge."""
        if (self._wedge_when_idle and self.state == READY and self._inflight is None and not self._inbox
                and not self.scheduler.running and not self.scheduler.waiting):
            self._wedge_when_idle = False
            self.stalled_since = now
            self.stall_until = now + self._wedge_duration if self._wedge_duration else None

    def _clear_stall(self, now: float) -> None:
        if self.stalled_since is not None and self._inflight is not None:
            self._inflight.t_end += now - self.stalled_since   # the hung step resumes where it stopped
        self.stalled_since = None
        self.stall_until = None
        unreported, self._aborts_unreported = self._aborts_unreported, []
        for request in unreported:
            self.metrics.on_finished(request)

    def _die(self, reason: str, exit_code: int, log_lines: Callable[[], None]) -> None:
        now = self.clock.now()
        self.state = DEAD
        self.death_reason = reason
        log_lines()
        self._inflight = None
        self.stalled_since = None
        inbox, self._inbox = self._inbox, []
        for request in inbox:
            self.scheduler.finish(request, FINISH_ABORT, now)
        self.scheduler.abort_all(FINISH_ABORT, now)
        self.exit_code = exit_code
        self.exit_at = now + self.config.exit_delay

    # --- time ------------------------------------------------------------------------------------
    def poll(self) -> float:
        """Process everything due at the clock's now; return when something is next due (inf: never)."""
        self._polling = True
        try:
            return self._poll(self.clock.now())
        finally:
            self._polling = False

    def _poll(self, now: float) -> float:
        self._fire_timers(now)
        if self._wedge_when_idle:
            self._wedge_if_idle(now)
        flight = self._inflight
        carry = 0.0
        if flight is not None and self.stalled_since is None and now >= flight.t_end and self.state == READY:
            self._finish_step(now)
            # Host jitter (the sim's own process waiting for a CPU) is not the emulated GPU's time: a step
            # that ends late lets the next, back-to-back step start that much earlier (bounded).
            carry = min(now - flight.t_end, MAX_CARRY_S)
        if self._inflight is None and self.state == READY and self.stalled_since is None and self._inbox:
            # the engine core takes new requests from its input queue between steps (vLLM: queued_ts)
            inbox, self._inbox = self._inbox, []
            for request in inbox:
                self.scheduler.add(request, now)
        if self._inflight is None and self.state == READY and self.stalled_since is None \
                and (self.scheduler.running or self.scheduler.waiting):
            self._begin_step(now, carry)
        if self._inflight is None and self.state == READY and self.stalled_since is None:
            idle = getattr(self.metrics, "on_idle_loop", None)
            if idle is not None:
                idle(now)      # SGLang's scheduler keeps publishing while it has nothing to run
        return self._next_due()

    def run_until(self, t: float) -> None:
        """Virtual time only: advance the clock to `t`, running every step and timer due before it."""
        set_time = getattr(self.clock, "set", None)
        if set_time is None:
            raise TypeError("run_until needs a VirtualClock")
        stuck = 0
        while True:
            due = self.poll()
            if due > t:
                break
            stuck = stuck + 1 if due <= self.clock.now() else 0
            if stuck > 10_000:
                raise RuntimeError(f"simulator made no progress at t={self.clock.now():.6f}")
            set_time(max(due, self.clock.now()))
        if self.clock.now() < t:
            set_time(t)
            self.poll()

    def step(self) -> SimStep | None:
        """Virtual time only: run until the next step completes (advancing the clock by its duration).
        None if no step can run (idle, stalled, not ready, dead)."""
        self.poll()
        flight = self._inflight
        if flight is None or self.stalled_since is not None:
            return None
        steps = self.steps
        self.run_until(flight.t_end)
        return self.last_result if self.steps > steps else None

    async def run_realtime(self, max_wait: float = 0.5) -> None:
        """The real-time step loop, as one asyncio task; returns once the engine has exited."""
        self._wake_event = asyncio.Event()
        while self.state != EXITED:
            due = self.poll()
            if self.state == EXITED:
                break
            delay = min(due - self.clock.now(), max_wait)
            if delay <= 0:
                await asyncio.sleep(0)
                continue
            self._wake_event.clear()
            try:
                await asyncio.wait_for(self._wake_event.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass

    def _wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    def _fire_timers(self, now: float) -> None:
        while self._pending and self._pending[0][0] <= now:
            _, _, fault = self._pending.pop(0)
            self._apply(fault)
        while self.state == STARTING and self._stages and self._stages[0][0] <= now:
            self.log.stage(self._stages.pop(0)[1], self._auto_fit_from)
        if self.error_until is not None and now >= self.error_until:
            self.error_status = self.error_until = None
        if self._crash_at is not None and self.state == READY and now >= self._crash_at:
            self._crash_at = None
            self._die("crash-loop", 1, self.log.engine_death)
        if self.state == STARTING and not self._startup_hang and now >= self.started_at + self.config.startup_seconds:
            self._become_ready(now)
        if self.stall_until is not None and now >= self.stall_until:
            self._clear_stall(now)
        if self.pd is not None and self.state == READY and self.stalled_since is None:
            self.pd.expire_due(now)      # a stopped prefill's worker releases nothing
        if (self.behaviour.stall_watchdog and self.stalled_since is not None and self.state == READY
                and self.scheduler.running and now - self.stalled_since >= self.config.watchdog_timeout):
            self._die("watchdog", 137, self.log.stall_watchdog)
        if self.behaviour.periodic_stats_log and self.state in (READY, DEAD) and now >= self._next_log_at:
            self.log.stats(now)
            while self._next_log_at <= now:
                self._next_log_at += self.config.log_stats_interval
        if (self.state == DEAD and self.exit_at is not None and now >= self.exit_at
                and self.death_reason == "crash-loop"):
            self._restart(now)
        if self.state == DEAD and self.exit_at is not None and now >= self.exit_at:
            self.state = EXITED
            if self.behaviour.logs_shutdown:
                self.log.shutdown()
            for callback in list(self.on_exit):
                callback(self)

    def _stage_plan(self) -> list[tuple[float, str]]:
        return [(self.started_at + share * self.config.startup_seconds, name) for name, share in self.log.STAGES]

    def _restart(self, now: float) -> None:
        """The supervisor starts the crashed server again: a new process, its counters from zero."""
        cfg = self.config
        self.restarts += 1
        self.started_at = now
        self.pool = BlockPool(cfg.num_blocks, enable_prefix_caching=cfg.enable_prefix_caching)
        self.scheduler = Scheduler(pool=self.pool, block_size=cfg.block_size, max_num_seqs=cfg.max_num_seqs,
                                   max_batched_tokens=cfg.max_batched_tokens, max_model_len=cfg.max_model_len)
        self.pd = PdSide(self) if cfg.pd_role else None     # a new process: its leases and counters are gone
        self.metrics = self.behaviour.make_metrics(self, now)
        self.log = self.behaviour.make_log(self, self.log.sink)
        self.state = STARTING
        self.exit_code = self.exit_at = self.death_reason = None
        self._inflight = None
        self._stages = self._stage_plan()
        self._next_log_at = now + cfg.log_stats_interval
        self.last_output_at = now

    def _become_ready(self, now: float) -> None:
        while self._stages:
            self.log.stage(self._stages.pop(0)[1], self._auto_fit_from)
        if self._startup_oom:
            self.log.startup_oom()
            self.state = DEAD
            self.death_reason = "startup-oom"
            self.exit_code = 1
            self.exit_at = now
            return
        self.state = READY
        self.log.ready(self._auto_fit_from)
        self.last_output_at = now
        if self.crash_every is not None:
            self._crash_at = now + self.crash_every

    def _next_due(self) -> float:
        candidates = [math.inf]
        if self._inflight is not None and self.stalled_since is None:
            candidates.append(self._inflight.t_end)
        if self._pending:
            candidates.append(self._pending[0][0])
        if self.state == STARTING and self._stages:
            candidates.append(self._stages[0][0])
        if self.error_until is not None:
            candidates.append(self.error_until)
        if self._crash_at is not None and self.state == READY:
            candidates.append(self._crash_at)
        if self.state == STARTING and not self._startup_hang:
            candidates.append(self.started_at + self.config.startup_seconds)
        if self.stall_until is not None:
            candidates.append(self.stall_until)
        if self.pd is not None and self.pd.leases and self.state == READY and self.stalled_since is None:
            candidates.append(self.pd.next_expiry())
        if self.behaviour.stall_watchdog and self.stalled_since is not None and self.scheduler.running:
            candidates.append(self.stalled_since + self.config.watchdog_timeout)
        if self.behaviour.periodic_stats_log and self.state in (READY, DEAD):
            candidates.append(self._next_log_at)
        if self.state == DEAD and self.exit_at is not None:
            candidates.append(self.exit_at)
        return min(candidates)

    # --- steps -----------------------------------------------------------------------------------
    def _begin_step(self, now: float, carry: float = 0.0) -> None:
        plan = self.scheduler.schedule(now)
        for admission in plan.admitted:
            self.metrics.on_admitted(admission)
            self.log.on_admitted(admission)
        if plan.empty:
            return
        hw = self.config.hw
        if self.oom_budget_mib is not None:
            need_mib = len(plan.scheduled) * hw.vocab_size * 4 / 2**20
            if need_mib > self.oom_budget_mib:
                self._die("crash-oom", self.oom_exit_code,
                          lambda: self.log.oom(len(plan.scheduled), need_mib, self.oom_budget_mib))
                return
        duration = roofline.step_seconds(hw, tokens=plan.num_tokens, sequences=len(plan.scheduled),
                                         context_tokens=plan.context_tokens, slow_factor=self.slow_factor)
        self._inflight = _InFlight(plan, now - carry, now - carry + duration)

    def _finish_step(self, now: float) -> SimStep:
        flight = self._inflight
        self._inflight = None
        result = self.scheduler.apply(flight.plan, now)
        result.duration = now - flight.t_start
        lag = now - flight.t_end
        self.max_lag = max(self.max_lag, lag)
        self.total_lag += lag
        self.steps += 1
        self.last_result = result
        self.metrics.on_step(result)
        self.log.on_step(result)
        for request in result.finished:
            self.metrics.on_finished(request)
        for request in result.sampled:
            if request.status == RUNNING:
                request.notify()
        if result.sampled:
            self.last_output_at = now
        if not self.scheduler.running and not self.scheduler.waiting:
            on_idle = getattr(self.metrics, "on_idle", None)
            if on_idle is not None:
                on_idle(now)
            self._wedge_if_idle(now)
        return result


def _greedy_seed(seed: int, pieces: Sequence[str]) -> int:
    digest = hashlib.sha256("\x00".join([str(seed), *pieces]).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def _chain(blocks) -> list:
    out, previous = [], None
    for block in blocks:
        previous = hash((previous, tuple(block) if isinstance(block, list) else block))
        out.append(previous)
    return out


def _has_startup_oom(specs: Sequence[str]) -> bool:
    return any(spec.split("@")[0].split(":")[0].strip() == "startup-oom" for spec in specs)
