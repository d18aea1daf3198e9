"""`Guard`: the recorder's verdicts turned into actions on one server's process tree.

A verdict in `act_on` → (engine_dead: a grace for the server to exit by itself) → py-spy stacks of the
tree → SIGKILL of the tree → stop. SIGTERM to guard, for a server guard started → SIGTERM to the server
(it drains) → wait up to the drain timeout → kill what is left. Every step is said in one line on
stderr (and as a JSON line with --json); blocking work (py-spy, waiting for processes) runs in worker
threads so the recorder keeps probing meanwhile.

No signal reaches a process not proven to be the server behind the URL (servewatch.actions.identity):
an attached server is proven before guard starts; a server guard started is proven once it listens.
Before every signal the proof is run again (the PID may have been reused, the port handed over); when
it fails, nothing is signalled and guard says so. One exception, for a server guard started itself: a
drain it was asked for (SIGTERM to guard) reaches its own child even when the child does not listen (yet,
or any more, while it drains); that child is pinned by its create time, and its PID cannot be reused
while guard has not reaped it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from servewatch.actions import stacks as stack_dump
from servewatch.actions import tree
from servewatch.actions.identity import (ServerIdentityError, ServerProof, prove_server, reprove, tree_listens,
                                         unverifiable_reason)
from servewatch.actions.policy import Action, GuardConfig, Outcome, action_for, exit_status
from servewatch.detectors import registry
from servewatch.sources.collective_source import collect_now

ReturnCode = Callable[[], "int | None"]     # Popen.poll of a server guard started; None when attached


class Guard:
    def __init__(self, root: tree.Member, config: GuardConfig, stacks_dir: Path, *, returncode: ReturnCode | None,
                 url: str, proof: ServerProof | None = None, override: bool = False, json_lines: bool = False):
        self.root = root
        self.url = url
        self.proof = proof            # None until a server guard started listens on the URL's port
        self.override = override      # the user's --unverified-pid-ok
        self.refused: list[str] = []  # signals not sent: the proof failed
        self._visible = unverifiable_reason(url) is None
        self.config = config
        self.stacks_dir = stacks_dir
        self.returncode = returncode
        self.json_lines = json_lines
        self.outcome = Outcome()
        self.first: tuple[str, str | None] | None = None   # the life's first verdict and its bundle
        self.recorder = None          # set by the command; stopped when guard is done
        self.busy = False             # an action or a drain is under way: no second one
        self.tasks: set[asyncio.Task] = set()
        self.done = asyncio.Event()

    # --- events ------------------------------------------------------------------------------------

    def on_fired(self, fired) -> None:
        """An on-loop sink's on_fired (the event loop thread): guard acting on a verdict."""
        name = fired.verdict.name
        if self.first is None:
            self.first = (name, fired.bundle)
        if name == registry.ENGINE_DEAD or (name == registry.PROCESS_EXIT
                                            and fired.verdict.details.get("after_engine_death")):
            self.outcome = replace(self.outcome, engine_died=True)
        if name == registry.PROCESS_EXIT:
            self._server_gone()

    def on_evidence(self, verdict, fired_now: bool = True) -> None:
        """The recorder's evidence listener (the event loop thread): a verdict whose evidence now holds — at
        its firing, or later as the probes agree (the action policy, detectors.registry) — is acted on when it
        is one of --act-on."""
        action = action_for(verdict.name, self.config, verdict.details, registry.action_for(verdict))
        if action is None or self.busy or verdict.name == registry.PROCESS_EXIT:
            return
        self.busy = True      # a second verdict of the same detection run does not start a second action
        self._spawn(self._act(action))

    def say_policy(self, probing: bool) -> None:
        """What guard acts on, in one line at its start: each verdict with its class and the evidence it waits
        for; and when the probe is off, which of them cannot fire."""
        line = f"acts on {', '.join(registry.policy_lines(self.config.act_on))}"
        blind = [name for name in self.config.act_on if (found := registry.spec(name)) and found.probes]
        if not probing and blind:
            line += f"; the probe is off (--no-probe), so {' and '.join(blind)} cannot fire"
        self.say(line, event="policy", act_on=list(self.config.act_on), probe=probing,
                 evidence={name: found.evidence_words() for name in self.config.act_on
                           if (found := registry.spec(name)) and found.evidence_words()})

    def drain(self) -> None:
        """SIGTERM/SIGINT to guard. A server guard started is asked to drain; an attached one is left
        alone (guard only stops watching). A second signal during a drain kills the tree at once."""
        if self.returncode is None:
            self.say("stopping; the attached server is left running", event="stop")
            self._finish()
            return
        if self.outcome.drain is not None:
            self.say("second signal during the drain: killing the tree now", event="drain")
            self._spawn(self._kill_after_drain())
            return
        self.outcome = replace(self.outcome, drain="draining")
        self.busy = True
        if self.recorder is not None:     # a server shutting down on request is not an incident
            self.recorder.hold_verdicts()
        self._spawn(self._drain())

    # --- actions -----------------------------------------------------------------------------------

    async def _act(self, action: Action) -> None:
        loop = asyncio.get_running_loop()
        if action.wait_for_exit_s > 0:
            self.say(f"{action.verdict}: giving the server {action.wait_for_exit_s:g} s to exit by itself",
                     event="grace", verdict=action.verdict)
            if await self._root_gone_within(action.wait_for_exit_s):
                self.busy = False
                return     # process_exit takes it from here
        members = tree.snapshot(self.root.pid, self.root.create_time)
        if not members:
            self.busy = False
            return
        if action.kill and not self._proven(action.verdict):
            self.busy = False      # keep watching; a later verdict is checked again
            return
        if not action.kill:
            self.say(f"{action.verdict}: dry run: would dump the stacks of {len(members)} process(es) and kill the "
                     f"tree ({_roles(members)})", event="dry_run", verdict=action.verdict)
            self.busy = False
            return
        if self.recorder is not None and await collect_now(self.recorder) is not None:
            await self.recorder.detect_in_background()   # every rank's dumps and RAS judged (and kept) before the kill
        if action.stacks:
            capture = await loop.run_in_executor(None, self._capture, members)
            where = f" → {capture.path}" if capture.path else ""
            split = f"; divergence: {capture.divergence.words}" if capture.divergence else ""
            self.say(f"{action.verdict}: stacks {capture.status}"
                     f"{' (' + capture.reason + ')' if capture.reason else ''}{where}{split}",
                     event="stacks", verdict=action.verdict, path=capture.path, **capture.public())
        if not self._proven(action.verdict):      # again: the stacks took seconds
            self.busy = False
            return
        killed = await loop.run_in_executor(None, tree.kill, members)
        self.outcome = replace(self.outcome, killed_for=action.verdict, hardware=action.hardware)
        self.say(f"{action.verdict}: killed the tree ({_roles(killed.members)})"
                 + (f"; still there: {list(killed.survivors)}" if killed.survivors else ""),
                 event="kill", verdict=action.verdict, killed=len(killed.members), survivors=list(killed.survivors))
        self._finish()

    def _capture(self, members):
        try:
            return stack_dump.capture(members, self.stacks_dir, when=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        except Exception as exc:  # noqa: BLE001 - the stacks are evidence; the kill that follows is the action
            return stack_dump.StackCapture("failed", None, None, reason=f"{type(exc).__name__}: {exc}")

    async def _drain(self) -> None:
        self.say(f"asking the server to drain (SIGTERM to pid {self.root.pid}); up to "
                 f"{self.config.drain_timeout_s:g} s", event="drain")
        if not self._proven("drain", own_child_ok=True):
            self._finish()
            return
        if not tree.ask_to_stop(self.root):
            self._server_gone()
            return
        timeout = self.config.drain_timeout_s
        again = tree.stop_again_after(self.root)
        if again is not None and again[1] < timeout:
            engine, after = again
            if await self._root_gone_within(after):
                self._server_gone()
                return
            if not self._proven("drain", own_child_ok=True):
                self._finish()
                return
            self.say(f"the server is still up {after:g} s after SIGTERM: {engine} stops its work at the first signal "
                     f"and then waits on clients still connected; a second SIGTERM ends it (SIGTERM to pid "
                     f"{self.root.pid})", event="drain")
            self.outcome = replace(self.outcome, drain="forced")
            if not tree.ask_to_stop(self.root):
                self._server_gone()
                return
            timeout -= after
        if await self._root_gone_within(timeout):
            self._server_gone()
            return
        await self._kill_after_drain()

    async def _kill_after_drain(self) -> None:
        if not self._proven("drain", own_child_ok=True):
            self._finish()
            return
        members = tree.snapshot(self.root.pid, self.root.create_time)
        killed = await asyncio.get_running_loop().run_in_executor(None, tree.kill, members)
        self.outcome = replace(self.outcome, drain="timeout")
        self.say(f"drain: killed the tree ({_roles(killed.members)})", event="kill", killed=len(killed.members),
                 survivors=list(killed.survivors))
        self._finish()

    # --- identity ----------------------------------------------------------------------------------

    def prove_when_listening(self) -> None:
        """A server guard started: proven as soon as its tree listens on the URL's port."""
        self._spawn(self._prove_when_listening())

    async def _prove_when_listening(self) -> None:
        while not self.done.is_set() and not self.try_prove():
            if self.returncode is not None and self.returncode() is not None:
                return
            await asyncio.sleep(0.2)   # another process's state: polled (one psutil read)

    def try_prove(self) -> bool:
        """A server guard started: proven once it listens (called until it is). True once proven."""
        if self.proof is not None:
            return True
        if self._visible and not tree_listens(self.root.pid, self.url):
            return False      # not listening yet (the full proof would also name who else listens: costly)
        try:
            self.proof = prove_server(self.root.pid, self.url, allow_unverifiable=self.override)
        except ServerIdentityError:
            return False
        if abs(self.proof.create_time - self.root.create_time) > 0.01:    # cannot happen to an unreaped child
            self.proof = None
            return False
        self.say_proof()
        return True

    def say_proof(self) -> None:
        proof = self.proof
        given = "; --unverified-pid-ok was given" if self.override else ""
        self.say(f"identity: {proof.how}{given}", event="identity", verified=proof.verified, override=self.override,
                 listener_pid=proof.listener_pid)

    def identity_record(self) -> dict | None:
        """What a bundle says about the server's identity (target.identity), or None before any proof."""
        if self.proof is None:
            return None
        return {"verified": self.proof.verified, "override": self.override, "how": self.proof.how}

    def _proven(self, what: str, *, own_child_ok: bool = False) -> bool:
        """The proof run again just before a signal; False (and said, and kept in self.refused) if it fails."""
        try:
            if self.proof is None:
                self.proof = prove_server(self.root.pid, self.url, allow_unverifiable=self.override)
                self.say_proof()
            else:
                self.proof = reprove(self.proof, self.url)
            return True
        except ServerIdentityError as exc:
            problem = str(exc)
        if own_child_ok and self.returncode is not None and self.returncode() is None and tree.snapshot(
                self.root.pid, self.root.create_time):
            return True      # guard's own child, unreaped, same create time (see the module docstring)
        self.refused.append(f"{what}: {problem}")
        self.say(f"{what}: sending no signal: {problem}", event="refused", verdict=what, reason=problem)
        return False

    async def _root_gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._root_gone():
                return True
            await asyncio.sleep(0.1)   # another process's state: polled
        return self._root_gone()

    def _root_gone(self) -> bool:
        if self.returncode is not None:
            return self.returncode() is not None
        return not tree.snapshot(self.root.pid, self.root.create_time)

    # --- the end -----------------------------------------------------------------------------------

    def _server_gone(self) -> None:
        code = self.returncode() if self.returncode is not None else None
        drain = self.outcome.drain if self.outcome.drain != "draining" else "drained"
        self.outcome = replace(self.outcome, server_gone=True, server_exit=code, drain=drain)
        self._finish()

    def _finish(self) -> None:
        if self.outcome.drain == "draining":
            self.outcome = replace(self.outcome, drain=None)
        self.done.set()
        if self.recorder is not None:
            self.recorder.stop()

    def result(self) -> tuple[int, str]:
        code, why = exit_status(self.outcome)
        if self.refused:
            why += f"; {len(self.refused)} signal(s) not sent, the process was not proven to be the server"
        self.say(f"exit {code}: {why}", event="exit", code=code, why=why)
        return code, why

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def say(self, line: str, *, event: str, **fields) -> None:
        print(f"servewatch guard: {line}", file=sys.stderr, flush=True)
        if self.json_lines:
            print(json.dumps({"guard": event, **fields}, ensure_ascii=False), flush=True)


def _roles(members) -> str:
    return ", ".join(f"{m.role} {m.pid}" for m in members)
