"""Honest comparison: `diagnose`'s top hypothesis on the six recorded real-vLLM scenarios beside the labelled
truth, and vllm-doctor's answer on the same scrapes when it is installed.

    PYTHONPATH=. python benchmarks/diagnose_vs_truth.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servewatch.doctor.diagnose import diagnose  # noqa: E402
from tests.diagnose_scenarios import REAL, scenarios  # noqa: E402

SCRAPES = {"idle": "idle.prom", "slot overload": "overload_slots.prom", "KV pressure": "kv_pressure_t1.prom",
           "stalled worker": "stall_sigstop.prom", "dead engine": "before_worker_sigkill.prom"}


def main() -> int:
    doctor = shutil.which("vllm-doctor")
    agree = 0
    rows = scenarios()
    print(f"{'scenario':16} {'truth':12} {'servewatch diagnose':22} {'agrees':7} vllm-doctor")
    for name, (truth, readings) in rows.items():
        top = diagnose(readings)[0]
        ok = top.name == truth and top.verdict == "supported"
        agree += ok
        other = "not installed"
        if doctor and name in SCRAPES:
            result = subprocess.run([doctor, str(REAL / SCRAPES[name])], capture_output=True, text=True, timeout=60)
            other = (result.stdout.strip().splitlines() or ["(no output)"])[0][:60]
        elif doctor:
            other = "no scrape for this scenario"
        print(f"{name:16} {truth:12} {top.name:22} {'yes' if ok else 'NO':7} {other}")
    print(f"agreement: {agree}/{len(rows)}")
    return 0 if agree == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
