"""The prepared lab (venv, model, run directory) and how the suite starts a server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab_observations import Observations, log_excerpt

from servewatch.lab.model_dir import TinyModel
from servewatch.lab.server import ServerConfig, VllmServer
from servewatch.lab.sglang_server import SglangConfig, SglangServer
from servewatch.lab.venv import LabVenv


@dataclass
class Lab:
    cache_dir: Path
    venv: LabVenv
    model: TinyModel
    run_dir: Path
    obs: Observations

    def server(self, name: str, **overrides) -> VllmServer:
        config = ServerConfig(model_dir=self.model.path, cache_root=self.cache_dir / "vllm-cache", **overrides)
        return VllmServer(self.venv.python, config, self.run_dir / f"{name}.log")


def start_ready(lab: Lab, name: str, **overrides) -> VllmServer:
    """Start a server, wait for /health 200, record its startup time and process tree."""
    server = lab.server(name, **overrides).start()
    try:
        ready = server.wait_ready()
        tree = server.process_tree()
    except BaseException:
        server.stop()
        lab.obs.save_text(f"{name}.startup.log", log_excerpt(server.log_text()))
        raise
    lab.obs.record(f"{name}.startup", {"ready_seconds": round(ready, 1), "flags": _flags(server.config),
                                       "tree": {"api_server": tree.api_server is not None,
                                                "engine_core": tree.engine_core is not None,
                                                "worker": tree.worker is not None}})
    lab.obs.say(f"{name}: /health 200 after {ready:.1f} s (pids api={tree.api_server} "
                f"core={tree.engine_core} worker={tree.worker})")
    assert tree.engine_core and tree.worker, f"process tree incomplete: {tree}"
    return server


def _flags(config: ServerConfig) -> dict:
    return {"max_model_len": config.max_model_len, "max_num_seqs": config.max_num_seqs,
            "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
            "log_stats_interval_s": config.log_stats_interval_s}




@dataclass
class SglangLab:
    cache_dir: Path
    venv: LabVenv
    model: TinyModel
    stand_in: Path
    run_dir: Path
    obs: Observations

    def config(self, **overrides) -> SglangConfig:
        return SglangConfig(model_dir=self.model.path, stand_in_dir=self.stand_in,
                            files_dir=self.cache_dir / "sglang-files", **overrides)

    def server(self, name: str, **overrides) -> SglangServer:
        return SglangServer(self.venv.python, self.config(**overrides), self.run_dir / f"{name}.log")


def start_sglang_ready(lab: SglangLab, name: str, **overrides) -> SglangServer:
    """Start SGLang, wait for /health 200, record its startup time and process tree."""
    server = lab.server(name, **overrides).start()
    try:
        ready = server.wait_ready()
        tree = server.process_tree()
    except BaseException:
        server.stop()
        lab.obs.save_text(f"{name}.startup.log", log_excerpt(server.log_text()))
        raise
    lab.obs.record(f"{name}.startup", {"ready_seconds": round(ready, 1),
                                       "tree": {"main": tree.api_server is not None,
                                                "scheduler": tree.engine_core is not None,
                                                "detokenizer": tree.worker is not None}})
    lab.obs.say(f"{name}: /health 200 after {ready:.1f} s (pids main={tree.api_server} "
                f"scheduler={tree.engine_core} detokenizer={tree.worker})")
    assert tree.engine_core and tree.worker, f"process tree incomplete: {tree}"
    return server


def assert_no_stand_in_call(server: SglangServer) -> None:
    """The run proves something only if SGLang never reached a stubbed op of the test-only stand-in."""
    called = server.stand_in_calls()
    assert called == [], f"SGLang called stubbed sgl_kernel ops {called}: this run did not run real code throughout"
