"""The GPU source on a real GPU: NVML as servewatch reads it while the GPU is idle, under a bf16 matmul loop and
under a spin kernel (torch.cuda._sleep), and whether servewatch's per-rank classifier tells the three apart.

    python scripts/gpu_check.py [--out DIR] [--phase-s 40] [--device 0]

Needs: the stdlib, nvidia-ml-py and the torch the machine has (CUDA). At most ~8 minutes (3 phases of --phase-s,
default 40 s, plus warm-up). Writes DIR/gpu-check-<date>.json: the hardware (name, driver, CUDA), and per phase
every reading as a bundle stores it (servewatch.bundle.serialize.sample_to_dict) — fixtures for the tests, with
the date and the hardware. Prints one line per phase: the median utilisation, power and SM clock, and the class
(idle / busy / spin); exits 0 when idle reads idle, the matmul busy and the spin kernel spin, 1 when not, 2 when
there is no GPU. What it settles: whether "busy at low power" (a kernel resident, not computing) is what a
spinning rank looks like on this GPU, the rule `servewatch.detectors.evidence.gpus` uses (SPIN_POWER_SHARE of the limit).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check", help="where the readings go (default ./gpu-check)")
    parser.add_argument("--phase-s", type=float, default=40.0, help="seconds per phase (default 40)")
    parser.add_argument("--device", type=int, default=0, help="the CUDA device (and NVML index) to use")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_check: no torch here (it needs the torch the GPU machine has)")
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible to torch")
        return 2
    from servewatch.bundle.serialize import sample_to_dict
    from servewatch.detectors.evidence.gpus import SPIN_POWER_SHARE, _rank_state
    from servewatch.sources.gpu import NvmlProbe, load_pynvml

    probe = NvmlProbe()
    if probe.error:
        print(f"gpu_check: NVML: {probe.error}")
        return 2
    probe.start_events(time.time)
    pynvml = load_pynvml()
    device = torch.device(f"cuda:{args.device}")
    hardware = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "gpu": torch.cuda.get_device_name(device),
                "driver": _text(pynvml.nvmlSystemGetDriverVersion()), "cuda": torch.version.cuda,
                "torch": torch.__version__, "xid_events": probe.xid_error or "watched"}
    print(f"gpu_check: {hardware['gpu']}, driver {hardware['driver']}, CUDA {hardware['cuda']}, torch "
          f"{hardware['torch']}; Xid events: {hardware['xid_events']}")

    def idle(stop: threading.Event) -> None:
        stop.wait()

    def matmul(stop: threading.Event) -> None:
        a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize(device)

    def spin(stop: threading.Event) -> None:
        cycles = int(torch.cuda.get_device_properties(device).clock_rate * 1000 * 0.5)   # ~0.5 s per kernel
        with torch.cuda.device(device):
            while not stop.is_set():
                torch.cuda._sleep(cycles)
                torch.cuda.synchronize(device)

    phases, verdicts = {}, {}
    for name, work, expected in (("idle", idle, "idle"), ("matmul", matmul, "busy"), ("spin", spin, "spin")):
        stop = threading.Event()
        worker = threading.Thread(target=work, args=(stop,), daemon=True)
        worker.start()
        stop.wait(5.0)                                    # warm-up: NVML utilisation is a trailing average
        readings = []
        deadline = time.monotonic() + args.phase_s
        while time.monotonic() < deadline:
            readings.append(probe.snapshot(time.time()))
            stop.wait(1.0)
        stop.set()
        worker.join(30)
        devices = [next(d for d in r.devices if d.index == args.device) for r in readings]
        classes = [_rank_state(d) for d in devices]
        verdict = max(set(classes), key=classes.count)
        verdicts[name] = (verdict, expected)
        util = statistics.median(d.utilization_pct or 0 for d in devices)
        power = statistics.median(d.power_w or 0 for d in devices)
        sm = statistics.median(d.sm_clock_mhz or 0 for d in devices)
        limit = devices[-1].power_limit_w
        print(f"gpu_check: {name}: utilisation {util:.0f} %, power {power:.0f} of {limit} W (spin below "
              f"{SPIN_POWER_SHARE:.0%}), SM {sm:.0f} MHz, reasons 0x{devices[-1].clock_event_reasons or 0:x} → "
              f"{verdict} ({'as expected' if verdict == expected else 'expected ' + expected}; "
              f"{classes.count(verdict)}/{len(classes)} readings)")
        phases[name] = [sample_to_dict(r) for r in readings]
    probe.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu-check-{hardware['date']}.json"
    path.write_text(json.dumps({"hardware": hardware, "phases": phases,
                                "classes": {k: v[0] for k, v in verdicts.items()}}, indent=1) + "\n")
    ok = all(got == want for got, want in verdicts.values())
    print(f"gpu_check: {'the three read apart' if ok else 'NOT told apart'}; readings → {path}")
    return 0 if ok else 1


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    raise SystemExit(main())
