"""Generate (once) and locate the tiny model, by running tiny_model.py in the lab venv."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from servewatch.lab import tiny_model
from servewatch.lab.venv import LabSetupError, LabVenv

GENERATE_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class TinyModel:
    path: Path
    info: dict
    reused: bool
    seconds: float


def model_path(cache_dir: Path, seed: int = 0, weights_seed: int | None = None) -> Path:
    if weights_seed is None or weights_seed == seed:
        return cache_dir / "models" / f"tiny-llama-seed{seed}"
    return cache_dir / "models" / f"tiny-llama-seed{seed}-weights{weights_seed}"


def ensure_tiny_model(venv: LabVenv, cache_dir: Path, seed: int = 0, weights_seed: int | None = None) -> TinyModel:
    """The tiny model for `seed` (tokenizer and weights), or with the same tokenizer and the weights of
    `weights_seed`."""
    started = time.monotonic()
    path = model_path(cache_dir, seed, weights_seed)
    done = path / tiny_model.DONE_MARKER
    if done.is_file():
        return TinyModel(path, json.loads(done.read_text(encoding="utf-8")), True, time.monotonic() - started)
    cmd = [str(venv.python), tiny_model.__file__, "--out", str(path), "--seed", str(seed)]
    if weights_seed is not None and weights_seed != seed:
        cmd += ["--weights-seed", str(weights_seed)]
    try:
        completed = subprocess.run(cmd, capture_output=True, text=True, timeout=GENERATE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LabSetupError(f"generating the tiny model took over {GENERATE_TIMEOUT_S:.0f}s") from exc
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabSetupError(f"generating the tiny model failed (exit {completed.returncode}): {last}")
    return TinyModel(path, json.loads(done.read_text(encoding="utf-8")), False, time.monotonic() - started)
