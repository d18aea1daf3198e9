"""Start a real SGLang (CPU) on a loopback port with the test-only `sgl_kernel` stand-in first on its path.

SGLang's files stay inside the lab cache (SGLANG_CACHE_DIR, and a TMPDIR per server removed after it
stops: otherwise it leaves ZMQ sockets, temp dirs and the prometheus multiprocess folder in /tmp and
~/.cache). The idle scheduler sleeps
(--sleep-on-idle; without it one core spins at 100 %). Stop is SIGTERM to the main process, which
drains and stops its children (SIGTERM to the whole group makes it report a crashed child instead).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from servewatch.lab.server import LabServer
from servewatch.lab.sgl_kernel_stand_in import stand_in_calls

SCHEDULER_TITLE = "sglang::scheduler"
DETOKENIZER_TITLE = "sglang::detokenizer"
SGLANG_STOP_GRACE_S = 25.0     # a drain took 8.4 s on a 2-core machine
_ERROR_LINE = re.compile(r"^(?:\[[^\]]*\] )?(?P<cls>[A-Za-z_][\w.]*(?:Error|Exception)): (?P<msg>.+)$")


@dataclass(frozen=True, slots=True)
class SglangConfig:
    model_dir: Path
    stand_in_dir: Path                       # holds the test-only sgl_kernel package
    files_dir: Path                          # SGLANG_CACHE_DIR and TMPDIR live below it
    max_total_tokens: int = 8192
    context_length: int = 2048
    max_running_requests: int | None = None  # None: SGLang's own default
    port: int | None = None
    host: str = "127.0.0.1"
    served_model_name: str | None = None     # None: SGLang names the model by its path, as a user's would be
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()   # SGLang's own settings, e.g. SGLANG_HEALTH_CHECK_TIMEOUT


def sglang_command(python: Path, config: SglangConfig, port: int) -> list[str]:
    command = [
        str(python), "-m", "sglang.launch_server",
        "--model-path", str(config.model_dir),
        "--device", "cpu",
        "--host", config.host,
        "--port", str(port),
        "--enable-metrics",
        "--attention-backend", "torch_native",
        "--sampling-backend", "pytorch",
        "--cuda-graph-backend-decode", "disabled",
        "--cuda-graph-backend-prefill", "disabled",
        "--max-total-tokens", str(config.max_total_tokens),
        "--context-length", str(config.context_length),
        "--sleep-on-idle",
    ]
    if config.max_running_requests is not None:
        command += ["--max-running-requests", str(config.max_running_requests)]
    if config.served_model_name is not None:
        command += ["--served-model-name", config.served_model_name]
    return [*command, *config.extra_args]


def sglang_tmp_dir(config: SglangConfig, port: int) -> Path:
    return config.files_dir / "tmp" / f"port-{port}"


_DROPPED_VARIABLES = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")


def sglang_variables(config: SglangConfig, port: int) -> dict[str, str]:
    """The variables the lab sets for SGLang (its cache and temp dirs are created here)."""
    cache, tmp = config.files_dir / "cache", sglang_tmp_dir(config, port)
    cache.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": str(config.stand_in_dir),
        "SGLANG_CACHE_DIR": str(cache),
        "TMPDIR": str(tmp),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
        **dict(config.extra_env),
    }


def sglang_environment(config: SglangConfig, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_VARIABLES}
    env.update(sglang_variables(config, port))
    return env


def sglang_supervised_command(python: Path, config: SglangConfig, port: int) -> list[str]:
    """SGLang's command for a supervisor that starts it (`servewatch guard -- COMMAND`): the lab's
    environment is set by env(1), which execs SGLang in the same process, so the supervisor keeps its own."""
    unset = [arg for name in _DROPPED_VARIABLES if name != "PYTHONPATH" for arg in ("-u", name)]
    assignments = [f"{name}={value}" for name, value in sglang_variables(config, port).items()]
    return ["env", *unset, *assignments, *sglang_command(python, config, port)]


def sglang_error_message(log_text: str) -> str | None:
    """The last exception line SGLang wrote (its scheduler's traceback ends with the cause)."""
    found = None
    for line in log_text.splitlines():
        match = _ERROR_LINE.match(line.strip())
        if match and not match["cls"].endswith("Warning"):
            found = f"{match['cls'].rsplit('.', 1)[-1]}: {match['msg'].strip()}"
    return found


class SglangServer(LabServer):
    engine = "SGLang"
    core_title = SCHEDULER_TITLE
    worker_title = DETOKENIZER_TITLE

    def command(self) -> list[str]:
        return sglang_command(self.python, self.config, self.port)

    def environment(self) -> dict[str, str]:
        return sglang_environment(self.config, self.port)

    def supervised_command(self) -> list[str]:
        return sglang_supervised_command(self.python, self.config, self.port)   # env(1) sets SGLang's own

    def supervisor_environment(self) -> dict[str, str]:
        import os

        return dict(os.environ)

    def error_message(self, log_text: str) -> str | None:
        return sglang_error_message(log_text)

    def stand_in_calls(self) -> list[str]:
        """Stubbed sgl_kernel ops this server called: any at all means the run cannot be trusted."""
        return stand_in_calls(self.log_text())

    def stop(self, grace_s: float = SGLANG_STOP_GRACE_S) -> int | None:
        code = super().stop(grace_s)
        # Its ZMQ sockets and temp dirs outlive even a clean shutdown; the whole tree is gone by now.
        shutil.rmtree(sglang_tmp_dir(self.config, self.port), ignore_errors=True)
        return code
