"""Log grammar the postmortem needs beyond what servewatch.sources.logs.parse_line reads.

engine grammar: moves into the dialect. Everything here is engine knowledge (vLLM and SGLang log
formats); the dialects' constants are reused by import, and what they do not have yet lives here.

Every function returns parsed numbers and fixed literals only, never the line's free text: a log line
can carry prompts, request ids or paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from servewatch.dialects import sglang, vllm

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# --- line prefixes ---------------------------------------------------------------------------------
# vLLM 0.32+: "(APIServer pid=1) INFO 11-29 15:53:12 [loggers.py:335] msg" is the dialect's LOG_PREFIX.
# Older vLLM and multi-rank workers: "(VllmWorker rank=0 pid=7)", "(EngineCore_0 pid=7)" (0.8-0.11 wrote the
# process part through a stdout hook, in ANSI colour), and API-server lines with no process part at all.
_PROCESS_PART = re.compile(r"^\((?P<process>[A-Za-z][\w:.-]*)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)\) ")
_LEVEL_STAMP = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[(?P<where>[^\]]+)\] (?P<msg>.*)$")
# uvicorn's own lines: "INFO:     Shutting down"
_UVICORN = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")


@dataclass(frozen=True, slots=True)
class Line:
    """One log line split into its prefix and message. `process` is the writer ("APIServer",
    "EngineCore", "Worker", "scheduler" ...) when the prefix names it; `stamp` as written (may lack a year)."""

    dialect: str | None
    process: str | None
    pid: int | None
    level: str | None
    stamp: str | None
    msg: str
    prefixed: bool            # the line had an engine prefix (a bare line may continue a traceback)


def split(raw: str) -> Line:
    text = ANSI.sub("", raw).rstrip("\r\n")
    match = vllm.LOG_PREFIX.match(text)
    if match:
        return Line("vllm", match["process"], int(match["pid"]), match["level"], match["ts"], match["msg"], True)
    match = sglang.LOG_PREFIX.match(text)
    if match:
        ranks = match["ranks"].strip() or None
        return Line("sglang", ranks, None, None, match["ts"], match["msg"], True)
    process = pid = None
    rest = text
    part = _PROCESS_PART.match(text)
    if part:
        process, pid, rest = part["process"], int(part["pid"]), text[part.end():]
    match = _LEVEL_STAMP.match(rest)
    if match:
        return Line("vllm", process, pid, match["level"], match["ts"], match["msg"], True)
    if part:
        return Line("vllm", process, pid, None, None, rest, True)
    match = _UVICORN.match(text)
    if match:
        return Line(None, None, None, match["level"], None, match["msg"], False)
    return Line(None, None, None, None, None, text, False)


# --- year-less stamps ------------------------------------------------------------------------------
# vLLM writes "%m-%d %H:%M:%S" with no year or zone. Times are laid on an assumed leap year (so 02-29
# parses) and a month going backwards (12-31 → 01-01) moves to the next year.
ASSUMED_YEAR = 2000


class StampClock:
    """Turns stamps into seconds since the first stamp seen, crossing a new year when the month goes back."""

    def __init__(self) -> None:
        self.first: datetime | None = None
        self.last: datetime | None = None
        self.year = ASSUMED_YEAR

    def seconds(self, stamp: str | None) -> float | None:
        if not stamp:
            return None
        try:
            if len(stamp) > 14:           # "2026-11-30 13:51:14": SGLang states the year
                when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
            else:
                when = datetime.strptime(f"{self.year}-{stamp}", "%Y-%m-%d %H:%M:%S")
                if self.last is not None and when < self.last and when.month < self.last.month:
                    self.year += 1
                    when = when.replace(year=self.year)
        except ValueError:
            return None
        if self.first is None:
            self.first = when
        self.last = when if self.last is None or when > self.last else self.last
        return (when - self.first).total_seconds()


# --- periodic stats: the older vLLM generation ----------------------------------------------------------
# The dialect's STATS_LINE reads "Engine 000: Avg prompt throughput ..." (0.9+). Before it, V1 wrote the
# same fields without the engine part, and the V0 engine wrote Swapped/Pending and both KV pools.
OLDER_STATS_LINE = re.compile(
    r"^Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, Avg generation throughput: (?P<gen_tps>[\d.]+) "
    r"tokens/s, Running: (?P<running>\d+) reqs, (?:Swapped: (?P<swapped>\d+) reqs, )?"
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs, (?P<device>\w+) KV cache usage: (?P<kv_pct>[\d.]+)%"
    r"(?:, CPU KV cache usage: (?P<cpu_kv_pct>[\d.]+)%)?(?:, Prefix cache hit rate: (?P<prefix_hit_pct>[\d.]+)%)?")
# V1's dump when the engine core dies mid-step (dump_input.py): the scheduler's state at death. The
# "Dumping scheduler output" line next to it carries request ids and token ids: never read.
SCHEDULER_STATS_DUMP = re.compile(
    r"Dumping scheduler stats: SchedulerStats\(num_running_reqs=(?P<running>\d+), "
    r"num_waiting_reqs=(?P<waiting>\d+).*?(?:kv_cache_usage|gpu_cache_usage)=(?P<kv>[\d.eE-]+)")

# --- startup stages ------------------------------------------------------------------------------------
STARTUP_STAGES: tuple[tuple[str, re.Pattern], ...] = (
    ("weights", re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds")),
    ("weights", re.compile(r"Model loading took (?P<gib>[\d.]+) GiB(?: memory)? and (?P<seconds>[\d.]+) seconds")),
    ("weights", re.compile(r"Load weight end\. elapsed=(?P<seconds>[\d.]+) s")),                     # SGLang
    ("memory profiling", re.compile(r"Memory profiling takes (?P<seconds>[\d.]+) seconds")),
    ("memory profiling", re.compile(r"Initial profiling/warmup run took (?P<seconds>[\d.]+) s")),
    ("KV sizing", re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")),
    ("KV sizing", re.compile(r"KV Cache is allocated\. .*?#tokens: (?P<tokens>\d+)")),               # SGLang
    ("KV sizing", re.compile(r"max_total_num_tokens=(?P<tokens>\d+), .*?max_running_requests=(?P<max_running>\d+)"
                             r".*?context_len=(?P<context_len>\d+)")),                                 # SGLang
    ("compile", re.compile(r"torch\.compile takes (?P<seconds>[\d.]+) s in total")),
    ("compile", re.compile(r"Compiling model again due to a load failure")),
    ("graph capture", re.compile(r"Graph capturing finished in (?P<seconds>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB")),
    ("graph capture", re.compile(r"Capture cuda graph end\. Time elapsed: (?P<seconds>[\d.]+) s")),  # SGLang
    ("engine init", re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s")),
    ("engine init", re.compile(r"Engine startup timings \(s\): load_weight=(?P<load_weight_s>[\d.]+), "
                               r"kv_cache_allocation=(?P<kv_allocation_s>[\d.]+), "
                               r"scheduler_e2e=(?P<seconds>[\d.]+)")),                                # SGLang
)
MAX_NUM_SEQS_ARG = re.compile(r"'max_num_seqs': (?P<value>\d+)")
MEMORY_UTILIZATION_ARG = re.compile(r"'gpu_memory_utilization': (?P<value>[\d.]+)")
MAX_RUNNING_REQUESTS_ARG = re.compile(r"max_running_requests=(?P<value>\d+)")
MEM_FRACTION_ARG = re.compile(r"'mem_fraction_static': (?P<value>[\d.]+)")
NON_DEFAULT_ARGS = "non-default args: "      # vLLM
SERVER_ARGS = "server_args="                 # SGLang

# --- tracebacks --------------------------------------------------------------------------------------
TRACEBACK_START = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>[\w<>.]+)')
# "torch.OutOfMemoryError: CUDA out of memory. ..." / "RuntimeError: cancelled" / "KeyboardInterrupt"
EXCEPTION_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning"
                            r"|Timeout))(?::\s|$)")
ENGINE_PACKAGES = ("vllm", "sglang")
# The multiprocessing header that precedes a child's bare traceback: "Process EngineCore:"
CHILD_PROCESS_HEADER = re.compile(r"^Process (?P<process>[A-Za-z][\w:.-]*):$")


def engine_frame(path: str, function: str) -> str | None:
    """'vllm.v1.sample.sampler.apply_penalties' for a frame inside an engine package; None otherwise.
    Only the module path from the package down is kept: the install location is the user's."""
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ENGINE_PACKAGES and i < len(parts) - 1:
            module = "/".join(parts[i:])
            if module.endswith(".py"):
                module = module[:-3]
            if not re.fullmatch(r"[\w/]+", module) or not re.fullmatch(r"[\w<>.]+", function):
                return None
            return module.replace("/", ".") + "." + function
    return None


# --- out of memory -----------------------------------------------------------------------------------
# PyTorch's text: "CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacity of
# 11.63 GiB of which 84.88 MiB is free." (the dialect's OOM_LINE reads the first number).
_SIZE = r"(?P<{0}>[\d.]+) (?P<{0}_unit>[KMGT]?i?B)"
OOM_DETAILS = re.compile(
    r"Tried to allocate " + _SIZE.format("requested") +
    r"(?:\.? ?(?:GPU|Device) (?P<device>\d+) has a total capacity of " + _SIZE.format("total") +
    r" of which " + _SIZE.format("free") + r" is free)?")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def oom_details(msg: str) -> dict[str, float | int]:
    """Bytes requested (and the device's total and free bytes when stated) of an OOM message."""
    match = OOM_DETAILS.search(msg)
    if not match:
        return {}
    out: dict[str, float | int] = {}
    for name in ("requested", "total", "free"):
        if match[name] is not None and match[f"{name}_unit"] in _UNITS:
            out[f"{name}_bytes"] = float(match[name]) * _UNITS[match[f"{name}_unit"]]
    if match["device"] is not None:
        out["device"] = int(match["device"])
    return out


OOM_EXCEPTIONS = ("OutOfMemoryError",)
OOM_LITERALS = ("CUDA out of memory", "out of memory. Tried to allocate", *sglang.OOM_LINES)

# --- signals, shutdown, watchdogs, exits -----------------------------------------------------------------
SIGNAL_LINES = (
    re.compile(r"received signal=(?P<signal>SIG[A-Z]+)"),                  # vLLM 0.32 engine core
    re.compile(r"(?P<signal>SIGTERM|SIGINT|SIGQUIT) received"),           # SGLang
    re.compile(r"Received (?P<signal>sigquit) from a child process"),     # SGLang
)
SHUTDOWN_LINES = (
    "[shutdown] API server: shutdown triggered",
    "Shutting down",
    "Gracefully exiting...",
    "Application shutdown complete.",
)
API_EXIT_LINE = re.compile(r"Finished server process \[\d+\]")
FORCE_KILL_LINE = re.compile(r"force killing remaining process (?P<process>[A-Za-z][\w:.-]*)")
EXIT_CODE_LINE = re.compile(r"(?:died|crashed|terminated) with exit code:? (?P<code>-?\d+)")
TIMEOUT_LINES = (
    re.compile(r"RPC call to \w+ timed out"),
    re.compile(r"Timed out waiting for engine core processes to start"),
    re.compile(r"Health check failed\. Server couldn't get a response from detokenizer"),
)
SIGNAL_NUMBERS = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT", 6: "SIGABRT", 11: "SIGSEGV", 3: "SIGQUIT"}
