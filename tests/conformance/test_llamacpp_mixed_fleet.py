"""`servewatch serve` watching a mixed fleet (issue 53): a real vLLM, a real SGLang and the real llama-server in one
run, each with a little traffic; /api/v1/targets names each target's engine and its token rate, and a SIGSTOP of
llama-server is named on that target only (health_loss: a stopped process answers nothing), the others staying up.

Run: `pytest -m llamacpp tests/conformance` (CI's real llama.cpp stage, after its vLLM and SGLang lab installs: the
test takes the three labs from the lab cache; skipped where SERVEWATCH_SKIP_VLLM or SERVEWATCH_SKIP_SGLANG says a
local run left one out). Measured alone on 2 shared cores (2026-12-06 10:29): 95 s, the engines started one at a time
(vLLM ready in 35.7 s, SGLang 26.7 s, llama-server 0.5 s), every rate seen 81.8 s in, health_loss on llama-server
6.5 s after its SIGSTOP."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack

import pytest
from lab_traffic import Traffic

from servewatch.lab.recipe import LLAMACPP, SGLANG, VLLM, prepare_lab

DEADLINE_S = 180.0          # for the rates to show on all three (vLLM and SGLang start in 40-90 s here)
STOP_NAMED_S = 30.0         # health_loss's own bound (/health unanswered) is seconds; a stopped server answers nothing


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _wait(what, predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        seen = predicate()
        if seen:
            return seen
        time.sleep(0.5)        # polling serve's API for a condition, bounded by the deadline
    raise AssertionError(f"{what} not seen within {timeout_s:g} s; last: {seen}")


def _hang_up(traffic: Traffic) -> None:
    """Cancel what is still in flight; a client already done (llama-server answers 400 requests in seconds) has
    closed its loop."""
    if not traffic.done.is_set():
        try:
            traffic.cancel()
        except RuntimeError:      # its loop closed between the check and the cancel
            pass


@pytest.mark.llamacpp
@pytest.mark.timeout(900)
def test_serve_names_each_engine_of_a_mixed_fleet_and_a_stop_on_its_target_only(tmp_path_factory):
    skipped = [name for name in ("SERVEWATCH_SKIP_VLLM", "SERVEWATCH_SKIP_SGLANG") if os.environ.get(name) == "1"]
    if skipped:
        pytest.skip(f"{' and '.join(skipped)}=1: this run has not the three engines")
    tmp_path = tmp_path_factory.mktemp("fleet")
    t0 = time.monotonic()
    labs = {"vllm": prepare_lab(VLLM), "sglang": prepare_lab(SGLANG), "llamacpp": prepare_lab(LLAMACPP)}
    timings = {"labs_s": round(time.monotonic() - t0, 1)}
    with ExitStack() as stack:
        servers = {}
        # One at a time: started together on 2 shared cores, vLLM was not ready after its 240 s (2026-12-06 10:20).
        for name, prepared in labs.items():
            server = prepared.server(tmp_path / f"{name}.log").start()
            stack.callback(server.stop)
            servers[name] = server
            timings[f"{name}_ready_s"] = round(server.wait_ready(), 1)
        proc = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--listen", "127.0.0.1:0",
                                 "--interval", "0.5", "--no-probe",
                                 *(arg for name, s in servers.items() for arg in ("--target", f"{name}={s.url}"))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stack.callback(lambda: proc.poll() is None and (proc.send_signal(signal.SIGTERM), proc.wait(30)))
        match = re.match(r"servewatch serve: listening on (http://127\.0\.0\.1:\d+), watching 3 target\(s\)$",
                         proc.stderr.readline().strip())
        assert match
        api = match[1]
        for name, server in servers.items():
            model = _get(server.url + "/v1/models")["data"][0]["id"]
            traffic = Traffic(server.url, n=400, concurrency=2, max_tokens=32, model=model, timeout_s=600).start()
            stack.callback(_hang_up, traffic)

        def all_rates():
            targets = {t["name"]: t for t in _get(api + "/api/v1/targets")["targets"]}
            ok = all(t["up"] and (t["signals"].get("tokens_per_s") or 0) > 0 for t in targets.values())
            return targets if ok and len(targets) == 3 else None

        targets = _wait("a token rate on every target", all_rates, DEADLINE_S)
        timings["rates_seen_s"] = round(time.monotonic() - t0, 1)
        assert {name: t["engine"] for name, t in targets.items()} == \
            {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}
        rates = {name: round(t["signals"]["tokens_per_s"], 1) for name, t in targets.items()}

        faults = {"health_loss", "not_serving", "alive_health_ok_no_progress", "engine_dead", "process_exit"}
        os.kill(servers["llamacpp"].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            def named():
                verdicts = _get(api + "/api/v1/verdicts")["active"]
                return verdicts if any(v["target"] == "llamacpp" and v["verdict"] in faults for v in verdicts) else None

            active = _wait("a verdict on llama-server", named, STOP_NAMED_S)
            named_s = round(time.monotonic() - stopped_at, 1)
        finally:
            os.kill(servers["llamacpp"].pid, signal.SIGCONT)
        assert {v["target"] for v in active if v["verdict"] in faults} == {"llamacpp"}, active
        others = {t["name"]: t["up"] for t in _get(api + "/api/v1/targets")["targets"] if t["name"] != "llamacpp"}
        assert others == {"vllm": True, "sglang": True}
    timings["total_s"] = round(time.monotonic() - t0, 1)
    print(f"\nmixed fleet: rates {rates}; verdict on llamacpp {sorted(v['verdict'] for v in active)} {named_s} s "
          f"after SIGSTOP; {timings}")
