"""servewatch's built-in engine: a vLLM/SGLang-compatible simulator with a realistic scheduler.

In-process API (no HTTP, no sleeping; this is what the load generator, recorder and demo build on)::

    from servewatch.clock import VirtualClock
    from servewatch.sim import SimConfig, SimEngine

    clock = VirtualClock()
    engine = SimEngine(SimConfig(dialect="vllm", profile="rtx3060-7b", max_num_seqs=256), clock)
    handle = engine.submit(prompt_tokens=44, max_tokens=128, ignore_eos=True)   # -> Request
    engine.run_until(clock.now() + 5.0)       # run every step and timer due in the next 5 virtual s
    handle.output_len, handle.token_times, handle.finish_reason, handle.first_token_ts
    engine.step()                              # or one step at a time (clock advances by its duration)
    engine.health()                            # 200 / 503 / 0 (= would not answer), per dialect
    engine.metrics_text()                      # the /metrics body, byte-compatible with the dialect
    engine.inject({"kind": "stall"})           # or "engine-death@20s:exit=0", SimFault(...)
    engine.num_running, engine.num_waiting, engine.kv_usage, engine.steps, engine.state, engine.exit_code

* `submit(prompt_tokens, max_tokens, *, prompt=None, ignore_eos=False, prefix_key=None,
  is_streaming=True, listener=None)`: `prefix_key` makes requests share prompt blocks (prefix-cache
  hits); `prompt` text is counted by the documented token counter (servewatch.sim.tokens) and hashed
  per block. Raises `RequestRejected` (HTTP 400 in the server), `RequestFailed` (a 5xx, during an
  error storm) or `EngineDeadError`; `record_response(status)` counts a status as the HTTP layer would. The returned
  `Request` is live: `output_len`, `token_times` (one timestamp per token), `first_token_ts`,
  `finish_reason` (`stop` / `length` / `abort`), `preemptions`, `prefix_hit_tokens`; `listener(request)`
  is called on every new token and at finish.
* `abort(request)`: finish with reason `abort` (what a client disconnect does).
* `run_until(t)` / `step()` need a VirtualClock; `run_realtime()` is the same engine driven by a
  RealClock as one asyncio task (what `servewatch sim` serves over HTTP, see servewatch.sim.server).
  Both drive `poll()`, so virtual and HTTP runs share every rule.
* `health()` for vLLM: 200 while alive (stalled included), 503 once dead, 0 (no answer) during
  startup and after exit. For SGLang: 503 while starting, 503 once a stall has outlasted the
  generation probe's timeout (20 s), 503 when dead.
* `state` is "starting" / "ready" / "dead" / "exited"; after engine death the process would exit with
  `exit_code` at `exit_at` (the HTTP server does exit; in-process, callbacks in `engine.on_exit` run).

Faults (servewatch.sim.faults): stall, engine-death, crash-oom, slow, admission-deadlock,
startup-hang (or startup-hang@STAGE), startup-oom, error-storm (5xx or 4xx), crash-loop, clear; on one side of
a prefill/decode pair (`SimConfig(pd_role="prefill" | "decode")`, servewatch.sim.pd): kv-stall, kv-expire,
kv-fail, pd-bypass.
Profiles (servewatch.sim.profiles): h100-8b, rtx3060-7b (default),
tiny-cpu. Deterministic for a given config and seed.
"""

from servewatch.sim.config import SimConfig
from servewatch.sim.engine import (DEAD, EXITED, NO_ANSWER, READY, STARTING, EngineDeadError, RequestFailed,
                                   RequestRejected, SimEngine)
from servewatch.sim.faults import SimFault, FaultSpecError, parse_fault_spec
from servewatch.sim.profiles import PROFILES, Profile
from servewatch.sim.request import Request
from servewatch.sim.scheduler import SimStep

__all__ = [
    "DEAD", "EXITED", "NO_ANSWER", "READY", "STARTING", "EngineDeadError", "FaultSpecError", "PROFILES",
    "Profile", "Request", "RequestFailed", "RequestRejected", "SimConfig", "SimEngine", "SimFault", "SimStep", "parse_fault_spec",
]
