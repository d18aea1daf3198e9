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


def pytest_runtest_setup(item):
    check_tools(item)
