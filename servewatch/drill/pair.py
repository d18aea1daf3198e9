"""A prefill/decode pair as a drill's target (`target: {engine: vllm, pd: {connector: nixl, lease_s: 30}}`, or
`engine: sim`): two instances started as one — the lab's pair (servewatch.lab.pd: both ready, then hands shaken
before the pair is said ready) or two simulators with `--pd-role` — each a target of its own behind its URL,
proven by PID before any signal. A fault aims at one side (`side: prefill|decode`, its role and rank within that
instance); the step's recorder records the deployment (`watch --prefill URL --decode URL`, guard with `--instance`
on the side at fault, serve with the pair as one target), and the workload goes through `servewatch proxy`'s pair
mode so that each request takes both legs. A verdict names a side by its instance name (host:port, as the
deployment recorder calls it): `side_events` keeps the ones that do."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from servewatch.drill.target import DrillTarget, LabTarget, SimTarget, TargetError, make_target
from servewatch.errors import ServewatchError

SIDES = ("prefill", "decode")
ROUTER_READY_S = 30.0
# After a fault that ends (SIGCONT), a side catches up before it answers /health again: decode resumed from a 45 s
# stop with a queue behind it missed the drill's one 2 s look and the pair was started again for nothing (90 s).
SETTLE_S = 30.0
_ROUTER_LISTENING = re.compile(r"servewatch proxy: listening on (127\.0\.0\.1:\d+)")


def make(plan_target, log_dir: Path) -> DrillTarget:
    """The drill's target for a plan's: a pair (`pd:`), else drill.target's."""
    if plan_target.pd is not None:
        return PairTarget(plan_target, log_dir)
    return make_target(plan_target, log_dir)


def other(side: str) -> str:
    return SIDES[1 - SIDES.index(side)]


class VllmSide(LabTarget):
    """One lab vLLM instance of the pair: its server is made by the pair (servewatch.lab.pd.pd_pair)."""

    def __init__(self, plan_target, log_dir: Path, role: str):
        super().__init__(plan_target, log_dir)
        self.role = role

    def start(self) -> None:
        raise TargetError("an instance of a prefill/decode pair starts with its pair")

    def proven(self) -> None:
        self.server.process_tree()
        self.prove()
        self.processes()


class SimSide(SimTarget):
    """One simulator of the pair, started with its `--pd-role`."""

    def __init__(self, plan_target, log_dir: Path, role: str):
        super().__init__(plan_target, log_dir)
        self.role = role


class PairTarget(DrillTarget):
    """The pair: `sides` (prefill, decode), each a DrillTarget of its own; started, stopped and restarted as one.
    Its own url and pid are decode's (where a request ends); a fault acts through the side it names."""

    def __init__(self, plan_target, log_dir: Path):
        super().__init__(plan_target)
        self.log_dir = log_dir
        self.pd = plan_target.pd
        self.lives = 0
        self.handshakes: list[int] = []         # NIXL: the hand-overs each start took before it was said ready
        single = dataclasses.replace(plan_target, pd=None)
        if plan_target.engine == "sim":
            self.dialect = plan_target.sim_dialect
            self.sides = {}
            for role in SIDES:
                extra = ["--pd-role", role]
                if role == "prefill":
                    extra += ["--kv-lease-seconds", f"{self.pd.lease_s:g}"]
                elif self.pd.kv_wait_timeout_s is not None:
                    extra += ["--kv-wait-timeout", f"{self.pd.kv_wait_timeout_s:g}"]
                spec = dataclasses.replace(single, args=(*single.args, *extra))
                self.sides[role] = SimSide(spec, log_dir / role, role)
        else:
            from servewatch.lab.recipe import VLLM

            self.dialect = VLLM.engine
            self.sides = {role: VllmSide(single, log_dir, role) for role in SIDES}

    # -- the pair as one target
    @property
    def url(self) -> str:
        return self.sides["decode"].url

    @property
    def pid(self) -> int:
        return self.sides["decode"].pid

    def side(self, name: str) -> DrillTarget:
        return self.sides[name]

    def names(self) -> dict[str, str]:
        """side -> the instance's name as the deployment recorder calls it (host:port)."""
        from servewatch.watch.deployment import members_from

        members = members_from([self.sides["prefill"].url], [self.sides["decode"].url])
        return {m.role: m.name for m in members}

    def start(self) -> None:
        started = time.monotonic()
        if self.spec.engine == "sim":
            for role in SIDES:
                self.sides[role].start()
        else:
            self._start_vllm()
        self.ready_s.append(round(time.monotonic() - started, 1))
        self.processes()

    def _start_vllm(self) -> None:
        from servewatch.lab.pd import PAIR_ARGS, ensure_nixl, pd_pair
        from servewatch.lab.recipe import VLLM, prepare_lab

        lab = prepare_lab(VLLM)
        if self.pd.connector == "nixl":
            ensure_nixl(lab.venv)
        self.lives += 1
        prefill, decode = self.sides["prefill"], self.sides["decode"]
        log_dir = self.log_dir / f"pair-{self.lives}"
        log_dir.mkdir(parents=True, exist_ok=True)
        pair = pd_pair(lab, self.pd.connector, self.log_dir, lease_s=self.pd.lease_s,
                       prefill_port=prefill.port_fixed, decode_port=decode.port_fixed, log_dir=log_dir,
                       extra_args=(*PAIR_ARGS, *self.spec.args), max_model_len=self.spec.max_model_len)
        for side, server in (("prefill", pair.prefill), ("decode", pair.decode)):
            self.sides[side].server = server
            self.sides[side].model_dir = str(lab.model.path)
        self.pair = pair
        try:
            for server in pair.servers():
                server.start()
            ready: dict[str, float] = {}
            problems: list[str] = []

            def wait(role, server):
                try:
                    ready[role] = server.wait_ready(self.spec.ready_timeout_s)
                except ServewatchError as exc:
                    problems.append(f"{role}: {exc}")

            waits = [threading.Thread(target=wait, args=(r, s), daemon=True)
                     for r, s in (("prefill", pair.prefill), ("decode", pair.decode))]
            for thread in waits:
                thread.start()
            for thread in waits:
                thread.join(self.spec.ready_timeout_s + 30)
            if problems or set(ready) != set(SIDES):
                raise TargetError(f"the pair was not ready within {self.spec.ready_timeout_s:g} s "
                                  f"({'; '.join(problems) or 'no answer'})")
            silent = pair.silent_side_channels()
            if silent:
                raise TargetError(f"NIXL side channel(s) not listening: {', '.join(silent)}")
            if self.pd.connector == "nixl":   # decode's first handshake can outlast vLLM's 5 s receive: shaken here
                self.handshakes.append(pair.shake_hands())
            for side in SIDES:
                self.sides[side].proven()
        except BaseException:
            pair.stop()
            raise

    def kv_storage(self) -> Path | None:
        """The example connector's shared directory of KV files (None: another connector, or the simulator)."""
        pair = getattr(self, "pair", None)
        return pair.storage if pair is not None else None

    def stop(self) -> None:
        for side in SIDES:
            self.sides[side].stop()

    def healthy(self) -> bool:
        """Both sides answer /health 200, each given up to SETTLE_S while its server runs."""
        from servewatch.drill.target import wait_healthy

        return all(wait_healthy(self.sides[s].url, SETTLE_S, alive=self.sides[s].running_process) for s in SIDES)

    def processes(self):
        found = []
        for side in SIDES:
            found += self.sides[side].processes()
            self.seen_pids.update(self.sides[side].seen_pids)
        return found

    def running_process(self) -> bool:
        return all(self.sides[s].running_process() for s in SIDES)

    def log_file(self) -> Path | None:
        return None

    def cpu_note(self) -> str | None:
        return next((n for s in SIDES if (n := self.sides[s].cpu_note())), None)

    def model(self) -> str:
        return self.sides["decode"].model()

    def model_path(self) -> str | None:
        return self.sides["decode"].model_path()

    def ports(self) -> list[tuple[str, int]]:
        return [(self.sides[s].host, self.sides[s].port) for s in SIDES]


# -- which verdicts name a side ------------------------------------------------------------------------------

def names_instance(details: dict | None, name: str, role: str) -> bool:
    """Whether a verdict's details name the instance `name` (of `role`) as the one it is about: the side it may
    act on (`act_on`) where it names one, else the instance whose own verdict it is (`instance`), else the
    instance its details give for that role (a pair verdict that acts on neither side: kv_expired's prefill,
    pd_bypass's decode and idle prefill)."""
    details = details or {}
    if details.get("act_on") is not None:
        return details["act_on"] == name
    if details.get("instance") is not None:
        return details["instance"] == name
    return details.get(role) == name


def side_events(events, name: str, role: str) -> list:
    """The recorder's events about the instance `name`: each firing that names it, with the cleared and
    evidence-held lines of those firings (by verdict and onset)."""
    kept, fired = [], set()
    for e in sorted(events, key=lambda e: e.t):
        if e.event == "fired":
            if names_instance(e.details, name, role):
                fired.add((e.verdict, e.onset))
                kept.append(e)
        elif (e.verdict, e.onset) in fired or (e.details and names_instance(e.details, name, role)):
            kept.append(e)
    return kept


def acting_events(events, name: str) -> list:
    """The events a guard or a livez holding instance `name` may act on (registry.may_act_on): the side at fault
    or nothing."""
    from servewatch.detectors import registry

    allowed = {(e.verdict, e.onset) for e in events if e.event == "fired"
               and registry.may_act_on(e.verdict, e.details or {}, name)}
    return [e for e in events if (e.verdict, e.onset) in allowed]


# -- the router: servewatch proxy's pair mode ----------------------------------------------------------------

class PairRouter:
    """`servewatch proxy --listen 127.0.0.1:0 --prefill URL --decode URL` as a subprocess: each request prefilled
    (max_tokens 1, kv_transfer_params), then sent to decode with the prefill's parameters; `url` is where the
    workload sends."""

    def __init__(self, prefill: str, decode: str, log_path: Path, records: Path | None = None):
        self.command = [sys.executable, "-m", "servewatch", "proxy", "--listen", "127.0.0.1:0",
                        "--prefill", prefill, "--decode", decode]
        if records is not None:
            self.command += ["--records", str(records)]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.host, self.port = "127.0.0.1", 0
        self._listening = threading.Event()

    def start(self) -> PairRouter:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(ROUTER_READY_S):
            self.close()
            raise TargetError(f"servewatch proxy's pair mode did not say where it listens within "
                              f"{ROUTER_READY_S:g} s (log: {self.log_path})")
        return self

    def _read(self) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log:
            for line in self.proc.stderr:
                log.write(line)
                found = _ROUTER_LISTENING.search(line)
                if found and self.url is None:
                    self.url = f"http://{found[1]}"
                    self.port = int(found[1].rsplit(":", 1)[1])
                    self._listening.set()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def decode_waiting(pair: PairTarget) -> float | None:
    """Requests decode holds waiting for their KV, from one read of its /metrics (the connector's gauges,
    `EngineState.kv_transfer`, summed); None when it cannot be read."""
    from servewatch.drill.target import engines_of

    engines = engines_of(pair.side("decode").url)
    if engines is None:
        return None
    total = None
    for engine in engines:
        kv = engine.kv_transfer
        if kv is None:
            continue
        found = kv.waiting_for_kv if kv.waiting_for_kv is not None else kv.fetch_in_progress
        if found is not None:
            total = (total or 0.0) + found
    return total


HANDOVER_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel"
HANDOVER_PREFILL_S = 120.0      # the prefill leg of a hand-over a fault makes (one ~300-token prompt)


class Handover:
    """One request handed over by hand, as test_12's steps do: prefilled (max_tokens 1, kv_transfer_params), then,
    after the fault has landed, sent to decode with the prefill's parameters on a thread of its own: decode
    waits for KV from the side at fault. `outcome`: decode's status (None: no answer) and seconds, once it ends."""

    def __init__(self, pair: PairTarget, model: str, tag: int):
        self.pair, self.model = pair, model
        self.prompt = " ".join([HANDOVER_WORDS, f"india{tag} juliet{tag}"] * 30)
        self.params: dict | None = None
        self.outcome: dict = {}
        self._thread: threading.Thread | None = None

    def prefill(self) -> str | None:
        """The prefill leg; None when it gave parameters, else why not."""
        from servewatch.lab.pd import PREFILL_PARAMS, post_completion

        status, answer = post_completion(self.pair.side("prefill").url, {
            "model": self.model, "prompt": self.prompt, "max_tokens": 1, "kv_transfer_params": PREFILL_PARAMS},
            HANDOVER_PREFILL_S)
        params = answer.get("kv_transfer_params") if status == 200 and isinstance(answer, dict) else None
        if status != 200 or (not params and self.pair.kv_storage() is None):   # the example connector's: none
            return f"the prefill answered {status if status is not None else 'nothing'} without kv_transfer_params"
        self.params = params or None
        return None

    def decode(self, timeout_s: float) -> None:
        """The decode leg, started now on a thread (decode waits for the KV the prefill holds)."""
        from servewatch.lab.pd import post_completion

        def leg():
            started = time.monotonic()
            body = {"model": self.model, "prompt": self.prompt, "max_tokens": 4}
            if self.params:
                body["kv_transfer_params"] = self.params
            status, _ = post_completion(self.pair.side("decode").url, body, timeout_s)
            self.outcome.update(status=status, seconds=round(time.monotonic() - started, 2))

        self._thread = threading.Thread(target=leg, daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> dict:
        if self._thread is not None:
            self._thread.join(max(0.0, timeout_s))
        return dict(self.outcome)
