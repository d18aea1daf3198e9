"""The prepared lab (servewatch.lab.recipe: venv, model, stand-in) with this run's directory and
observations, and how the suite starts a server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab_observations import Observations, log_excerpt

from servewatch.lab.model_dir import TinyModel
from servewatch.lab.recipe import PreparedLab
from servewatch.lab.server import LabServer, ServerConfig, VllmServer
from servewatch.lab.sglang_server import SglangConfig, SglangServer
from servewatch.lab.venv import LabVenv


@dataclass
class Lab:
    """One engine's prepared lab (the same recipe `servewatch lab ENGINE` prepares) for this run."""
    prepared: PreparedLab
    run_dir: Path
    obs: Observations

    @property
    def cache_dir(self) -> Path:
        return self.prepared.cache_dir

    @property
    def venv(self) -> LabVenv:
        return self.prepared.venv

    @property
    def model(self) -> TinyModel:
        return self.prepared.model

    @property
    def stand_in(self) -> Path | None:
        return self.prepared.stand_in

    def config(self, **overrides) -> ServerConfig | SglangConfig:
        return self.prepared.config(**overrides)

    def server(self, name: str, **overrides) -> LabServer:
        return self.prepared.server(self.run_dir / f"{name}.log", **overrides)


def start_ready(lab: Lab, name: str, **overrides) -> VllmServer | SglangServer:
    """Start the lab's engine, wait for /health 200, record its startup time and process tree (named as
    the engine names its processes)."""
    server = lab.server(name, **overrides).start()
    try:
        ready = server.wait_ready()
        tree = server.process_tree()
    except BaseException:
        server.stop()
        lab.obs.save_text(f"{name}.startup.log", log_excerpt(server.log_text()))
        raise
    names = lab.prepared.recipe.processes
    pids = (tree.api_server, tree.engine_core, tree.worker)
    record = {"ready_seconds": round(ready, 1)}
    if isinstance(server.config, ServerConfig):
        record["flags"] = _flags(server.config)
    record["tree"] = {process: pid is not None for process, pid in zip(names, pids)}
    lab.obs.record(f"{name}.startup", record)
    short = {"api_server": "api", "engine_core": "core"}
    lab.obs.say(f"{name}: /health 200 after {ready:.1f} s (pids "
                + " ".join(f"{short.get(n, n)}={pid}" for n, pid in zip(names, pids)) + ")")
    assert tree.engine_core and tree.worker, f"process tree incomplete: {tree}"
    return server


def _flags(config: ServerConfig) -> dict:
    return {"max_model_len": config.max_model_len, "max_num_seqs": config.max_num_seqs,
            "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
            "log_stats_interval_s": config.log_stats_interval_s}


def assert_no_stand_in_call(server: SglangServer) -> None:
    """The run proves something only if SGLang never reached a stubbed op of the test-only stand-in."""
    called = server.stand_in_calls()
    assert called == [], f"SGLang called stubbed sgl_kernel ops {called}: this run did not run real code throughout"
