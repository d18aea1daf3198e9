"""Records the Flight Recorder fixtures the fast suite reads (tests/fixtures/flight_recorder/): a real
two-rank gloo job per mode, its dumps taken through the pipe trigger by servewatch's own collector.

    python -m tests.collective.record_fixtures   (from the repository root, with servewatch's venv)
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from servewatch.sources import collective_env, flight_recorder
from tests.collective.gloo import LAB_PYTHON, gloo_job

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "flight_recorder"
WAIT = {"behind": ("rank 0 in collective 5", "rank 1 sleeping before collective 5"),
        "mismatch": ("rank 0 in collective 5", "rank 1 in collective 5")}


def main() -> None:
    torch_version = subprocess.run([str(LAB_PYTHON), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"recorded": "2026-12-05", "torch": torch_version, "backend": "gloo", "world": 2, "cases": {}}
    for mode, wanted in WAIT.items():
        with tempfile.TemporaryDirectory() as tmp, gloo_job(mode, Path(tmp)) as job:
            job.wait_for("rank 0 pipe ready", "rank 1 pipe ready", *wanted)
            ranks = {r.rank: (r.pipe, r.dump) for r in collective_env.discover(job.pids)}
            got = flight_recorder.collect(ranks, timeout_s=10)
            assert not got.failures, got.failures
            for rank in ranks:
                raw = Path(ranks[rank][1]).read_bytes()
                (OUT / f"gloo_{mode}_rank{rank}.json").write_bytes(raw)
            meta["cases"][mode] = {"files": [f"gloo_{mode}_rank{r}.json" for r in sorted(ranks)],
                                   "why": flight_recorder.analyse(got.dumps).why()}
            print(mode, meta["cases"][mode]["why"])
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
