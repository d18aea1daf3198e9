"""Can the real-time simulator sustain N concurrent streams on one core?

Starts `servewatch sim` pinned to one CPU, drives N closed-loop streaming clients (each sends its next
request when the last ends) for S seconds from this process (pinned to another CPU when there is one),
and compares the tokens the clients received with what the same engine produces for the same workload
in virtual time (the roofline's promise). Prints the ratio, the server's step lag, and the server's CPU
cost per streamed token (which does not depend on how loaded the machine is). On the default
seed-002 profile (rtx3060-7b, ~1.3k tokens/s at 256 running) the ratio should be ~1.0; the h100-8b
profile at 256 streams (~30k tokens/s) is beyond one Python core, and the ratio says by how much.

    .venv/bin/python benchmarks/sim_streams.py [--streams 256] [--seconds 20] [--profile rtx3060-7b]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.clock import VirtualClock  # noqa: E402
from servewatch.sim import SimConfig, SimEngine  # noqa: E402


def output_tokens(client: int, out: int) -> int:
    """Per-client output length, spread over [out/2, 1.5*out) so the closed loop does not march in waves."""
    return out // 2 + (client * 97) % out


def expected_tokens(profile: str, streams: int, warmup: float, seconds: float, prompt: int, out: int) -> int:
    """Tokens the engine generates in the measured window for this workload, in virtual time."""
    clock = VirtualClock()
    engine = SimEngine(SimConfig(profile=profile, max_num_seqs=256), clock)
    t0 = clock.now()
    window = (t0 + warmup, t0 + warmup + seconds)
    current = [engine.submit(prompt_tokens=prompt, max_tokens=output_tokens(i, out), ignore_eos=True)
               for i in range(streams)]
    done = []
    while clock.now() < window[1]:
        engine.run_until(min(window[1], clock.now() + 0.02))
        for i, h in enumerate(current):
            if h.finished:
                done.append(h)
                current[i] = engine.submit(prompt_tokens=prompt, max_tokens=output_tokens(i, out), ignore_eos=True)
    return sum(1 for h in done + current for t in h.token_times if window[0] <= t < window[1])


async def drive(port: int, streams: int, warmup: float, seconds: float, prompt: int, out: int) -> dict:
    start = time.monotonic()
    count_from, stop_at = start + warmup, start + warmup + seconds
    received = 0
    requests = 0
    prompt_text = " ".join(["word"] * prompt)
    timeout = aiohttp.ClientTimeout(total=warmup + seconds + 60)
    connector = aiohttp.TCPConnector(limit=streams + 8)

    async def client(session: aiohttp.ClientSession, index: int) -> None:
        nonlocal received, requests
        body = {"prompt": prompt_text, "max_tokens": output_tokens(index, out), "ignore_eos": True, "stream": True}
        while time.monotonic() < stop_at:
            async with session.post("/v1/completions", json=body) as resp:
                requests += 1
                async for line in resp.content:
                    now = time.monotonic()
                    if now >= stop_at:
                        return                    # stop counting at the deadline (closing aborts it)
                    if line.startswith(b"data: {") and now >= count_from:
                        received += 1

    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(client(session, i) for i in range(streams)))
        async with session.get("/_sim/state") as resp:
            state = await resp.json()
    return {"received": received, "requests": requests, "state": state}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window (not counted)")
    parser.add_argument("--profile", default="rtx3060-7b")
    parser.add_argument("--prompt-tokens", type=int, default=44)
    parser.add_argument("--output-tokens", type=int, default=256)
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = cpus[0], (set(cpus[1:]) or {cpus[0]})
    proc = subprocess.Popen([sys.executable, "-m", "servewatch", "sim", "--port", "0", "--profile", args.profile,
                             "--max-num-seqs", "256", "--log-file", os.devnull],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        os.sched_setaffinity(proc.pid, {server_cpu})
        os.sched_setaffinity(0, client_cpus)
        line = proc.stderr.readline()
        match = re.search(r":(\d+)\s*$", line)
        if not match:
            print(f"server did not start: {line!r}", file=sys.stderr)
            return 1
        port = int(match.group(1))
        cpu_before = _cpu_seconds(proc.pid)
        result = asyncio.run(drive(port, args.streams, args.warmup, args.seconds, args.prompt_tokens,
                                   args.output_tokens))
        server_cpu_s = _cpu_seconds(proc.pid) - cpu_before
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    expected = expected_tokens(args.profile, args.streams, args.warmup, args.seconds, args.prompt_tokens,
                               args.output_tokens)
    state = result["state"]
    # CPU covers warm-up and window; scale the window's tokens to the whole run for the per-token cost
    tokens_all = result["received"] * (args.warmup + args.seconds) / args.seconds
    report = {
        "profile": args.profile, "streams": args.streams, "seconds": args.seconds,
        "server_cpu": server_cpu, "tokens_received": result["received"], "tokens_expected": expected,
        "ratio": round(result["received"] / expected, 3) if expected else None,
        "achieved_tokens_per_s": round(result["received"] / args.seconds, 1),
        "expected_tokens_per_s": round(expected / args.seconds, 1),
        "requests": result["requests"], "server_cpu_s": round(server_cpu_s, 2),
        "server_cpu_share": round(server_cpu_s / args.seconds, 2),
        # machine-load-independent: what one dedicated core could stream at this cost per token
        "server_cpu_us_per_token": round(server_cpu_s / tokens_all * 1e6, 1) if tokens_all else None,
        "one_core_capacity_tokens_per_s": round(tokens_all / server_cpu_s) if server_cpu_s > 0 else None,
        "step_lag_mean_ms": round(state["mean_lag_s"] * 1000, 2), "step_lag_max_ms": round(state["max_lag_s"] * 1000, 2),
        "client_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(report, indent=2))
    return 0


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
