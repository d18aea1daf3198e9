"""The active probe: ask the server for one token, with a deadline, when nothing else proves it serves.

A passive reader cannot tell an idle server from one that hangs while idle: both show 0 running,
0 waiting, flat counters and /health 200. So, at most every `probe_interval_s` seconds, and only when the
counters have not moved in that span (a busy server pays nothing), the probe sends one completion of
`max_tokens` 1 for a fixed short prompt to the model /v1/models names, and records how it ended
(`ProbeSample`: served, deadline, failed, unavailable) and how long it took. Cost on an idle server:
one request of a few prompt tokens and 1 output token per interval.

Never stored: the prompt, the completion, the model's name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from servewatch.clock import Clock
from servewatch.timeline.ranks import Aim, dp_engines
from servewatch.timeline.tracks import engine_series
from servewatch.timeline.samples import DEADLINE, FAILED, SERVED, STOPPED, UNAVAILABLE, ProbeSample
from servewatch.timeline.window import Window

PROMPT = "The sky is"        # a few tokens in any tokenizer
# An idle server is asked every 10 s (NVIDIA Dynamo's canary asks an idle worker after 10 s, with a 3 s timeout), so
# an engine that hangs while idle is named within about 10 s + its deadline of the request that first waits on it.
DEFAULT_PROBE_INTERVAL_S = 10.0
# The deadline is learned from the server's own answers (None: learned; a number: fixed, as --probe-deadline gives):
# LEARN_FACTOR times the slowest of its last LEARN_FROM served probes, never under DEADLINE_FLOOR_S and never over
# DEADLINE_CEILING_S, which is also the deadline before the server has answered one. An idle tiny model on a CPU
# answers in tens of milliseconds (the lab vLLM and SGLang, 2026-12): its deadline is the floor.
DEFAULT_DEADLINE_S: float | None = None
DEADLINE_FLOOR_S = 3.0
DEADLINE_CEILING_S = 10.0
LEARN_FACTOR = 4.0
LEARN_FROM = 8
URGENT_DEADLINE_S = 3.0      # a probe asked because a rank looks stalled: an idle server answers in well under 1 s
PREEMPTED_WORDS = "in flight given up for an urgent one"   # the cost line's words (the drill reads them)
URGENT_GAP_S = 10.0          # at most one such probe per this many seconds
# A probe that got no token is asked again at once, with the same deadline, so that two probes in a row agree before
# anything acts on not_serving (its action policy, detectors.registry): one confirmation per run of misses.


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    outcome: str                    # SERVED, DEADLINE, FAILED or UNAVAILABLE
    latency_s: float | None         # sent -> answered (or -> given up at the deadline)
    status: int | None = None
    tokens: int | None = None
    error: str | None = None        # short class, stored
    detail: str = ""                # one line for a terminal, never stored
    at: float | None = None         # when it ended, on the source's clock (None: when it was collected)


class Attempt(Protocol):
    def answer(self) -> ProbeAnswer | None:
        """How it ended, or None while it is still waiting. An attempt keeps its own deadline."""

    def cancel(self) -> None: ...


Prober = Callable[..., Attempt]     # start one probe with this deadline (seconds); `route=` headers aim it at one engine


class ProbeSource:
    kind = "probe"

    def __init__(self, prober: Prober, clock: Clock, *, probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S,
                 deadline_s: float | None = DEFAULT_DEADLINE_S, check_s: float = 1.0,
                 say: Callable[[str], None] | None = None, urgent_deadline_s: float = URGENT_DEADLINE_S):
        if probe_interval_s <= 0 or (deadline_s is not None and deadline_s <= 0) or check_s <= 0:
            raise ValueError("probe interval, deadline and check cadence must be positive")
        self.prober = prober
        self.clock = clock
        self.probe_interval_s = probe_interval_s
        self.fixed_deadline_s = deadline_s     # None: learned from the server's answers (deadline_s)
        self._served: deque[float] = deque(maxlen=LEARN_FROM)   # the latencies of the last served probes
        self.interval = check_s        # how often it looks whether an answer came or a probe is due
        self.urgent_deadline_s = min(urgent_deadline_s, deadline_s if deadline_s is not None else DEADLINE_FLOOR_S)
        self.urgent = 0                # probes asked at once because a rank looked stalled
        self._deadline = self.deadline_s   # the pending attempt's
        self.after_stop = 0            # probes asked at once because a stop that explained a miss ended
        self._stop_miss = False        # a probe missed while a process of the server was stopped: ask when it ends
        self._last_urgent: float | None = None
        self.say = say
        self.sent = 0                  # probes asked (what the probe cost)
        self.skipped = 0               # intervals in which the counters had already proven progress
        self._ring = None
        self._suspicion_reads: str | None = None
        self._attempt: Attempt | None = None
        self._asked: float | None = None
        self._last_skip: float | None = None
        self._said: set[str] = set()
        self._first_poll: float | None = None
        self._engine: str | None = None    # the data-parallel engine the pending attempt was aimed at
        self._turn = 0                     # routine probes aimed in turn at each data-parallel engine
        self._aim: Aim | None = None       # how the pending attempt was aimed
        self._confirm: tuple[Aim | None] | None = None   # a miss to confirm: ask its engine again at once
        self._confirmed_run = False        # this run of misses had its confirmation (until a probe is served)
        self.confirms = 0                  # probes asked at once to confirm a miss
        self.preempted = 0                 # probes cancelled for an urgent one (asked before a rank looked stalled)
        self._pending_urgent = False       # the pending attempt is an urgent one

    @property
    def deadline_s(self) -> float:
        """The routine probe's deadline: the fixed one, else learned — LEARN_FACTOR x the slowest of the last
        LEARN_FROM served probes, between DEADLINE_FLOOR_S and DEADLINE_CEILING_S (the ceiling until one served)."""
        if self.fixed_deadline_s is not None:
            return self.fixed_deadline_s
        if not self._served:
            return DEADLINE_CEILING_S
        return min(DEADLINE_CEILING_S, max(DEADLINE_FLOOR_S, LEARN_FACTOR * max(self._served)))

    def deadline_words(self) -> str:
        if self.fixed_deadline_s is not None:
            return f"{self.fixed_deadline_s:g} s"
        return (f"{self.deadline_s:g} s (learned: {LEARN_FACTOR:g} x the slowest of the last {len(self._served)} "
                f"served, between {DEADLINE_FLOOR_S:g} and {DEADLINE_CEILING_S:g} s)" if self._served else
                f"{self.deadline_s:g} s (until the server has answered one; then learned from its answers)")

    # (window) -> (when an engine rank began to look stalled, how to aim a request at its data-parallel
    # engine or None), or None (bind_timeline)
    suspicion = None

    def bind_timeline(self, ring, suspicion=None, reads: str | None = None) -> None:
        """The recorder's ring, where the probe reads whether the counters already proved progress; and,
        from the layer that knows the detectors, when the process view began to show a stalled rank and how
        to send a request to that rank's engine. `reads`: the sample kind without which `suspicion` finds
        nothing (it is not asked, and no window made for it, while the ring holds none: a remote target has no
        process view, and serve checks hundreds of them every cadence)."""
        self._ring = ring
        self.suspicion = suspicion
        self._suspicion_reads = reads

    def cost_line(self) -> str:
        span = self.clock.now() - self._first_poll if self._first_poll is not None else 0.0
        per_hour = f" ({self.sent * 3600 / span:.0f} an hour)" if span >= 60 else ""
        urgent = f" ({self.urgent} asked at once: a rank looked stalled)" if self.urgent else ""
        if self.confirms:
            urgent += f" ({self.confirms} asked at once to confirm a probe that got no token)"
        if self.after_stop:
            urgent += f" ({self.after_stop} asked at once when a stop that a miss coincided with ended)"
        if self.preempted:
            urgent += f" ({self.preempted} {PREEMPTED_WORDS}: asked before a rank looked stalled)"
        return (f"{self.sent} one-token request(s){urgent} in {span:.0f} s{per_hour}; {self.skipped} skipped "
                f"because the counters had moved; deadline {self.deadline_words()}")

    async def poll(self) -> list[ProbeSample]:
        return self.poll_now()

    def poll_now(self) -> list[ProbeSample]:
        """`poll` as a plain call (it never waits: an attempt runs on its own task): what a timer shared by many
        recorders calls (watch.ticker)."""
        now = self.clock.now()
        if self._first_poll is None:
            self._first_poll = now
        urgent = None
        if self._attempt is not None:
            # A probe asked before a rank looked stalled says nothing of that rank, and waiting out its deadline
            # delays the verdict by up to that deadline (10.5 s measured on a TP=2 vLLM whose engine core stopped
            # under a routine probe): it gives way to the urgent one.
            urgent = None if self._pending_urgent else self._urgent(now)
            if urgent is None:
                return self._collect(now)
            self._attempt.cancel()
            self._attempt = None
            self.preempted += 1
        urgent = urgent or self._urgent(now)
        if urgent is not None:
            self._last_urgent = now
            self.urgent += 1
            return self._ask(now, self.urgent_deadline_s, urgent[0], urgent=True)
        if self._stop_miss and self._ring is not None and not _stopped_now(self._ring.window(since=now - 5.0)):
            # A miss while a process of the server was stopped (SIGSTOP, a tracer: gdb's attach) says nothing
            # once it runs again (not_serving leaves such probes out): ask at once, not an interval later.
            # It stands for the confirmation too: a miss now starts a run of its own, confirmed in its turn.
            self._stop_miss, self._confirm, self._confirmed_run = False, None, False
            self.after_stop += 1
            return self._ask(now, self.deadline_s, self._aim)
        if self._confirm is not None:
            (aim,), self._confirm = self._confirm, None
            self.confirms += 1
            return self._ask(now, self.deadline_s, aim)
        if self._asked is not None and now - self._asked < self.probe_interval_s:
            return []
        # Due: unless the counters moved over the last interval (looked at on every poll, so a probe goes
        # out one interval after the last movement, not up to two).
        window = (self._ring.window(since=now - self.probe_interval_s - self.deadline_s) if self._ring is not None
                  else None)
        if window is not None and progress_proven(window, now - self.probe_interval_s, self.deadline_s):
            if self._last_skip is None or now - self._last_skip >= self.probe_interval_s:
                self.skipped += 1
                self._last_skip = now
            return []
        return self._ask(now, self.deadline_s, self._in_turn(window))

    def _in_turn(self, window: Window | None) -> Aim | None:
        """A data-parallel server balances an idle load onto engine 0, so an unaimed probe would only ever
        ask engine 0 and never find another engine that hangs while idle: each engine the process view shows
        is asked in turn (None: one engine, or none the view can route to)."""
        engines = dp_engines(window.process[-1] if window is not None and window.process else None)
        if not engines:
            return None
        self._turn += 1
        return engines[(self._turn - 1) % len(engines)]

    def _ask(self, now: float, deadline_s: float, aim: Aim | None = None, *, urgent: bool = False) -> list[ProbeSample]:
        self._asked = now
        self._pending_urgent = urgent
        self.sent += 1
        self._deadline = deadline_s
        self._engine = aim.engine if aim is not None else None
        self._aim = aim
        self._attempt = self.prober(deadline_s, route=dict(aim.headers)) if aim is not None else self.prober(deadline_s)
        return self._collect(now)

    def _urgent(self, now: float) -> tuple[Aim | None] | None:
        """Ask at once ((how to aim it or None); None: not now): the process view shows an engine rank
        stopped, in uninterruptible sleep or starved beside spinning siblings (detectors.ranks.suspects) since
        after the last probe was asked; a stall that happened while the engine read idle is told only by a
        request's answer — from that rank's engine, where the server has more than one (data parallel)."""
        if self._ring is None or self.suspicion is None or (
                self._last_urgent is not None and now - self._last_urgent < URGENT_GAP_S):
            return None
        if self._suspicion_reads is not None and not self._ring.holds(self._suspicion_reads):
            return None
        found = self.suspicion(self._ring.window(since=now - 60.0))
        if found is None:
            return None
        onset, aim = found
        return (aim,) if self._asked is None or self._asked < onset else None

    @property
    def pending(self) -> Attempt | None:
        """The probe sent and not yet answered, if any."""
        return self._attempt

    def cancel_pending(self) -> None:
        if self._attempt is not None:
            self._attempt.cancel()
            self._attempt = None

    def _collect(self, now: float) -> list[ProbeSample]:
        answer = self._attempt.answer()
        if answer is None:
            # A backstop only: the attempt keeps its deadline (a model lookup may come before it).
            if now - self._asked < 2 * self._deadline + self.interval:
                return []
            self._attempt.cancel()
            answer = ProbeAnswer(DEADLINE, now - self._asked, error="timeout",
                                 detail=f"no token within {self._deadline:g} s")
        self._attempt = None
        if answer.outcome == SERVED:
            self._confirmed_run = False
            if answer.latency_s is not None:
                self._served.append(answer.latency_s)
        elif answer.outcome in (DEADLINE, FAILED):
            if not self._confirmed_run:
                self._confirm, self._confirmed_run = (self._aim,), True
            if self._ring is not None and _stopped_since(self._ring.window(since=self._asked - 1.0), self._asked):
                self._stop_miss = True
        self._tell(answer)
        t = min(now, answer.at) if answer.at is not None else now
        return [ProbeSample(t=t, outcome=answer.outcome, latency_s=answer.latency_s, deadline_s=self._deadline,
                            status=answer.status, tokens=answer.tokens, error=answer.error, engine=self._engine)]

    def _tell(self, answer: ProbeAnswer) -> None:
        """One line per kind of trouble that makes the probe useless (said again only after it worked)."""
        if answer.outcome == SERVED:
            self._said.clear()
            return
        if answer.outcome != UNAVAILABLE or not answer.detail or answer.error in self._said:
            return
        self._said.add(answer.error or "")
        if self.say is not None:
            self.say(f"probe unavailable: {answer.detail}; no probe verdict until it answers")


def _stopped_since(window: Window, t: float) -> bool:
    """A process sample at or after `t` shows a process of the server stopped."""
    return any(m.status in STOPPED for sample in window.process if sample.t >= t for m in sample.members)


def _stopped_now(window: Window) -> bool:
    """The newest process sample shows a process of the server stopped (no process view: never)."""
    return bool(window.process) and any(m.status in STOPPED for m in window.process[-1].members)


def progress_proven(window: Window, since: float, deadline_s: float) -> bool:
    """Did the engines generate more tokens after `since` than the probes themselves asked for?

    The baseline is each engine's last scrape at or before `since`. A probe's own token shows up in the
    counters too, so tokens of probes answered in the span (or just before it, by up to a deadline:
    their token may be counted late) do not count as proof."""
    delta = 0.0
    for points in engine_series(window.metrics).values():
        split = bisect_right(points, since, key=lambda point: point[0].t)     # points are in time order
        if split == 0 or split == len(points):
            continue
        old, new = points[split - 1][1].counters.generation_tokens, points[-1][1].counters.generation_tokens
        if old is not None and new is not None and new > old:
            delta += new - old
    own = sum(p.tokens if p.tokens is not None else 1 for p in window.probe
              if p.outcome == SERVED and p.t >= since - deadline_s)
    return delta > own


# --- over HTTP ---------------------------------------------------------------------------------------

class HttpProber:
    """Probes over HTTP: the model from /v1/models (looked up again after a 404), then one completion."""

    def __init__(self, transport, base: str, clock: Clock):
        self.transport = transport          # a `transport.contract.Transport`
        self.base = base
        self.clock = clock
        self.model: str | None = None

    def __call__(self, deadline_s: float, route: dict[str, str] | None = None) -> Attempt:
        return _TaskAttempt(asyncio.ensure_future(self._ask(deadline_s, route or {})))

    async def _ask(self, deadline_s: float, route: dict[str, str]) -> ProbeAnswer:
        answer = await self._outcome(deadline_s, route)
        return dataclasses.replace(answer, at=self.clock.now())

    async def _outcome(self, deadline_s: float, route: dict[str, str]) -> ProbeAnswer:
        from servewatch.sources import completions

        if self.model is None:
            found = await completions.served_model(self.transport, self.base, timeout_s=max(deadline_s, 2.0))
            if found.model is None:
                return ProbeAnswer(UNAVAILABLE, None, error=found.error or "no_models",
                                   detail=found.detail if found.error != completions.CONNECT else "")
            self.model = found.model
        request = {"model": self.model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0, "stream": False}
        done = await completions.complete(self.transport, self.base, request, timeout_s=deadline_s, headers=route)
        if done.status == 404:
            self.model = None      # renamed or reloaded: look it up again next time
        return classify(done, deadline_s)


def classify(done, deadline_s: float) -> ProbeAnswer:
    """A completion's answer as a probe outcome. Only a missed deadline or a server-side failure counts
    against the server; anything that says the probe's own request was wrong says nothing."""
    from servewatch.sources import completions

    if done.error == completions.TIMEOUT:
        return ProbeAnswer(DEADLINE, done.elapsed_s, error="timeout", detail=f"no token within {deadline_s:g} s")
    if done.status is not None and 200 <= done.status < 300 and done.error is None:
        if done.tokens == 0:
            return ProbeAnswer(FAILED, done.elapsed_s, done.status, 0, "no_token", "an answer without a token")
        return ProbeAnswer(SERVED, done.elapsed_s, done.status, done.tokens)
    if done.status is not None and done.status >= 500:
        return ProbeAnswer(FAILED, done.elapsed_s, done.status, error=done.error, detail=done.detail)
    if done.error == completions.DISCONNECTED:
        return ProbeAnswer(FAILED, done.elapsed_s, done.status, error=done.error, detail=done.detail)
    # 4xx (a wrong model, an API key, a rejected prompt), refused connections, answers that are not the
    # API's JSON, oversized answers
    detail = "" if done.error == completions.CONNECT else done.detail
    return ProbeAnswer(UNAVAILABLE, done.elapsed_s, done.status, error=done.error, detail=detail)


class _TaskAttempt:
    def __init__(self, task: asyncio.Future):
        self.task = task

    def answer(self) -> ProbeAnswer | None:
        if not self.task.done():
            return None
        if self.task.cancelled():
            return ProbeAnswer(UNAVAILABLE, None, error="cancelled")
        error = self.task.exception()
        if error is not None:   # the HTTP helpers never raise; if they did, that is not the server's fault
            return ProbeAnswer(UNAVAILABLE, None, error=type(error).__name__[:40])
        return self.task.result()

    def cancel(self) -> None:
        self.task.cancel()


def stderr_say(tool: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"servewatch {tool}: {line}", file=sys.stderr, flush=True)
    return say
