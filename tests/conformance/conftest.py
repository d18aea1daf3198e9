"""Conformance against a real vLLM (CPU build), SGLang or llama.cpp: the lab is prepared once, before any test's
timeout runs.

Run: `pytest -m vllm tests/conformance`, `pytest -m sglang tests/conformance` or `pytest -m llamacpp
tests/conformance` (the default addopts deselect the three markers). One engine runs at a time (the machines have 2 cores); every server is torn
down by its fixture's finalizer, by LabServer's atexit hook, and by its own context manager.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
import lab_timing
from lab_observations import Neutralizer, Observations
from lab_servers import Lab

from servewatch.lab.recipe import LLAMACPP, SGLANG, VLLM, LabRecipe, prepare_lab
from servewatch.lab.server import stop_servers_on_termination

_LAB_KEY = pytest.StashKey[Lab]()
_SGLANG_LAB_KEY = pytest.StashKey[Lab]()
_LLAMACPP_LAB_KEY = pytest.StashKey[Lab]()
_STARTED_KEY = pytest.StashKey[float]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install a lab only when its engine's cases were selected, outside every test's timeout."""
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("sglang") or item.get_closest_marker("vllm") or item.get_closest_marker("llamacpp")
           or item.get_closest_marker("pd") for item in session.items):
        # The freeze meter runs for the whole session, so every timing bound can be judged against it.
        lab_timing.start_meter(Path(tempfile.mkdtemp(prefix="servewatch-freezes-")) / "freezes.txt")
    if any(item.get_closest_marker("sglang") for item in session.items):
        _prepare(session, SGLANG, _SGLANG_LAB_KEY, "servewatch-sglang-conformance-")
    if any(item.get_closest_marker("vllm") or item.get_closest_marker("pd") for item in session.items):   # pd: a vLLM pair
        _prepare(session, VLLM, _LAB_KEY, "servewatch-conformance-")
    if any(item.get_closest_marker("llamacpp") for item in session.items):
        _prepare(session, LLAMACPP, _LLAMACPP_LAB_KEY, "servewatch-llamacpp-conformance-")


def _prepare(session: pytest.Session, recipe: LabRecipe, key: pytest.StashKey[Lab], prefix: str) -> None:
    """The lab `servewatch lab ENGINE` prepares (servewatch.lab.recipe), with this run's directory."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[{'' if recipe is VLLM else recipe.engine + ' '}lab] {line}")

    prepared = prepare_lab(recipe, say=say)
    venv, model = prepared.venv, prepared.model
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    obs = Observations(run_dir, Neutralizer(venv=venv.root, model=model.path, cache=prepared.cache_dir, tmp=run_dir))
    setup = {"venv_seconds": round(venv.seconds, 1), "venv_reused": venv.reused,
             "model_seconds": round(model.seconds, 1)}
    if recipe is VLLM:
        setup["model"] = model.info
    obs.record("setup", setup)
    session.config.stash[key] = Lab(prepared, run_dir, obs)
    session.config.stash[_STARTED_KEY] = time.monotonic()


@pytest.fixture(scope="session")
def sglang_lab(request: pytest.FixtureRequest) -> Lab:
    prepared = request.config.stash.get(_SGLANG_LAB_KEY, None)
    if prepared is None:
        pytest.fail("the SGLang lab was not prepared (run with -m sglang)")
    yield prepared
    prepared.obs.flush()


@pytest.fixture
def sglang_run_dir(sglang_lab: Lab, request: pytest.FixtureRequest) -> Path:
    path = sglang_lab.run_dir / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def llamacpp_lab(request: pytest.FixtureRequest) -> Lab:
    prepared = request.config.stash.get(_LLAMACPP_LAB_KEY, None)
    if prepared is None:
        pytest.fail("the llama.cpp lab was not prepared (run with -m llamacpp)")
    yield prepared
    prepared.obs.flush()


@pytest.fixture
def llamacpp_run_dir(llamacpp_lab: Lab, request: pytest.FixtureRequest) -> Path:
    path = llamacpp_lab.run_dir / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest) -> Lab:
    prepared = request.config.stash.get(_LAB_KEY, None)
    if prepared is None:
        pytest.fail("the vLLM lab was not prepared (run with -m vllm)")
    yield prepared
    prepared.obs.flush()


_attempt_started: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _attempt_started[item.nodeid] = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One line per attempt of a case (a freeze-explained miss is retried once): outcome, longest freeze."""
    if not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    started = _attempt_started.get(report.nodeid, time.monotonic())
    failure = ""
    if report.failed or report.outcome == "rerun":
        lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")]
        failure = lines[0][1:].strip()[:300] if lines else ""
    lab_timing.record_case(report.nodeid, report.outcome, started, time.monotonic(),
                           rerun=report.outcome == "rerun", failure=failure)


def pytest_unconfigure(config) -> None:
    lab_timing.stop_meter()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    started = config.stash.get(_STARTED_KEY, None)
    for key, title in ((_LAB_KEY, "vLLM conformance figures"), (_SGLANG_LAB_KEY, "SGLang conformance figures"),
                       (_LLAMACPP_LAB_KEY, "llama.cpp conformance figures")):
        prepared = config.stash.get(key, None)
        if prepared is None:
            continue
        prepared.obs.flush()
        terminalreporter.section(title)
        for line in prepared.obs.summary_lines:
            terminalreporter.write_line(line)
        if started is not None:
            terminalreporter.write_line(f"suite wall time after setup: {time.monotonic() - started:.0f} s")
        terminalreporter.write_line(f"run directory (logs, observations.json): {prepared.run_dir}")


@pytest.fixture
def run_dir(lab: Lab, request: pytest.FixtureRequest) -> Path:
    path = lab.run_dir / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path



def pytest_configure(config) -> None:
    """SIGTERM (CI's time budget running out) ends the session as ^C does: fixtures' finalizers and the
    atexit hook stop every server this session started."""
    stop_servers_on_termination()
