from pathlib import Path

import pytest

from tests.tools import check_tools

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def metrics_fixture():
    def load(name: str) -> str:
        return (FIXTURES / "metrics" / name).read_text()
    return load


@pytest.fixture(autouse=True, scope="session")
def private_state_home(tmp_path_factory):
    """What guard keeps between runs (stack dumps, the ledger of lives) goes to a directory of this test
    session, not the user's ~/.local/state; subprocesses inherit it."""
    import os

    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


def pytest_configure(config):
    """The processes the tests start get SIGINT's and SIGQUIT's default actions, as from a terminal. A suite started
    as a background job (`pytest ... &` in a script) has both ignored, and its children inherit that; servewatch keeps
    a stop signal ignored when it started ignored (nohup's rule), so a watch, serve or load the tests stop with
    SIGINT would never stop (five tests failed that way when this machine's suite ran in the background,
    2026-12-06 23:30)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_runtest_setup(item):
    check_tools(item)
