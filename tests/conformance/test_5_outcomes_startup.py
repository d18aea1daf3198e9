"""Request outcomes and startup stages on a real vLLM: watched from its first second, a normal start
raises nothing and its stages are recorded; served requests raise nothing, a storm of prompts over the
model's length is a client-error finding naming that cause; a start whose worker is stopped while
compiling (under `guard`) is startup_stalled naming the stage."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from lab_cli import SERVEWATCH, Watcher, assert_bundles_verify
from lab_observations import log_excerpt
from lab_timing import FreezeExplainedMiss, check_within, longest_freeze
from lab_traffic import Traffic

from servewatch.lab.server import ServerConfig, free_port, vllm_command, vllm_environment
from servewatch.bundle.incident import load_incident, stage_rows

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]

MAX_MODEL_LEN = 512
OVER_LENGTH_PROMPT = "word " * 800            # 4,000 characters: over 512 tokens by vLLM's own bound


def post(url: str, body: dict, timeout_s: float = 30.0) -> int:
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read(1 << 16)
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_watched_from_its_first_second_then_served_and_rejected_requests(lab, run_dir):
    server = lab.server("outcomes", max_model_len=MAX_MODEL_LEN).start()
    out = run_dir / "bundles"
    try:
        with Watcher(server.url, out, pid=server.pid, log_file=server.log_path) as watcher:
            ready = server.wait_ready()
            assert watcher.verdicts() == [], watcher.describe()          # a normal start: no verdict at all

            served = Traffic(server.url, n=12, concurrency=2, max_tokens=8).start()   # 84 ITL samples: too few for histogram_blind
            assert served.wait(120) and served.result.statuses == [200] * 12, served.result.statuses
            calm_until = time.monotonic() + 4                             # a few scrapes after the traffic
            while time.monotonic() < calm_until:
                time.sleep(0.5)   # the recorder's scrapes are what is awaited; nothing to wait on here
            assert watcher.verdicts() == [], watcher.describe()

            storm_at = time.monotonic()
            statuses = [post(server.url, {"model": "tiny", "prompt": OVER_LENGTH_PROMPT, "max_tokens": 8})
                        for _ in range(30)]
            assert set(statuses) == {400}, statuses
            line = watcher.wait_for("client_errors", timeout_s=60, after=storm_at)
            assert line is not None, watcher.describe()
            rejected = int(re.search(r"(\d+) × 4xx", line.data["why"])[1])   # fired once the threshold was met
            assert 5 <= rejected <= 30 and "inputs over the model's maximum length" in line.data["why"], line.data["why"]
            assert {v.name for v in watcher.verdicts()} == {"client_errors"}, watcher.describe()

            abort_at = time.monotonic()
            # Side by side, so each stream gets an eighth of the engine: one alone generated its 480 tokens
            # in ~0.2 s here, sometimes before its client had hung up, and was counted finished.
            with ThreadPoolExecutor(max_workers=8) as pool:
                firsts = list(pool.map(lambda _: hang_up_after_first_chunk(server.url), range(8)))
            assert all(firsts), firsts                  # each stream had begun: the engine was working on it
            aborted = watcher.wait_for("requests_aborted", timeout_s=60, after=abort_at)
            assert aborted is not None, watcher.describe()
            hung_up = int(re.match(r"(\d+) of ", aborted.data["why"])[1])   # fired once the threshold was met
            assert 5 <= hung_up <= 8 and "the client hung up mid-answer" in aborted.data["why"], aborted.data["why"]
        bundle = line.data["bundle"]
    finally:
        server.stop()
    incident = load_incident(bundle)
    verdict = next(v for v in incident.verdicts if v.name == "client_errors")
    assert verdict.details["cause"] == "input_too_long"
    stages = {row[0]: row for row in stage_rows(incident)}
    assert {"process up", "weights loaded", "KV cache sized", "engine ready", "ready", "first /health 200"} <= set(stages)
    assert "512 tokens per request" in stages["KV cache sized"][3]
    lab.obs.record("outcomes", {"ready_s": round(ready, 1), "client_errors_after_s": round(line.arrived - storm_at, 1),
                                "stages": {name: row[1] for name, row in stages.items()}})
    lab.obs.say(f"outcomes: ready {ready:.1f} s, no verdict while loading or serving; 30 prompts over "
                f"{MAX_MODEL_LEN} tokens → client_errors (input_too_long) {line.arrived - storm_at:.1f} s after the "
                f"storm began; stages (s from the start): "
                + ", ".join(f"{name} {row[1]:g}" for name, row in stages.items()))
    lab.obs.say(f"outcomes: {line.data['why']}")
    lab.obs.say(f"outcomes: 8 streams closed by the client after their first chunk → requests_aborted "
                f"{aborted.arrived - abort_at:.1f} s after the first hang-up: {aborted.data['why']}")
    assert_bundles_verify(out)


def hang_up_after_first_chunk(url: str) -> bool:
    """A streaming completion closed by the client once its first chunk arrived: the engine aborts it."""
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 480, "stream": True,
            "ignore_eos": True}
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.readline(1 << 12).startswith(b"data:")


class GuardedStart:
    """`servewatch guard URL --log-file LOG -- sh -c 'exec vllm ... >> LOG'`, its JSON lines collected."""

    def __init__(self, lab, run_dir, *guard_args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = ServerConfig(model_dir=lab.model.path, cache_root=lab.cache_dir / "vllm-cache",
                                   max_model_len=MAX_MODEL_LEN, port=self.port)
        self.log = run_dir / "guarded-vllm.log"
        self.log.write_text("")
        command = " ".join(_quote(part) for part in vllm_command(lab.venv.python, self.config, self.port))
        self.stderr_path = run_dir / "guard-stderr.txt"
        self.out = run_dir / "bundles"
        self.args = ["guard", self.url, "--json", "--interval", "0.5", "--log-file", str(self.log), "--no-stacks",
                     "--out", str(self.out), *guard_args, "--", "sh", "-c", f"exec {command} >> {_quote(str(self.log))} 2>&1"]
        self.lines: list[tuple[float, dict]] = []

    def __enter__(self) -> GuardedStart:
        self._stderr = open(self.stderr_path, "w+", encoding="utf-8")
        self.proc = subprocess.Popen([*SERVEWATCH, *self.args], stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, env=vllm_environment(self.config))
        self.started = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), json.loads(raw)))

    def tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def __exit__(self, *exc) -> None:
        tree = self.tree()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for proc in tree:
            try:
                proc.resume()
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(tree, timeout=10)
        self._stderr.close()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _wait_for_line(path, text: str, timeout_s: float, guarded: GuardedStart) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return time.monotonic()
        assert guarded.proc.poll() is None, f"guard exited {guarded.proc.returncode}"
        time.sleep(0.1)   # another process's log file: nothing to wait on but the file
    raise AssertionError(f"{text!r} not in the vLLM log after {timeout_s:.0f} s: "
                         f"{log_excerpt(path.read_text(errors='replace'), max_lines=20)}")


FENCE_S = 80.0
# The floor of the startup bound, lowered from the 120 s default to keep the case short, but above the
# imports before vLLM's first log line: 20 s on a loaded run here (8-16 s quiet), and a floor under that
# reads a slow import as a stalled start.
FLOOR_S = 30.0


def test_a_start_stopped_while_compiling_is_startup_stalled_naming_the_stage(lab, run_dir):
    # bound = max(floor, k × the longest earlier stage): the imports (~8–16 s here) set it
    with GuardedStart(lab, run_dir, "--set", f"startup_stall_floor_s={FLOOR_S:g}", "--set", "startup_stall_k=1") as guarded:
        compiling_at = _wait_for_line(guarded.log, "Warming up model for the compilation", 240, guarded)
        worker = next((p for p in guarded.tree() if "VLLM::Worker" in " ".join(p.cmdline())), None)
        assert worker is not None, [p.cmdline() for p in guarded.tree()]
        os.kill(worker.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        deadline = stopped_at + FENCE_S   # only a fence: the bound is asserted below from the verdict's own
        found = None
        while found is None and time.monotonic() < deadline:
            found = next(((at, line) for at, line in guarded.lines if line.get("verdict") == "startup_stalled"), None)
            time.sleep(0.2)   # guard's stdout is read by a thread; poll its list
        before = [line.get("verdict") for at, line in guarded.lines if at < stopped_at and line.get("verdict")]
        os.kill(worker.pid, signal.SIGCONT)
    assert before == [], before                                  # nothing while it loaded normally under guard
    if found is None:
        freeze = longest_freeze(stopped_at)
        raise (FreezeExplainedMiss if freeze >= FENCE_S - (FLOOR_S + 1.3) else AssertionError)(
            f"no startup_stalled within {FENCE_S:.0f} s of the stop (longest freeze {freeze:.1f} s): "
            f"{[line for _, line in guarded.lines]}")
    at, line = found
    # The bound it reports must be the one set here, max(FLOOR_S, 1 x the longest earlier stage), and the
    # verdict must come within it (counted from the compiling line) + two 0.5 s cadences + 0.3 s of polling.
    details = line["details"]
    assert details["bound_s"] == round(max(FLOOR_S, 1.0 * details["longest_gap_s"]), 1), details
    check_within("startup_stalled after the compiling line", at - compiling_at, details["bound_s"] + 2 * 0.5 + 0.3,
                 since=compiling_at)
    assert "stuck after compiling" in line["why"] and "compiling the model" in line["why"], line["why"]
    assert "stopped" in line["why"]                              # the stopped worker is named
    assert not any(line.get("verdict") == "health_loss" for _, line in guarded.lines)
    lab.obs.record("startup_stalled", {"compiling_after_s": round(compiling_at - guarded.started, 1),
                                       "verdict_after_stop_s": round(at - stopped_at, 1)})
    lab.obs.say(f"startup: worker stopped {compiling_at - guarded.started:.0f} s into the start while compiling → "
                f"startup_stalled {at - stopped_at:.1f} s later: {line['why']}")
    assert_bundles_verify(guarded.out)
