"""Start a real engine on a loopback port, wait for it, name its processes, and always tear it down.

LabServer is the lifecycle every engine shares; VllmServer (here) and SglangServer (sglang_server.py)
say how to start theirs and how its processes are titled. Teardown is guaranteed three ways:
`with VllmServer(...)` (also when the body raises), an atexit hook for anything still running when the
interpreter exits, and `stop()` which a pytest fixture finalizer calls. The server runs in its own
session, so the whole process group can be swept at the end; a terminating signal to the program that
started it does not reach it, so that program calls `stop_servers_on_termination()`.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import subprocess
import time
# Not the transport: a blocking wait for a lab engine's /health at its start (no event loop; the transport is asyncio).
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from servewatch.errors import ServewatchError
from servewatch.sched import set_session_nice

ENGINE_CORE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"
READY_TIMEOUT_S = 240.0
STOP_GRACE_S = 15.0
HTTP_TIMEOUT_S = 2.0
# The lab engine's session gives way to the programs measuring it (see yield_cpu): the nice of its autogroup.
ENGINE_AUTOGROUP_NICE = 10

# The root cause vLLM prints, e.g. "ValueError: To serve at least one request with the model's ...".
# The (Process pid=N) prefix is optional: tracebacks are written raw to stderr.
_EXCEPTION_LINE = re.compile(r"^(?:\([\w:]+ pid=\d+\) )?(?P<cls>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<msg>.+)$")


def yield_cpu(pid: int, nice: int = ENGINE_AUTOGROUP_NICE) -> str | None:
    """Lower the CPU priority of the lab engine's session (its autogroup) to `nice`; None when done, else why not.

    A CPU vLLM saturates both cores with four busy processes, and without this every process of another
    session (the load client, the recorder, the drill's /health prober) waited for a CPU: the drill's prober
    saw a slowest /health of 8.2 s, 0.02 s once the engine's session was at nice 10, the engine's throughput
    the same (188 requests of 256 tokens against 192; servewatch.sched). A lab engine is measured, not served:
    the measuring side must not be the one that waits."""
    why = set_session_nice(pid, nice)
    return None if why is None else f"its session's CPU priority was left as it is ({why})"


def _pin_to(cpus: tuple[int, ...]) -> Callable[[], None]:
    """For Popen's preexec_fn: the child (and so every process and thread it starts, which inherit it) runs on
    `cpus` only. OpenMP's binding (VLLM_CPU_OMP_THREADS_BIND) pins vLLM's compute threads, not the threads a
    library starts on its own, such as NIXL's progress thread."""
    return lambda: os.sched_setaffinity(0, cpus)


class StartupFailed(ServewatchError):
    """The engine exited or never became ready; str() carries the engine's own message."""

    def __init__(self, message: str, *, exit_code: int | None, log_path: Path, vllm_message: str | None):
        super().__init__(message)
        self.returncode = exit_code
        self.log_path = log_path
        self.vllm_message = vllm_message


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model_dir: Path
    max_model_len: int = 2048
    max_num_seqs: int = 16
    kv_cache_memory_bytes: int = 4 * 2**20
    port: int | None = None                 # None: pick a free loopback port
    host: str = "127.0.0.1"
    log_stats_interval_s: float = 1.0
    served_model_name: str = "tiny"
    cache_root: Path | None = None          # VLLM_CACHE_ROOT: keeps the torch.compile cache with the lab
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()   # e.g. (("VLLM_CPU_OMP_THREADS_BIND", "0|1"),) for two ranks
    cpus: tuple[int, ...] = ()              # the cores the whole process tree may run on (empty: all of them)


@dataclass(frozen=True, slots=True)
class ProcessTree:
    api_server: int
    engine_core: int | None
    worker: int | None
    others: tuple[tuple[int, str], ...]     # (pid, name) of every other descendant

    def as_dict(self) -> dict:
        return {
            "api_server": self.api_server,
            "engine_core": self.engine_core,
            "worker": self.worker,
            "others": [{"pid": pid, "name": name} for pid, name in self.others],
        }


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def vllm_command(python: Path, config: ServerConfig, port: int) -> list[str]:
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(config.model_dir),
        "--served-model-name", config.served_model_name,
        "--host", config.host,
        "--port", str(port),
        "--dtype", "bfloat16",
        "--max-model-len", str(config.max_model_len),
        "--max-num-seqs", str(config.max_num_seqs),
        "--kv-cache-memory-bytes", str(config.kv_cache_memory_bytes),
        *config.extra_args,
    ]


# Every process of a lab vLLM asks for AMX tiles at its start (amx/sitecustomize.py says why: without it, vLLM 0.32's
# CPU attention died of SIGILL on an AMX Xeon).
AMX_GRANT_DIR = Path(__file__).with_name("amx")


def vllm_environment(config: ServerConfig) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
        VLLM_LOG_STATS_INTERVAL=f"{config.log_stats_interval_s:g}",
    )
    if config.cache_root is not None:
        env["VLLM_CACHE_ROOT"] = str(config.cache_root)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(AMX_GRANT_DIR), env.get("PYTHONPATH", "")) if p)
    env.update(dict(config.extra_env))
    env.pop("VIRTUAL_ENV", None)
    return env


def vllm_error_message(log_text: str) -> str | None:
    """The first exception line vLLM wrote (the root cause comes before the wrappers)."""
    for line in log_text.splitlines():
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return f"{match['cls'].rsplit('.', 1)[-1]}: {match['msg'].strip()}"
    return None


def _title(proc: psutil.Process) -> str:
    try:
        cmdline = proc.cmdline()
        return " ".join(cmdline) if cmdline else proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


class LabServer:
    """One engine process tree on loopback. Subclasses give the command, environment and titles."""

    engine = "engine"
    core_title = ""          # title prefix of the process that schedules (EngineCore, scheduler)
    worker_title = ""        # title prefix of the second engine process (Worker, detokenizer)

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        raise NotImplementedError

    def supervised_command(self) -> list[str]:
        """The engine's command as a supervisor (`self.wrapper`, e.g. servewatch guard ... --) runs it."""
        return self.command()

    def supervisor_environment(self) -> dict[str, str]:
        """The supervisor's environment (the engine's own unless its command sets it, as SGLang's does)."""
        return self.environment()

    def error_message(self, log_text: str) -> str | None:
        return vllm_error_message(log_text)

    def __init__(self, python: Path, config, log_path: Path):
        self.wrapper: tuple[str, ...] = ()   # a supervisor that starts the engine (servewatch guard ... --)
        self.python = python
        self.config = config
        self.log_path = log_path
        self.port = config.port or free_port(config.host)
        self.proc: subprocess.Popen | None = None
        self.ready_seconds: float | None = None
        self._started_at: float | None = None
        self._tracked: dict[int, psutil.Process] = {}
        self.cpu_note: str | None = None     # why the engine's session kept its CPU priority (yield_cpu)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("server not started")
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LabServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*self.wrapper, *self.supervised_command()] if self.wrapper else self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.supervisor_environment() if self.wrapper else self.environment(),
                start_new_session=True,
                preexec_fn=_pin_to(cpus) if (cpus := getattr(self.config, "cpus", ())) else None,
            )
        self._started_at = time.monotonic()
        self.cpu_note = yield_cpu(self.proc.pid)
        self._track(self.proc.pid)
        _LIVE.add(self)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Block until /health answers 200; return seconds since start. Raises StartupFailed."""
        assert self.proc is not None and self._started_at is not None
        deadline = self._started_at + timeout_s
        while time.monotonic() < deadline:
            self._track_descendants()
            if self.health_status() == 200:
                self.ready_seconds = time.monotonic() - self._started_at
                return self.ready_seconds
            try:
                code = self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
            raise self._startup_failure(f"{self.engine} exited with code {code} before becoming ready", code)
        raise self._startup_failure(f"{self.engine} not ready after {timeout_s:.0f}s", None)

    def wait_exit(self, timeout_s: float) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def wait_exit_keep_zombie(self, timeout_s: float) -> int | None:
        """The API server's exit code (negative: killed by that signal), without reaping it.

        The process stays a zombie, so its pid and exit status remain readable from outside
        (/proc/PID/stat) by a watcher, until wait_exit() or stop() reaps it.
        """
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while self.proc.returncode is None:
            try:
                info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return self.proc.poll()
            if info is not None:
                return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)  # waitid has no timeout; a bounded poll of our own child
        return self.proc.returncode

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Stop the whole tree: SIGCONT (a stopped worker cannot exit), SIGTERM, then SIGKILL."""
        if self.proc is None:
            return None
        self._track_descendants()
        # Descendants are waited on through psutil; the API server only through Popen, so that its
        # real exit code is reaped by Popen and not lost.
        descendants = [p for pid, p in self._tracked.items() if pid != self.proc.pid and _alive(p)]
        for member in descendants:
            _signal(member, signal.SIGCONT)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        _, still = psutil.wait_procs(descendants, timeout=grace_s)
        if self.wait_exit(max(0.1, deadline - time.monotonic())) is None:
            self.proc.kill()
        for member in still:
            _signal(member, signal.SIGKILL)
        psutil.wait_procs(still, timeout=5.0)
        self.wait_exit(5.0)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers that escaped the recorded tree
        except (ProcessLookupError, PermissionError):
            pass
        _LIVE.discard(self)
        return self.proc.returncode

    def __enter__(self) -> LabServer:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -- observation -----------------------------------------------------------------------------

    def health_status(self, timeout_s: float = HTTP_TIMEOUT_S) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout_s) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError, TimeoutError):
            return None

    def metrics_text(self, timeout_s: float = 10.0, max_bytes: int = 16 * 2**20) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=timeout_s) as response:
            return response.read(max_bytes).decode("utf-8", errors="replace")

    def process_tree(self, timeout_s: float = 30.0) -> ProcessTree:
        """The main process and its descendants, waiting (bounded) until the two engine processes appear."""
        deadline = time.monotonic() + timeout_s
        while True:
            tree = self._snapshot_tree()
            if (tree.engine_core and tree.worker) or time.monotonic() >= deadline or self.returncode is not None:
                return tree
            time.sleep(0.2)  # bounded poll of the OS process table; nothing to wait on instead

    def _snapshot_tree(self) -> ProcessTree:
        engine_core = worker = None
        others = []
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for child in children:
            self._tracked.setdefault(child.pid, child)
            title = _title(child)
            if title.startswith(self.core_title) and engine_core is None:
                engine_core = child.pid
            elif title.startswith(self.worker_title) and worker is None:
                worker = child.pid
            else:
                try:
                    others.append((child.pid, child.name()))
                except psutil.Error:
                    pass
        return ProcessTree(self.pid, engine_core, worker, tuple(others))

    def _track(self, pid: int) -> None:
        try:
            self._tracked.setdefault(pid, psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass

    def _track_descendants(self) -> None:
        root = self._tracked.get(self.pid) if self.proc else None
        if root is None or not _alive(root):
            return
        try:
            for child in root.children(recursive=True):
                self._tracked.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def _startup_failure(self, what: str, code: int | None) -> StartupFailed:
        if code is None:
            self.stop()
        vllm_message = self.error_message(self.log_text())
        detail = f": {vllm_message}" if vllm_message else ""
        return StartupFailed(
            f"{what}{detail} (log: {self.log_path})", exit_code=code, log_path=self.log_path, vllm_message=vllm_message
        )


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)  # psutil checks pid + create time: never signals a recycled pid
    except psutil.Error:
        pass


class VllmServer(LabServer):
    engine = "vLLM"
    core_title = ENGINE_CORE_TITLE
    worker_title = WORKER_TITLE

    def command(self) -> list[str]:
        return vllm_command(self.python, self.config, self.port)

    def environment(self) -> dict[str, str]:
        return vllm_environment(self.config)


_LIVE: set[LabServer] = set()


def stop_servers_on_termination() -> None:
    """SIGTERM and SIGHUP (a CI timeout, a closed terminal) end this program as ^C does, through its `with`
    blocks, finalizers and the atexit hook below, which stop the servers it started. Left at their defaults
    they kill it at once and the servers, in sessions of their own, run on (a DP=2 SGLang did, 2026-12-02).
    The signal is noted: the program exits 128 + its number (servewatch.stopping)."""
    from servewatch import stopping

    stopping.interrupt_on_termination()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(grace_s=5.0)
