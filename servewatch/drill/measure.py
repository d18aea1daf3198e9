"""What a drill records during one fault, and the figures it derives from the records.

Recording: the recorder (`servewatch watch --json` in a subprocess: its verdict lines, read as they come),
an HTTP prober (/health and /v1/models every PROBE_PERIOD_S), and the workload (servewatch.load).
Derived (pure functions, tested on their own): detection times, when a Kubernetes liveness probe would
have restarted the pod, client impact, recovery.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from servewatch.clock import parse_iso8601
from servewatch.timeline.gaps import STARVED_LINE, Gap, frozen, longest

PROBE_PERIOD_S = 0.5
PROBE_TIMEOUT_S = 5.0           # a slower answer is recorded as no answer (its latency says how slow)
KUBELET_PERIOD_S = 10.0
KUBELET_FAILURE_THRESHOLD = 3
KUBELET_TIMEOUT_S = 1.0         # timeoutSeconds' default: a slower answer is a failed probe
CONNECT_TIMEOUT_S = 5.0         # the workload's connect timeout unless the plan's says otherwise (the OpenAI client's)
LISTENING = re.compile(r"servewatch proxy: listening on (127\.0\.0\.1:\d+)")
SERVE_LISTENING = re.compile(r"servewatch serve: listening on (http://127\.0\.0\.1:\d+),")
SERVE_TARGET = "drill"          # the name `servewatch serve` knows the drilled server by
SERVE_POLL_S = 0.2              # serve's verdicts and livez read this often (fired and cleared to within it)
SERVE_READ_LIMIT = 4 << 20
LOG_READ_LIMIT = 8 << 20         # bytes of the server's log read after an injection (`expect.log_shows`)


# -- recording ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HttpAnswer:
    t: float                 # epoch seconds the request was sent
    path: str
    status: int | None       # None: no answer (refused, timed out)
    latency_s: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 400


class Prober:
    """/health and /v1/models every PROBE_PERIOD_S, each probe on a worker of its own, so that a server
    that does not answer does not slow the cadence (a kubelet does not wait for one probe to send the next)."""

    def __init__(self, url: str):
        from concurrent.futures import ThreadPoolExecutor

        self.url = url
        self.answers: list[HttpAnswer] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=int(2 * PROBE_TIMEOUT_S / PROBE_PERIOD_S) + 2,
                                        thread_name_prefix="drill-probe")
        self._thread = threading.Thread(target=self._run, name="drill-prober", daemon=True)

    def start(self) -> "Prober":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:     # started (a ^C can come between the recorder and the prober)
            self._thread.join(timeout=PROBE_PERIOD_S + 1)
        self._pool.shutdown(wait=True)
        self.answers.sort(key=lambda a: a.t)

    def _probe(self, path: str) -> None:
        from servewatch.drill.target import health

        t = time.time()
        status = health(self.url, path, timeout_s=PROBE_TIMEOUT_S)
        self.answers.append(HttpAnswer(t, path, status, time.time() - t))

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            for path in ("/health", "/v1/models"):
                self._pool.submit(self._probe, path)
            next_t += PROBE_PERIOD_S
            if self._stop.wait(max(0.0, next_t - time.monotonic())):
                return


@dataclass
class VerdictEvent:
    event: str               # fired | cleared | evidence_held (the evidence of its action class came after the firing)
    verdict: str
    t: float                 # epoch seconds the recorder concluded it (fired) or saw it end (cleared)
    onset: float
    bundle: str | None = None
    why: str = ""            # the verdict's explanation (fired lines): which engine, which rank, which process
    details: dict | None = None   # the detector's own figures as the fired line gave them (e.g. threshold_s)
    evidence_held: bool = True    # fired lines: the evidence its action class waits for already held


def parse_watch_line(line: str) -> VerdictEvent | None:
    try:
        data = json.loads(line)
        return VerdictEvent(data["event"], data["verdict"], parse_iso8601(data["t"]), parse_iso8601(data["onset"]),
                            data.get("bundle"), str(data.get("why") or ""),
                            data["details"] if isinstance(data.get("details"), dict) else None,
                            data.get("evidence_held") is not False)
    except (ValueError, KeyError, TypeError):
        return None


class Watcher:
    """`servewatch watch URL --pid PID --json --out DIR` (with the server's log when the drill started it,
    and --probe when the fault asks for it) as a subprocess; its verdict lines as events. With `guard`
    (its --act-on verdicts, empty for its default) `servewatch guard` runs in watch's place, attached to the
    same PID, acting as it would in production; its action lines are kept as `actions`. With `proxy_records`
    `servewatch proxy --watch` runs in watch's place, in front of the server on a loopback port of its own
    (`listen_url`, where the workload sends), its per-request records appended to that file. With `serve`
    `servewatch serve --target drill=URL` runs in watch's place (by URL: no pid, no log), and its HTTP API is
    read every SERVE_POLL_S: /api/v1/verdicts for the verdicts it fired and cleared, /targets/drill/livez for
    the answers a kubelet would get (`livez`: epoch seconds, status or None)."""

    def __init__(self, url: str, pid: int, out: Path, *, interval_s: float, settings: tuple[str, ...],
                 log_path: Path, wrapper: list[str] | None = None, server_log: Path | None = None,
                 probe: tuple[float, float] | None = None, guard: tuple[str, ...] | None = None,
                 stacks_dir: Path | None = None, proxy_records: Path | None = None, serve: bool = False,
                 env: dict[str, str] | None = None, deployment: dict | None = None):
        self.events: list[VerdictEvent] = []
        self.livez: list[tuple[float, int | None]] = []   # `serve`: its livez answers
        self.readyz: list[tuple[float, int | None]] = []  # `serve`: its readyz answers (a readiness probe's view)
        self.serve_url: str | None = None
        self.actions: list[tuple[float, dict]] = []    # guard's lines (epoch seconds read, the line)
        self.log_path = log_path
        self.recording = threading.Event()
        self.exit_code: int | None = None
        self.listen_url: str | None = None      # `proxy`: where the workload sends, in front of the server
        command = [*(wrapper or [sys.executable, "-m", "servewatch"])]
        # a prefill/decode pair (drill.pair): {prefill, decode: URLs; instance, pid, name: the side at fault}
        self.instance = deployment["name"] if deployment is not None else None
        self.other_instance = deployment.get("other") if deployment is not None else None
        self.livez_other: list[tuple[float, int | None]] = []   # a pair under serve: the other side's livez
        if deployment is not None:
            pair = ["--prefill", deployment["prefill"], "--decode", deployment["decode"]]
            if serve:                           # a deployment is a serve target from its config
                config = out.parent / f"{out.name}-serve.yaml"
                config.parent.mkdir(parents=True, exist_ok=True)
                config.write_text(json.dumps({"targets": [{"name": SERVE_TARGET, "prefill": [deployment["prefill"]],
                                                           "decode": [deployment["decode"]]}]}), encoding="utf-8")
                command += ["serve", "--config", str(config), "--listen", "127.0.0.1:0"]
            elif guard is not None:             # guard holds the side at fault
                command += ["guard", *pair, "--instance", deployment["instance"], "--pid", str(deployment["pid"]),
                            "--json"]
            else:
                command += ["watch", *pair, "--json"]
            server_log = None                   # a deployment is recorded from its instances' URLs
        elif proxy_records is not None:           # the request path records: the proxy has no --pid, log or probe
            command += ["proxy", "--listen", "127.0.0.1:0", "--upstream", url, "--records", str(proxy_records),
                        "--watch"]
        elif serve:                             # the fleet recorder, by URL, with its HTTP API on loopback
            command += ["serve", "--target", f"{SERVE_TARGET}={url}", "--listen", "127.0.0.1:0"]
        else:
            command += ["watch" if guard is None else "guard", url, "--pid", str(pid), "--json"]
        command += ["--out", str(out), "--interval", f"{interval_s:g}"]
        for setting in settings:
            command += ["--set", setting]
        if guard is not None:
            command += ["--stacks-dir", str(stacks_dir or out.parent / "stacks"),
                        "--lives", str(log_path.with_suffix(".lives.json"))]
            if guard:
                command += ["--act-on", ",".join(guard)]
        if serve:
            command += (["--probe", "--probe-interval", f"{probe[0]:g}", "--probe-deadline", f"{probe[1]:g}"]
                        if probe is not None else ["--no-probe"])
        elif proxy_records is None:
            if server_log is not None:     # the engine's own log: its shutdown and death lines
                command += ["--log-file", str(server_log)]
            if probe is not None:          # (interval, deadline): watch's probe, as the fault asks
                command += ["--probe", "--probe-interval", f"{probe[0]:g}", "--probe-deadline", f"{probe[1]:g}"]
            elif guard is None:            # watch probes by default (guard does not); a fault that does not ask
                command += ["--no-probe"]  # measures without it
        self.command = command
        self.env = env or {}          # beside the drill's own environment (a fault's: the NVML stand-in)
        self.proc: subprocess.Popen | None = None
        self._threads: list[threading.Thread] = []
        self.stderr_lines: list[str] = []

    def start(self, ready_timeout_s: float = 30.0) -> bool:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                     env={**os.environ, **self.env} if self.env else None)
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for thread in self._threads:
            thread.start()
        return self.recording.wait(ready_timeout_s)

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            event = parse_watch_line(line)
            if event is not None:
                self.events.append(event)
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "guard" in data:
                self.actions.append((time.time(), data))

    def _read_err(self) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log:
            for line in self.proc.stderr:
                log.write(line)
                self.stderr_lines.append(line.rstrip("\n"))
                listening = LISTENING.search(line)
                if listening:
                    self.listen_url = f"http://{listening[1]}"
                serving = SERVE_LISTENING.search(line)
                if serving and self.serve_url is None:
                    self.serve_url = serving[1]
                    poller = threading.Thread(target=self._poll_serve, daemon=True)
                    self._threads.append(poller)
                    poller.start()
                if ": recording " in line:
                    self.recording.set()

    def _poll_serve(self) -> None:
        """serve's verdicts as watch's lines: each fired one (its own t, onset, why and bundle) once, and each
        cleared one once, at the time serve's recorder saw it end (as watch's cleared line, not when this poll
        happened to read it); livez's answers. Until serve exits."""
        from servewatch.drill.target import get

        seen: set[tuple] = set()
        self.recording.set()                 # serve is up and recording once its API answers
        while self.proc.poll() is None:
            answer = get(f"{self.serve_url}/api/v1/verdicts", 2.0, SERVE_READ_LIMIT)
            try:
                doc = json.loads(answer.body) if answer is not None and answer.ok else None
            except ValueError:
                doc = None
            now = time.time()
            if isinstance(doc, dict):
                for item in sorted(doc.get("recent", []), key=lambda v: v.get("t", "")):
                    key = (item.get("verdict"), item.get("t"))
                    if key not in seen:
                        seen.add(key)
                        event = parse_watch_line(json.dumps({**item, "event": "fired"}))
                        if event is not None:
                            self.events.append(event)
                for item in sorted(doc.get("cleared", []), key=lambda v: v.get("t", "")):
                    key = ("cleared", item.get("verdict"), item.get("t"))
                    if key not in seen:      # at the time serve saw it end, as watch's cleared line says
                        seen.add(key)
                        event = parse_watch_line(json.dumps({**item, "event": "cleared"}))
                        if event is not None:
                            self.events.append(event)
            self.livez.append((now, self._status("livez")))
            self.readyz.append((now, self._status("readyz")))
            if self.other_instance:
                self.livez_other.append((now, self._status("livez", self.other_instance)))
            time.sleep(SERVE_POLL_S)   # serve's HTTP API, polled as a kubelet and a dashboard would

    def _status(self, endpoint: str, instance: str | None = None) -> int | None:
        """serve's answer for the drill's target at `endpoint` (livez, readyz): its status, None without one."""
        from servewatch.drill.target import get

        instance = instance or self.instance
        which = f"?instance={instance}" if instance else ""     # a pair: the side at fault's (or the other's)
        answer = get(f"{self.serve_url}/targets/{SERVE_TARGET}/{endpoint}{which}", 2.0, SERVE_READ_LIMIT)
        return answer.status if answer is not None else None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)     # watch ends like ^C: bundles being written are finished
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        for thread in self._threads:
            thread.join(timeout=5)
        self.exit_code = code
        return code

    def bundle_failures(self) -> int:
        for line in self.stderr_lines:
            if "bundle(s) could not be written" in line:
                try:
                    return int(line.split(": ")[-1].split()[0])
                except (ValueError, IndexError):
                    return 1
        return 0


# How much later than planned a scenario's workload may be told to stop sending (extend_to) and still go on as
# the same run: its load is given this much more time than planned and stops at its end as it moves. A late signal
# moved the end by 0.1-10.9 s in the CI runs of 2026-12; a later end than this is a follow-on run.
EXTEND_SLACK_S = 60.0


class Workload:
    """The plan's load scenario (servewatch.load) in a thread of its own, for a given window."""

    def __init__(self, url: str, model: str, workload: dict, *, duration_s: float, after_s: float = 0.0,
                 request_timeout_s: float = 60.0, seed: int = 0, headers: tuple[tuple[str, str], ...] = ()):
        self.url, self.model, self.spec = url, model, dict(workload)
        self.headers = headers          # sent with every request (plan.workload_headers); never stored
        self.duration_s, self.after_s = duration_s, after_s
        self.request_timeout_s = request_timeout_s
        self.seed = seed
        self.ends_at = time.time() + after_s + duration_s     # epoch: no request is sent after it
        self._latest_end = self.ends_at + EXTEND_SLACK_S      # the run itself may be moved on to this
        self._records: list = []
        # A follow-on run (extend_to) shares its first run's live records and early end: the root's.
        self._root: Workload = self
        self.finished: list = []        # each request's record as it finishes (appended by the load's thread)
        self._stop_sending = threading.Event()
        self._recovery_after: float | None = None
        self.recovered = threading.Event()   # a good request sent at or after _recovery_after has finished
        self._problem: str | None = None
        self.followers: list[Workload] = []
        self._thread = threading.Thread(target=self._run, name="drill-workload", daemon=True)

    def start(self) -> "Workload":
        self._thread.start()
        return self

    def extend_to(self, until: float) -> float:
        """Keep the same load sending until epoch `until` when it was to stop before. For a fault whose signal
        went out late (the drill not scheduled for seconds on a loaded machine), the hold and the traffic after
        it shift with the signal; without this the load stopped early and no request was sent after the fault.
        Up to EXTEND_SLACK_S the run itself goes on (a closed loop keeps its concurrency); beyond, a follow-on
        run of the scenario starts where this one stops sending. Until 2026-12-07 every extension was a follow-on
        run, and a closed loop's started all of its streams at once while the first run's were still in flight:
        the KV-pressure step of the real vLLM drill, extended by 0.1 s, had 48 streams of 1,500 tokens on
        24 planned, and 3 of them timed out (the clean-clone CI of 2026-12-07 01:00). Returns the seconds added."""
        added = until - self.ends_at
        if added <= 0:
            return 0.0
        if until > self._latest_end:
            start = max(self.ends_at, self._latest_end)
            self.follow(Workload(self.url, self.model, self.spec, duration_s=until - start,
                                 after_s=max(0.0, start - time.time()), request_timeout_s=self.request_timeout_s,
                                 seed=self.seed + 1000 * (len(self.followers) + 1), headers=self.headers))
            self._latest_end = until
        self.ends_at = until
        return added

    def follow(self, follower: "Workload") -> None:
        """Start a follow-on run that shares this run's live records and early end."""
        follower._root = self._root
        self.followers.append(follower)
        follower.start()

    @property
    def records(self) -> list:
        return [*self._records, *(r for f in self.followers for r in f.records)]

    def load_options(self) -> dict:
        """What run_load is given besides the config: the early end and the live records."""
        stopped = self._root._stop_sending.is_set
        return {"stop_sending": lambda: stopped() or time.time() >= self.ends_at, "on_record": self._on_record}

    def _on_record(self, rec) -> None:
        root = self._root
        root.finished.append(rec)
        after = root._recovery_after
        if after is not None and rec.ok and rec.sent is not None and rec.sent >= after:
            root.recovered.set()

    def end_at_recovery(self, reverted_at: float) -> bool:
        """Send until a good request sent at or after `reverted_at` has finished (the recovery a step measures,
        `recovery`), at most until the planned end, then no more: those in flight finish. The traffic after a fault
        is planned for the whole recovery bound; once the recovery is seen the rest adds nothing to the step. True
        when the recovery came before the planned end."""
        self._recovery_after = reverted_at       # before the scan: a record finishing meanwhile sets the event
        if any(r.ok and r.sent is not None and r.sent >= reverted_at for r in list(self.finished)):
            self.recovered.set()
        came = self.recovered.wait(max(0.0, self.ends_at - time.time()))
        self._stop_sending.set()
        self.ends_at = min(self.ends_at, time.time())
        return came

    @property
    def problem(self) -> str | None:
        return self._problem or next((f.problem for f in self.followers if f.problem), None)

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for worker in (self, *self.followers):
            worker._thread.join(max(0.0, deadline - time.monotonic()))

    def running(self) -> bool:
        return self._thread.is_alive() or any(f.running() for f in self.followers)

    def _run(self) -> None:
        from servewatch.errors import ServewatchError
        from servewatch.load.runner import run_load
        from servewatch.load.scenarios import LoadConfig

        if self.after_s > 0 and self._root._stop_sending.wait(self.after_s):
            return                     # the drill's own timeline: traffic starts this long after the fault,
                                       # unless the traffic was ended before
        spec = self.spec
        config = LoadConfig(url=self.url, scenario=spec.get("scenario", "custom"), rate=spec.get("rate"),
                            concurrency=spec.get("concurrency"), arrival=spec.get("arrival", "poisson"),
                            duration_s=max(1.0, self._latest_end - time.time()),   # sent until ends_at
                            prompt_tokens=spec.get("prompt_tokens"),
                            output_tokens=spec.get("output_tokens"), tokenizer=spec.get("tokenizer", "approx"),
                            model=self.model, metrics_interval_s=0.0, seed=self.seed,
                            request_timeout_s=self.request_timeout_s, idle_timeout_s=self.request_timeout_s,
                            connect_timeout_s=float(spec.get("connect_timeout_s", CONNECT_TIMEOUT_S)),
                            sender_priority="normal", headers=self.headers)
        try:
            self._records = run_load(config, **self.load_options()).records
        except ServewatchError as exc:
            self._problem = str(exc)


# -- derived figures (pure) ----------------------------------------------------------------------------

def starved_gaps(lines: list[str]) -> list[Gap]:
    """The gaps in its own sampling the recorder said on stderr ("recorder starved: 7.0 s gap at <ISO>, interval
    0.5 s": each over twice its interval plus an allowance), as (start, end) in epoch seconds."""
    out = []
    for line in lines:
        said = re.search(STARVED_LINE, line)
        if said is None:
            continue
        try:
            start = parse_iso8601(said[2])
        except ValueError:
            continue
        out.append(Gap(start, start + float(said[1])))
    return out


def starved_during(gaps: list[Gap], start: float, end: float) -> float:
    """The longest gap in the recorder's own sampling that overlaps [start, end], in seconds (0.0: none)."""
    return round(longest(gaps, start, end), 1)


def frozen_during(gaps: list[Gap], start: float, end: float) -> float:
    """How long [start, end] the recorder spent in those gaps (each clipped to it), in seconds."""
    return round(frozen(gaps, start, end), 1)


def kubelet_restart(answers: list[tuple[float, bool]], start: float, end: float, *,
                    period_s: float = KUBELET_PERIOD_S, threshold: int = KUBELET_FAILURE_THRESHOLD) -> float | None:
    """When a kubelet probing every period_s from `start` would have restarted the pod: the time of the
    threshold-th failed probe in a row, or None. A probe at T reads the first recorded answer at or
    after T (within one period); a probe with nothing recorded near it is skipped, not counted."""
    answers = sorted(answers)
    failures = 0
    k = 1
    i = 0
    while (probe_t := start + k * period_s) <= end:
        while i < len(answers) and answers[i][0] < probe_t:
            i += 1
        if i < len(answers) and answers[i][0] < probe_t + period_s:
            if answers[i][1]:
                failures = 0
            else:
                failures += 1
                if failures >= threshold:
                    return probe_t
        k += 1
    return None


def health_answers(probes: list[HttpAnswer], path: str = "/health") -> list[tuple[float, bool]]:
    return [(p.t, p.ok and p.latency_s <= KUBELET_TIMEOUT_S) for p in probes if p.path == path]


def acting(events: list[VerdictEvent], *classes: str) -> list[tuple[float, float, str]]:
    """(from, to, verdict): when a verdict of these action classes held with its evidence, from the recorder's
    fired, evidence and cleared lines — what guard acts on and what fails serve's livez (the registry's action
    policy, one declaration)."""
    from servewatch.detectors import registry

    names = registry.by_action(*classes)
    out = []
    for e in events:
        if e.event != "fired" or e.verdict not in names:
            continue
        cleared = next((c.t for c in events if c.event == "cleared" and c.verdict == e.verdict and c.t >= e.t),
                       float("inf"))
        since = e.t if e.evidence_held else next((c.t for c in events if c.event == "evidence_held" and c.verdict == e.verdict
                                              and e.t <= c.t < cleared), None)
        if since is not None:
            out.append((since, cleared, e.verdict))
    return out


def livez_answers(events: list[VerdictEvent], start: float, end: float,
                  step_s: float = PROBE_PERIOD_S) -> list[tuple[float, bool]]:
    """servewatch's livez over time, from the recorder's lines: it fails while a verdict of the restart class
    holds with its evidence (`acting`)."""
    from servewatch.detectors.verdict import RESTART

    intervals = [(a, b) for a, b, _ in acting(events, RESTART)]
    out = []
    t = start
    while t <= end:
        out.append((t, not any(a <= t < b for a, b in intervals)))
        t += step_s
    return out


def policy(demands: str, events: list[VerdictEvent], injected: float, end: float, *,
           livez: list[tuple[float, int | None]] | None = None) -> dict:
    """What the fault demanded (an action class, or "none") and what the action policy did about it between the
    injection and `end`: the restart-class verdict guard with its defaults acts on and livez fails on, and when its
    evidence held (`acted_s`, from the injection; None: nothing of the class); livez's first 503 as serve answered
    it, where serve recorded the step; and the latest a kubelet on livez (period 10 s, failureThreshold 3) would
    restart the pod had the fault lasted: the first failing livez plus three periods."""
    from servewatch.detectors import registry
    from servewatch.detectors.verdict import RESTART

    held = sorted((a, verdict) for a, b, verdict in acting(events, RESTART) if injected <= a <= end or a < injected < b)
    acted_at, acted_on = (max(held[0][0], injected), held[0][1]) if held else (None, None)
    failing = acted_at
    if livez is not None:     # serve's verdict lines carry no evidence: its livez, as answered, says when it acted
        failing = next((t for t, status in livez if injected <= t <= end and status is not None and status != 200), None)
        acted_at = failing
        if acted_on is None and failing is not None:
            acted_on = next((e.verdict for e in events if e.event == "fired" and e.t <= failing
                             and registry.action_of(e.verdict) == RESTART), None)
    out: dict = {"demands": demands, "acted_on": acted_on,
                 "acted_s": None if acted_at is None else round(acted_at - injected, 2)}
    if livez is not None:
        out["livez_failed_s"] = None if failing is None else round(failing - injected, 2)
    out["kubelet_by_s"] = (None if failing is None
                           else round(failing - injected + KUBELET_FAILURE_THRESHOLD * KUBELET_PERIOD_S, 1))
    return out


def detections(events: list[VerdictEvent], injected: float) -> dict[str, float]:
    """verdict -> seconds from the injection to the recorder's conclusion (first firing at or after it)."""
    out: dict[str, float] = {}
    for e in sorted(events, key=lambda e: e.t):
        if e.event == "fired" and e.t >= injected and e.verdict not in out:
            out[e.verdict] = round(e.t - injected, 2)
    return out


def explanations(events: list[VerdictEvent], injected: float) -> dict[str, str]:
    """verdict -> what its first firing at or after the injection said (the `detections` firing)."""
    out: dict[str, str] = {}
    for e in sorted(events, key=lambda e: e.t):
        if e.event == "fired" and e.t >= injected and e.verdict not in out:
            out[e.verdict] = e.why
    return out


def health_during(probes: list[HttpAnswer], start: float, end: float, path: str = "/health", *,
                  stopped: bool = False) -> dict:
    """What `path` answered to the probes sent between start and end: counts by answer ("200", "503",
    "no answer"). When the fault `stopped` a process (SIGSTOP), a probe left unanswered for a kubelet's
    timeout (KUBELET_TIMEOUT_S) or more while the fault held and answered only after it ("200 after the
    fault") is no answer while it held: a stopped process answers nothing, but the kernel still accepts
    connections on its listening socket, and the requests queued there are answered at once after SIGCONT.
    (A probe sent in the fault's last second and answered just after it is counted by its answer: it cannot
    tell.) Under any other fault a late answer is a slow one, counted by its status; `slowest` says how slow."""
    counts: dict[str, int] = {}
    for p in probes:
        if p.path == path and start <= p.t <= end:
            key = "no answer" if p.status is None else str(p.status)
            if stopped and p.status is not None and p.t + p.latency_s > end and end - p.t >= KUBELET_TIMEOUT_S:
                key += " after the fault"
            counts[key] = counts.get(key, 0) + 1
    return counts


def slowest(probes: list[HttpAnswer], start: float, end: float, path: str = "/health") -> float | None:
    """The longest a probe of `path` sent between start and end waited for its answer (seconds), answered or
    not; None without a probe."""
    waits = [p.latency_s for p in probes if p.path == path and start <= p.t <= end]
    return round(max(waits), 2) if waits else None


def answers_during(answers: list[tuple[float, int | None]], start: float, end: float) -> dict[str, int]:
    """(epoch, status or None) answers between start and end, counted by answer ("200", "503", "no answer")."""
    counts: dict[str, int] = {}
    for t, status in answers:
        if start <= t <= end:
            key = "no answer" if status is None else str(status)
            counts[key] = counts.get(key, 0) + 1
    return counts


def first_ok_after(probes: list[HttpAnswer], t0: float, path: str = "/health") -> float | None:
    for p in sorted(probes, key=lambda p: p.t):
        if p.path == path and p.t >= t0 and p.status == 200:
            return round(p.t + p.latency_s - t0, 2)
    return None


@dataclass
class Impact:
    requests: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    truncated: int = 0
    ttft_before_s: float | None = None
    ttft_during_s: float | None = None
    e2e_before_s: float | None = None     # p50 of good requests done before the fault: what recovery waits on
    e2e_outside_s: float | None = None    # p50 of good requests that did not overlap the fault (done before it, or
                                          # sent after its end): a request's length at this load, the engine's speed

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @property
    def ttft_inflation(self) -> float | None:
        if not self.ttft_before_s or self.ttft_during_s is None:
            return None
        return round(self.ttft_during_s / self.ttft_before_s, 2)

    def to_json(self) -> dict:
        return {"requests": self.requests, "failed": self.failed, "error_rate": round(self.error_rate, 3),
                "errors": dict(sorted(self.errors.items())), "truncated": self.truncated,
                "ttft_before_s": self.ttft_before_s, "ttft_during_s": self.ttft_during_s,
                "ttft_inflation": self.ttft_inflation, "e2e_before_s": self.e2e_before_s,
                "e2e_outside_s": self.e2e_outside_s}


def impact(records, injected: float, reverted: float) -> Impact:
    """Client impact from the load's own records: errors by class, truncated streams, TTFT before the
    fault against TTFT of requests sent while it held (p50 each)."""
    out = Impact(requests=len(records))
    before, during, e2e_before, e2e_outside = [], [], [], []
    for r in records:
        if r.error:
            out.failed += 1
            out.errors[r.error] = out.errors.get(r.error, 0) + 1
            if r.error == "truncated":
                out.truncated += 1
        elif r.http_status != 200:
            out.failed += 1
        sent = r.sent if r.sent is not None else r.scheduled
        if r.ok and r.e2e_s is not None and sent + r.e2e_s < injected:     # done before the fault
            e2e_before.append(r.e2e_s)
        if r.ok and r.e2e_s is not None and (sent + r.e2e_s < injected or sent >= reverted):
            e2e_outside.append(r.e2e_s)
        if r.ttft_s is not None:
            if sent < injected:
                before.append(r.ttft_s)
            elif sent <= max(reverted, injected + 1.0):
                during.append(r.ttft_s)
    out.ttft_before_s = round(statistics.median(before), 4) if before else None
    out.ttft_during_s = round(statistics.median(during), 4) if during else None
    out.e2e_before_s = round(statistics.median(e2e_before), 3) if e2e_before else None
    out.e2e_outside_s = round(statistics.median(e2e_outside), 3) if e2e_outside else None
    return out


def recovery(records, reverted: float) -> float | None:
    """Seconds from the end of the fault to the first good request completed after it (sent after it)."""
    ends = [r.sent + r.e2e_s for r in records
            if r.ok and r.sent is not None and r.e2e_s is not None and r.sent >= reverted]
    return round(min(ends) - reverted, 2) if ends else None


def resumed(records, reverted: float) -> float | None:
    """Seconds from the end of the fault to the first token the workload received after it on a request the
    fault held (sent before its end, still streaming after it): when the server moved tokens again, as a client
    saw it. None when no request was held across the fault's end. (vLLM 0.32's worker can park up to 5 s after
    its engine core resumes from a stop — shm_broadcast.py:69-72, a reader's recheck of a lost notification —
    and a no-progress verdict rightly holds until tokens move: measured 5.0 s, CI of 2026-12-07.)"""
    first = None
    for r in records:
        if r.sent is None or r.sent >= reverted or r.e2e_s is None or r.sent + r.e2e_s < reverted:
            continue
        for t, k in zip(r.chunk_t_s, r.chunk_tokens):
            at = r.sent + t
            if k > 0 and at >= reverted:
                first = at if first is None else min(first, at)
                break
    return None if first is None else round(first - reverted, 2)


def files_holding(roots: list[Path], needle: str) -> int:
    """How many files below `roots` hold `needle` (gzip files read decompressed): a bundle must not hold the
    served model's path (SGLang and vLLM put it in their model_name label)."""
    import gzip

    wanted, count = needle.encode(), 0
    for root in roots:
        for path in root.rglob("*"):
            try:
                data = path.read_bytes() if path.is_file() else b""
                if path.suffix == ".gz":
                    data = gzip.decompress(data)
            except (OSError, EOFError, gzip.BadGzipFile):
                continue      # unreadable: verify has said so already
            count += wanted in data
    return count


# -- guard (a step recorded by `servewatch guard`) ---------------------------------------------------------

_STACKS_HEADER = re.compile(r"^=== pid (\d+) \([a-z_]+\): (\w+)", re.MULTILINE)


def stacks_captured(text: str) -> set[int]:
    """The pids whose stacks a guard stack dump (its private file) holds, captured."""
    return {int(m.group(1)) for m in _STACKS_HEADER.finditer(text) if m.group(2) == "captured"}


def guard_outcome(actions: list[tuple[float, dict]], events: list[VerdictEvent], injected: float, *,
                  exit_code: int | None, tree_left: int, signalled: list[int], captured: set[int]) -> dict:
    """What guard did after the injection, from its lines: the verdict it acted on and when, its stacks
    (outcome by role, the diverging ranks by title: never the file's path), the kill and its delay after
    the verdict, guard's exit status, the processes of the tree still alive after, and which of the
    processes the fault signalled have their stacks in the dump."""
    mine = [(t, line) for t, line in actions if t >= injected]
    stacks = next(((t, line) for t, line in mine if line.get("guard") == "stacks"), None)
    kill = next(((t, line) for t, line in mine if line.get("guard") == "kill"), None)
    acted_on = (kill or stacks or (None, {}))[1].get("verdict")
    # Guard acts when the verdict's evidence holds (the action policy): at its firing, or at the evidence line after
    # it (not_serving's second probe); the kill's delay counts from there.
    fired = next((e.t for e in events if e.event == "fired" and e.verdict == acted_on and e.t >= injected), None)
    held = next((since for since, _, name in acting(events, *_classes_of(acted_on)) if name == acted_on
                 and since >= injected), fired)
    out: dict = {"acted_on": acted_on, "verdict_s": None if fired is None else round(fired - injected, 2),
                 "evidence_s": None if held is None else round(held - injected, 2),
                 "stacks": None, "kill": None, "exit": exit_code, "tree_left": tree_left,
                 "signalled_stacks": [pid for pid in signalled if pid in captured]}
    said = next((line.get("why") for _, line in actions if line.get("guard") == "exit"), None)
    if isinstance(said, str):       # its last line: why it exited ("hardware: GPU 1 (...) Xid 79 (...), do not ...")
        out["said"] = said
    if stacks is not None:
        line = stacks[1]
        out["stacks"] = {"status": line.get("status"), "processes": dict(line.get("processes") or {}),
                         "diverging": list(line.get("diverging") or []), "after_s": round(stacks[0] - injected, 2)}
    if kill is not None:
        line = kill[1]
        out["kill"] = {"killed": int(line.get("killed", 0)), "survivors": len(line.get("survivors") or []),
                       "after_s": round(kill[0] - injected, 2),
                       "after_verdict_s": None if held is None else round(kill[0] - held, 2)}
    return out


def _classes_of(verdict: str | None) -> tuple[str, ...]:
    """The action class of `verdict` (all of them for a name the registry does not know)."""
    from servewatch.detectors import registry
    from servewatch.detectors.verdict import ACTION_CLASSES

    return (registry.action_of(verdict),) if verdict in registry.names() else ACTION_CLASSES


RECORD_FIELDS = ("id", "scheduled", "sent", "http_status", "error", "error_detail", "ttft_s", "e2e_s",
                 "output_tokens", "max_tokens", "finish_reason")


def save_records(records, path: Path) -> None:
    """The step's requests as the workload saw them, one JSON line each — times, status, error class and token
    counts only (no text, no per-chunk arrays): what the impact, recovery and in-flight figures were computed
    from. A write that fails is skipped: the figures are in drill.json."""
    try:
        with open(path, "w", encoding="utf-8") as out:
            for r in records:
                data = r.to_json()
                out.write(json.dumps({k: data.get(k) for k in RECORD_FIELDS}) + "\n")
    except OSError:
        pass


CAUGHT_AFTER_S = 1.0     # a request sent this soon after the injection is caught by it too: a killed engine's
                         # API server answers for about a second (vLLM exits 0.5-0.7 s after its worker dies)


def in_flight(records, injected: float) -> dict:
    """The requests the fault caught (ending after the injection, sent before it or within CAUGHT_AFTER_S of it)
    and how each ended: failed (by error class), or ok — and of those, how many got every token asked for. A
    request whose last tokens were generated before a kill can still reach the client after it: it is whole, and
    ok is right; an ok one with fewer tokens than asked would be a cut stream counted a success."""
    caught = [r for r in records if r.sent is not None and r.sent < injected + CAUGHT_AFTER_S
              and (r.e2e_s is None or r.sent + r.e2e_s > injected)]
    errors: dict[str, int] = {}
    for r in caught:
        if not r.ok:
            key = r.error or f"HTTP {r.http_status}"
            errors[key] = errors.get(key, 0) + 1
    ok = [r for r in caught if r.ok]
    return {"count": len(caught), "ok": len(ok),
            "whole": sum(1 for r in ok if r.output_tokens is not None and r.output_tokens >= r.max_tokens),
            "errors": dict(sorted(errors.items()))}


def clearances(events: list[VerdictEvent], injected: float, reverted: float) -> dict[str, float]:
    """verdict -> seconds from the end of the fault to the recorder's `cleared` line, for each verdict fired
    after the injection (a verdict never cleared is absent)."""
    out: dict[str, float] = {}
    for e in events:
        if e.event != "fired" or e.t < injected or e.verdict in out:
            continue
        cleared = next((c.t for c in events if c.event == "cleared" and c.verdict == e.verdict and c.t >= e.t), None)
        if cleared is not None:
            out[e.verdict] = round(max(0.0, cleared - reverted), 2)
    return out


def stored_details(events: list[VerdictEvent], injected: float, verdict: str) -> dict | None:
    """The details of the first firing of `verdict` after the injection: as its line gave them, else as its
    bundle (incident.json) stored them; None when it did not fire or neither has them. (A line's details do
    not wait on a bundle: a fault that fires several verdicts at once may have them share one bundle, or a
    recorder stopped at the step's end may not have written it yet.)"""
    fired = next((e for e in events if e.event == "fired" and e.verdict == verdict and e.t >= injected), None)
    if fired is not None and fired.details is not None:
        return dict(fired.details)
    if fired is None or not fired.bundle:
        return None
    try:
        incident = json.loads((Path(fired.bundle) / "incident.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    stored = next((v for v in incident.get("verdicts", ()) if v.get("name") == verdict), None)
    return None if stored is None else dict(stored.get("details") or {})


def reported_exit(events: list[VerdictEvent], injected: float) -> dict | None:
    """What the first process_exit after the injection stored as the server's exit status: {exit_code,
    exit_signal}, or None when it fired without a readable bundle."""
    details = stored_details(events, injected, "process_exit")
    if details is None:
        return None
    return {"exit_code": details.get("exit_code"), "exit_signal": details.get("exit_signal")}


def thresholds(events: list[VerdictEvent], injected: float, verdicts) -> dict[str, float]:
    """verdict -> the threshold (seconds) its first firing after the injection said it judged by (its
    threshold_s, or the bound_s of a stage-by-stage wait such as startup_stalled's)."""
    out = {}
    for verdict in verdicts:
        details = stored_details(events, injected, verdict) or {}
        for key in ("threshold_s", "bound_s"):
            if isinstance(details.get(key), (int, float)):
                out[verdict] = round(float(details[key]), 3)
                break
    return out


def exit_words(code: int | None = None, *, exit_code=None, exit_signal=None) -> str:
    """An exit status in words: `code` as Popen gives it (negative: the signal), or the recorder's fields."""
    if code is not None:
        exit_code, exit_signal = (code, None) if code >= 0 else (None, -code)
    if exit_signal is not None:
        try:
            name = signal.Signals(exit_signal).name
        except ValueError:
            name = f"signal {exit_signal}"
        return f"killed by {name}"
    return "still running" if exit_code is None else f"exit code {exit_code}"


def log_shows(path: Path | None, offset: int, literals) -> dict[str, bool]:
    """Whether each literal is in the server's log after byte `offset` (where it stood at the injection)."""
    text = ""
    if path is not None:
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                text = log.read(LOG_READ_LIMIT).decode("utf-8", errors="replace")
        except OSError:
            text = ""
    return {literal: literal in text for literal in literals}


def log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0
