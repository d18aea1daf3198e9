"""One lab recipe per real engine, and `prepare_lab(recipe)`: the venv (installed once), the tiny model
(generated once) and, for SGLang, the test-only sgl_kernel stand-in. `servewatch lab ENGINE` (and CI's
`servewatch lab ENGINE --install-only`) and the conformance fixtures all prepare a lab through it; the
prepared lab then builds the engine's server with the paths it owns filled in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servewatch.lab.llamacpp import LlamacppConfig, LlamacppServer, binary_path, ensure_llamacpp, ensure_tiny_gguf
from servewatch.lab.model_dir import TinyModel, ensure_tiny_model
from servewatch.lab.server import LabServer, ServerConfig, VllmServer
from servewatch.lab.sglang_server import SglangConfig, SglangServer
from servewatch.lab.sglang_venv import ensure_sglang_venv
from servewatch.lab.venv import LabVenv, ensure_venv, resolve_cache_dir

Say = Callable[[str], None]


@dataclass(frozen=True)
class LabRecipe:
    engine: str                                   # "vllm" | "sglang" | "llamacpp": the `servewatch lab` subcommand
    title: str                                    # in messages: "vLLM", "SGLang", "llama.cpp"
    ensure_venv: Callable[..., LabVenv]           # (cache_dir, progress=) → the engine's venv (llama.cpp: its build,
                                                  # then the venv that writes its model)
    stand_in: bool                                # SGLang's CPU path needs the test-only sgl_kernel stand-in
    server_kind: type[LabServer]
    config: Callable[..., ServerConfig | SglangConfig | LlamacppConfig]   # (prepared lab, **overrides) → its config
    processes: tuple[str, str, str]               # the engine's names of ProcessTree's api_server, engine_core, worker
    watch_log: bool                               # `watch` wants its log too (signals its /metrics lacks)
    ensure_model: Callable[..., TinyModel] = ensure_tiny_model   # (venv, cache_dir) → the tiny model


@dataclass(frozen=True)
class PreparedLab:
    recipe: LabRecipe
    cache_dir: Path
    venv: LabVenv
    model: TinyModel
    stand_in: Path | None                         # the stand-in's directory (SGLang), first on its PYTHONPATH

    def config(self, **overrides: Any) -> ServerConfig | SglangConfig | LlamacppConfig:
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


def _llamacpp_config(lab: PreparedLab, **overrides: Any) -> LlamacppConfig:
    return LlamacppConfig(model_path=lab.model.path, binary=binary_path(lab.cache_dir), **overrides)


VLLM = LabRecipe("vllm", "vLLM", ensure_venv, False, VllmServer, _vllm_config, ("api_server", "engine_core", "worker"),
                 watch_log=False)
SGLANG = LabRecipe("sglang", "SGLang", ensure_sglang_venv, True, SglangServer, _sglang_config,
                   ("main", "scheduler", "detokenizer"), watch_log=True)
# llama-server is one process: its HTTP threads and, on its main thread, the slots' loop.
LLAMACPP = LabRecipe("llamacpp", "llama.cpp", ensure_llamacpp, False, LlamacppServer, _llamacpp_config,
                     ("server", "", ""), watch_log=True, ensure_model=ensure_tiny_gguf)
RECIPES = {recipe.engine: recipe for recipe in (VLLM, SGLANG, LLAMACPP)}


def prepare_lab(recipe: LabRecipe, cache_dir: str | Path | None = None, *, say: Say = lambda line: None) -> PreparedLab:
    """Install (once) the recipe's venv, generate (once) the tiny model, write the stand-in the recipe needs;
    each step said in one line. Raises LabSetupError (a ServewatchError) naming what failed."""
    cache = resolve_cache_dir(cache_dir)
    venv = recipe.ensure_venv(cache, progress=say)
    say(f"venv: {venv.root} ({'reused' if venv.reused else 'installed'} in {venv.seconds:.1f}s)")
    model = recipe.ensure_model(venv, cache)
    say(f"model: {model.path} ({'reused' if model.reused else 'generated'} in {model.seconds:.1f}s)")
    stand_in = None
    if recipe.stand_in:
        from servewatch.lab.sgl_kernel_stand_in import write_stand_in

        stand_in = write_stand_in(cache)
        say(f"test-only sgl_kernel stand-in: {stand_in}")
    return PreparedLab(recipe, cache, venv, model, stand_in)
