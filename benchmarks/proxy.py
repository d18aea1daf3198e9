"""What `servewatch proxy` adds to a stream: latency to the first token and per token, CPU per 100k streamed
tokens, memory per in-flight stream — side by side with going direct and with Debian's nginx as a plain
reverse proxy (proxy_buffering off), in one run against the same fast upstream.

The upstream is a tiny SSE server in its own process that writes one token to each active stream every
`--step-ms`, each an event in vLLM 0.32's completions shape whose text is its send time (time.time(), the
clients' clock); the clients (this process) take receive time minus send time per token, so the added per-token latency is the difference
of those distributions between routes, each route against the same upstream and schedule in the same run.
`--schedule staggered` (the default) gives each stream a schedule of its own, the sends spread evenly over
the step as an engine's independent requests are, paced by a timerfd: the latency figures are then what a
proxy adds to one token, not a place in a queue of --streams tokens sent at once (`--schedule lockstep`,
every stream's token in the same tick, as an engine's batch step would be if its server wrote them all at
once). A stream's first token comes one step after the upstream reads its request, so the added TTFT is
the request's way there plus the first token's way back, never a further step; the staggered upstream also
names the time it read each request (a response header), so `added_to_upstream` is the request's way alone.
CPU is the proxy's (or nginx's master + workers') user + system time over the measured phase, per 100k
tokens delivered.

    apt-get install -y nginx      # optional: without it the nginx column is left out
    .venv/bin/python benchmarks/proxy.py [--streams 200] [--seconds 8] [--rounds 3] [--tokens 64] [--step-ms 20]
        [--schedule staggered|lockstep] [--baseline DIR] [--upstream URL of a running engine]
        [--competitor off|on|both]

`--competitor on` measures every route beside a CPU-bound competitor at the same priority (issue 54's second
condition): Debian's `stress-ng --cpu 1` (apt-get install -y stress-ng), started by this benchmark before the
routes' phases and stopped after them, at the benchmark's own nice level, which the proxies and nginx inherit
too. `both` measures each round quiet and beside it (the two in alternating order), each condition's figures
of its own (`competitor` in the JSON); the memory figure is taken quiet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each token is an event in vLLM 0.32's completions shape (its serving code dumps every chunk with
# exclude_unset, so the choice's members passed as None are there as null), one stream's events alike but
# for their piece; the piece is the upstream's send time (time.time()), which the clients read back.
EVENT = (b'HEAD = b\'data: {"id":"cmpl-bench-7f3a9c2e41d84b6f","object":"text_completion","created":1796000000,'
         b'"model":"bench","choices":[{"index":0,"text":"\'\n'
         b'MID = b\'","logprobs":null,"finish_reason":\'\n'
         b'TAIL = b\',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\\n\\n\'\n').decode()

UPSTREAM = r'''
import asyncio, sys, time
''' + EVENT + r'''
STEP = float(sys.argv[2]) / 1000
active = set()

class S(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf, self.left = t, b"", 0
    def data_received(self, d):
        self.buf += d
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            n = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            if len(self.buf) < end + 4 + n:
                return
            body, self.buf = self.buf[end + 4:end + 4 + n], self.buf[end + 4 + n:]
            if head.startswith(b"get"):
                self.t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                continue
            self.left = int(body.split(b'"max_tokens":')[1].split(b",")[0].split(b"}")[0])
            self.t.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            active.add(self)
    def connection_lost(self, exc):
        active.discard(self)

async def ticker():
    while True:
        await asyncio.sleep(STEP)
        now = repr(time.time()).encode()
        done = []
        for s in active:
            s.left -= 1
            fin = b'"length"' if s.left == 0 else b"null"
            ev = HEAD + now + MID + fin + TAIL
            if s.left == 0:
                ev += b"data: [DONE]\n\n"
            s.t.write(b"%x\r\n%s\r\n" % (len(ev), ev) + (b"0\r\n\r\n" if s.left == 0 else b""))
            if s.left == 0:
                done.append(s)
        for s in done:
            active.discard(s)

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(S, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    asyncio.create_task(ticker())
    await asyncio.Event().wait()
asyncio.run(main())
'''

# The staggered upstream: each stream's tokens on a schedule of its own, as an engine's independent requests
# are (not all in one step). A stream's first token is sent one step after its request is read (a fixed
# "prefill", the same for every route, so a route that delays the request delays the first token by just
# that much, never by a further step), the next ones every step after. The first request on each
# connection starts its schedule a further fraction of a step later (a low-discrepancy sequence over the
# connections, so their sends spread uniformly over the step; those first requests are in the warm-up and
# not measured); closed-loop requests after it start where the previous one ended, so the spread stays.
# Sends are paced by a timerfd (to the microsecond), not by an event loop's millisecond timers, which would
# fire them in bursts of one millisecond's worth of streams; one epoll waits for it and for requests, so a
# request is read the moment it arrives.
PACED_UPSTREAM = r"""
import ctypes, heapq, os, select, socket, sys, time
""" + EVENT + r"""
STEP = float(sys.argv[2]) / 1000
now = time.time            # the clients compare their receive time with this stamp: the same clock

class _ts(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
class _its(ctypes.Structure):
    _fields_ = [("interval", _ts), ("value", _ts)]
libc = ctypes.CDLL(None, use_errno=True)
tfd = libc.timerfd_create(0, 0o4000)          # CLOCK_REALTIME (time.time's clock), TFD_NONBLOCK
if tfd < 0:
    raise SystemExit("timerfd_create failed")
armed = None

def arm(t):
    global armed
    if t != armed:
        armed = t
        sec = int(t)
        libc.timerfd_settime(tfd, 1, ctypes.byref(_its(_ts(0, 0), _ts(sec, int((t - sec) * 1e9)))), None)  # ABSTIME
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(4096)
ls.setblocking(False)
ep = select.epoll()
ep.register(ls.fileno(), select.EPOLLIN)
ep.register(tfd, select.EPOLLIN)
conns = {}                 # fd -> Conn
heap = []                  # (due, seq, fd, request number)
seq = 0
accepted = 0
GOLDEN = 0.6180339887498949

class Conn:
    __slots__ = ("sock", "buf", "left", "req", "phase", "out")
    def __init__(self, sock, phase):
        self.sock, self.buf, self.left, self.req, self.phase, self.out = sock, b"", 0, 0, phase, b""

def send(c, data):
    if c.out:
        c.out += data
    else:
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            return close(c)
        if n < len(data):
            c.out = data[n:]
            ep.modify(c.sock.fileno(), select.EPOLLIN | select.EPOLLOUT)

def close(c):
    fd = c.sock.fileno()
    if conns.pop(fd, None) is not None:
        ep.unregister(fd)
        c.sock.close()

def readable(c):
    global seq
    try:
        d = c.sock.recv(65536)
    except BlockingIOError:
        return
    except OSError:
        d = b""
    if not d:
        return close(c)
    t = now()
    c.buf += d
    while True:
        end = c.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = c.buf[:end].lower()
        n = 0
        for line in head.split(b"\r\n"):
            if line.startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        if len(c.buf) < end + 4 + n:
            return
        body, c.buf = c.buf[end + 4:end + 4 + n], c.buf[end + 4 + n:]
        if head.startswith(b"get"):
            send(c, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            continue
        c.left = int(body.split(b'"max_tokens":')[1].split(b",")[0].split(b"}")[0])
        c.req += 1
        send(c, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-read: "
             + repr(t).encode() + b"\r\n\r\n")
        seq += 1
        heapq.heappush(heap, (t + STEP + c.phase, seq, c.sock.fileno(), c.req))
        c.phase = 0.0

def events(timeout):
    global accepted
    for fd, ev in ep.poll(timeout):
        if fd == tfd:
            try:
                os.read(tfd, 8)
            except BlockingIOError:
                pass
            continue
        if fd == ls.fileno():
            while True:
                try:
                    s, _ = ls.accept()
                except BlockingIOError:
                    break
                s.setblocking(False)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                accepted += 1
                conns[s.fileno()] = Conn(s, (accepted * GOLDEN) % 1.0 * STEP)
                ep.register(s.fileno(), select.EPOLLIN)
            continue
        c = conns.get(fd)
        if c is None:
            continue
        if ev & select.EPOLLOUT and c.out:
            try:
                k = c.sock.send(c.out)
                c.out = c.out[k:]
            except BlockingIOError:
                pass
            except OSError:
                close(c)
                continue
            if not c.out:
                ep.modify(fd, select.EPOLLIN)
        if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            readable(c)

while True:
    t = now()
    while heap and heap[0][0] <= t:
        due, _, fd, req = heapq.heappop(heap)
        c = conns.get(fd)
        if c is None or c.req != req or c.left <= 0:
            continue
        c.left -= 1
        fin = b'"length"' if c.left == 0 else b"null"
        ev = HEAD + repr(now()).encode() + MID + fin + TAIL
        if c.left == 0:
            ev += b"data: [DONE]\n\n"
        send(c, b"%x\r\n%s\r\n" % (len(ev), ev) + (b"0\r\n\r\n" if c.left == 0 else b""))
        if c.left > 0:
            seq += 1
            heapq.heappush(heap, (due + STEP, seq, fd, req))
        t = now()
    if heap:
        arm(heap[0][0])
    events(1.0)
"""

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    upstream engine {{ server 127.0.0.1:{up}; keepalive 512; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, limit: float = 15.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def worker_pids(pid: int, limit: float = 15.0) -> list[int]:
    """The children of `pid` once it has one: nginx's master listens before it forks its worker, so a port that
    answers is no sign of a worker to measure (measured without it, nginx's CPU read 0 and the run failed)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        found = children(pid)
        if found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"process {pid} started no worker within {limit:g} s")


def cpu_s(pids: list[int], user_only: bool = False) -> float:
    """The processes' CPU seconds (user and system; user alone with user_only) from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + (0 if user_only else int(fields[12]))) / tick
        except OSError:
            pass
    return total


def switches(pids: list[int]) -> tuple[int, int]:
    """The processes' context switches so far, voluntary (it waited) and involuntary (it was preempted), summed
    over their threads (/proc/PID/task/*/status; a thread that ends between two reads takes its own with it)."""
    vol = invol = 0
    for pid in pids:
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
            except OSError:
                pass
    return vol, invol


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# One CPU-bound process beside the routes: a stressor of one core, at the priority it inherits (this process's,
# which the proxies and nginx inherit too); its timeout only a bound should it outlive the benchmark.
COMPETITOR = ("--cpu", "1", "--cpu-method", "int64", "--timeout", "3600", "--quiet")


class Competitor:
    """`stress-ng --cpu 1` beside the routes while it is on (a session of its own, stopped as a group)."""

    def __init__(self):
        self.exe = shutil.which("stress-ng") or ("/usr/bin/stress-ng" if os.path.exists("/usr/bin/stress-ng") else None)
        if self.exe is None:
            raise SystemExit("--competitor needs stress-ng on the PATH (Debian: apt-get install -y stress-ng)")
        self.proc: subprocess.Popen | None = None
        self.pids: list[int] = []

    @property
    def command(self) -> str:
        return "stress-ng " + " ".join(COMPETITOR)

    def start(self) -> None:
        self.proc = subprocess.Popen([self.exe, *COMPETITOR], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self.pids = [self.proc.pid, *worker_pids(self.proc.pid)]     # its stressor, running before a phase starts

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc, self.pids = None, []


class Stream(asyncio.Protocol):
    """A closed-loop streaming client on one keep-alive connection. Against the built-in upstream each
    token's text is its send time; against a real engine (`stamped` False) tokens are counted, not timed."""

    def __init__(self, stats, body: bytes, port: int, stamped: bool = True):
        self.stats, self.port, self.stamped = stats, port, stamped
        self.request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.sent = 0.0
        self.first = True
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.send()

    def send(self):
        self.first = True
        self.sent = time.time()
        self.transport.write(self.request)

    def data_received(self, data: bytes):
        now = time.time()
        st = self.stats
        if data.startswith(b"HTTP/1.1 200"):
            i = data.find(b"x-read: ")
            if i > 0:            # the staggered upstream's time of reading the request
                read = float(data[i + 8:data.find(b"\r\n", i)])
                st["req_leg"].append(read - self.sent)
        pos = 0
        while True:
            i = data.find(b'"text":"', pos)
            if i < 0:
                break
            j = data.find(b'"', i + 8)
            if self.first:
                self.first = False
                st["ttft"].append(now - self.sent)
            elif st["measure"] and self.stamped:
                try:
                    st["lag"].append(now - float(data[i + 8:j]))
                except ValueError:    # the stamp split across two chunks by a route: counted, not timed
                    st["split"] += 1
            st["tokens"] += st["measure"]
            pos = j
        if data.endswith(b"0\r\n\r\n"):
            st["requests"] += 1
            if st["run"]:
                self.send()
            elif not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_result(None)


async def phase(port: int, streams: int, tokens: int, seconds: float, warmup: float, pids: list[int],
                model: str | None = None, beside: list[int] = ()) -> dict:
    """Closed-loop streams through one route. With `model` the upstream is a real engine: every request
    asks for exactly `tokens` (ignore_eos) and tokens are counted, not timed. `beside`: a competitor's
    processes, whose CPU over the measured phase is reported (cores) to show it ran."""
    loop = asyncio.get_running_loop()
    stats = {"ttft": [], "req_leg": [], "lag": [], "tokens": 0, "requests": 0, "measure": False, "run": True,
             "split": 0}
    request = {"model": model or "m", "prompt": "p", "max_tokens": tokens, "stream": True}
    if model is not None:
        request.update(prompt="The quick brown fox jumps over the lazy dog.", ignore_eos=True, temperature=0.0)
    body = json.dumps(request).encode()
    conns = []
    for _ in range(streams):
        _, proto = await loop.create_connection(lambda: Stream(stats, body, port, model is None), "127.0.0.1", port)
        conns.append(proto)
    await asyncio.sleep(warmup)
    stats["ttft"].clear()
    stats["req_leg"].clear()
    stats["measure"] = True
    cpu0, user0, other0, sw0 = cpu_s(pids), cpu_s(pids, user_only=True), cpu_s(list(beside)), switches(pids)
    rss_peak = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.5)
        rss_peak = max(rss_peak, rss_kb(pids))
    cpu, user = cpu_s(pids) - cpu0, cpu_s(pids, user_only=True) - user0
    beside_cores = (cpu_s(list(beside)) - other0) / (time.monotonic() - t0)
    vol, invol = (b - a for a, b in zip(sw0, switches(pids)))
    stats["measure"] = False
    stats["run"] = False
    await asyncio.wait([c.done for c in conns], timeout=30)
    for c in conns:
        c.transport.close()
    return {"ttft": sorted(stats["ttft"]), "req_leg": sorted(stats["req_leg"]), "lag": sorted(stats["lag"]),
            "tokens": stats["tokens"], "cpu_s": cpu, "user_s": user,
            "rss_peak_kb": rss_peak, "beside_cores": beside_cores, "voluntary": vol, "involuntary": invol}


async def hold(port: int, streams: int, pids: list[int]) -> float:
    """kB of the proxy's RSS per in-flight stream: `streams` long streams held open, against idle."""
    loop = asyncio.get_running_loop()
    base = rss_kb(pids)
    stats = {"ttft": [], "req_leg": [], "lag": [], "tokens": 0, "requests": 0, "measure": False, "run": False,
             "split": 0}
    body = json.dumps({"model": "m", "prompt": "p", "max_tokens": 100000, "stream": True}).encode()
    conns = []
    for _ in range(streams):
        _, proto = await loop.create_connection(lambda: Stream(stats, body, port), "127.0.0.1", port)
        conns.append(proto)
    await asyncio.sleep(3.0)
    held = rss_kb(pids)
    for c in conns:
        c.transport.abort()
    await asyncio.sleep(1.0)
    return (held - base) / streams


def event_loop() -> str:
    """The proxies' event loop: uvloop when this interpreter can import it (the proxies run on it too)."""
    try:
        import uvloop
    except ImportError:
        return "asyncio (uvloop not installed; pip install 'servewatch[fast]')"
    return f"uvloop {uvloop.__version__}"


def count_path(tree: Path | None = None, env: dict[str, str] | None = None) -> str:
    """How the proxy of this tree (or of the source tree `tree`, as the baseline route runs it, with `env` added to
    its environment) counts a read: "compiled" (servewatch.proxy._inline, built by setup.py) or "pure Python";
    then what moves a streamed body: the "pump" (servewatch.proxy._pump) or the "event loop"."""
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
            f"getattr(f, '__module__', '')]; sys.path.insert(0, {str(Path(tree).resolve())!r}); " if tree else "")
    code += ("from servewatch.proxy import server; print(getattr(server, 'COUNT_PATH', 'pure Python') + "
             "', streamed bodies moved by the ' + getattr(server, 'PUMP_PATH', 'event loop'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)})
    return done.stdout.strip() or "unknown"


def q(values, p):
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (closed loop)")
    ap.add_argument("--step-ms", type=float, default=20.0, help="the upstream's step: one token per stream per step")
    ap.add_argument("--schedule", choices=("staggered", "lockstep"), default="staggered",
                    help="staggered: each stream's tokens on its own schedule, the sends spread over the step (an "
                    "engine's independent requests; what the latency figures mean); lockstep: every stream's token "
                    "in the same tick of the upstream (a burst of --streams tokens each step)")
    ap.add_argument("--hold", type=int, default=1000, help="streams held open for the memory figure (0: none)")
    ap.add_argument("--baseline", metavar="DIR", help="also run `servewatch proxy` from the source tree DIR (e.g. a "
                    "worktree of an earlier commit) as the route 'baseline proxy', to compare two versions in one run")
    ap.add_argument("--baseline-env", metavar="NAME=VALUE", action="append", default=[],
                    help="set in the baseline route's environment only (repeatable): e.g. the same tree as --baseline "
                    "with SERVEWATCH_PROXY_PUMP=0 (the event loop), beside this tree's proxy (the pump, its default), "
                    "compares the two in one run")
    ap.add_argument("--rounds", type=int, default=3, help="each route measured once a round, in rotating order")
    ap.add_argument("--upstream", metavar="URL", help="a running engine (e.g. `servewatch lab vllm --port 8000`) "
                    "instead of the built-in upstream: TTFT and CPU per token only (its tokens carry no send "
                    "time), no memory figure; use far fewer --streams than the built-in upstream takes")
    ap.add_argument("--competitor", choices=("off", "on", "both"), default="off",
                    help="on: every route measured beside a CPU-bound competitor at the same priority (stress-ng "
                    "--cpu 1); both: each round quiet and beside it, the figures of each condition apart")
    ap.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="the figures as JSON, to FILE (benchmarks/run.py) or, without one, to stdout")
    args = ap.parse_args()
    baseline_env = dict(item.split("=", 1) for item in args.baseline_env if "=" in item)
    if len(baseline_env) != len(args.baseline_env) or (baseline_env and not args.baseline):
        raise SystemExit("--baseline-env: NAME=VALUE, with --baseline")
    model = None
    if args.upstream:
        from urllib.parse import urlsplit
        from urllib.request import urlopen

        parts = urlsplit(args.upstream)
        if parts.scheme != "http" or not parts.port or parts.path.strip("/"):
            raise SystemExit("--upstream: a plain http://HOST:PORT of a running engine")
        try:
            with urlopen(f"{args.upstream.rstrip('/')}/v1/models", timeout=10) as r:
                model = json.loads(r.read(1 << 20))["data"][0]["id"]
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise SystemExit(f"--upstream {args.upstream}: no model listed at /v1/models ({exc})") from None

    tmp = Path(tempfile.mkdtemp(prefix="sw-proxy-bench-"))
    procs: list[subprocess.Popen] = []
    competitor = Competitor() if args.competitor != "off" else None
    try:
        if model is None:
            up = free_port()
            code = PACED_UPSTREAM if args.schedule == "staggered" else UPSTREAM
            procs.append(subprocess.Popen([sys.executable, "-c", code, str(up), str(args.step_ms)]))
            wait_port(up)
        else:
            up = urlsplit(args.upstream).port
        routes = {"direct": (up, [])}
        pport = free_port()
        # this tree's servewatch on this interpreter (uvloop where it has it), whatever venv runs the benchmark
        proxy = subprocess.Popen([sys.executable, "-m", "servewatch", "proxy", "--listen", f"127.0.0.1:{pport}",
                                  "--upstream", f"http://127.0.0.1:{up}", "--records", str(tmp / "requests.jsonl")],
                                 stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
        procs.append(proxy)
        wait_port(pport)
        routes["servewatch proxy"] = (pport, [proxy.pid])
        if args.baseline:
            bport = free_port()
            # the baseline tree first on the path, and an editable install's finder (which would answer
            # for `servewatch` first) out of the way
            code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
                    f"getattr(f, '__module__', '')]; sys.path.insert(0, {str(Path(args.baseline).resolve())!r}); "
                    "from servewatch.cli import main; sys.argv[0] = 'servewatch'; sys.exit(main())")
            base = subprocess.Popen([sys.executable, "-c", code, "proxy", "--listen", f"127.0.0.1:{bport}",
                                     "--upstream", f"http://127.0.0.1:{up}", "--records",
                                     str(tmp / "baseline.jsonl")], stderr=subprocess.DEVNULL,
                                    env={**os.environ, **baseline_env})
            procs.append(base)
            wait_port(bport)
            routes["baseline proxy"] = (bport, [base.pid])
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if nginx:
            nport = free_port()
            (tmp / "nginx.conf").write_text(NGINX_CONF.format(prefix=tmp, up=up, port=nport))
            ng = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")], stderr=subprocess.DEVNULL)
            procs.append(ng)
            wait_port(nport)
            routes["nginx"] = (nport, [ng.pid, *worker_pids(ng.pid)])
        # Rounds, each route once a round in a rotating order: on a machine shared with other work, the
        # routes then see the same conditions on average, and each round gives its own CPU ratio. With
        # --competitor both, each round is measured quiet and beside the competitor, in alternating order.
        conditions = {"off": ["quiet"], "on": ["competitor"], "both": ["quiet", "competitor"]}[args.competitor]
        rounds: dict[str, list[dict[str, dict]]] = {c: [] for c in conditions}
        names = list(routes)
        for i in range(args.rounds):
            for condition in conditions[i % len(conditions):] + conditions[:i % len(conditions)]:
                beside: list[int] = []
                if condition == "competitor":
                    competitor.start()
                    beside = competitor.pids
                try:
                    this = {}
                    for name in names[i % len(names):] + names[:i % len(names)]:
                        port, pids = routes[name]
                        this[name] = asyncio.run(phase(port, args.streams, args.tokens, args.seconds, args.warmup,
                                                       pids, model, beside))
                finally:
                    if condition == "competitor":
                        competitor.stop()
                rounds[condition].append(this)
        memory = {} if model is not None or args.hold <= 0 else {   # (a real engine is not asked for 1000 streams)
            name: asyncio.run(hold(port, args.hold, pids)) for name, (port, pids) in routes.items() if pids}
    finally:
        if competitor is not None:
            competitor.stop()
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    paths = {"servewatch proxy": count_path(),
             **({"baseline proxy": count_path(args.baseline, baseline_env)} if args.baseline else {})}
    figures = {condition: condition_figures(these, names, memory if condition == conditions[0] else {})
               for condition, these in rounds.items()}
    if args.json:
        first = figures[conditions[0]]
        document = {**first, "event_loop": event_loop(), "count_path": paths, "schedule": args.schedule,
                    "conditions": conditions}
        if competitor is not None:
            document["competitor_command"] = competitor.command
        if conditions == ["quiet", "competitor"]:
            document["competitor"] = figures["competitor"]
        text = json.dumps(document, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
        return 0
    sched = ("each stream on its own schedule, the sends spread over the step" if args.schedule == "staggered"
             else "every stream's token in the same tick")
    if model is None:
        print(f"{args.streams} concurrent streams, {args.tokens} tokens each (closed loop), one token per stream "
              f"every {args.step_ms:g} ms ({sched}), {args.rounds} x {args.seconds:g} s measured per route (rounds in "
              f"rotating order); memory with {args.hold} streams held open; the proxies' event loop: {event_loop()}; "
              f"a read counted: {', '.join(f'{k}: {v}' for k, v in paths.items())}")
        cols = ("tokens", "ttft_p50_ms", "ttft_p99_ms", "token_lag_p50_ms", "token_lag_p99_ms", "added_ttft_p50_ms",
                "added_ttft_p99_ms", "added_token_p50_ms", "added_token_p99_ms",
                *(("added_to_upstream_p50_ms", "added_to_upstream_p99_ms") if args.schedule == "staggered" else ()),
                "cpu_s_per_100k_tokens", "user_us_per_token", "switches_per_1k_tokens", "preempted_per_1k_tokens",
                "kb_per_in_flight_stream")
    else:
        print(f"{args.upstream} serving {model}: {args.streams} concurrent streams of {args.tokens} tokens each "
              f"(ignore_eos, closed loop), {args.rounds} x {args.seconds:g} s measured per route (rounds in rotating "
              f"order); tokens counted, not timed (a real engine's carry no send time); the proxies' event loop: "
              f"{event_loop()}")
        cols = ("tokens", "ttft_p50_ms", "ttft_p99_ms", "added_ttft_p50_ms", "added_ttft_p99_ms",
                "cpu_s_per_100k_tokens")
    for condition in conditions:
        table = figures[condition]["routes"]
        if condition == "competitor":
            print(f"beside a CPU-bound competitor at the same priority ({competitor.command}: "
                  f"{figures[condition]['competitor_cores']:.2f} cores while the routes were measured):")
        elif len(conditions) > 1:
            print("quiet (no competitor):")
        print(f"{'':26}" + "".join(f"{n:>18}" for n in table))
        for col in cols:
            cells = []
            for row in table.values():
                v = row.get(col)
                cells.append(f"{'':>18}" if v is None else (f"{v:>18d}" if isinstance(v, int) else f"{v:>18.3f}"))
            print(f"{col:26}" + "".join(cells))
        if "nginx" in table and "servewatch proxy" in table:
            ratio = table["servewatch proxy"]["cpu_s_per_100k_tokens"] / table["nginx"]["cpu_s_per_100k_tokens"]
            print(f"CPU per token, servewatch proxy / nginx: {ratio:.2f}x (by round: "
                  f"{', '.join(f'{x:.2f}x' for x in figures[condition]['cpu_ratio_per_round'])})")
            if "baseline proxy" in table:
                ratio = table["baseline proxy"]["cpu_s_per_100k_tokens"] / table["nginx"]["cpu_s_per_100k_tokens"]
                print(f"CPU per token, baseline proxy / nginx: {ratio:.2f}x")
    return 0


def condition_figures(rounds: list[dict[str, dict]], names: list[str], memory: dict[str, float]) -> dict:
    """One condition's figures from its rounds: each route's row (its latencies against going direct, its CPU per
    token), the CPU ratio to nginx's by round, the proxy against nginx (what benchmarks/run.py holds) and the
    competitor's cores while the routes were measured (0 without one)."""
    results = {}
    for name in names:
        parts = [r[name] for r in rounds]
        results[name] = {"ttft": sorted(x for p in parts for x in p["ttft"]),
                         "lag": sorted(x for p in parts for x in p["lag"]),
                         "req_leg": sorted(x for p in parts for x in p["req_leg"]),
                         "tokens": sum(p["tokens"] for p in parts), "cpu_s": sum(p["cpu_s"] for p in parts),
                         "user_s": sum(p["user_s"] for p in parts),
                         "voluntary": sum(p.get("voluntary", 0) for p in parts),
                         "involuntary": sum(p.get("involuntary", 0) for p in parts),
                         "rss_peak_kb": max(p["rss_peak_kb"] for p in parts)}
    base = results["direct"]

    def ms(values, p):        # None where there is nothing to take a quantile of (a real engine's lags)
        return values[min(len(values) - 1, int(p * len(values)))] * 1e3 if values else None

    def added(r, key, p):
        mine, direct = ms(r[key], p), ms(base[key], p)
        return None if mine is None or direct is None else mine - direct

    table = {}
    for name, r in results.items():
        row = {"tokens": r["tokens"],
               "ttft_p50_ms": ms(r["ttft"], 0.5), "ttft_p99_ms": ms(r["ttft"], 0.99),
               "token_lag_p50_ms": ms(r["lag"], 0.5), "token_lag_p99_ms": ms(r["lag"], 0.99)}
        if name != "direct":
            row.update({"added_ttft_p50_ms": added(r, "ttft", 0.5), "added_ttft_p99_ms": added(r, "ttft", 0.99),
                        "added_token_p50_ms": added(r, "lag", 0.5), "added_token_p99_ms": added(r, "lag", 0.99),
                        "added_to_upstream_p50_ms": added(r, "req_leg", 0.5),
                        "added_to_upstream_p99_ms": added(r, "req_leg", 0.99),
                        "cpu_s_per_100k_tokens": r["cpu_s"] / max(r["tokens"], 1) * 1e5,
                        "user_us_per_token": r["user_s"] / max(r["tokens"], 1) * 1e6,
                        # a wake-up (voluntary: it waited for a read) and a preemption, per 1,000 tokens
                        "switches_per_1k_tokens": r["voluntary"] / max(r["tokens"], 1) * 1e3,
                        "preempted_per_1k_tokens": r["involuntary"] / max(r["tokens"], 1) * 1e3,
                        "kb_per_in_flight_stream": memory.get(name)})
        table[name] = row
    per_round = []
    if "nginx" in results and "servewatch proxy" in results:
        for r in rounds:
            mine, theirs = (r[n]["cpu_s"] / max(r[n]["tokens"], 1) for n in ("servewatch proxy", "nginx"))
            per_round.append(mine / theirs if theirs else float("nan"))
    phases = [p for r in rounds for p in r.values()]
    document = {"routes": table, "cpu_ratio_per_round": per_round,
                "competitor_cores": sum(p["beside_cores"] for p in phases) / max(len(phases), 1)}
    if "nginx" in table and "servewatch proxy" in table:
        # what benchmarks/run.py holds: CPU per token as a ratio, the added latencies as the proxy's minus
        # nginx's (ms; the two measured in the same run against the same upstream)
        mine, theirs = table["servewatch proxy"], table["nginx"]
        document["vs_nginx"] = {
            "cpu_per_token_ratio": mine["cpu_s_per_100k_tokens"] / theirs["cpu_s_per_100k_tokens"],
            **{f"{key}_minus_ms": mine[key] - theirs[key]
               for key in ("added_ttft_p50_ms", "added_ttft_p99_ms", "added_token_p99_ms")
               if mine.get(key) is not None and theirs.get(key) is not None}}
        best = best_round_token_p99(rounds)
        if best is not None:
            document["vs_nginx"]["added_token_p99_ms_minus_ms_best_round"] = best
    return document


def best_round_token_p99(rounds: list[dict[str, dict]]) -> float | None:
    """The per-token p99 the proxy adds beyond what nginx adds (both against going direct), in the round where it is
    least: what benchmarks/run.py holds beside the competitor. There, a scheduling stall of the whole proxy lands in
    one round and takes the pooled p99 with it (+175 ms in 1 of 8 runs, 2026-12-07 10:20, against +0.8 to +2.9 ms
    in the other 7); a cost the proxy adds to every token shows in every round. None without the three routes'
    lags in some round."""
    def p99(values):
        values = sorted(values)
        return values[min(len(values) - 1, int(0.99 * len(values)))] * 1e3

    out = []
    for r in rounds:
        if not all(r.get(name, {}).get("lag") for name in ("direct", "servewatch proxy", "nginx")):
            continue
        direct = p99(r["direct"]["lag"])
        out.append((p99(r["servewatch proxy"]["lag"]) - direct) - (p99(r["nginx"]["lag"]) - direct))
    return min(out) if out else None

if __name__ == "__main__":
    raise SystemExit(main())
