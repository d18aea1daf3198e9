"""Faults on one real vLLM prefill/decode pair joined by NIXL (issue 52, item 5's facts), one start shared by all:
the hand-over, the router sending decode alone, the prefill stopped (SIGSTOP) while decode waits for its KV, the
prefill killed after its step, decode's engine core killed. Each step checks what the engines' own series and
answers say about the side at fault. Measured 2026-12-06 10:18 on 2 cores at a load average of 8-15 (the same
steps as a script): the pair ready in 121 s, 208 s in all; decode waited with `deferred` 1 and `in_progress` 1
and /health 200 through a 27 s stop, then answered 200 from the transfer; after the prefill's kill decode
answered 500 in 2.5 s with one failed transfer; decode's API server exited 0 3.2 s after its engine core's kill.
As this test at 10:27 (load average 6-9, with a 20 s stop): 92 s in all, the pair ready in 39 s. Marker `pd`: run it
with `pytest -m pd tests/conformance/test_12_pd_faults.py`."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servewatch.lab.pd import PREFILL_PARAMS, ensure_nixl, pd_pair

pytestmark = [pytest.mark.pd, pytest.mark.timeout(900)]

READY_S = 600.0          # both instances' start: 121-532 s measured here at load averages of 8-37
REQUEST_S = 240.0        # one leg
STOP_HOLD_S = 20.0       # the prefill stopped this long while decode waits
SAMPLE_S = 2.0           # decode's gauges read this often during the stop
FAIL_BOUND_S = 60.0      # decode's answer after the prefill's kill: 0.2-5.5 s measured, ~50 s in an earlier session
EXIT_BOUND_S = 30.0      # decode's API server gone after its engine core's kill: 3.2 s measured


def _prompt(i: int) -> str:
    return " ".join(["alpha bravo charlie delta echo foxtrot golf hotel", f"india{i} juliet{i}"] * 30)


def _post(url: str, body: dict) -> tuple[int, dict | str]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:300]


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


_KEPT = {"vllm:prompt_tokens_by_source_total": "source", "vllm:num_requests_waiting_by_reason": "reason",
         "vllm:num_requests_kv_fetch_by_stage": "stage", "vllm:nixl_num_failed_transfers_total": None}


def _series(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=15) as answer:
        text = answer.read().decode()
    return {f"{s.name}{{{s.labels.get(_KEPT[s.name], '') if _KEPT[s.name] else ''}}}": s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name in _KEPT}


def _grew(before: dict, after: dict, key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


EXTERNAL = "vllm:prompt_tokens_by_source_total{external_kv_transfer}"
LOCAL = "vllm:prompt_tokens_by_source_total{local_compute}"
DEFERRED = "vllm:num_requests_waiting_by_reason{deferred}"
FETCHING = "vllm:num_requests_kv_fetch_by_stage{in_progress}"
FAILED = "vllm:nixl_num_failed_transfers_total{}"


def _tree(pid: int) -> list[psutil.Process]:
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


def test_faults_on_one_real_nixl_pair_show_on_the_side_at_fault(lab, tmp_path):
    started = time.monotonic()
    ensure_nixl(lab.prepared.venv)
    pair = pd_pair(lab.prepared, "nixl", tmp_path, lease_s=300)
    steps: dict[str, float] = {}
    with pair:
        ready: dict[str, float] = {}
        waits = [threading.Thread(target=lambda r=r, s=s: ready.__setitem__(r, s.wait_ready(READY_S)), daemon=True)
                 for r, s in (("prefill", pair.prefill), ("decode", pair.decode))]
        for thread in waits:
            thread.start()
        for thread in waits:
            thread.join(READY_S + 30)
        assert set(ready) == {"prefill", "decode"}, f"not ready: {ready}"
        assert pair.silent_side_channels() == []
        pair.shake_hands()     # as `lab vllm --pd` does: decode's first handshake can outlast vLLM's 5 s receive
        steps["ready"] = time.monotonic() - started
        prefill, decode = pair.prefill.url, pair.decode.url

        def handed(i: int) -> dict:
            status, answer = _post(prefill, {"model": "tiny", "prompt": _prompt(i), "max_tokens": 1,
                                             "kv_transfer_params": PREFILL_PARAMS})
            assert status == 200, answer
            return answer["kv_transfer_params"]

        def to_decode(i: int, params: dict | None) -> tuple[int, dict | str]:
            body = {"model": "tiny", "prompt": _prompt(i), "max_tokens": 4}
            return _post(decode, body | ({"kv_transfer_params": params} if params else {}))

        # 1. the hand-over: every prompt token of decode's answer came by the transfer
        params, before = handed(1), _series(decode)
        status, answer = to_decode(1, params)
        after = _series(decode)
        assert status == 200, answer
        tokens = answer["usage"]["prompt_tokens"]
        assert tokens > 256 and _grew(before, after, EXTERNAL) == tokens and _grew(before, after, LOCAL) == 0

        # 2. the router sent decode alone: decode computed the whole prompt, the prefill saw nothing
        before, prefill_before = _series(decode), _series(prefill)
        status, answer = to_decode(2, None)
        after = _series(decode)
        assert status == 200, answer
        assert _grew(before, after, LOCAL) == answer["usage"]["prompt_tokens"]
        assert _grew(before, after, EXTERNAL) == 0 and _series(prefill) == prefill_before

        # 3. the prefill stopped after its step while decode waits: decode holds the request (deferred, fetch in
        #    progress), its /health 200 throughout; after SIGCONT the transfer completes and decode answers 200
        params = handed(3)
        stopped_procs = _tree(pair.prefill.pid)
        for proc in stopped_procs:
            proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        before, got = _series(decode), {}
        waiting = threading.Thread(target=lambda: got.update(r=to_decode(3, params)), daemon=True)
        waiting.start()
        seen = []
        try:
            while time.monotonic() - stopped < STOP_HOLD_S:
                waiting.join(SAMPLE_S)
                now = _series(decode)
                seen.append((round(time.monotonic() - stopped, 1), _health(decode), now.get(DEFERRED), now.get(FETCHING)))
        finally:
            for proc in stopped_procs:
                proc.send_signal(signal.SIGCONT)
        waiting.join(REQUEST_S)
        assert "r" in got, "decode never answered after the prefill went on"
        assert all(s[1:] == (200, 1.0, 1.0) for s in seen[1:]), seen    # the first read may come before decode asks
        status, answer = got["r"]
        assert status == 200 and _grew(before, _series(decode), EXTERNAL) == answer["usage"]["prompt_tokens"], answer
        steps["prefill stopped"] = time.monotonic() - stopped

        # 4. the prefill killed after its step: decode fails the request (a failed transfer, HTTP 500), its /health
        #    still 200
        params, before = handed(4), _series(decode)
        for proc in _tree(pair.prefill.pid):
            proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        status, answer = to_decode(4, params)
        failed_after = time.monotonic() - killed
        assert status == 500 and failed_after < FAIL_BOUND_S, (status, answer, failed_after)
        assert _grew(before, _series(decode), FAILED) >= 1 and _health(decode) == 200
        steps["decode failed after the prefill's kill"] = failed_after

        # 5. decode's engine core killed: its API server exits
        cores = [p for p in _tree(pair.decode.pid) if p.name().startswith("VLLM::EngineCor")]
        assert len(cores) == 1, [p.name() for p in _tree(pair.decode.pid)]
        cores[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = pair.decode.proc.wait(timeout=EXIT_BOUND_S)
        steps["decode exited after its core's kill"] = time.monotonic() - killed
        assert _health(decode) is None
    steps["all"] = time.monotonic() - started
    print("; ".join(f"{k} {v:.1f}s" for k, v in steps.items()) + f"; decode exit code {code}")
