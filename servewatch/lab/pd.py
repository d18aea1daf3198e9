"""A prefill/decode pair of lab vLLM instances joined by a KV connector (`servewatch lab vllm --pd`).

Two connectors run on this CPU build (docs/site/real-engines.md, "A prefill/decode pair"):
- "example": vLLM's ExampleConnector, KV through files in a shared directory; nothing to install. Prefill is
  the kv_producer, decode the kv_consumer; a request goes to prefill (max_tokens 1), then the same to decode.
- "nixl": NixlConnector over UCX on TCP. `nixl` is installed into the lab venv once (NIXL_PIN);
  `"kv_buffer_device": "cpu"`, UCX_TLS=tcp,self (UCX's default transports segfaulted the prefill worker on its
  first request), a side channel per instance on loopback, and the prefill's lease on its blocks
  (kv_lease_duration) as a setting. Prefill's answer carries the kv_transfer_params that decode is sent.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from servewatch.lab.server import VllmServer, free_port
from servewatch.lab.venv import LabSetupError, LabVenv

CONNECTORS = ("example", "nixl")
NIXL_PIN = "nixl==1.5.1"          # 1.5.2 was offered on 2026-12-06 and pip settled on 1.5.1
# `nixl` is a meta package: it imports a backend wheel, nixl_cuXX for the CUDA major it finds, and with no CUDA
# (this CPU lab) the first installed of nixl_cu13, nixl_cu12. nixl 1.5.1 requires both wheels, so a plain install
# may run either; the pair was measured on nixl_cu12 (2026-12-06). The lab installs the meta package and that
# wheel without dependencies (torch and numpy, nixl-cu12's only ones, are vLLM's own) and removes any other backend.
NIXL_BACKEND = ("nixl-cu12==1.5.1", "nixl_cu12")
NIXL_INSTALL_TIMEOUT_S = 900.0
DEFAULT_LEASE_S = 30              # vLLM's own default kv_lease_duration
UCX_TRANSPORTS = "tcp,self"
# Both instances run eager (no torch.compile): with it, neither of two instances starting at once on 2 busy cores
# was ready in 300 s (docs/site/real-engines.md); eager, both were in 272-284 s under a load average of 12-20.
PAIR_ARGS = ("--enforce-eager",)
# Each instance on a core of its own (VLLM_CPU_OMP_THREADS_BIND), and NIXL's UCX with one thread (vLLM's
# num_threads, default 4). Left to vLLM's "auto", both instances bound their OpenMP threads to both cores of this
# machine, each with 4 NIXL threads: through the router, 4 requests in 60 s at concurrency 2, decode's tokens
# 140-170 ms apart, its wait for KV 2-32 s, and the healthy step of the pair's drill failed in all five runs of
# 2026-12-06 (decode's /health unanswered, its requests timed out). With both, on the same machine the same
# minute (2026-12-07 01:55-02:03): 42 requests, none failed, tokens 12-94 ms apart (p50 of the requests' medians
# 22 ms), the wait for KV 0.05-5.95 s (under 1 s in 31 of 40); the drill's seven faults all met, 371 s in all.
PAIR_CORES = {"prefill": "0", "decode": "1"}
NIXL_THREADS = 1


def pair_cpus(role: str) -> tuple[int, ...]:
    """The cores `role`'s whole process tree runs on: its OpenMP core (PAIR_CORES), where this machine has it.
    The OpenMP binding pins vLLM's compute threads only; threads that NIXL and UCX start on their own ran anywhere
    (a thread of decode's worker at 77 % of the prefill's core in the soak of 2026-12-07 02:30). vLLM itself still
    moves the thread that starts its NIXL connector to the last core of each NUMA node (nixl/base_worker.py:700-714;
    2 % of a core in the soak of 06:40). On a machine with fewer cores than the pair, none."""
    core = int(PAIR_CORES[role])
    return (core,) if core in os.sched_getaffinity(0) else ()
# The request fields that make a prefill keep its blocks for a remote decode (vLLM's toy disaggregation proxy).
PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False}

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class NixlInstall:
    installed: bool          # False: it was already in the venv
    seconds: float


def ensure_nixl(venv: LabVenv, *, say: Say = lambda line: None,
                timeout_s: float = NIXL_INSTALL_TIMEOUT_S) -> NixlInstall:
    """`nixl` importable in the lab venv on its CUDA 12 backend (NIXL_BACKEND): pip-installed the first time, any
    other backend removed. Raises LabSetupError."""
    started = time.monotonic()
    wheel, module = NIXL_BACKEND
    found = nixl_backend(venv)
    if found == module:
        return NixlInstall(False, time.monotonic() - started)
    log_path = venv.root.parent / "nixl.install.log"
    say(f"installing {NIXL_PIN} and {wheel} into {venv.root} (about 130 MB; log: {log_path})"
        + (f"; removing the {found} backend (the pair was measured on {module})" if found else ""))
    steps = ([["uninstall", "-y", found.replace("_", "-")]] if found else []) + [
        ["install", "--no-deps", NIXL_PIN, wheel]]
    with open(log_path, "w", encoding="utf-8") as log:
        for step in steps:
            try:
                done = subprocess.run([str(venv.python), "-m", "pip", *step], stdout=log, stderr=subprocess.STDOUT,
                                      timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired as exc:
                raise LabSetupError(f"pip {' '.join(step)} timed out after {timeout_s:.0f}s (see {log_path})") from exc
            if done.returncode != 0:
                raise LabSetupError(f"pip {' '.join(step)} failed with exit code {done.returncode} (see {log_path})")
    if (after := nixl_backend(venv)) != module:
        raise LabSetupError(f"nixl imports {'no backend' if after is None else after} after installing {wheel}, "
                            f"not {module} (see {log_path})")
    return NixlInstall(True, time.monotonic() - started)


def nixl_backend(venv: LabVenv) -> str | None:
    """The backend wheel `import nixl` takes in the lab venv (e.g. "nixl_cu12"); None when nixl does not import."""
    done = subprocess.run([str(venv.python), "-c", "import nixl._api as api; print(api.__name__.split('.')[0])"],
                          capture_output=True, text=True, timeout=120, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def kv_transfer_config(connector: str, role: str, *, storage: Path | None = None,
                       lease_s: int = DEFAULT_LEASE_S) -> dict:
    """vLLM's --kv-transfer-config for one side ("prefill" | "decode") of the pair."""
    kv_role = "kv_producer" if role == "prefill" else "kv_consumer"   # NIXL's kv_both is deprecated in 0.32
    if connector == "example":
        assert storage is not None
        return {"kv_connector": "ExampleConnector", "kv_role": kv_role,
                "kv_connector_extra_config": {"shared_storage_path": str(storage)}}
    if connector == "nixl":
        return {"kv_connector": "NixlConnector", "kv_role": kv_role, "kv_buffer_device": "cpu",
                "kv_connector_extra_config": {"kv_lease_duration": int(lease_s), "num_threads": NIXL_THREADS}}
    raise ValueError(f"unknown connector {connector!r}")


# The kernel hands out ports of its ephemeral range (ip_local_port_range) to every bind(0) and connect(): a
# side-channel port picked there and bound minutes later by vLLM (after the model loads) can be taken meanwhile by
# the other instance's start (its own bind(0) ports, its connections). So the side channels take ports below that
# range, where the kernel never assigns one by itself, each checked free by binding it.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
SIDE_CHANNEL_FLOOR = 20000


def ephemeral_low(path: Path = EPHEMERAL_RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read: Linux's default)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def side_channel_ports(count: int, *, avoid: tuple[int, ...] = (), host: str = "127.0.0.1",
                       low: int | None = None) -> tuple[int, ...]:
    """`count` distinct free ports on `host` below the ephemeral range (not in `avoid`)."""
    top = ephemeral_low() if low is None else low
    floor = SIDE_CHANNEL_FLOOR if SIDE_CHANNEL_FLOOR < top else max(1024, top // 2)
    chosen: list[int] = []
    for port in random.sample(range(floor, top), top - floor):
        if port in avoid or port in chosen:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return tuple(chosen)
    raise LabSetupError(f"no {count} free ports on {host} between {floor} and {top - 1} for NIXL's side channels")


def side_channel_listening(port: int, host: str = "127.0.0.1", timeout_s: float = 2.0) -> bool:
    """Whether something accepts a TCP connection on host:port (vLLM's NIXL handshake listener once the instance
    is ready; a bare connect and close leaves that listener serving)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


HANDSHAKE_ATTEMPTS = 3
HANDSHAKE_LEG_S = 300.0            # one leg of the short hand-over: at a load average of 25 (10:36) a ~100-token
                                   # leg took over 120 s (NIXL's read 65.8 s), and a try given up on still ran on
                                   # decode, its tokens counted after the pair was said ready
HANDSHAKE_PROMPT = " ".join(["servewatch lab pair handshake"] * 16)   # ~100 tokens: whole KV blocks to read


def post_completion(url: str, body: dict, timeout_s: float) -> tuple[int | None, dict | None]:
    """POST /v1/completions with `body` on a fresh connection: (status, the answer's JSON object), None for what
    did not come (no answer, not a JSON object)."""
    from servewatch.transport.contract import HttpRequest, Reply, send_blocking

    got = send_blocking(HttpRequest("POST", f"{url}/v1/completions", timeout_s=timeout_s, max_bytes=1 << 20,
                                    body=json.dumps(body).encode(), fresh=True))
    if not isinstance(got, Reply):
        return None, None
    try:
        answer = json.loads(got.body)
    except ValueError:
        answer = None
    return got.status, answer if isinstance(answer, dict) else None


def nixl_environment(side_channel_port: int) -> tuple[tuple[str, str], ...]:
    return (("UCX_TLS", UCX_TRANSPORTS), ("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1"),
            ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(side_channel_port)))


@dataclass
class PdPair:
    connector: str
    prefill: VllmServer
    decode: VllmServer
    storage: Path | None          # the example connector's shared directory
    lease_s: int | None           # NIXL's kv_lease_duration
    side_channels: dict[str, int] = field(default_factory=dict)   # NIXL: role -> its handshake listener's port

    def servers(self) -> tuple[VllmServer, VllmServer]:
        return self.prefill, self.decode

    def shake_hands(self, *, attempts: int = HANDSHAKE_ATTEMPTS, timeout_s: float = HANDSHAKE_LEG_S,
                    post: Callable[[str, dict, float], tuple[int | None, dict | None]] | None = None) -> int:
        """NIXL: hand one short prompt over until decode answers 200 (at most `attempts` times); how many it took.
        Decode asks the prefill's side channel for its metadata once per prefill and gives up after vLLM's fixed
        5 s receive ("handshake_failed", HTTP 500 for that request): measured 1.0 s when it worked on this
        machine, and over 5 s in 3 of 6 hand-overs sent right after the pair was ready (2026-12-06). Once shaken,
        the pair's requests need no side channel. Raises LabSetupError when no hand-over got through."""
        send = post or post_completion
        last = ""
        for attempt in range(1, attempts + 1):
            status, answer = send(self.prefill.url, {"model": self.prefill.config.served_model_name,
                                                     "prompt": HANDSHAKE_PROMPT, "max_tokens": 1,
                                                     "kv_transfer_params": PREFILL_PARAMS}, timeout_s)
            params = answer.get("kv_transfer_params") if status == 200 and isinstance(answer, dict) else None
            if not params:
                last = f"prefill answered {status if status is not None else 'nothing'} without kv_transfer_params"
                continue
            status, answer = send(self.decode.url, {"model": self.decode.config.served_model_name,
                                                    "prompt": HANDSHAKE_PROMPT, "max_tokens": 1,
                                                    "kv_transfer_params": params}, timeout_s)
            if status == 200:
                return attempt
            last = f"decode answered {status if status is not None else 'nothing'}"
        raise LabSetupError(f"no prompt handed over from prefill to decode in {attempts} tries ({last}; logs: "
                            f"{self.prefill.log_path}, {self.decode.log_path})")

    def silent_side_channels(self) -> list[str]:
        """Once both are ready: each instance whose NIXL side channel does not listen, as 'role (host:port)'.
        vLLM binds it before it answers /health; decode's handshake with a prefill whose channel is silent times
        out after vLLM's 5 s receive ("handshake_failed", HTTP 500)."""
        return [f"{role} (127.0.0.1:{port})" for role, port in self.side_channels.items()
                if not side_channel_listening(port)]

    def __enter__(self) -> PdPair:
        for server in self.servers():
            if server.proc is None:
                server.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        for server in self.servers():
            server.stop()


def pd_pair(lab, connector: str, workdir: Path, *, lease_s: int = DEFAULT_LEASE_S,
            prefill_port: int | None = None, decode_port: int | None = None,
            log_dir: Path | None = None, extra_args: tuple[str, ...] = PAIR_ARGS, **settings) -> PdPair:
    """Two lab vLLM servers (not started) joined by `connector`; the example connector's files under `workdir`.
    `extra_args` go to both (default PAIR_ARGS); `settings` are ServerConfig fields both share
    (max_model_len, kv_cache_memory_bytes, ...)."""
    if connector not in CONNECTORS:
        raise ValueError(f"unknown connector {connector!r}")
    storage = workdir / "kv-files" if connector == "example" else None
    if storage is not None:
        storage.mkdir(parents=True, exist_ok=True)
    logs = log_dir or workdir
    ports = {"prefill": prefill_port or free_port(), "decode": decode_port or free_port()}
    channels = (dict(zip(ports, side_channel_ports(2, avoid=tuple(ports.values()))))
                if connector == "nixl" else {})
    servers = {}
    for role, port in ports.items():
        config = kv_transfer_config(connector, role, storage=storage, lease_s=lease_s)
        env = ((*nixl_environment(channels[role]), ) if connector == "nixl" else ()) + (
            ("VLLM_CPU_OMP_THREADS_BIND", PAIR_CORES[role]),)
        servers[role] = lab.server(logs / f"vllm-{role}-{port}.log", port=port,
                                   extra_args=("--kv-transfer-config", json.dumps(config), *extra_args), extra_env=env,
                                   cpus=pair_cpus(role), **settings)
    return PdPair(connector, servers["prefill"], servers["decode"], storage,
                  lease_s if connector == "nixl" else None, channels)
