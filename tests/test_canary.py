"""The output canary: recorded from one simulated model, it matches a restart of the same model and
reports a mismatch on a model with other weights (another seed); bad files and servers are one line."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading

import pytest

from servewatch import canary
from servewatch.cli import main
from servewatch.clock import RealClock
from servewatch.sim import SimConfig, SimEngine
from servewatch.sim.server import serve


class SimServer:
    """The simulator serving HTTP on its own loop in a thread, so the CLI can run its own asyncio.run()."""

    def __init__(self, seed: int, model_name: str | None = None):
        self.seed = seed
        self.model_name = model_name
        self.url = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self):
        async def run():
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            config = SimConfig(seed=self.seed)
            if self.model_name is not None:
                config = dataclasses.replace(config, model_name=self.model_name)
            engine = SimEngine(config, RealClock())
            await serve(engine, "127.0.0.1", 0, on_listening=self._listening, stop=self._stop)
        asyncio.run(run())

    def _listening(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def record(url, out, *extra):
    return main(["canary", "record", url, "--out", str(out), *extra])


def test_the_canary_matches_a_restart_of_the_same_model_and_not_a_model_with_other_weights(tmp_path, capsys):
    path = tmp_path / "canary.json"
    with SimServer(seed=7) as first:
        assert record(first.url, path) == 0
    stored = json.loads(path.read_text())
    assert set(stored) == {"schema", "prompt", "max_tokens", "completion_sha256", "completion_tokens",
                           "completion_chars", "model", "recorded_t"}              # no text by default
    assert stored["completion_tokens"] >= 1
    capsys.readouterr()
    with SimServer(seed=7) as restarted:
        assert main(["canary", "check", restarted.url, str(path)]) == 0
    assert capsys.readouterr().out.startswith("canary matches:")
    with SimServer(seed=8) as other_weights:
        assert main(["canary", "check", other_weights.url, str(path)]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("canary MISMATCH:") and "\n" not in line


def test_a_server_serving_another_model_is_a_mismatch_that_says_so(tmp_path, capsys):
    """Same weights (seed), so the same completion; the model name differs: not a match, and said."""
    path = tmp_path / "canary.json"
    with SimServer(seed=7) as first:
        assert record(first.url, path) == 0
    recorded_model = json.loads(path.read_text())["model"]
    capsys.readouterr()
    with SimServer(seed=7, model_name="another-model") as other:
        assert main(["canary", "check", other.url, str(path)]) == 1
    assert capsys.readouterr().out.strip() == (
        f"canary MISMATCH: the model differs: the server answered as model another-model, the canary was recorded "
        f"from model {recorded_model} (the same completion, {json.loads(path.read_text())['completion_tokens']} "
        f"token(s))")


def test_keep_text_stores_the_completion_and_locates_the_first_difference(tmp_path, capsys):
    path = tmp_path / "canary.json"
    with SimServer(seed=7) as server:
        assert record(server.url, path, "--keep-text") == 0
    kept = canary.parse(path.read_text(), "x")
    assert kept.text and canary.digest(kept.text) == kept.completion_sha256
    check = canary.compare(kept, kept.text[:3] + "#" + kept.text[4:], kept.completion_tokens)
    assert not check.matches and "first difference at character 3" in check.line


@pytest.mark.parametrize("content,needle", [
    ("not json", "not JSON"),
    ("{}", "not a canary file"),
    ('{"schema": "servewatch.canary/1", "prompt": "p"}', "'max_tokens' is missing"),
])
def test_a_bad_canary_file_is_one_line_and_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["canary", "check", "http://127.0.0.1:9", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servewatch canary:") and needle in err[0] and str(path) in err[0]


def test_an_unreachable_server_or_an_unwritable_out_is_one_line(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert record(f"http://127.0.0.1:{port}", tmp_path / "c.json") == 2
    assert record("http://127.0.0.1:9", tmp_path / "missing" / "c.json") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "connection refused" in err[0] and "no such directory" in err[1]
    assert not (tmp_path / "c.json").exists()


def test_a_model_path_is_stored_as_its_last_component():
    assert canary.recorded("x", 1, "/models/secret/dir/tiny", 0.0, keep_text=False).model == "tiny"
