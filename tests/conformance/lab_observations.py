"""What the conformance suite saw on the real engine, kept for the fast tests.

Every run writes `observations.json` and the captured texts into the session's run directory. With
SERVEWATCH_RECORD_FIXTURES=DIR (e.g. tests/fixtures/vllm_real) the same files are also written
there, with machine-specific paths and addresses replaced by neutral ones.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

RECORD_ENV = "SERVEWATCH_RECORD_FIXTURES"

# Placeholders used by the shared fixtures (../shared/fixtures/vllm-0.32.0-cpu).
NEUTRAL_VENV = "/opt/venv"
NEUTRAL_MODEL = "/models/tiny"
NEUTRAL_CACHE = "/opt/cache"
NEUTRAL_HOME = "/home/user"
NEUTRAL_TMP = "/tmp/run"
_IPV4 = re.compile(r"\b(?!127\.0\.0\.1\b)(?!0\.0\.0\.0\b)\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")


class Neutralizer:
    def __init__(self, *, venv: Path, model: Path, cache: Path, tmp: Path):
        # Longest first, so a path inside another is replaced by its own placeholder.
        pairs = [(str(venv), NEUTRAL_VENV), (str(model), NEUTRAL_MODEL), (str(cache), NEUTRAL_CACHE),
                 (str(tmp), NEUTRAL_TMP), (str(Path.home()), NEUTRAL_HOME)]
        self.pairs = sorted(((a, b) for a, b in pairs if a and a != "/"), key=lambda p: -len(p[0]))

    def __call__(self, text: str) -> str:
        for real, neutral in self.pairs:
            text = text.replace(real, neutral)
        return _IPV4.sub("192.0.2.2", text)


class Observations:
    def __init__(self, run_dir: Path, neutralize: Neutralizer):
        self.run_dir = run_dir
        self.neutralize = neutralize
        self.data: dict[str, object] = {}
        self.summary_lines: list[str] = []
        self._lock = threading.Lock()
        target = os.environ.get(RECORD_ENV)
        self.fixture_dir = Path(target) if target else None

    def record(self, key: str, value: object) -> None:
        with self._lock:
            self.data[key] = value

    def say(self, line: str) -> None:
        """A line for the end-of-run summary (detection times and other figures)."""
        with self._lock:
            self.summary_lines.append(line)

    def save_text(self, name: str, text: str) -> Path:
        path = self.run_dir / name
        path.write_text(text, encoding="utf-8")
        if self.fixture_dir is not None:
            self.fixture_dir.mkdir(parents=True, exist_ok=True)
            (self.fixture_dir / name).write_text(self.neutralize(text), encoding="utf-8")
        return path

    def flush(self) -> None:
        text = json.dumps(self.data, indent=1, sort_keys=True, default=str) + "\n"
        (self.run_dir / "observations.json").write_text(text, encoding="utf-8")
        if self.fixture_dir is not None and self.data:
            self.fixture_dir.mkdir(parents=True, exist_ok=True)
            merged = {}
            existing = self.fixture_dir / "observations.json"
            if existing.is_file():
                merged = json.loads(existing.read_text(encoding="utf-8"))
            merged.update(json.loads(self.neutralize(text)))
            existing.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def log_excerpt(text: str, *, drop=("GET /health", "GET /metrics", "Route: "), max_lines: int = 400) -> str:
    """The log without per-probe access lines and the route list; the tail when too long."""
    lines = [ln for ln in text.splitlines() if not any(d in ln for d in drop)]
    return "\n".join(lines[-max_lines:]) + "\n"
