"""The server a drill acts on: one the drill starts and stops itself (the built-in simulator or a lab
engine), or an existing one given by URL and PID, accepted only once its PID is proven to serve the URL
(actions.identity) and with the user's explicit consent. Every signal is preceded by a fresh proof."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from servewatch import proctime
from servewatch.errors import ServewatchError

HEALTH_TIMEOUT_S = 2.0
METRICS_MAX_BYTES = 16 * 2**20
SIM_READY_TIMEOUT_S = 30.0


class TargetError(ServewatchError):
    exit_code = 2


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    create_time: float        # seconds since boot (started_since_boot): the identity, immune to clock steps
    title: str
    role: str
    rank: int
    dp: int | None = None     # its data-parallel rank (own or inherited): the engine it belongs to


# A process is the same process while its pid and its start, counted in clock ticks since boot, are the
# same. psutil's create_time() adds the boot time as the wall clock puts it now, so a step of the wall
# clock (a VM resumed after a pause, NTP) moves it: a clean-clone CI run saw the same SGLang process "start"
# 2.00 s later mid-drill, and the SIGCONT that ends a stop was withheld as if the process had been replaced.
IDENTITY_TOLERANCE_S = 0.01    # rounding to clock ticks


def started_since_boot(pid: int) -> float:
    """When `pid` started, in seconds since boot (servewatch.proctime). Raises psutil.NoSuchProcess when it is
    gone."""
    import psutil

    try:
        return proctime.started_since_boot(pid)
    except ProcessLookupError:
        raise psutil.NoSuchProcess(pid) from None


def get(url: str, timeout_s: float, max_bytes: int):
    """A GET from the drill's blocking steps (no event loop there) through the transport contract: the answer
    (`transport.contract.Reply`, any status), or None without one (whatever the outcome, or a bad URL)."""
    from servewatch.transport.contract import HttpRequest, Reply, send_blocking

    try:
        got = send_blocking(HttpRequest("GET", url, timeout_s=timeout_s, max_bytes=max_bytes))
    except ValueError:
        return None
    return got if isinstance(got, Reply) else None


def health(url: str, path: str = "/health", timeout_s: float = HEALTH_TIMEOUT_S) -> int | None:
    answer = get(f"{url}{path}", timeout_s, 1 << 16)
    return answer.status if answer is not None else None


def engines_of(url: str) -> list | None:
    """The engines one read of the server's /metrics shows (dialects.read_scrape), or None when it cannot be read."""
    from servewatch.dialects import read_scrape

    answer = get(f"{url}/metrics", HEALTH_TIMEOUT_S, METRICS_MAX_BYTES)
    if answer is None or not answer.ok:
        return None
    try:
        return read_scrape(answer.body).engines
    except (ValueError, ServewatchError):
        return None


def wait_healthy(url: str, timeout_s: float, alive=lambda: True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        if health(url) == 200:
            return True
        time.sleep(0.2)   # a server starting up: nothing to wait on but its /health
    return False


class DrillTarget:
    """Common part: URL, proof, process listing by role and rank, signals."""

    owned = True
    dialect: str | None = None          # the engine's dialect (registered name); None: not known
    hang_root: Path | None = None       # where the test-only hang hook and its requests live (drill.hang_hook), if installed

    def __init__(self, plan_target):
        self.spec = plan_target
        self.proof = None
        self.proof_started: float | None = None   # the proven pid's start, seconds since boot
        self.seen_pids: dict[int, float] = {}     # every process of the server seen: for the leak check
        self.restarts: list[float] = []
        self.ready_s: list[float] = []             # each start the drill made: seconds until /health 200
        self.starting = False                      # launched by an at_start step, not yet up (or gone)

    # -- to be given by subclasses
    url: str = ""
    pid: int = 0

    def start(self) -> None:
        raise NotImplementedError

    def _hang_hook(self, pythonpath: str | None = None, *, native: bool = False) -> dict[str, str]:
        """The variables that install the test-only hang hook in a server the drill starts (drill.hang_hook); `native`:
        the server is no Python program (llama-server), the hook is preloaded."""
        from servewatch.drill import hang_hook

        self.hang_root = self.log_dir / "hang"
        return hang_hook.environment(self.hang_root, pythonpath, native=native)

    def stop(self) -> None:
        raise NotImplementedError

    def launch(self) -> None:
        """Start the server without waiting for it (an at_start step): the recorder attaches to its first
        second, the fault lands during the start; wait_up() ends the start."""
        raise TargetError("the drill starts only a server of its own")

    def wait_up(self, timeout_s: float) -> tuple[float | None, int | None]:
        """After launch(): (seconds from the launch to /health 200, None) once the server is up and proven,
        (None, exit status) once its main process has exited, (None, None) when neither came within
        timeout_s of the launch. The exit is read without reaping, so the recorder sees the real status."""
        proc, launched = self._launched()
        code = wait_up_keep_zombie(self.url, proc, launched + timeout_s)
        if code is not None or health(self.url) != 200:
            return None, code
        took = round(time.monotonic() - launched, 1)
        self.starting = False
        self._came_up(took)
        self.prove()
        self.processes()
        self.ready_s.append(took)
        return took, None

    def _launched(self) -> tuple[subprocess.Popen, float]:
        """The main process launch() started, and when (time.monotonic())."""
        raise TargetError("the drill starts only a server of its own")

    def _came_up(self, took: float) -> None:
        """What a subclass notes when a start it launched is up (before the proof)."""

    def running_process(self) -> bool:
        """The main process the drill launched is still running."""
        return False

    def restart(self) -> float:
        """Stop and start a server the drill started itself; the seconds it took."""
        if not self.owned:
            raise TargetError("this target cannot be restarted by the drill")
        started = time.monotonic()
        self.stop()
        self.start()
        took = time.monotonic() - started
        self.restarts.append(took)
        return took

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 80

    def prove(self) -> None:
        import psutil

        from servewatch.actions.identity import ServerIdentityError, ServerProof, prove_server

        try:
            self.proof = prove_server(self.pid, self.url)
        except ServerIdentityError:
            if not (self.starting and self.owned and _own_child(self.pid)):
                raise
            # Starting: SGLang binds its port only once its engine is up (vLLM's API server at once). The
            # process is the one the drill itself launched (its child, with the start recorded below).
            self.proof = ServerProof(self.pid, 0.0, None, self.port, True,
                                     f"pid {self.pid} is the server the drill started, not listening yet")
        try:
            self.proof_started = started_since_boot(self.pid)
        except psutil.Error:
            raise TargetError(f"pid {self.pid} exited right after it was proven to serve {self.url}") from None

    def reprove(self) -> None:
        """The proof again before a signal: the same process (its start since boot, see started_since_boot —
        not actions.identity.reprove's wall-clock create time, which a clock step moves), proven afresh to
        hold the URL's port."""
        import psutil

        if self.proof is None or self.proof.pid != self.pid:
            self.prove()
            return
        try:
            same = abs(started_since_boot(self.pid) - self.proof_started) <= IDENTITY_TOLERANCE_S
        except psutil.Error:
            same = False
        if not same:
            raise TargetError(f"pid {self.pid} is no longer the process proven to serve {self.url}: the server "
                              f"exited")
        self.prove()

    def processes(self) -> list[Process]:
        """The server's processes: role by the dialect, rank by the rank model (a title's own rank, else the
        one it inherits: a DP engine's plain VLLM::Worker is its EngineCore_DP<n>'s DP rank n); processes
        with no rank are counted in order within their role."""
        import psutil

        from servewatch.dialects import by_name
        from servewatch.sources.process import title_of
        from servewatch.timeline.samples import ProcessMember

        dialect = by_name(self.dialect)
        guarded = self.spec.under_guard is not None   # the root is guard, its child the API server
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        found: list[ProcessMember] = []    # the root first
        for i, proc in enumerate(procs):
            try:
                title = title_of(proc)
                created = started_since_boot(proc.pid)
                ppid = proc.ppid()
            except psutil.Error:
                continue
            role = ("guard" if guarded else "api") if i == 0 else \
                "api" if guarded and ppid == self.pid else ((dialect.role_of(title) if dialect else None) or "other")
            self.seen_pids[proc.pid] = created
            found.append(ProcessMember(proc.pid, created, role, title, "running", ppid=ppid))
        return with_ranks(found)

    def member(self, role: str | None, rank: int) -> tuple[Process, str]:
        """The process a fault aims at, and a note when the role has no process of its own here."""
        procs = self.processes()
        if not procs:
            raise TargetError(f"the server behind {self.url} is not running")
        role = role or "api"
        chosen = [p for p in procs if p.role == role]
        if not chosen:
            return procs[0], f"no {role} process of its own here: the API server's process"
        by_rank = [p for p in chosen if p.rank == rank]
        if not by_rank:
            ranks = ", ".join(str(p.rank) for p in chosen)
            raise TargetError(f"no {role} of rank {rank} (ranks here: {ranks})")
        return by_rank[0], ""

    def hang(self, proc: Process, seconds: float) -> Path:
        """Block `proc`'s main thread for at most `seconds` through the test-only hook (drill.hang_hook), proven and
        checked to catch the hook's signal right before; the request's path (release it to end the hang)."""
        from servewatch.drill import hang_hook

        if self.hang_root is None:
            raise TargetError("the hang hook is installed only in servers the drill starts itself (the lab engines, "
                              "the simulator)")
        if not hang_hook.catches(proc.pid):
            raise TargetError(f"pid {proc.pid} ({proc.title}) does not catch the hang hook's signal: not sent")
        path = hang_hook.request(self.hang_root, proc.pid, seconds)
        try:
            self.send(proc, hang_hook.HANG_SIGNAL)
        except BaseException:
            hang_hook.release(path)
            raise
        return path

    def send(self, proc: Process, sig: int) -> None:
        """Signal one process of the server, proven again right before."""
        import psutil

        self.reprove()
        members = {p.pid: p for p in self.processes()}
        current = members.get(proc.pid)
        if current is None or abs(current.create_time - proc.create_time) > IDENTITY_TOLERANCE_S:
            raise TargetError(f"pid {proc.pid} is no longer part of the server behind {self.url}")
        psutil.Process(proc.pid).send_signal(sig)

    def undo(self, proc: Process, sig: int) -> str | None:
        """SIGCONT to the very process the drill stopped (pid and start as when it was proven); None when
        sent, else why not (it is gone, or its pid now names another process)."""
        import psutil

        try:
            if abs(started_since_boot(proc.pid) - proc.create_time) > IDENTITY_TOLERANCE_S:
                return f"pid {proc.pid} is another process now: {signal_name(sig)} not sent"
            psutil.Process(proc.pid).send_signal(sig)
        except psutil.Error:
            return f"pid {proc.pid} is gone: {signal_name(sig)} not sent"
        return None

    def exit_status(self) -> int | None:
        """The main process's exit status once it has exited (negative: the signal that killed it), read as its
        parent; None while it runs, and for a server the drill did not start (not its child)."""
        return None

    def healthy(self) -> bool:
        return health(self.url) == 200

    def running(self, dp: int | None) -> float | None:
        """Requests running on the engine of data-parallel rank `dp` (all engines when None, or when the
        engines carry no DP label), from one /metrics read; None when it cannot be read."""
        from servewatch.dialects import dp_rank_of

        engines = engines_of(self.url)
        if engines is None:
            return None
        mine = [e for e in engines if dp is not None and dp_rank_of(e.labels) == str(dp)]
        return sum(e.running or 0.0 for e in (mine or engines))

    def log_file(self) -> Path | None:
        """The server's log, for the recorder to read (None: the drill did not start it)."""
        return None

    def cpu_note(self) -> str | None:
        """Why the server the drill started could not give way to the drill's own processes for the CPU (None:
        it did, or the drill did not start an engine; servewatch.lab.server.yield_cpu)."""
        return None

    def model(self) -> str:
        return self.model_card().get("id") or "unknown"

    def model_path(self) -> str | None:
        """Where the served model was loaded from, when /v1/models says (vLLM's and SGLang's `root`, or an id
        that is itself a path) and it is an absolute path: a bundle must not hold it."""
        card = self.model_card()
        for value in (card.get("root"), card.get("id")):
            if isinstance(value, str) and value.startswith("/") and len(value) > 1:
                return value
        return None

    def model_card(self) -> dict:
        """The first model /v1/models lists ({} when it cannot be read)."""
        import json

        answer = get(f"{self.url}/v1/models", 5.0, 1 << 20)
        try:
            card = json.loads(answer.body)["data"][0] if answer is not None and answer.ok else {}
        except (ValueError, KeyError, IndexError, TypeError):
            return {}
        return card if isinstance(card, dict) else {}


class SimTarget(DrillTarget):
    """`servewatch sim` in a subprocess of its own session, on a fixed loopback port."""

    def __init__(self, plan_target, log_dir: Path):
        super().__init__(plan_target)
        from servewatch.lab.server import free_port

        self.dialect = plan_target.sim_dialect
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def start(self) -> None:
        self.launch()
        self.starting = False
        if not wait_healthy(self.url, SIM_READY_TIMEOUT_S, alive=lambda: self.proc.poll() is None):
            self.stop()
            raise TargetError(f"the simulator did not become healthy on {self.url} (log: {self.log_dir / 'sim.log'})")
        self.prove()
        self.processes()

    def _launched(self) -> tuple[subprocess.Popen, float]:
        return self.proc, self.launched

    def running_process(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starting = True
        log = open(self.log_dir / "sim.log", "ab")
        command = [sys.executable, "-m", "servewatch", "sim", "--dialect", self.dialect, "--port", str(self.port),
                   "--profile", "tiny-cpu", "--log-stats-interval", "1", "--max-model-len",
                   str(self.spec.max_model_len), *self.spec.args]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env={**os.environ, **self._hang_hook()})
        self.launched = time.monotonic()
        log.close()

    def log_file(self) -> Path | None:
        return self.log_dir / "sim.log"

    def exit_status(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.undo(Process(self.proc.pid, self.seen_pids.get(self.proc.pid, 0.0), "", "api", 0), 18)  # SIGCONT
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        else:
            self.proc.wait(5)


class LabTarget(DrillTarget):
    """A lab vLLM, SGLang or llama.cpp (servewatch.lab), started on a loopback port the drill keeps across restarts."""

    def __init__(self, plan_target, log_dir: Path):
        super().__init__(plan_target)
        from servewatch.lab.server import free_port

        self.dialect = plan_target.engine
        self.port_fixed = free_port()
        self.url = f"http://127.0.0.1:{self.port_fixed}"
        self.log_dir = log_dir
        self.server = None
        self.lives = 0
        self.model_dir: str | None = None

    def model_path(self) -> str | None:
        """The lab model's directory (SGLang's /v1/models gives only the served name)."""
        return self.model_dir or super().model_path()

    @property
    def pid(self) -> int:
        return self.server.pid if self.server is not None and self.server.proc is not None else 0

    def _build(self):
        from servewatch.lab.recipe import RECIPES, VLLM, prepare_lab

        lab = prepare_lab(RECIPES[self.dialect])           # the lab `servewatch lab ENGINE` prepares
        self.model_dir = str(lab.model.path)
        self.lives += 1
        log_path = self.log_dir / f"{self.dialect}-{self.lives}.log"
        # SGLang's test-only kernel stand-in stays on its PYTHONPATH, after the hang hook
        hook = self._hang_hook(str(lab.stand_in) if lab.stand_in is not None else os.environ.get("PYTHONPATH"),
                               native=lab.recipe.engine == "llamacpp")
        common = {"port": self.port_fixed, "extra_args": tuple(self.spec.args),
                  "extra_env": (*tuple(self.spec.env), *hook.items())}
        if lab.recipe is VLLM:
            server = lab.server(log_path, max_model_len=self.spec.max_model_len, **common)
        else:
            server = lab.server(log_path, context_length=self.spec.max_model_len, served_model_name="tiny", **common)
        if self.spec.under_guard is not None:     # guard starts the engine; its lines go to the same log
            server.wrapper = (sys.executable, "-m", "servewatch", "guard", self.url, "--json", "--interval", "0.5",
                              "--out", str(self.log_dir / f"guard-bundles-{self.lives}"), "--no-stacks",
                              "--lives", str(self.log_dir / "guard-lives.json"), *self.spec.under_guard, "--")
        return server

    def start(self) -> None:
        self.launch()
        self.starting = False
        try:
            self.ready_s.append(round(self.server.wait_ready(self.spec.ready_timeout_s), 1))
        except ServewatchError:
            self.server.stop()
            raise
        self.server.process_tree()
        self.prove()
        self.processes()

    def launch(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.server = self._build()
        self.server.start()
        self.starting = True

    def _launched(self) -> tuple[subprocess.Popen, float]:
        return self.server.proc, self.server._started_at

    def _came_up(self, took: float) -> None:
        self.server.ready_seconds = took
        self.server.process_tree()

    def running_process(self) -> bool:
        return self.server is not None and self.server.proc is not None and self.server.returncode is None

    def stop(self) -> None:
        if self.server is not None:
            self.processes()
            self.server.stop()

    def log_file(self) -> Path | None:
        return self.server.log_path if self.server is not None else None

    def cpu_note(self) -> str | None:
        return self.server.cpu_note if self.server is not None else None

    def exit_status(self) -> int | None:
        return self.server.returncode if self.server is not None else None


class ExistingTarget(DrillTarget):
    """A server the drill did not start: proven by PID and port, drilled only with consent."""

    owned = False

    def __init__(self, plan_target):
        super().__init__(plan_target)
        self.url = plan_target.url.rstrip("/")
        self._pid = plan_target.pid

    @property
    def pid(self) -> int:
        return self._pid

    def start(self) -> None:
        self.prove()        # a PID that does not serve the URL: ServerIdentityError, one line, exit 2
        if not self.spec.consent:
            raise TargetError(f"drilling {self.url} signals its processes: pass --consent (or consent: true in the "
                              f"plan's target) to confirm this server may be disrupted")
        self.dialect = _detect_dialect(self.url, self.pid)
        self.processes()

    def stop(self) -> None:
        pass


def wait_up_keep_zombie(url: str, proc: subprocess.Popen, deadline: float) -> int | None:
    """Until /health answers 200 or the process exits (its exit status, read without reaping it: the
    recorder reads the status of the zombie it left, as an engine's real parent would), or the monotonic
    deadline; None unless it exited."""
    import os

    while time.monotonic() < deadline:
        if health(url) == 200:
            return None
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll()
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        time.sleep(0.2)   # a server starting up: nothing to wait on but its /health and its exit
    return None


def _own_child(pid: int) -> bool:
    import os

    import psutil

    try:
        return psutil.Process(pid).ppid() == os.getpid()
    except psutil.Error:
        return False


def _detect_dialect(url: str, pid: int) -> str | None:
    """The engine behind an existing server, through the dialect registry: its /metrics as read_scrape reads it,
    else the process titles of its tree (a dialect that names one of them); None when neither tells (never guessed)."""
    import psutil

    from servewatch.dialects import read_scrape, registered
    from servewatch.errors import ServewatchError
    from servewatch.sources.process import title_of

    answer = get(f"{url}/metrics", 5.0, 4 << 20)
    try:
        dialect = read_scrape(answer.body).dialect if answer is not None and answer.ok else None
        if dialect is not None:
            return dialect
    except (ValueError, ServewatchError):
        pass
    try:
        root = psutil.Process(pid)
        titles = [title_of(p) for p in (root, *root.children(recursive=True))]
    except psutil.Error:
        return None
    return next((d.name for d in registered() if any(d.role_of(t) for t in titles)), None)


def make_target(plan_target, log_dir: Path) -> DrillTarget:
    if plan_target.existing:
        return ExistingTarget(plan_target)
    if plan_target.engine == "sim":
        return SimTarget(plan_target, log_dir)
    return LabTarget(plan_target, log_dir)


def with_ranks(members) -> list[Process]:
    """Processes (ProcessMember, the root first, roles set) with their rank: the most specific the rank model
    gives (a title's own, e.g. Worker_TP1's TP rank 1, else the one it inherits from a ranked ancestor: a DP
    engine's plain VLLM::Worker has its EngineCore_DP<n>'s DP rank n); one with none is counted in order
    within its role (the API server: 0)."""
    from servewatch.timeline.ranks import rank_view
    from servewatch.timeline.samples import ProcessSample

    if not members:
        return []
    sample = ProcessSample(0.0, members[0].pid, None, True, tuple(members))
    views = {r.pid: r for r in rank_view(sample)}
    out: list[Process] = []
    counts: dict[str, int] = {}
    for m in members:
        view = views.get(m.pid) if m.role != "api" else None
        rank = view.axes[-1][1] if view is not None and view.axes else None
        out.append(Process(m.pid, m.create_time, m.title, m.role, counts.get(m.role, 0) if rank is None else rank,
                           view.axis("DP") if view is not None else None))
        counts[m.role] = counts.get(m.role, 0) + 1
    return out


def pid_alive(pid: int, create_time: float) -> bool:
    """`create_time`: seconds since boot, as Process.create_time."""
    import psutil

    try:
        return (abs(started_since_boot(pid) - create_time) <= IDENTITY_TOLERANCE_S
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def signal_name(sig: int) -> str:
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def port_held(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


