"""`servewatch serve`'s peak memory beside hostile targets, against the same serve over the live targets
alone, both measured in the same invocation.

    .venv/bin/python benchmarks/serve_hostile.py [--live 100] [--interval 2] [--duration 60]
                                                 [--tree DIR] [--json FILE] [--no-baseline]

The live targets are fleet.py's fake vLLM fleet (a real 51 kB vLLM 0.32 scrape in which every counter
moves at every scrape, each target on its own loopback address). The hostile run adds five targets,
one process of their own, each answering every path the same way:

    drip     a 200 whose declared 100 MB body arrives one metrics line every 20 ms, for ever
    series   a 200 with 200,000 series (8.1 MB, under the 16 MiB byte bound: only the series bound stops it)
    noise    a 200 with 1 MiB of random bytes (not text, not an exposition)
    hang     reads the request and answers nothing
    reset    reads the request and resets the connection (RST)

Reported for each run: serve's peak RSS (VmHWM from /proc, the kernel's high-water mark over the whole
run, start-up included) and its RSS at the end; the hostile run's peak over the baseline's (a ratio in
the same invocation). `--tree DIR` runs the servewatch of another checkout (the benchmark's fake targets
come from this one), so an older version can be measured with today's benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTILE = ("drip", "series", "noise", "hang", "reset")


# --- the hostile targets (their own process) ---------------------------------------------------------

def serve_hostile(ports: list[int], control: int) -> None:
    series_body = "".join(f'vllm:num_requests_running{{engine="{i}"}} 0\n' for i in range(200_000)).encode()
    noise_body = os.urandom(2**20)

    def head(length: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n" % length

    async def read_request(reader) -> bool:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return False
        for line in request.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                await reader.readexactly(int(line.split(b":", 1)[1]))
        return True

    def handler(kind: str):
        async def handle(reader, writer):
            try:
                while await read_request(reader):
                    if kind == "series":
                        writer.write(head(len(series_body)) + series_body)
                    elif kind == "noise":
                        writer.write(head(len(noise_body)) + noise_body)
                    elif kind == "drip":
                        writer.write(head(100_000_000))
                        for i in range(10**9):
                            writer.write(b'vllm:num_requests_running{engine="%d"} 0\n' % i)
                            await writer.drain()
                            await asyncio.sleep(0.02)
                    elif kind == "hang":
                        await asyncio.sleep(3600)
                    elif kind == "reset":
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        writer.transport.abort()
                        return
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()
        return handle

    async def main():
        for kind, port in zip(HOSTILE, ports):
            await asyncio.start_server(handler(kind), "127.0.0.1", port, backlog=1024)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# --- measuring ---------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def targets_up(api: str) -> tuple[int, int]:
    import urllib.request
    with urllib.request.urlopen(api + "/api/v1/targets", timeout=30) as response:
        targets = json.loads(response.read())["targets"]
    return sum(1 for t in targets if t.get("up")), len(targets)


def one_run(tree: Path, live: list[str], hostile: list[str], args) -> dict:
    """serve over `live` + `hostile` for --duration seconds after every live target is up."""
    work = Path(tempfile.mkdtemp(prefix="servewatch-hostile-"))
    (work / "targets.json").write_text(json.dumps([{"targets": live + hostile}]))
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--file-sd", str(work / "targets.json"),
                              "--listen", f"127.0.0.1:{port}", "--interval", f"{args.interval:g}",
                              *(["--history", args.history] if args.history else [])],
                             cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                up, known = targets_up(api)
                if up >= len(live) and known == len(live) + len(hostile):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                raise SystemExit(f"serve_hostile: serve ({tree}) did not bring the live targets up")
            time.sleep(0.5)
        end = time.monotonic() + args.duration
        samples, started = [], time.monotonic()
        while time.monotonic() < end:
            samples.append((time.monotonic() - started, status_mib(serve.pid, "VmRSS")))
            time.sleep(0.5)
        up, known = targets_up(api)
        return {"peak_mb": round(status_mib(serve.pid, "VmHWM") * 2**20 / 1e6, 1),
                "end_mb": round(status_mib(serve.pid, "VmRSS") * 2**20 / 1e6, 1),
                "sampled_max_mb": round(max(m for _, m in samples) * 2**20 / 1e6, 1),
                "rss_every_10s_mb": [round(m * 2**20 / 1e6, 1) for t, m in samples[::20]],
                "up": up, "targets": known}
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured after the live targets are up")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose servewatch runs (default: this one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-baseline", action="store_true", help="the hostile run only")
    parser.add_argument("--kinds", default=",".join(HOSTILE), help="the hostile targets to run (default: all five)")
    parser.add_argument("--history", help="serve's --history (default: serve's own)")
    parser.add_argument("--serve-hostile", nargs=6, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_hostile:
        serve_hostile(args.serve_hostile[:5], args.serve_hostile[5])
        return 0

    fleet_port, control_port = free_port(), free_port()
    hostile_ports = [free_port() for _ in HOSTILE]
    live = [f"127.0.{1 + i // 250}.{1 + i % 250}:{fleet_port}" for i in range(args.live)]
    kinds = [k for k in args.kinds.split(",") if k]
    hostile = [f"127.0.0.1:{p}" for k, p in zip(HOSTILE, hostile_ports) if k in kinds]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(HERE / "fleet.py"), "--serve-fleet", str(args.live),
                               str(fleet_port), str(control_port)], stdout=subprocess.PIPE, text=True, env=env),
             subprocess.Popen([sys.executable, __file__, "--serve-hostile", *map(str, hostile_ports), "0"],
                              stdout=subprocess.PIPE, text=True, env=env)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        figures = {"live": args.live, "hostile": kinds, "interval_s": args.interval,
                   "duration_s": args.duration, "tree": str(args.tree.resolve())}
        figures["with_hostile"] = one_run(args.tree.resolve(), live, hostile, args)
        if not args.no_baseline:
            figures["live_only"] = one_run(args.tree.resolve(), live, [], args)
            figures["peak_ratio"] = round(figures["with_hostile"]["peak_mb"] / figures["live_only"]["peak_mb"], 3)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    w = figures["with_hostile"]
    print(f"serve beside {args.live} live + {len(kinds)} hostile targets ({', '.join(kinds)}) at "
          f"{args.interval:g} s for {args.duration:g} s: peak RSS {w['peak_mb']:.1f} MB, at the end {w['end_mb']:.1f} MB "
          f"({w['up']}/{w['targets']} up)")
    if "live_only" in figures:
        b = figures["live_only"]
        print(f"serve over the {args.live} live targets alone:   peak RSS {b['peak_mb']:.1f} MB, at the end "
              f"{b['end_mb']:.1f} MB; peak with hostile / alone = {figures['peak_ratio']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
