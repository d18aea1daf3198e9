"""`servewatch serve` watching a fleet, against Prometheus scraping the same targets at the same cadence
in the same run.

    .venv/bin/python benchmarks/fleet.py [--targets 1000] [--interval 2] [--duration 60] [--stalled 3]
                                         [--history 600]

A separate process serves N fake vLLM targets (each its own loopback address, 127.0.x.y, on one port),
each answering a real 51 kB vLLM 0.32 scrape in which every counter moves at every scrape (each
`_total`, histogram bucket, `_count` and `_sum`: a busy server, the worst case for serve's history);
`--stalled` of them freeze their counters (with requests still running) once the measurement starts.
Reported, from /proc for both processes over the same window: CPU per target-scrape (serve vs
Prometheus, and the ratio), targets per core, RSS per target (serve's whole RSS / N; its ring holds
min(duration, history) of samples), serve's event-loop lag (its own gauge, read from its /metrics every
`--serve-scrape` seconds, as a Prometheus scraping serve would) and how long after the freeze serve
turned each stalled target's livez to 503 (polled four times a second).
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
import urllib.error
import urllib.request
from pathlib import Path

from moving_scrape import body_at, split_capture

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def address(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


# --- the fake fleet (its own process) ---------------------------------------------------------------

def serve_fleet(n: int, port: int, control_port: int) -> None:
    """N fake targets on one port (told apart by the address they were reached at), as a bare asyncio
    protocol answering from prepared bytes: the fleet must cost less than what it measures, or 1,000
    targets at 2 s do not fit a 2-core machine beside serve and Prometheus."""
    parts, moving = split_capture()
    scrapes = {"servewatch": 0, "prometheus": 0}
    per_target = {"servewatch": [0] * n, "prometheus": [0] * n}   # for the warm-up: every target twice
    step = [0] * n
    stalled: set[int] = set()
    answers: dict[int, bytes] = {}

    def answer_at(at: int) -> bytes:
        answer = answers.get(at)
        if answer is None:
            if len(answers) > 64:
                answers.clear()
            answer = answers[at] = response(200, body_at(parts, moving, at).encode(), b"text/plain; version=0.0.4")
        return answer

    def response(status: int, body: bytes, content_type: bytes) -> bytes:
        return (b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
                % (status, content_type, len(body)) + body)

    health = response(200, b"", b"text/plain")
    missing = response(404, b"", b"text/plain")

    class Target(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.buffer = transport, b""
            self.index = _index(transport.get_extra_info("sockname")[0])

        def data_received(self, data):
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                path = head.split(b" ", 2)[1]
                if path == b"/metrics":
                    who = "prometheus" if b"Prometheus" in head else "servewatch"
                    scrapes[who] += 1
                    per_target[who][self.index] += 1
                    if who == "servewatch" and self.index not in stalled:
                        step[self.index] += 1
                    self.transport.write(answer_at(step[self.index]))
                else:
                    self.transport.write(health if path == b"/health" else missing)

    def _index(ip: str) -> int:
        _, _, c, d = (int(x) for x in ip.split("."))
        return (c - 1) * 250 + (d - 1)

    async def control(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        body = json.loads(await reader.readexactly(length))
        if "stall" in body:
            stalled.update(body["stall"])
        answer = {**scrapes, "least": {who: min(counts) for who, counts in per_target.items()}}
        writer.write(response(200, json.dumps(answer).encode(), b"application/json"))
        await writer.drain()
        writer.close()

    async def main():
        loop = asyncio.get_running_loop()
        await loop.create_server(Target, "0.0.0.0", port, backlog=4096)
        await asyncio.start_server(control, "127.0.0.1", control_port)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# --- measuring ---------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS      # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def control(port: int, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/control", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def loop_lag(api: str) -> float:
    with urllib.request.urlopen(api + "/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("servewatch_event_loop_lag_seconds "):
                return float(line.split()[1])
    return float("nan")


def live(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=30):
            return True
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return False
        raise


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"fleet benchmark: {what} not within {seconds} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=600.0,
                        help="measurement window, seconds (default 600: serve's full history is in the figures)")
    parser.add_argument("--stalled", type=int, default=3)
    parser.add_argument("--history", type=float, default=600.0)
    parser.add_argument("--serve-scrape", type=float, default=5.0, help="seconds between reads of serve's /metrics")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE as JSON (benchmarks/run.py)")
    parser.add_argument("--serve-fleet", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fleet:
        serve_fleet(*args.serve_fleet)
        return
    n = args.targets
    work = Path(tempfile.mkdtemp(prefix="servewatch-fleet-"))
    fleet_port, control_port, serve_port, prom_port = free_port(), free_port(), free_port(), free_port()
    targets = [f"{address(i)}:{fleet_port}" for i in range(n)]
    (work / "targets.json").write_text(json.dumps([{"targets": targets}]))
    procs = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        fleet = subprocess.Popen([sys.executable, __file__, "--serve-fleet", str(n), str(fleet_port), str(control_port)],
                                 stdout=subprocess.PIPE, text=True, env=env)
        procs.append(fleet)
        assert fleet.stdout.readline().strip() == "ready"
        serve = subprocess.Popen([sys.executable, "-m", "servewatch", "serve", "--file-sd", str(work / "targets.json"),
                                  "--listen", f"127.0.0.1:{serve_port}", "--interval", f"{args.interval}",
                                  "--history", f"{args.history}"], stderr=subprocess.DEVNULL, env=env)
        procs.append(serve)
        prometheus = None
        binary = shutil.which("prometheus")
        if binary:
            (work / "prometheus.yml").write_text(
                f"global: {{scrape_interval: {args.interval:g}s, scrape_timeout: {args.interval:g}s}}\n"
                "scrape_configs:\n  - job_name: fleet\n    file_sd_configs: [{files: ['"
                f"{work / 'targets.json'}']}}]\n")
            prometheus = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}",
                                           f"--storage.tsdb.path={work / 'tsdb'}",
                                           f"--web.listen-address=127.0.0.1:{prom_port}"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(prometheus)
        api = f"http://127.0.0.1:{serve_port}"
        wait_for(lambda: sum(t["up"] for t in get_json(api + "/api/v1/targets")["targets"]) == n, 120,
                 "every target up in serve")
        scrapers = ["servewatch"] + (["prometheus"] if prometheus else [])
        # Warm-up: both scrapers have scraped every target twice (each recorder has its cadence; Prometheus
        # has found every target), so neither side's start-up cost is counted in the window.
        wait_for(lambda: all(control(control_port, {})["least"][who] >= 2 for who in scrapers),
                 120 + 4 * args.interval, "every target scraped twice by both scrapers")
        before = {"servewatch": cpu_s(serve.pid), **({"prometheus": cpu_s(prometheus.pid)} if prometheus else {})}
        fleet_before = cpu_s(fleet.pid)
        scrapes_before = control(control_port, {})
        stalled = list(range(0, n, max(1, n // max(1, args.stalled))))[:args.stalled]
        control(control_port, {"stall": stalled})
        frozen_at = time.monotonic()
        detected: dict[str, float] = {}
        names = {targets[i] for i in stalled}
        end = frozen_at + args.duration
        lags = []
        next_lag = time.monotonic()
        while time.monotonic() < end:
            if time.monotonic() >= next_lag:      # serve's /metrics, as a Prometheus scraping serve would
                lags.append(loop_lag(api))
                next_lag += args.serve_scrape
            for name in names - set(detected):    # livez turns 503 on a sustained stall, as a kubelet sees it
                if not live(f"{api}/targets/{name}/livez"):
                    detected[name] = time.monotonic() - frozen_at
            time.sleep(0.25)
        after = {"servewatch": cpu_s(serve.pid), **({"prometheus": cpu_s(prometheus.pid)} if prometheus else {})}
        fleet_cores = (cpu_s(fleet.pid) - fleet_before) / args.duration
        scrapes_after = control(control_port, {})
        rss = rss_mib(serve.pid)
        # Every live target's livez, at the end: a live target must pass; one that does not is printed
        # with what serve says of it (state, last error, active verdicts), so the cause is on the page.
        live_names = [name for i, name in enumerate(targets) if i not in set(stalled)]
        not_live = [name for name in live_names if not live(f"{api}/targets/{name}/livez")]
        described = {t["name"]: t for t in get_json(api + "/api/v1/targets")["targets"]} if not_live else {}
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)

    window = args.duration
    print(f"fleet: {n} targets at {args.interval:g} s for {window:g} s (history {args.history:g} s; the ring holds "
          f"{min(window + 3 * args.interval, args.history):.0f} s)")
    print(f"  (the fake fleet itself: {fleet_cores:.2f} cores)")
    per = {}
    cadence_share = {}
    for who in before:
        scrapes = scrapes_after[who] - scrapes_before[who]
        cadence_share[who] = scrapes / window / n * args.interval
        cpu = after[who] - before[who]
        per[who] = cpu / scrapes if scrapes else float("nan")
        print(f"  {who:10s} {scrapes:7d} scrapes ({cadence_share[who]:.2f} of the cadence), "
              f"CPU {cpu:6.1f} s = {cpu / window:.2f} cores, {per[who] * 1e3:.2f} ms per target-scrape")
    if "prometheus" in per:
        print(f"  CPU per target-scrape, serve / Prometheus: {per['servewatch'] / per['prometheus']:.2f}x (goal <= 1.5x)")
    cores = (after["servewatch"] - before["servewatch"]) / window
    print(f"  targets per core at this cadence: {n / cores:.0f}" if cores else "")
    print(f"  serve RSS {rss:.0f} MiB: {rss / n * 1024:.0f} KiB per target (goal <= 2 MB)")
    lags.sort()
    print(f"  serve's event-loop lag (0.5 s timer), sampled {len(lags)}x: median {lags[len(lags) // 2] * 1e3:.0f} ms, "
          f"p90 {lags[int(0.9 * (len(lags) - 1))] * 1e3:.0f} ms, max {lags[-1] * 1e3:.0f} ms")
    threshold = max(2.0, 4 * args.interval)
    times = sorted(detected.values())
    print(f"  stalled {len(stalled)}, flagged {len(times)}: " + ", ".join(f"{t:.1f} s" for t in times) +
          f" after the freeze (single-target threshold {threshold:g} s + one cadence = {threshold + args.interval:g} s)")
    print(f"  livez of the {len(live_names)} live targets at the end: {len(live_names) - len(not_live)} answered 200")
    for name in not_live[:20]:
        t = described.get(name, {})
        print(f"    {name}: state {t.get('state')}, last error {t.get('last_error') or 'none'}, "
              f"active {', '.join(t.get('active') or []) or 'none'}")
    problems = [f"{who} kept {share:.2f} of its cadence (< 0.98)" for who, share in cadence_share.items() if share < 0.98]
    problems += [f"{len(not_live)} live target(s) failed livez"] if not_live else []
    problems += [f"{len(stalled) - len(times)} stalled target(s) never flagged"] if len(times) < len(stalled) else []
    if problems:
        raise SystemExit("fleet benchmark FAILED: " + "; ".join(problems))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "targets": n, "interval_s": args.interval, "window_s": window,
            "ms_per_target_scrape": {who: v * 1e3 for who, v in per.items()},
            "cpu_ratio": per["servewatch"] / per["prometheus"] if "prometheus" in per else None,
            "rss_kib_per_target": rss / n * 1024, "stalls_flagged_s": times}, indent=1) + "\n")


if __name__ == "__main__":
    main()
