"""`prepare_lab(recipe)`: the one lab set-up behind `servewatch lab ENGINE`, the conformance fixtures and
the drill's lab targets. Checked without an engine: the venv and model steps are stood in for."""

from __future__ import annotations

from pathlib import Path

from servewatch.lab import recipe as lab_recipe
from servewatch.lab.model_dir import TinyModel
from servewatch.lab.server import VllmServer
from servewatch.lab.sglang_server import SglangServer
from servewatch.lab.venv import LabVenv


def _prepared(monkeypatch, tmp_path: Path, which: lab_recipe.LabRecipe):
    said: list[str] = []
    venv = LabVenv(tmp_path / "venv", reused=True, seconds=0.0)
    model = TinyModel(tmp_path / "models" / "tiny", {}, reused=False, seconds=1.5)
    fake = lab_recipe.LabRecipe(which.engine, which.title, lambda cache, progress: venv, which.stand_in,
                                which.server_kind, which.config, which.processes, which.watch_log,
                                ensure_model=lambda v, cache: model)
    return lab_recipe.prepare_lab(fake, tmp_path, say=said.append), said


def test_a_vllm_lab_builds_its_server_over_the_lab_paths(monkeypatch, tmp_path):
    lab, said = _prepared(monkeypatch, tmp_path, lab_recipe.VLLM)
    assert said == [f"venv: {tmp_path / 'venv'} (reused in 0.0s)",
                    f"model: {tmp_path / 'models' / 'tiny'} (generated in 1.5s)"]
    server = lab.server(tmp_path / "a.log", max_num_seqs=2, port=1234)
    assert isinstance(server, VllmServer) and lab.stand_in is None
    assert (server.config.model_dir, server.config.cache_root, server.config.max_num_seqs, server.port) == (
        tmp_path / "models" / "tiny", tmp_path / "vllm-cache", 2, 1234)
    assert server.python == tmp_path / "venv" / "bin" / "python"


def test_an_sglang_lab_writes_the_stand_in_and_puts_it_in_the_config(monkeypatch, tmp_path):
    lab, said = _prepared(monkeypatch, tmp_path, lab_recipe.SGLANG)
    assert lab.stand_in is not None and lab.stand_in.is_dir()
    assert said[-1] == f"test-only sgl_kernel stand-in: {lab.stand_in}"
    server = lab.server(tmp_path / "b.log", context_length=512, port=1235)
    assert isinstance(server, SglangServer)
    assert (server.config.stand_in_dir, server.config.files_dir, server.config.context_length) == (
        lab.stand_in, tmp_path / "sglang-files", 512)


def test_every_lab_engine_has_a_recipe():
    import argparse

    from servewatch.commands import add_command
    from servewatch.commands import lab as lab_command

    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(), lab_command)
    engines = next(a for a in parser._subparsers._group_actions[0].choices["lab"]._actions
                   if isinstance(a, argparse._SubParsersAction))
    assert set(engines.choices) == set(lab_recipe.RECIPES)
