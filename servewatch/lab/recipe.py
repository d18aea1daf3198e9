"""One lab recipe per real engine, and `prepare_lab(recipe)`: the venv (installed once), the tiny model
(generated once) and, for SGLang, the test-only sgl_kernel stand-in. `servewatch lab ENGINE` (and CI's
`servewatch lab ENGINE --install-only`) and the conformance fixtures all prepare a lab through it; the
prepared lab then builds the engine's server with the paths it owns filled in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servewatch.lab.model_dir import TinyModel, ensure_tiny_model
from servewatch.lab.server import LabServer, ServerConfig, VllmServer
from servewatch.lab.sglang_server import SglangConfig, SglangServer
from servewatch.lab.sglang_venv import ensure_sglang_venv
from servewatch.lab.venv import LabVenv, ensure_venv, resolve_cache_dir

Say = Callable[[str], None]


@dataclass(frozen=True)
class LabRecipe:
    engine: str                                   # "vllm" | "sglang": the `servewatch lab` subcommand
    title: str                                    # in messages: "vLLM", "SGLang"
    ensure_venv: Callable[..., LabVenv]           # (cache_dir, progress=) → the engine's venv
    stand_in: bool                                # SGLang's CPU path needs the test-only sgl_kernel stand-in
    server_kind: type[LabServer]
    config: Callable[..., ServerConfig | SglangConfig]   # (prepared lab, **overrides) → the server's config
    processes: tuple[str, str, str]               # the engine's names of ProcessTree's api_server, engine_core, worker
    watch_log: bool                               # `watch` wants its log too (signals its /metrics lacks)


@dataclass(frozen=True)
class PreparedLab:
    recipe: LabRecipe
    cache_dir: Path
    venv: LabVenv
    model: TinyModel
    stand_in: Path | None                         # the stand-in's directory (SGLang), first on its PYTHONPATH

    def config(self, **overrides: Any) -> ServerConfig | SglangConfig:
        """The engine's server config: the lab's model and cache paths, then `overrides`."""
        return self.recipe.config(self, **overrides)

    def server(self, log_path: Path, **overrides: Any) -> LabServer:
        """The engine's server (not started) with its log at `log_path`."""
        return self.recipe.server_kind(self.venv.python, self.config(**overrides), log_path)


def _vllm_config(lab: PreparedLab, **overrides: Any) -> ServerConfig:
    return ServerConfig(model_dir=lab.model.path, cache_root=lab.cache_dir / "vllm-cache", **overrides)


def _sglang_config(lab: PreparedLab, **overrides: Any) -> SglangConfig:
    assert lab.stand_in is not None
    return SglangConfig(model_dir=lab.model.path, stand_in_dir=lab.stand_in, files_dir=lab.cache_dir / "sglang-files",
                        **overrides)


VLLM = LabRecipe("vllm", "vLLM", ensure_venv, False, VllmServer, _vllm_config, ("api_server", "engine_core", "worker"),
                 watch_log=False)
SGLANG = LabRecipe("sglang", "SGLang", ensure_sglang_venv, True, SglangServer, _sglang_config,
                   ("main", "scheduler", "detokenizer"), watch_log=True)
RECIPES = {recipe.engine: recipe for recipe in (VLLM, SGLANG)}


def prepare_lab(recipe: LabRecipe, cache_dir: str | Path | None = None, *, say: Say = lambda line: None) -> PreparedLab:
    """Install (once) the recipe's venv, generate (once) the tiny model, write the stand-in the recipe needs;
    each step said in one line. Raises LabSetupError (a ServewatchError) naming what failed."""
    cache = resolve_cache_dir(cache_dir)
    venv = recipe.ensure_venv(cache, progress=say)
    say(f"venv: {venv.root} ({'reused' if venv.reused else 'installed'} in {venv.seconds:.1f}s)")
    model = ensure_tiny_model(venv, cache)
    say(f"model: {model.path} ({'reused' if model.reused else 'generated'} in {model.seconds:.1f}s)")
    stand_in = None
    if recipe.stand_in:
        from servewatch.lab.sgl_kernel_stand_in import write_stand_in

        stand_in = write_stand_in(cache)
        say(f"test-only sgl_kernel stand-in: {stand_in}")
    return PreparedLab(recipe, cache, venv, model, stand_in)
