"""Log lines in each dialect's format, written to a file (or any text stream).

vLLM: `(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message`, uvicorn's `INFO:     ...` lines,
the periodic `Engine 000: Avg prompt throughput: ...` line every log interval (INFO unless the engine
was idle in this and the previous interval; `Preemptions: N` only when non-zero in the interval), the
startup KV size line, and the error lines and tracebacks a dead engine prints.
SGLang: `[YYYY-MM-DD HH:MM:SS] message`: a `Prefill batch, ...` line per prefill batch, a
`Decode batch, ...` line every `decode_log_interval` decode batches, retraction warnings, and the
crash / watchdog / SIGQUIT lines. Times come from the engine's clock, so virtual runs log virtual time.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

VLLM_VERSION = "0.32.0"
SGLANG_VERSION = "0.5.23"
_STATUS_PHRASE = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  500: "Internal Server Error", 503: "Service Unavailable"}
_SITE = "/opt/venv/lib/python3.11/site-packages"


class LogSink:
    """Where lines go. Write failures are counted, never raised (a full disk must not kill the sim)."""

    def __init__(self, stream: TextIO | None):
        self.stream = stream
        self.failures = 0
        self.lines = 0

    def write(self, line: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.lines += 1
        except (OSError, ValueError):
            self.failures += 1


class _Base:
    def __init__(self, engine, sink: LogSink):
        self.engine = engine
        self.sink = sink
        self.pid = os.getpid()

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        self.sink.write(f"{level}:{' ' * (9 - len(level))}{message}")

    def access(self, client: str, method: str, path: str, status: int) -> None:
        self.uvicorn(f'{client} - "{method} {path} HTTP/1.1" {status} {_STATUS_PHRASE.get(status, "")}'.rstrip())

    def shutdown(self) -> None:
        for line in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                     f"Finished server process [{self.pid}]"):
            self.uvicorn(line)

    def serving(self, host: str, port: int) -> None:
        for line in (f"Started server process [{self.pid}]", "Waiting for application startup.",
                     "Application startup complete."):
            self.uvicorn(line)


class VllmLog(_Base):
    def __init__(self, engine, sink: LogSink):
        super().__init__(engine, sink)
        self._window_start = engine.clock.now()
        self._prompt = self._gen = self._preempt = 0
        self._prev_idle = True
        self._hits = self._queries = 0
        self._ext_hits = self._ext_queries = 0

    def _line(self, process: str, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(self.engine.clock.now()))
        for part in message.split("\n"):
            self.sink.write(f"({process} pid={self.pid}) {level} {stamp} [{where}] {part}")

    # --- lifecycle -------------------------------------------------------------------------------
    # The startup stages a real vLLM 0.32 CPU start logged, at their share of the start (imports 20 %,
    # torch.compile 55 %); a GPU start compiles while profiling memory and captures graphs after sizing KV.
    CPU_STAGES = (("process_up", 0.0), ("engine_start", 0.2), ("weights_loading", 0.4), ("weights_loaded", 0.42),
                  ("compiling", 0.43), ("compiled", 0.96), ("kv_cache_size", 0.97), ("engine_ready", 0.98))
    GPU_STAGES = (("process_up", 0.0), ("engine_start", 0.2), ("weights_loading", 0.3), ("weights_loaded", 0.45),
                  ("compiled", 0.7), ("kv_cache_size", 0.75), ("graphs_captured", 0.95), ("engine_ready", 0.98))
    FAILS_AT = "kv_cache_size"      # startup-oom: the KV sizing fails

    @property
    def STAGES(self):   # noqa: N802 - the same name as SglangLog's constant
        return self.CPU_STAGES if self.engine.config.hw.device == "CPU" else self.GPU_STAGES

    def stage(self, name: str, auto_fit_from: int | None = None) -> None:
        cfg, hw = self.engine.config, self.engine.config.hw
        cpu = hw.device == "CPU"
        if name == "process_up":
            self._line("APIServer", "INFO", "api_utils.py:286", "non-default args: {'model': %r, 'max_num_seqs': %d, "
                       "'max_model_len': %d, 'served_model_name': [%r]}" % (hw.model_name, cfg.max_num_seqs,
                                                                           cfg.max_model_len, cfg.model_name))
        elif name == "engine_start":
            self._line("EngineCore", "INFO", "core.py:133", f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with "
                       f"config: model='{hw.model_name}', max_seq_len={cfg.max_model_len}, served_model_name="
                       f"{cfg.model_name}, enable_prefix_caching={cfg.enable_prefix_caching}, enable_chunked_prefill=True")
        elif name == "weights_loading":
            runner = "cpu_model_runner.py:68" if cpu else "gpu_model_runner.py:4978"
            self._line("Worker", "INFO", runner, f"Starting to load model {hw.model_name}...")
        elif name == "weights_loaded":
            self._line("Worker", "INFO", "default_loader.py:501", "Loading weights took 0.01 seconds")
        elif name == "compiling" and cpu:
            self._line("Worker", "INFO", "cpu_model_runner.py:87", "Warming up model for the compilation...")
        elif name == "compiled" and cpu:
            self._line("Worker", "INFO", "cpu_model_runner.py:91", "Warming up done.")
        elif name == "compiled":
            self._line("Worker", "INFO", "monitor.py:34", f"torch.compile takes {0.25 * cfg.startup_seconds:.2f} s in total")
        elif name == "graphs_captured":
            self._line("Worker", "INFO", "gpu_model_runner.py:6516", "Graph capturing finished in "
                       f"{max(1, round(0.2 * cfg.startup_seconds))} secs, took 0.50 GiB")
        elif name == "kv_cache_size":
            tokens = cfg.num_blocks * cfg.block_size
            if auto_fit_from is not None:
                self._line("EngineCore", "INFO", "kv_cache_planning.py:1405", "Auto-fit max_model_len: reduced from "
                           f"{auto_fit_from} to {cfg.max_model_len} to fit in available KV cache memory "
                           f"({tokens * hw.kv_bytes_per_token / 2**30:.2f} GiB)")
            self._line("EngineCore", "INFO", "kv_cache_utils.py:2327", f"{hw.device} KV cache size: {tokens:,} tokens, "
                       f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: "
                       f"{tokens / cfg.max_model_len:.2f}x")
        elif name == "engine_ready":
            self._line("EngineCore", "INFO", "core.py:402", "init engine (profile, create kv cache, warmup model) took "
                       f"{self.engine.config.startup_seconds:.2f} s")

    def ready(self, auto_fit_from: int | None = None) -> None:
        self._line("APIServer", "INFO", "entry.py:136", "Supported tasks: ['generate']")

    def listening(self, host: str, port: int) -> None:
        self._line("APIServer", "INFO", "entry.py:140", f"Starting vLLM server on http://{host}:{port}")
        self.serving(host, port)

    # --- periodic stats --------------------------------------------------------------------------
    def on_admitted(self, admission) -> None:
        self._queries += admission.query_tokens
        self._hits += admission.hit_tokens
        if self.engine.pd is not None:
            self._ext_queries += admission.request.prompt_len
            self._ext_hits += admission.request.external_tokens

    def on_step(self, result) -> None:
        plan = result.plan
        self._prompt += plan.prefill_tokens
        self._gen += len(result.sampled)
        self._preempt += len(plan.preempted)

    def stats(self, now: float) -> None:
        """vLLM's LoggingStatLogger.log(): one line per interval, DEBUG (not shown) when idle."""
        e = self.engine
        elapsed = max(now - self._window_start, 1e-9)
        prompt_tps, gen_tps = self._prompt / elapsed, self._gen / elapsed
        idle = prompt_tps == 0 and gen_tps == 0
        if not (idle and self._prev_idle):
            deferred = e.pd.waiting_for_kv if e.pd is not None else 0
            parts = [f"Avg prompt throughput: {prompt_tps:.1f} tokens/s",
                     f"Avg generation throughput: {gen_tps:.1f} tokens/s",
                     f"Running: {e.num_running} reqs", f"Waiting: {e.num_waiting + deferred} reqs"]
            if deferred:
                parts.append(f"Deferred: {deferred} reqs")
                parts.append(f"KV fetch: 0 waiting to start, {deferred} in progress, 0 completed waiting")
            if self._preempt:
                parts.append(f"Preemptions: {self._preempt}")
            parts.append(f"{e.config.hw.device} KV cache usage: {e.kv_usage * 100:.1f}%")
            if self._queries:
                parts.append(f"Prefix cache hit rate: {self._hits / self._queries * 100:.1f}%")
            if self._ext_queries:
                parts.append(f"External prefix cache hit rate: {self._ext_hits / self._ext_queries * 100:.1f}%")
            self._line("APIServer", "INFO", "loggers.py:335", "Engine 000: " + ", ".join(parts))
        if e.pd is not None:
            self._kv_transfer_metrics(e.pd.take_interval())
        self._prev_idle = idle
        self._window_start = now
        self._prompt = self._gen = self._preempt = 0

    def _kv_transfer_metrics(self, interval: dict[str, list]) -> None:
        """kv_connector/v1/metrics.py KVConnectorLogging.log: NixlKVConnectorStats.reduce() of the interval,
        written only when the interval saw a transfer, a failure or an expiry."""
        xfer = interval["xfer"]
        if not any(interval.values()):
            return
        failures = (f"Num failed transfers={len(interval['failed'])}, Num KV expired reqs={len(interval['expired'])}, "
                    f"Num notifs after expiry={len(interval['after_expiry'])}")
        if not xfer:
            body = ("Num successful transfers=0, Avg xfer time (ms)=0, P90 xfer time (ms)=0, Avg post time (ms)=0, "
                    "P90 post time (ms)=0, Avg MB per transfer=0, Throughput (MB/s)=0, Avg number of descriptors=0, ")
        else:
            times = sorted(t for t, _ in xfer)
            mb = sum(b for _, b in xfer) / 2**20
            p90 = times[min(len(times) - 1, int(0.9 * (len(times) - 1) + 0.5))]
            body = (f"Num successful transfers={len(xfer)}, Avg xfer time (ms)={sum(times) / len(times) * 1e3:.3f}, "
                    f"P90 xfer time (ms)={p90 * 1e3:.3f}, Avg post time (ms)=0.5, P90 post time (ms)=0.5, "
                    f"Avg MB per transfer={mb / len(xfer):.3f}, Throughput (MB/s)={mb / max(sum(times), 1e-9):.3f}, "
                    "Avg number of descriptors=1.0, ")
        self._line("APIServer", "INFO", "loggers.py:341", "KV Transfer metrics: " + body + failures)

    # --- the KV connector (P/D) --------------------------------------------------------------------
    def kv_expired(self, rid: str, held_s: float) -> None:
        self._line("EngineCore", "WARNING", "base_worker.py:3033", f"Releasing expired KV blocks for request {rid} "
                   "which were retrieved by 0 remote worker(s) before lease expired.")

    def kv_failed(self, failure_type: str, tokens: int, timeout_s: float, *, notification: bool = False) -> None:
        rid = f"cmpl-{self.engine.config.seed:04x}{self.engine.pd.failed_transfers:028x}"
        context = f"{{'request_id': '{rid}', 'engine_id': '{self.engine.pd.engine_id}'}}"
        self._line("Worker", "ERROR", "pull_worker.py:562", f"NIXL transfer failure: {failure_type} | Context: "
                   f"{{'failure_type': '{failure_type}', {context[1:]}")
        self._line("EngineCore", "ERROR", "scheduler.py:3417", f"Failing 1 request(s) due to KV load failure "
                   f"(failure_policy=fail, {tokens} tokens affected). Request IDs: {{'{rid}'}}")
        if notification:
            self._line("Worker", "ERROR", "pull_worker.py:452", "NIXL transfer failure: notification_failed. P worker "
                       "blocks will be freed after timeout. This may indicate network issues. | Context: "
                       f"{{'failure_type': 'notification_failed', {context[1:]}")

    # --- failures --------------------------------------------------------------------------------
    def engine_death(self) -> None:
        self._line("EngineCore", "ERROR", "multiproc_executor.py:315", "Worker proc VllmWorker-0 died unexpectedly "
                   "(exit code: None), shutting down executor.")
        self._fatal(["  File \"%s/vllm/v1/engine/core.py\", line 1702, in _handle_client_request" % _SITE,
                     "    raise RuntimeError(\"Executor failed.\")", "RuntimeError: Executor failed."])

    def oom(self, running: int, mib: float, free_mib: float) -> None:
        hw = self.engine.config.hw
        self._fatal([
            "  File \"%s/vllm/v1/sample/sampler.py\", line 307, in apply_penalties" % _SITE,
            "    logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts",
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib:.2f} MiB. GPU 0 has a total "
            f"capacity of {hw.device_total_gib:.2f} GiB of which {free_mib:.2f} MiB is free.",
        ])

    def _fatal(self, tail: list[str]) -> None:
        lines = ["EngineCore encountered a fatal error.", "Traceback (most recent call last):",
                 "  File \"%s/vllm/v1/engine/core.py\", line 1496, in run_engine_core" % _SITE,
                 "    engine_core.run_busy_loop()", *tail]
        for line in lines:
            self._line("EngineCore", "ERROR", "core.py:1512", line)
        for line in ("AsyncLLM output_handler failed.", "Traceback (most recent call last):",
                     "  File \"%s/vllm/v1/engine/async_llm.py\", line 849, in output_handler" % _SITE,
                     "    outputs = await engine_core.get_output_async()",
                     "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                     "(above) for the root cause."):
            self._line("APIServer", "ERROR", "async_llm.py:906", line)

    def startup_oom(self) -> None:
        cfg, hw = self.engine.config, self.engine.config.hw
        need = cfg.max_model_len * hw.kv_bytes_per_token / 2**30
        have = min(cfg.kv_tokens, cfg.max_model_len // 2) * hw.kv_bytes_per_token / 2**30
        message = (f"ValueError: To serve at least one request with the model's max seq len ({cfg.max_model_len}), "
                   f"({need:.1f} GiB KV cache is needed, which is larger than the available KV cache memory "
                   f"({have:.1f} GiB). Try increasing `gpu_memory_utilization` (which also controls CPU memory on "
                   "the CPU backend) or decreasing `max_model_len` when initializing the engine. See "
                   "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        for line in ("EngineCore failed to start.", "Traceback (most recent call last):",
                     "  File \"%s/vllm/v1/core/kv_cache_planning.py\", line 67, in check_enough_kv_cache_memory" % _SITE,
                     message):
            self._line("EngineCore", "ERROR", "core.py:1584", line)
        self.sink.write("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
                        "{'EngineCore': 1}")

    def stall_watchdog(self) -> None:
        """vLLM has no default stall watchdog: a hung engine logs nothing."""


class SglangLog(_Base):
    def __init__(self, engine, sink: LogSink):
        super().__init__(engine, sink)
        self._last_prefill = engine.clock.now()

    def _line(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.engine.clock.now()))
        for part in message.split("\n"):
            self.sink.write(f"[{stamp}] {part}")

    # The startup stages a real SGLang 0.5.23 logged, at their share of the start as a CPU start spread them.
    STAGES = (("process_up", 0.0), ("engine_start", 0.8), ("weights_loading", 0.95), ("weights_loaded", 0.96),
              ("kv_cache_size", 0.98), ("engine_ready", 1.0))
    FAILS_AT = "kv_cache_size"

    def stage(self, name: str, auto_fit_from: int | None = None) -> None:
        cfg = self.engine.config
        total = cfg.num_blocks * cfg.block_size
        if name == "process_up":
            self._line(f"server_args=ServerArgs(model_path='{cfg.hw.model_name}', served_model_name='{cfg.model_name}', "
                       f"max_running_requests={cfg.max_num_seqs}, page_size={cfg.block_size}, "
                       f"context_length={cfg.max_model_len}, enable_metrics=True)")
        elif name == "engine_start":
            self._line("Init parallel begin.")
        elif name == "weights_loading":
            self._line("Load weight begin. avail mem=20.88 GB")
        elif name == "weights_loaded":
            self._line("Load weight end. elapsed=0.05 s, type=LlamaForCausalLM, avail mem=20.87 GB, mem usage=0.01 GB.")
        elif name == "kv_cache_size":
            self._line(f"KV Cache is allocated. dtype: torch.float16, #tokens: {total}, K size: 0.00 GB, V size: 0.00 GB")
            self._line(f"max_total_num_tokens={total}, chunked_prefill_size={cfg.max_batched_tokens}, "
                       f"max_prefill_tokens={cfg.max_batched_tokens}, max_running_requests={cfg.max_num_seqs}, "
                       f"context_len={cfg.max_model_len}")
        elif name == "engine_ready":
            self._line(f"Engine startup timings (s): load_weight=0.05, kv_cache_allocation=0.75, "
                       f"scheduler_e2e={cfg.startup_seconds:.2f}")

    def ready(self, auto_fit_from: int | None = None) -> None:
        pass

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        self._line(f"{level}:{' ' * (9 - len(level))}{message}")     # SGLang stamps uvicorn's lines too

    def listening(self, host: str, port: int) -> None:
        self.serving(host, port)

    def fired_up(self) -> None:
        self._line("The server is fired up and ready to roll!")

    def on_admitted(self, admission) -> None:
        pass

    def on_step(self, result) -> None:
        e, plan = self.engine, result.plan
        graph = "cuda graph" if e.config.hw.device == "GPU" else "cpu graph"
        total = e.config.num_blocks * e.config.block_size
        usage = e.kv_used_tokens / total
        if plan.preempted:
            gained = sum(r.num_tokens for r in plan.preempted)
            self._line(f"KV cache pool is full. Retract requests. #retracted_reqs: {len(plan.preempted)}, "
                       f"#new_tokens_gained: {gained}, #new_token_ratio: 0.7000 -> 0.7000")
        if plan.admitted:
            now = result.t
            elapsed = max(now - self._last_prefill, 1e-9)
            self._last_prefill = now
            cached = sum(a.hit_tokens for a in plan.admitted)
            disagg = ""
            if e.pd is not None and e.pd.role == "prefill":
                disagg = f"#bootstrap-req: 0, #inflight-req: {len(e.pd.leases)}, #optimistic-req: 0, "
            self._line(f"Prefill batch, #new-seq: {len(plan.admitted)}, #new-token: {plan.prefill_tokens}, "
                       f"#cached-token: {cached}, token usage: {usage:.2f}, #running-req: "
                       f"{e.num_running - len(plan.admitted)}, #queue-req: {e.num_waiting}, #pending-token: 0, "
                       f"{disagg}{graph}: False, input throughput (token/s): {plan.prefill_tokens / elapsed:.2f}")
        elif plan.decode_tokens and e.metrics.decode_steps % e.config.decode_log_interval == 0:
            disagg = ""
            if e.pd is not None and e.pd.role == "decode":
                disagg = (f"pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: {e.pd.waiting_for_kv}, "
                          "#retracted-req: 0, ")
            self._line(f"Decode batch, #running-req: {e.num_running}, #token: {e.kv_used_tokens}, token usage: "
                       f"{usage:.2f}, {disagg}{graph}: {e.config.hw.device == 'GPU'}, gen throughput (token/s): "
                       f"{e.metrics.snapshot['sglang:gen_throughput']:.2f}, #queue-req: {e.num_waiting}")

    # --- the KV connector (P/D): disaggregation/prefill.py and decode.py, KVTransferError's text -------------
    def kv_expired(self, rid: str, held_s: float) -> None:
        room = abs(hash(rid)) % 2**63
        self._line("Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV "
                   "indices from the decode instance of this request. If a greater mean TTFT is acceptable, you can "
                   "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. ")
        self._line(f"Prefill bootstrap failed for request rank=0 req.rid='{rid}' req.bootstrap_room={room} with "
                   f"exception KVTransferError(bootstrap_room={room}): Request {room} timed out after {held_s:.1f}s "
                   "in KVPoll.Bootstrapping")

    def kv_failed(self, failure_type: str, tokens: int, timeout_s: float, *, notification: bool = False) -> None:
        room = self.engine.pd.failed_transfers
        self._line(f"Decode transfer failed for request rank=0 decode_req.req.rid='{room:032x}' "
                   f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
                   f"Request {room} timed out after {timeout_s:.1f}s in KVPoll.WaitingForInput")

    def stats(self, now: float) -> None:
        pass

    def engine_death(self) -> None:
        self._line("Scheduler hit an exception: Traceback (most recent call last):\n"
                   f"  File \"{_SITE}/sglang/srt/managers/scheduler.py\", line 6360, in run_scheduler_process\n"
                   "    scheduler.event_loop_overlap()\n"
                   "RuntimeError: NCCL communicator was aborted on rank 0.")
        self._sigquit()

    def oom(self, running: int, mib: float, free_mib: float) -> None:
        hw = self.engine.config.hw
        self._line("Scheduler hit an exception: Traceback (most recent call last):\n"
                   f"  File \"{_SITE}/sglang/srt/layers/sampler.py\", line 120, in forward\n"
                   "    logits = torch.softmax(logits, dim=-1)\n"
                   f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib:.2f} MiB. GPU 0 has a total "
                   f"capacity of {hw.device_total_gib:.2f} GiB of which {free_mib:.2f} MiB is free.")
        self._sigquit()

    def _sigquit(self) -> None:
        self._line("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")

    def startup_oom(self) -> None:
        self._line("Scheduler hit an exception: Traceback (most recent call last):\n"
                   "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                   "Current value: mem_fraction_static=0.88")
        self._line("Received sigquit from a child process. It usually means the child failed.")

    def stall_watchdog(self) -> None:
        e = self.engine
        self._line(f"Scheduler debug info:\nscheduler.cur_batch_for_debug.batch_size()={e.num_running}")
        self._line(f"Scheduler watchdog timeout (self.watchdog_timeout={e.config.watchdog_timeout:g}, "
                   "self.soft=False)")
        self._sigquit()

    def health_failed(self, since: float) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(since))
        now = time.strftime("%H:%M:%S", time.localtime(self.engine.clock.now()))
        self._line(f"Health check failed. Server couldn't get a response from detokenizer for last "
                   f"{self.engine.config.health_timeout:g} seconds. tic start time: {now}. last_heartbeat time: {stamp}")


class QuietLog(_Base):
    """The log of an engine the simulator knows only by its dialect: the HTTP server's own lines, no engine
    lines (an engine's log grammar is its dialect's to read, not the simulator's to guess)."""

    STAGES = (("process_up", 0.0), ("engine_ready", 1.0))
    FAILS_AT = "engine_ready"

    def _quiet(self, *args, **kwargs) -> None:
        return None

    stage = ready = listening = fired_up = on_admitted = on_step = stats = _quiet
    engine_death = oom = startup_oom = stall_watchdog = health_failed = kv_expired = kv_failed = _quiet
