"""What PyTorch's Flight Recorder sees of the lab vLLM at tensor parallel 2 (CPU, gloo), idle, under load, and
with VLLM::Worker_TP1 stopped (SIGSTOP) under load: per rank, how many entries, which ops, in which process
groups; whether vLLM's CPU all-reduce passes through c10d (its entries grow with decode steps) or bypasses it;
and what servewatch's analysis and `collective_hang` say from the dumps, and what its live collective source
(watch's and guard's path) says over the engine's tree. Issue 43, item 5. About 3 minutes
(one start, 45-95 s with the compile cache warm).

    .venv/bin/python scripts/fr_vllm_tp2.py [--cache DIR] [--keep DIR]

Needs the lab vLLM venv (`servewatch lab vllm --install-only`). Starts the engine as
tests/conformance/plans/multirank-vllm.yaml does (--tensor-parallel-size 2 --max-num-seqs 4, one OpenMP thread
per rank, 1 GiB KV space per rank) with TORCH_FR_BUFFER_SIZE=2000, a dump trigger pipe prefix
(TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and a dump file prefix (TORCH_FR_DUMP_TEMP_FILE).

The documented pipe is served by ProcessGroupNCCL's watchdog; a CPU engine's process groups are gloo, which has
no watchdog to serve it. So, for this lab check only, a `sitecustomize` on the engine's PYTHONPATH serves the
pipe the way the NCCL watchdog would: in each process where torch.distributed is initialised (the workers),
a thread makes PREFIX + RANK + ".pipe" and, at each request, writes torch's own JSON dump
(`_dump_fr_trace_json`) to the dump prefix + RANK. It also writes PREFIX + RANK + ".pid" (the process's
pid) so the ranks are known by process. The dumps' content is torch's. On a GPU engine (NCCL) no hook is
needed: the watchdog serves the pipe itself.

Exit status 0 when every step ran (whatever the dumps say: this is a measurement), 1 when a step failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.detectors import DetectorConfig, collective  # noqa: E402
from servewatch.sources import collective_env, collective_events, flight_recorder as fr  # noqa: E402
from servewatch.timeline.window import Window  # noqa: E402

SITE = r'''
# Lab only (scripts/fr_vllm_tp2.py): serve the Flight Recorder's dump trigger pipe in a gloo process, as
# ProcessGroupNCCL's watchdog serves it for NCCL. Started in every process; acts only where torch.distributed
# is initialised, within 10 minutes.
import os, sys, threading, time

def _serve():
    prefix, out = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix or not out:
        return
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                rank = dist.get_rank()
                break
        except Exception:
            pass
        time.sleep(0.5)
    else:
        return
    from torch._C._distributed_c10d import _dump_fr_trace_json
    pipe = f"{prefix}{rank}.pipe"
    try:
        os.mkfifo(pipe)
    except FileExistsError:
        pass
    with open(f"{prefix}{rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    fifo = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fifo, True)
    keep = os.open(pipe, os.O_WRONLY)
    while keep:
        if not os.read(fifo, 64):
            continue
        data = _dump_fr_trace_json(True, False)
        with open(f"{out}{rank}.tmp", "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.replace(f"{out}{rank}.tmp", f"{out}{rank}")

def _start():
    threading.Thread(target=_serve, daemon=True, name="fr-pipe-lab").start()

_start()
os.register_at_fork(after_in_child=_start)
'''


def say(line: str) -> None:
    print(line, flush=True)


def describe(rank: int, dump: fr.Dump) -> list[str]:
    lines = [f"  rank {rank}: format {dump.version or 'unknown'}, {dump.comm_lib_version or 'no comm lib version'}"]
    for name, g in dump.groups.items():
        ops = collections.Counter(f"{e.backend}:{e.op}" for e in g.entries)
        states = collections.Counter("completed" if e.completed else e.state for e in g.entries)
        last = g.entries[-1] if g.entries else None
        lines.append(f"    group {name} ({g.desc or 'no desc'}, ranks {list(g.ranks) if g.ranks else 'unknown'}): "
                     f"{len(g.entries)} entries {dict(ops)}; states {dict(states)}; "
                     f"last {('seq ' + str(last.seq) + ' ' + last.op + ' ' + last.state) if last else 'none'}; "
                     f"status {json.dumps(g.status)}")
    if not dump.groups:
        lines.append("    no process group, no entry")
    return lines


def collect(tmp: Path, label: str, timeout_s: float = 5.0) -> dict[int, fr.Dump]:
    pipes = sorted(tmp.glob("pipe_*.pipe"))
    ranks = {int(p.name[len("pipe_"):-len(".pipe")]): (str(p), str(tmp / f"fr_{p.name[len('pipe_'):-len('.pipe')]}"))
             for p in pipes}
    got = fr.collect(ranks, timeout_s=timeout_s)
    say(f"\n== {label}: {len(got.dumps)} of {len(ranks)} rank(s) dumped in {got.seconds:.2f} s")
    for rank, why in sorted(got.failures.items()):
        say(f"  rank {rank}: {why}")
    for rank, dump in sorted(got.dumps.items()):
        for line in describe(rank, dump):
            say(line)
    if got.dumps:
        analysis = fr.analyse(got.dumps)
        say(f"  {analysis.why()}")
        t = time.monotonic()
        events = collective_events.from_flight_recorder(analysis, t)
        verdicts = collective.detect(Window(logs=tuple(events)), DetectorConfig())
        say(f"  collective_hang: {verdicts[0].why if verdicts else 'does not fire'}")
    return got.dumps


def live_source(root: int) -> None:
    """servewatch's own live path (what watch and guard run) over the engine's tree, once, as if a stall were
    pending: its discovery line, its collection, the events and collective_hang."""
    import asyncio

    from servewatch.clock import RealClock
    from servewatch.sources.collective_source import CollectiveSource

    say("\n== servewatch's collective source over the tree (watch/guard's path), a stall pending")
    source = CollectiveSource(RealClock(), 1.0, root=root, pending=lambda: True, say=lambda line: say("  " + line))
    events = asyncio.run(source.poll())
    verdicts = collective.detect(Window(logs=tuple(events)), DetectorConfig())
    say(f"  {len(events)} event(s); collective_hang: {verdicts[0].why if verdicts else 'does not fire'}")


def all_reduces(dumps: dict[int, fr.Dump]) -> int:
    return sum(1 for d in dumps.values() for g in d.groups.values() for e in g.entries if e.op == "all_reduce")


def stream(url: str, stop: threading.Event, done: list) -> None:
    body = json.dumps({"model": "tiny", "prompt": "hello " * 40, "max_tokens": 1500, "stream": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            for _ in resp:
                if stop.is_set():
                    break
        done.append("ended")
    except Exception as exc:  # noqa: BLE001 - a measurement: said, not raised
        done.append(type(exc).__name__)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", help="the lab cache directory (default: servewatch lab's)")
    parser.add_argument("--keep", help="keep the dumps and the engine log in this directory")
    args = parser.parse_args()
    from servewatch.lab.recipe import VLLM, prepare_lab
    from servewatch.lab.server import ServerConfig, stop_servers_on_termination

    stop_servers_on_termination()
    t_start = time.monotonic()
    lab = prepare_lab(VLLM, args.cache, say=say)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fr-tp2-"))
    tmp.mkdir(parents=True, exist_ok=True)
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE)
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = (("VLLM_CPU_OMP_THREADS_BIND", "0|1"), ("VLLM_CPU_KVCACHE_SPACE", "1"), ("TORCH_FR_BUFFER_SIZE", "2000"),
           ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", str(tmp / "pipe_")), ("TORCH_FR_DUMP_TEMP_FILE", str(tmp / "fr_")),
           ("PYTHONPATH", pythonpath))
    config = ServerConfig(model_dir=lab.model.path, cache_root=lab.cache_dir / "vllm-cache", max_model_len=2048,
                          max_num_seqs=4, extra_args=("--tensor-parallel-size", "2"), extra_env=env)
    server = VLLM.server_kind(lab.venv.python, config, tmp / "engine.log")
    ok = True
    stop = threading.Event()
    streams: list[threading.Thread] = []
    stopped_pid = None
    try:
        server.start()
        say(f"vLLM TP=2 ready in {server.wait_ready():.1f} s at {server.url}")
        import psutil

        pids = collective_env.tree_pids(server.pid)
        say("discovery: " + collective_env.summary(collective_env.discover(pids)))
        deadline = time.monotonic() + 30
        while len(list(tmp.glob("pipe_*.pipe"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)   # the hook's threads make the pipes once torch.distributed is up: polled, bounded
        titles = {}
        for pid in pids:
            try:
                titles[pid] = " ".join(psutil.Process(pid).cmdline())[:60]
            except psutil.Error:
                pass
        for f in sorted(tmp.glob("pipe_*.pid")):
            pid = int(f.read_text())
            say(f"  rank {f.name[len('pipe_'):-len('.pid')]}: pid {pid} {titles.get(pid, '(title unknown)')}")
        idle = collect(tmp, "idle")
        done: list = []
        for _ in range(4):
            t = threading.Thread(target=stream, args=(server.url, stop, done), daemon=True)
            t.start()
            streams.append(t)
        time.sleep(8)         # the streams decode for a while: the measurement's span, not a synchronisation
        loaded = collect(tmp, "under load (4 streams, 8 s in)")
        grew = all_reduces(loaded) - all_reduces(idle)
        verdict = ("they grow with decode steps: the CPU all-reduce passes through c10d" if grew > 0 else
                   "no growth: the decode all-reduce does not pass through c10d (a custom path bypasses the "
                   "Flight Recorder)")
        say(f"\nc10d all_reduce entries, idle → under load: {all_reduces(idle)} → {all_reduces(loaded)} "
            f"({verdict})")
        worker = next((pid for pid in pids if titles.get(pid, "").startswith("VLLM::Worker_TP1")), None)
        if worker is None:
            for proc in psutil.Process(server.pid).children(recursive=True):
                try:
                    if " ".join(proc.cmdline()).startswith("VLLM::Worker_TP1"):
                        worker = proc.pid
                except psutil.Error:
                    pass
        if worker is None:
            say("no VLLM::Worker_TP1 process found: the stop was not made")
            ok = False
        else:
            os.kill(worker, signal.SIGSTOP)
            stopped_pid = worker
            say(f"\nSIGSTOP to VLLM::Worker_TP1 (pid {worker}) under load")
            time.sleep(4)     # rank 0 reaches the collective TP1 never enters: the measurement's span
            collect(tmp, "Worker_TP1 stopped under load (4 s in)")
            live_source(server.pid)
            os.kill(worker, signal.SIGCONT)
            stopped_pid = None
            say(f"SIGCONT to pid {worker}")
    except Exception as exc:  # noqa: BLE001 - said in one line, the engine stopped below
        say(f"failed: {type(exc).__name__}: {exc}")
        ok = False
    finally:
        stop.set()
        if stopped_pid is not None:
            os.kill(stopped_pid, signal.SIGCONT)
        server.stop()
        for t in streams:
            t.join(timeout=5)
    say(f"\n{time.monotonic() - t_start:.0f} s in all; dumps and engine log in {tmp}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
