"""Sampling 8 engine ranks every 0.5 s costs at most 2 ms of CPU per cycle.

    .venv/bin/python benchmarks/rank_sampling.py [--ranks 8] [--cycles 40] [--interval 0.5]

Starts a tree shaped like a multi-rank vLLM (one `VLLM::EngineCore` over `VLLM::Worker_TP<n>` children, titled
through argv[0] as setproctitle leaves them; each a sleeping `sleep`), then takes one process sample per
interval through the recorder's own process source (`PsutilProbe.snapshot`) and the rank model over it
(`rank_view`), and reports the CPU time (this process's user + system, which is what the watcher pays) per
cycle: median, mean (the target) and worst. The first cycle (titles read once per process and cached) is reported apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.timeline.ranks import rank_view  # noqa: E402
from servewatch.sources.process import RESCAN_S, PsutilProbe  # noqa: E402

TARGET_MS = 2.0


def start_tree(ranks: int) -> subprocess.Popen:
    workers = " ".join(f"(exec -a VLLM::Worker_TP{i} sleep 600) &" for i in range(ranks))
    script = f"{workers} exec -a VLLM::EngineCore sleep 600"
    # bash forks the workers, then becomes the engine core: the workers are its children
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    tree = start_tree(args.ranks)
    try:
        probe = PsutilProbe(os.getpid())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:      # until every rank has its title (exec done)
            view = rank_view(probe.snapshot(time.time()))
            if sum(r.kind == "worker" for r in view) == args.ranks and any(r.kind == "engine_core" for r in view):
                break
            time.sleep(0.05)
        else:
            print("the rank tree did not come up", file=sys.stderr)
            return 2
        costs = []
        for _ in range(args.cycles):
            start = time.process_time()
            view = rank_view(probe.snapshot(time.time()))
            costs.append((time.process_time() - start) * 1000)
            time.sleep(args.interval)
        workers = sum(r.kind == "worker" for r in view)
        median, worst = statistics.median(costs), max(costs)
        print(f"{workers} ranks + engine core sampled {len(costs)} times every {args.interval:g} s: "
              f"CPU per cycle median {median:.2f} ms, mean {statistics.fmean(costs):.2f} ms (the whole-tree walk every "
              f"{RESCAN_S:g} s included), worst {worst:.2f} ms (target <= {TARGET_MS:g} ms; "
              f"ratio median/target {median / TARGET_MS:.2f})")
        print(f"one rank: state {view[-1].state}, rss {view[-1].member.rss_bytes} B, "
              f"threads {view[-1].member.threads}, cpu {view[-1].member.cpu_percent} %")
        return 0 if statistics.fmean(costs) <= TARGET_MS else 1
    finally:
        os.killpg(tree.pid, 15)
        tree.wait()


if __name__ == "__main__":
    sys.exit(main())
