"""Run a plan: start (or prove) the target, then each fault in turn — recorder, prober and workload
started, the fault injected after its warm-up, held, reverted, observed — measure, check the
expectations, and at the end look for leaks (processes, ports, bundles)."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from servewatch.drill import measure as M
from servewatch.drill.faults import FAULTS
from servewatch.drill.plan import workload_headers
from servewatch.drill.pair import make as make_target
from servewatch.drill.target import DrillTarget, TargetError, pid_alive, port_held
from servewatch.actions.identity import ServerIdentityError
from servewatch.errors import ServewatchError


# Past the workload's end and its request timeout: the load's own teardown (closing connections).
WORKLOAD_JOIN_MARGIN_S = 10.0
WORKLOAD_FIRST_LEAD_S = 1.0    # workload_first: how long the requests get to take every slot before the recorder starts
LATE_SIGNAL_NOTE_S = 1.0       # a signal later than this after the injection began is said in the report
RUNNING_WORK_WAIT_S = 60.0     # a stop `on_running_work` waits at most this long for a request to run
RUNNING_WORK_TRIES = 3         # ... and is tried this many times when it lands on an idle engine
RUNNING_WORK_POLL_S = 0.2
# A pair's step of these kinds needs only the side it aims at up: the other side may lie dead from an earlier step
# (a pair start takes 40-120 s here), which the step's recorder then sees as that side's own verdicts.
PAIR_ONE_SIDE_KINDS = ("kill",)


class FaultNotRun(ServewatchError):
    pass


class TraceWorkload(M.Workload):
    """A plan's `workload: {trace: FILE, speed: X, start_s: S}`: the trace replayed open-loop (servewatch.load's
    trace replay) for the step's window, its rows from `start_s` on; a follow-on run (extend_to) sends the
    rows after those."""

    def __init__(self, *args, trace_offset_s: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace_offset_s = trace_offset_s

    def window(self) -> tuple[float, float]:
        speed = float(self.spec.get("speed", 1.0))
        first = float(self.spec.get("start_s", 0.0)) + self.trace_offset_s
        return first, first + self.duration_s * speed

    def extend_to(self, until: float) -> float:
        added = until - self.ends_at
        if added <= 0:
            return 0.0
        self.follow(TraceWorkload(self.url, self.model, self.spec, duration_s=added,
                                  after_s=max(0.0, self.ends_at - time.time()), request_timeout_s=self.request_timeout_s,
                                  seed=self.seed, headers=self.headers,
                                  trace_offset_s=self.trace_offset_s + self.window()[1] - self.window()[0]))
        self.ends_at = until
        return added

    def _run(self) -> None:
        from servewatch.load.runner import run_load
        from servewatch.load.scenarios import LoadConfig

        if self.after_s > 0 and self._root._stop_sending.wait(self.after_s):
            return                     # the drill's own timeline, as a scenario's workload keeps it (unless the
                                       # traffic was ended before)
        from servewatch.load.trace import read_trace

        spec = self.spec
        try:
            if not read_trace(spec["trace"], window=self.window(), max_rows=1, keep_bad=0).rows:
                return          # the trace ended before the step did: no traffic after it, as in the incident
        except (OSError, ValueError) as exc:
            self._problem = f"trace {Path(spec['trace']).name}: {getattr(exc, 'strerror', None) or exc}"
            return
        config = LoadConfig(url=self.url, scenario="custom", trace=spec["trace"], speed=float(spec.get("speed", 1.0)),
                            window=self.window(), tokenizer=spec.get("tokenizer", "approx"), model=self.model,
                            metrics_interval_s=0.0, seed=self.seed, request_timeout_s=self.request_timeout_s,
                            idle_timeout_s=self.request_timeout_s,
                            connect_timeout_s=float(spec.get("connect_timeout_s", M.CONNECT_TIMEOUT_S)),
                            sender_priority="normal", headers=self.headers)
        try:
            self._records = run_load(config, **self.load_options()).records
        except ServewatchError as exc:     # the trace by its name only: a drill's report is shareable
            self._problem = str(exc).replace(spec["trace"], Path(spec["trace"]).name)


@dataclass
class StepResult:
    index: int
    kind: str
    name: str
    target: str = "main"                                   # the plan's target it ran on
    touched: list[dict] = field(default_factory=list)     # {pid, title, role, rank}
    injected_at: float | None = None
    reverted_at: float | None = None
    not_run: str | None = None
    detected: dict[str, float] = field(default_factory=dict)
    explained: dict[str, str] = field(default_factory=dict)   # verdict -> its explanation (the detected firing)
    fired_before: list[str] = field(default_factory=list)   # verdicts concluded before the injection
    health: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)
    kubelet_health_s: float | None = None
    kubelet_livez_s: float | None = None
    impact: dict = field(default_factory=dict)
    recovery_s: float | None = None
    health_back_s: float | None = None
    health_slowest_s: float | None = None   # the longest a /health probe sent while the fault held waited
    restarted_by_drill_s: float | None = None
    bundles: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)      # {expectation, met, observed}
    guard: dict | None = None                             # what guard did (a step with guard:)
    cleared: dict[str, float] = field(default_factory=dict)   # verdict -> seconds after the fault to its clearing
    resumed_s: float | None = None      # the first token a request held across the fault's end got after it (M.resumed)
    elsewhere: dict[str, float] = field(default_factory=dict)  # a pair: verdicts that named another side, when
    server_exit: dict | None = None                       # {status (Popen's), reported (process_exit's)}
    log_seen: dict[str, bool] = field(default_factory=dict)   # expect.log_shows literal -> in the log after it
    thresholds: dict[str, float] = field(default_factory=dict)  # expect.fire_by_threshold verdict -> its threshold
    ready_s: float | None = None                          # at_start: the start the step made, to /health 200
    livez: dict[str, int] | None = None                   # serve: its livez answers while the fault held
    livez_other: dict[str, int] | None = None             # serve on a pair: the other side's livez meanwhile
    readyz: dict[str, int] | None = None                  # serve: its readyz answers while the fault held
    policy: dict | None = None    # what the fault demanded (an action class) and when guard and livez acted (M.policy)
    inconclusive: str | None = None   # "recorder starved N s": a miss while the recorder was starved (expect.inconclusive)

    @property
    def met(self) -> bool:
        return self.not_run is None and all(c["met"] for c in self.checks)

    def to_json(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out["met"] = self.met
        return out


class Context:
    """What a fault may use: the target's processes (proven before every signal), helpers it starts,
    the workload, the proxy."""

    def __init__(self, target: DrillTarget, step, result: StepResult, run):
        self.target, self.step, self.result, self.run = target, step, result, run
        self.url, self.host, self.port = target.url, target.host, target.port
        self.model = run.model
        self.max_model_len = target.spec.max_model_len
        self.proxy = None
        self.spawned: list[subprocess.Popen] = []
        self.waited = False          # the fault waited for a request to run before its signal
        self.log_offset = 0          # the server log's size at the injection (expect.log_shows reads after it)
        self.recorder_url: str | None = None   # servewatch proxy's, when it records the step: the workload's URL
        self.pair = None             # a prefill/decode pair's step: the pair (drill.pair); `target` is the side at fault

    def cannot(self, why: str) -> FaultNotRun:
        return FaultNotRun(why)

    def member(self, role, rank):
        proc, note = self.target.member(role, rank)
        if note:
            self.result.notes.append(note)
        return proc

    def signal(self, role, rank, sig: int):
        proc = self.member(role, rank)
        self.target.send(proc, sig)
        if not self.result.touched:     # the fault begins when its first signal is sent, not when it was decided
            self._injected_now()
        self.result.touched.append({"pid": proc.pid, "title": proc.title, "role": proc.role, "rank": proc.rank,
                                    "signal": signal.Signals(sig).name})
        return proc

    def hang(self, role, rank, seconds: float):
        """Block the main thread of the process aimed at for at most `seconds` (the test-only hook, drill.hang_hook):
        it reads state S, no stop visible. (The process, the request to release.)"""
        from servewatch.drill import hang_hook

        proc = self.member(role, rank)
        request = self.target.hang(proc, seconds)
        if not self.result.touched:
            self._injected_now()
        self.result.touched.append({"pid": proc.pid, "title": proc.title, "role": proc.role, "rank": proc.rank,
                                    "signal": hang_hook.signal_name()})
        return proc, request

    def _injected_now(self) -> None:
        """Stamp the injection at the signal itself. Finding and proving the process comes first, and on a
        2-core machine busy with generation the drill itself was frozen for ~9 s there: a worker stop
        stamped before it held 3 s instead of 12, with detection times counted from the wrong moment."""
        now = time.time()
        decided = self.result.injected_at
        if decided is not None and now - decided > LATE_SIGNAL_NOTE_S:
            why = "it waited for a request to run" if self.waited else "the drill was not scheduled meanwhile"
            self.result.notes.append(f"the signal went out {now - decided:.1f} s after the drill began injecting "
                                     f"({why}); times count from the signal")
        self.result.injected_at = now

    def stop_on_running_work(self, role, rank, tries: int = RUNNING_WORK_TRIES,
                             timeout_s: float = RUNNING_WORK_WAIT_S):
        """SIGSTOP the process aimed at once /metrics shows a request running on its engine (its DP rank's, or
        the server's), and keep the stop only if the gauges, frozen with it, still show one: a request can end
        between the read and the signal (a 256-token request takes about 2 s here), and a stop that lands
        between two waves finds nothing admitted — no counter can show that stall, and at DP=2 vLLM's API
        server sends the next requests to the other engine. A stop that finds the engine idle is undone at once
        (well under any stall threshold) and tried again, up to `tries`; bounded by timeout_s in all, after
        which the last stop is kept and the report says so."""
        proc = self.member(role, rank)
        where = "the server" if proc.dp is None else f"engine {proc.dp} (DP rank {proc.dp})"
        deadline = time.monotonic() + timeout_s
        self.waited = True
        attempt = 0
        while True:
            attempt += 1
            before = self.target.running(proc.dp)
            while time.monotonic() < deadline and not before:
                time.sleep(RUNNING_WORK_POLL_S)   # another process's state: polled
                before = self.target.running(proc.dp)
            stopped = self.signal(role, rank, signal.SIGSTOP)
            frozen = self.target.running(proc.dp)
            if frozen == 0 and attempt < tries and time.monotonic() < deadline:
                self.signal_member(stopped, signal.SIGCONT)     # idle: undone at once, and the stop starts again
                self.result.touched.clear()
                self.result.notes.append(f"a stop found {where} idle (its gauges at 0) and was undone at once")
                continue
            if frozen is None:
                self.result.notes.append("/metrics did not answer while the process was stopped: the running "
                                         "count is the one read just before the stop")
            elif not frozen:
                self.result.notes.append(f"no request running on {where} at the stop after {attempt} tries: kept")
            self.result.facts["running_at_stop"] = frozen if frozen is not None else (before or 0.0)
            return stopped

    def signal_tree(self, sig: int) -> list:
        """One signal to every process of the instance aimed at (its children first, each proven again right
        before): a whole server stopped or killed, as a node's failure takes it. The processes signalled."""
        procs = list(reversed(self.target.processes()))
        if not procs:
            raise FaultNotRun(f"the server behind {self.target.url} is not running")
        for proc in procs:
            self.target.send(proc, sig)
            if not self.result.touched:
                self._injected_now()
            self.result.touched.append({"pid": proc.pid, "title": proc.title, "role": proc.role, "rank": proc.rank,
                                        "signal": signal.Signals(sig).name})
        return procs

    def hand_over(self):
        """A pair's step: one request prefilled by hand before the fault lands (drill.pair.Handover); its decode leg
        is sent once the fault holds (`handover.decode`), so that decode waits for KV from the side at fault."""
        from servewatch.drill.pair import Handover

        if self.pair is None:
            raise FaultNotRun("decode_waits: only on a prefill/decode pair")
        self.waited = True
        handover = Handover(self.pair, self.model, self.result.index)
        why = handover.prefill()
        if why:
            raise FaultNotRun(f"decode_waits: {why}")
        return handover

    def signal_member(self, proc, sig: int) -> None:
        """Undo a signal (SIGCONT after SIGSTOP) on the very process it was sent to; what was not sent is
        said in the report."""
        problem = self.target.undo(proc, sig)
        if problem:
            self.result.notes.append(problem)

    def spawn(self, command: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.spawned.append(proc)
        self.run.helpers.append(proc)
        return proc

    def end_spawned(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def start_workload(self, *, after_s: float, duration_s: float, url: str | None = None) -> None:
        """The step's workload; `url`: sent there instead (a pair's fault that routes around the router)."""
        self.run.start_workload(self, after_s=after_s, duration_s=duration_s, url=url)

    def restart_target(self) -> float:
        if not self.target.owned:
            raise FaultNotRun("the drill restarts only a server it started itself")
        took = self.target.restart()
        self.run.watch_pid_changed = True
        return round(took, 1)


class DrillRun:
    def __init__(self, plan, out_dir: Path, say=lambda line: None):
        self.plan, self.out_dir, self.say = plan, out_dir, say
        self.helpers: list[subprocess.Popen] = []
        self.proxies = []
        self.results: list[StepResult] = []
        self.model = "unknown"
        self.model_path: str | None = None                  # where it was loaded from: in no bundle
        self.workloads: list[M.Workload] = []
        self.watch_pid_changed = False
        self.launched_at = 0.0                              # epoch of the last launch an at_start step made
        self.target: DrillTarget | None = None              # the current step's target
        self.targets: dict[str, DrillTarget] = {}           # every target started, by the plan's name
        self.started = self.ended = None
        self.leaks: dict = {}
        self.consent = plan.target.consent if plan.target.existing else None

    # -- the whole drill
    def run(self) -> list[StepResult]:
        self.started = time.time()
        steps = self.plan.steps
        try:
            for i, step in enumerate(steps):
                last = all(later.on != step.on for later in steps[i + 1:])   # the last on its target
                self.results.append(self.run_step(i, step, last=last))
        finally:
            for target in self.targets.values():
                target.stop()
            for proxy in self.proxies:
                proxy.close()
            for proc in self.helpers:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)
            self.ended = time.time()       # also when the drill ends on an error: the report says how long
        self.leaks = self.find_leaks()
        return self.results

    def _use(self, name: str, result: StepResult) -> bool:
        """Make the plan's target `name` the current one, started when its first step comes; the one running
        before, when the drill owns it, is stopped first (one engine at a time on the machine)."""
        target = self.targets.get(name)
        if target is not None and target is self.target:
            return True
        if self.target is not None and self.target.owned:
            self.target.stop()
        self.target = target
        if target is not None:          # started before: _ensure_up starts it again
            return True
        spec = self.plan.named_targets()[name]
        self.target = self.targets[name] = make_target(spec, self.out_dir / "logs" / ("" if name == "main" else name))
        try:
            self.target.start()             # proves the PID; an existing server needs consent
        except BaseException as exc:        # it failed, or was interrupted (^C): nothing left behind
            if self.target.owned:
                self.target.stop()
            if not isinstance(exc, ServewatchError) or not self.results:   # nothing drilled yet: no drill
                raise
            result.not_run = f"target {name} could not be started: {exc}"
            return False
        ready = f" (/health 200 after {self.target.ready_s[0]:.1f} s)" if self.target.ready_s else ""
        self.say(f"target{' ' + name if self.plan.targets else ''}: {spec.describe()}{ready}")
        note = self.target.cpu_note()
        if note:
            self.say(f"target{' ' + name if self.plan.targets else ''}: {note}; the drill's timings may wait for a CPU")
        self.model = self.target.model()
        self.model_path = self.target.model_path()
        return True

    def start_workload(self, ctx: Context, *, after_s: float, duration_s: float, url: str | None = None) -> None:
        url = url or (ctx.proxy.url if ctx.proxy is not None else (ctx.recorder_url or self.target.url))
        step = ctx.step
        timeout = step.request_timeout_s
        spec = step.workload if step.workload is not None else self.plan.workload
        if spec.get("tokenizer") == "model":    # the served model's own tokenizer: prompts of exact token counts
            if self.model_path:
                spec = {**spec, "tokenizer": self.model_path}
            else:
                spec = {**spec, "tokenizer": "approx"}
                ctx.result.notes.append("workload: the served model's directory is not known here: prompt sizes "
                                        "approximate (about one token a word)")
        headers = workload_headers(spec, self.plan.named_targets()[step.on])
        kind = TraceWorkload if "trace" in spec else M.Workload
        workload = kind(url, self.model, spec, duration_s=duration_s, after_s=after_s,
                        request_timeout_s=timeout, seed=ctx.result.index, headers=headers).start()
        self.workloads.append(workload)
        ctx.workload = workload

    # -- one fault
    def run_step(self, index: int, step, last: bool = False) -> StepResult:
        from servewatch.drill import full_disk
        from servewatch.drill.proxy import DelayProxy

        result = StepResult(index=index + 1, kind=step.kind, name=step.name, target=step.on)
        fault = FAULTS[step.kind](step)
        up = self._launch(step.on, result) if step.at_start else self._use(step.on, result)
        self.say(f"[{index + 1}/{len(self.plan.steps)}] {step.name}: "
                 + (f"at the start ({'when its log shows “' + step.on_log + '”' if step.on_log else 'at once'}): "
                    if step.at_start else "") + fault.summary)
        if not (up and (step.at_start or self._ensure_up(result, step))):
            return result
        bundle_dir = self.out_dir / "bundles" / f"{index + 1:02d}-{step.kind}"
        disk_mode = None
        wrapper = None
        if fault.full_bundle_dir:
            disk_mode = full_disk.make_full(bundle_dir)
            result.facts["full_disk"] = ("a 1 MiB tmpfs, filled" if disk_mode == "tmpfs"
                                         else "simulated: every write below the directory fails with ENOSPC")
            if disk_mode == "simulated":
                wrapper = full_disk.wrapper(bundle_dir)
        else:
            bundle_dir.mkdir(parents=True, exist_ok=True)
        pair = self.target if getattr(self.target, "sides", None) else None
        aimed = pair.side(step.side) if pair is not None else self.target     # the instance the fault aims at
        ctx = Context(aimed, step, result, self)
        ctx.workload = None
        ctx.pair = pair
        if fault.via_proxy:
            ctx.proxy = DelayProxy(aimed.host, aimed.port).start()
            self.proxies.append(ctx.proxy)
        deployment = None
        if pair is not None:
            names = pair.names()
            result.facts["side"] = f"{step.at_fault} {names[step.at_fault]}"     # what the verdicts must name
            if step.at_fault != step.side:
                result.facts["fault_on"] = f"{step.side} {names[step.side]}"
            from servewatch.drill.pair import other

            deployment = {"prefill": pair.side("prefill").url, "decode": pair.side("decode").url,
                          "instance": aimed.url, "pid": aimed.pid, "name": names[step.side],
                          "other": names[other(step.side)]}
        watcher = M.Watcher(self.target.url, self.target.pid, bundle_dir, interval_s=self.plan.interval_s,
                            settings=self.plan.settings, log_path=self.out_dir / "logs" / f"watch-{index + 1:02d}.log",
                            wrapper=wrapper, server_log=self.target.log_file(),
                            probe=(self.plan.probe_interval_s, self.plan.probe_deadline_s) if step.probe else None,
                            guard=step.guard, stacks_dir=self.out_dir / "stacks",
                            proxy_records=self.out_dir / "logs" / f"proxy-{index + 1:02d}.jsonl" if step.proxy else None,
                            serve=step.serve, env=fault.recorder_env(ctx, self.out_dir / "recorder-env" / f"{index + 1:02d}"),
                            deployment=deployment)
        bystander = None        # a pair's guard: the one holding the other side, which must not act
        if pair is not None and step.guard is not None:
            side = pair.side(other(step.side))
            bystander = M.Watcher(self.target.url, self.target.pid, self.out_dir / "bundles" / f"{index + 1:02d}-other-side",
                                  interval_s=self.plan.interval_s, settings=self.plan.settings,
                                  log_path=self.out_dir / "logs" / f"guard-other-{index + 1:02d}.log",
                                  probe=None, guard=step.guard, stacks_dir=self.out_dir / "stacks-other",
                                  deployment={**deployment, "instance": side.url, "pid": side.pid,
                                              "name": pair.names()[other(step.side)]})
        router = None
        prober = M.Prober(aimed.url)
        tree = []
        try:
            if step.workload_first and fault.workload and not step.at_start:
                # the recorder's first probe, asked at its start, then queues behind requests holding every slot
                self.start_workload(ctx, after_s=0.0, duration_s=WORKLOAD_FIRST_LEAD_S + step.warmup_s
                                    + step.hold_s + step.traffic_after_revert_s)
                self._sleep_until(time.time() + WORKLOAD_FIRST_LEAD_S)
            if not watcher.start():
                result.not_run = "the recorder did not start recording within 30 s"
                return result
            if bystander is not None and not bystander.start():
                result.not_run = "guard on the other side did not start recording within 30 s"
                return result
            if step.proxy and watcher.listen_url is None:
                result.not_run = "servewatch proxy did not say where it listens"
                return result
            ctx.recorder_url = watcher.listen_url
            if pair is not None:        # each request takes both legs: servewatch proxy's pair mode
                from servewatch.drill.pair import PairRouter

                try:
                    router = PairRouter(pair.side("prefill").url, pair.side("decode").url,
                                        self.out_dir / "logs" / f"router-{index + 1:02d}.log",
                                        self.out_dir / "logs" / f"router-{index + 1:02d}.jsonl").start()
                except TargetError as exc:
                    result.not_run = str(exc)
                    return result
                self.proxies.append(router)
                ctx.recorder_url = router.url
            prober.start()
            begun = time.time()
            if step.at_start:           # no workload: the fault lands during the start, at its moment
                if step.on_log and not self._wait_for_log(step.on_log, result):
                    return result
            else:
                if fault.workload and ctx.workload is None:
                    self.start_workload(ctx, after_s=0.0,
                                        duration_s=step.warmup_s + step.hold_s + step.traffic_after_revert_s)
                self._sleep_until(begun + step.warmup_s)
            if step.guard is not None:      # the tree guard may kill: each of them must be gone after
                tree = aimed.processes()
            ctx.log_offset = 0 if step.at_start else M.log_size(aimed.log_file())
            # at once at a start: the fault's time counts from the launch (a start can fail before the recorder
            # has said it records); a signal still stamps its own moment (Context.signal)
            result.injected_at = self.launched_at if step.at_start and not step.on_log else time.time()
            try:
                fault.inject(ctx)
            except (FaultNotRun, TargetError, ServerIdentityError) as exc:   # not proven: no signal, no fault
                result.not_run = str(exc)
                result.injected_at = None
                return result
            self._sleep_until(result.injected_at + step.hold_s)
            fault.revert(ctx)
            result.reverted_at = time.time()
            if ctx.workload is not None and fault.workload:     # a late signal shifts the traffic after it too
                added = ctx.workload.extend_to(result.reverted_at + step.traffic_after_revert_s)
                if added > LATE_SIGNAL_NOTE_S:
                    result.notes.append(f"the workload went on {added:.1f} s longer, so that it still sends for "
                                        f"{step.traffic_after_revert_s:g} s after the fault")
            if step.at_start:           # the start ends (up, or its process gone), then the observation
                self._end_start(result, prober, self.launched_at)
                self._sleep_until(time.time() + max(step.observe_s, step.expect.clear_within_s or 0.0))
            else:
                self._sleep_until(result.reverted_at + step.watch_after_revert_s)
                if ctx.workload is not None and step.expect.recovery_window_s is not None:
                    # the traffic after the fault was planned for the whole recovery bound: it ends once the
                    # recovery is seen (the recorder's observation is over by now)
                    ctx.workload.end_at_recovery(result.reverted_at)
        finally:
            prober.stop()
            if not step.proxy:              # the proxy is the workload's path: it outlives the workload
                watcher.stop()
            if ctx.workload is not None:    # it stops sending at its end, then waits for what is in flight
                ctx.workload.join(max(0.0, ctx.workload.ends_at - time.time()) + ctx.workload.request_timeout_s
                                  + WORKLOAD_JOIN_MARGIN_S)
            if step.proxy:
                watcher.stop()
            if bystander is not None:
                bystander.stop()
            if router is not None:
                router.close()
            for proc in ctx.spawned:
                ctx.end_spawned(proc)
            if ctx.proxy is not None:
                ctx.proxy.close()
            if disk_mode is not None:
                full_disk.release(bundle_dir, disk_mode)
        result.facts.update(fault.facts)
        cost = next((line.split("probe cost: ", 1)[1] for line in watcher.stderr_lines if "probe cost: " in line), None)
        if cost is not None:
            result.facts["probe"] = cost
        if step.guard is not None and result.injected_at is not None:
            result.guard = self._guard_outcome(result, watcher, tree)
            if bystander is not None:    # the other side's guard: no stacks, no kill, not exited 3
                acted = [line.get("guard") for _, line in bystander.actions if line.get("guard") in ("stacks", "kill")]
                result.guard["other_side"] = {"acted": bool(acted), "exit": bystander.exit_code}
        self._measure(result, step, watcher, prober, ctx)
        killed = bool(result.guard and result.guard["kill"])
        if (fault.takes_server_down or killed) and self.target.owned and not last:   # the last: the drill stops it
            if getattr(self.target, "sides", None):     # a pair: started again when a later step needs it whole
                return result
            result.restarted_by_drill_s = self._restart(result)
        return result

    def _launch(self, name: str, result: StepResult) -> bool:
        """An at_start step: its target started afresh (stopped first when it runs; the target before it, when
        the drill owns it, stopped too) without waiting: the recorder attaches to its first second."""
        target = self.targets.get(name)
        if self.target is not None and self.target.owned and self.target is not target:
            self.target.stop()
        if target is None:
            spec = self.plan.named_targets()[name]
            target = self.targets[name] = make_target(spec, self.out_dir / "logs" / ("" if name == "main" else name))
        else:
            target.stop()
        self.target = target
        try:
            self.launched_at = time.time()
            target.launch()
        except ServewatchError as exc:
            result.not_run = f"target {name} could not be started: {exc}"
            return False
        self.say(f"target{' ' + name if self.plan.targets else ''}: {target.spec.describe()} (started, recorded "
                 f"from its first second)")
        self.model_path = target.model_path()
        return True

    def _wait_for_log(self, literal: str, result: StepResult) -> bool:
        """Until the starting server's log shows `literal` (bounded by its ready_timeout_s); False (the fault
        not run, and why) when it exited or came up first, or the time ran out."""
        path = self.target.log_file()
        deadline = time.monotonic() + self.target.spec.ready_timeout_s
        while time.monotonic() < deadline:
            if M.log_shows(path, 0, (literal,)).get(literal):
                return True
            if not self.target.running_process():
                result.not_run = f"the server exited before its log showed “{literal}”"
                return False
            if self.target.healthy():
                result.not_run = f"the server was up before its log showed “{literal}”"
                return False
            time.sleep(0.2)    # another process's log file: nothing to wait on but the file
        result.not_run = (f"the server's log did not show “{literal}” within {self.target.spec.ready_timeout_s:g} s "
                          f"of its start")
        return False

    def _end_start(self, result: StepResult, prober, launched: float) -> None:
        """The start an at_start step made, to its end: /health 200 (the seconds it took, said), or its main
        process's exit (left unreaped for the recorder to read), or the target's ready_timeout_s. The time to
        /health 200 is the prober's first 200 when it saw one before the wait (the hold outlasted the start)."""
        took, code = self.target.wait_up(self.target.spec.ready_timeout_s)
        first = M.first_ok_after(prober.answers, launched)
        if took is not None and first is not None:
            took = round(min(took, first), 1)
        result.ready_s = took
        if took is not None:
            self.model = self.target.model()
            self.model_path = self.target.model_path()
            result.facts["start"] = f"/health 200 after {took:g} s"
        elif code is not None:
            result.facts["start"] = f"the server exited during its start ({M.exit_words(code)})"
        else:
            result.facts["start"] = f"not up within {self.target.spec.ready_timeout_s:g} s of its start"

    @staticmethod
    def _guard_outcome(result: StepResult, watcher, tree) -> dict:
        stacks = next((line for _, line in watcher.actions if line.get("guard") == "stacks"), {})
        try:     # guard's private dump: read here for which pids it holds, never copied into the report
            text = Path(stacks["path"]).read_text(encoding="utf-8", errors="replace") if stacks.get("path") else ""
        except OSError:
            text = ""
        return M.guard_outcome(watcher.actions, watcher.events, result.injected_at, exit_code=watcher.exit_code,
                               tree_left=sum(1 for p in tree if pid_alive(p.pid, p.create_time)),
                               signalled=[t["pid"] for t in result.touched], captured=M.stacks_captured(text))

    def _sleep_until(self, t: float) -> None:
        while (left := t - time.time()) > 0:
            time.sleep(min(left, 0.5))   # the drill's own timeline (warm-up, hold, observation)

    def _ensure_up(self, result: StepResult, step=None) -> bool:
        if getattr(self.target, "sides", None) and step is not None and step.kind in PAIR_ONE_SIDE_KINDS:
            side = self.target.side(step.side)      # a kill needs only its own side: no second start of the pair
            if side.healthy() and side.processes():
                return True
        if self.target.healthy() and self.target.processes():
            return True
        if not self.target.owned:
            result.not_run = "the server is not healthy and the drill did not start it, so cannot start it again"
            return False
        self._restart(result)
        return result.not_run is None

    def _restart(self, result: StepResult) -> float | None:
        try:
            took = self.target.restart()
        except ServewatchError as exc:
            result.not_run = result.not_run or f"the server could not be started again: {exc}"
            return None
        self.model = self.target.model()
        self.model_path = self.target.model_path()
        return round(took, 1)

    def _measure(self, result: StepResult, step, watcher, prober, ctx) -> None:
        from servewatch.clock import iso8601
        from servewatch.drill.expect import check, inconclusive
        from servewatch.bundle.verify import verify_bundle

        injected, reverted = result.injected_at, result.reverted_at or result.injected_at
        events, probes = watcher.events, prober.answers
        acting = events         # what guard and livez of the target may act on
        if ctx.pair is not None:     # a pair: the verdicts met are the ones naming the side at fault
            from servewatch.drill.pair import acting_events, side_events

            at_fault = step.at_fault
            name = ctx.pair.names()[at_fault]
            named = side_events(events, name, at_fault)
            result.elsewhere = {v: t for v, t in M.detections([e for e in events if e not in named], injected).items()}
            acting = acting_events(events, ctx.pair.names()[step.side])
            events = named
        result.detected = M.detections(events, injected)
        result.explained = M.explanations(events, injected)
        result.fired_before = sorted({e.verdict for e in events if e.event == "fired" and e.t < injected})
        stopped = any(t.get("signal") == "SIGSTOP" for t in result.touched)
        result.health = M.health_during(probes, injected, reverted, stopped=stopped)
        result.health_slowest_s = M.slowest(probes, injected, reverted)
        result.models = M.health_during(probes, injected, reverted, path="/v1/models", stopped=stopped)
        end = reverted + step.watch_after_revert_s
        start = injected - step.warmup_s
        restart = M.kubelet_restart(M.health_answers(probes), start, end)
        result.kubelet_health_s = None if restart is None else round(restart - injected, 1)
        if step.serve:      # serve's own livez, as answered (a kubelet's view of it), not derived from verdicts
            livez = [(t, status == 200) for t, status in watcher.livez]
            result.livez = M.answers_during(watcher.livez, injected, reverted)
            result.readyz = M.answers_during(watcher.readyz, injected, reverted)
            if ctx.pair is not None:     # the other side's livez: a fault on one side never fails it
                result.livez_other = M.answers_during(watcher.livez_other, injected, reverted)
        else:
            livez = M.livez_answers(acting, start, end)
        restart = M.kubelet_restart(livez, start, end)
        result.kubelet_livez_s = None if restart is None else round(restart - injected, 1)
        from servewatch.drill.faults import FAULTS

        result.policy = M.policy(FAULTS[step.kind].demands_of(step), acting, injected, end,
                                 livez=watcher.livez if step.serve else None)
        records = ctx.workload.records if ctx.workload is not None else []
        if records:
            M.save_records(records, self.out_dir / "logs" / f"workload-{result.index:02d}.jsonl")
        if ctx.workload is not None and ctx.workload.problem:
            result.notes.append(f"workload: {ctx.workload.problem}")
        elif ctx.workload is not None and ctx.workload.running():
            result.notes.append("workload: still running past its end and its request timeout; its requests "
                                "are not counted")
        result.impact = M.impact(records, injected, reverted).to_json()
        result.impact["in_flight_at_fault"] = M.in_flight(records, injected)
        result.cleared = M.clearances(events, injected, reverted)
        result.resumed_s = M.resumed(records, reverted)
        if step.expect.fire_by_threshold:
            result.thresholds = M.thresholds(events, injected, step.expect.fire_by_threshold)
        if step.expect.log_shows:
            result.log_seen = M.log_shows(ctx.target.log_file(), ctx.log_offset, step.expect.log_shows)
        if step.expect.exit_within_s is not None or "process_exit" in result.detected:
            result.server_exit = {"status": ctx.target.exit_status(), "reported": M.reported_exit(events, injected),
                                  "read_as_parent": ctx.target.owned}
        result.recovery_s = M.recovery(records, reverted)
        result.health_back_s = M.first_ok_after(probes, reverted)
        where = Path(watcher.command[watcher.command.index("--out") + 1])
        if step.serve:          # serve keeps each target's bundles in a directory of its own
            where = where / M.SERVE_TARGET
        bundles = sorted(p for p in where.glob("*") if p.is_dir() and not p.name.startswith("."))
        verified = 0
        for bundle in bundles:
            try:
                verify_bundle(bundle)
                verified += 1
            except ServewatchError:
                pass
        result.bundles = {"written": len(bundles), "verified": verified,
                          "write_failures": watcher.bundle_failures()}
        if bundles and self.model_path:         # privacy: where the model was loaded from, in no bundle
            result.bundles["holding_model_path"] = M.files_holding(bundles, self.model_path)
        result.checks = check(step.expect, result)
        # the recorder's own sampling from the step's start to its stop (its lines end there)
        gaps = [g for g in M.starved_gaps(watcher.stderr_lines) if g.end >= start]
        starved = M.starved_during(gaps, start, max(end, time.time()))
        if gaps:
            worst = max(gaps, key=lambda g: g.seconds)
            result.notes.append(f"the recorder was starved: a {starved:g} s gap in its own sampling at "
                                f"{iso8601(worst.start)[11:19]} UTC, interval {self.plan.interval_s:g} s; "
                                f"{M.frozen_during(gaps, start, end):g} s of the step's {end - start:.0f} s in gaps")
        result.inconclusive = inconclusive(result.checks, starved, M.frozen_during(gaps, start, end), end - start)

    # -- after the drill
    def find_leaks(self) -> dict:
        left, ports = [], []
        for target in self.targets.values():
            if not target.owned:
                continue    # an existing server is left running on purpose
            left += [pid for pid, created in target.seen_pids.items() if pid_alive(pid, created)]
            for host, port in (target.ports() if hasattr(target, "ports") else [(target.host, target.port)]):
                if port_held(host, port):
                    ports.append(port)
        helpers = [p.pid for p in self.helpers if p.poll() is None]
        for proxy in self.proxies:
            if proxy.port and port_held(proxy.host, proxy.port):
                ports.append(proxy.port)
        stress = _stress_left()
        return {"processes_left": len(left) + len(helpers) + stress, "ports_held": len(ports),
                "ok": not (left or helpers or ports or stress)}


def _stress_left() -> int:
    import psutil

    count = 0
    me = psutil.Process()
    for child in me.children(recursive=True):
        try:
            if child.name().startswith("stress-ng"):
                count += 1
        except psutil.Error:
            pass
    return count
