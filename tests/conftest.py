from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def metrics_fixture():
    def load(name: str) -> str:
        return (FIXTURES / "metrics" / name).read_text()
    return load
