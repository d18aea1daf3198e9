"""The SGLang lab venv: `sglang` pinned, installed once into the lab cache beside the vLLM one.

SGLang pins a CUDA build of torch (no CPU build of that version exists on the registry); that torch
runs on CPU as is. About 11 GB and 5 minutes the first time (measured on a 2-core machine).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servewatch.lab.venv import INSTALL_TIMEOUT_S, LabVenv, VenvRecipe, ensure_recipe_venv

SGLANG_VERSION = "0.5.23"
SGLANG_RECIPE = VenvRecipe("sglang", SGLANG_VERSION, "sglang", upgrade_pip=True,
                           size_hint="about 5 minutes and 11 GB the first time")


def sglang_venv_dir(cache_dir: Path) -> Path:
    return cache_dir / SGLANG_RECIPE.dir_name


def ensure_sglang_venv(
    cache_dir: Path,
    *,
    progress: Callable[[str], None] = lambda line: None,
    timeout_s: float = INSTALL_TIMEOUT_S,
) -> LabVenv:
    return ensure_recipe_venv(cache_dir, SGLANG_RECIPE, progress=progress, timeout_s=timeout_s)
