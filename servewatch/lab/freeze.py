"""A freeze meter: a separate process that sleeps in short steps and records every gap it notices.

On a loaded or virtualised host every process can stop being scheduled for seconds at a time (measured
on this project's CI machines: 4-28 s while a CPU vLLM ran). A timing bound that fails while the meter
saw such a freeze is explained by the machine; one that fails with no freeze is the code's fault. The
meter is a process of its own (not a thread of the watched or the watching program), raised in priority
like the watcher it stands beside, so what it measures is what the host did, not what one busy process did.

    meter = FreezeMeter(path).start()
    ...
    meter.longest(t0, t1)   # the longest gap overlapping [t0, t1] (time.monotonic(), shared by processes)
    meter.frozen(t0, t1)    # the time within [t0, t1] spent in gaps
    meter.stop()

File format: one line per gap above `report_over_s`: "<start> <end>" in CLOCK_MONOTONIC seconds. The questions
asked of the gaps (longest, frozen) are the recorder's own (`servewatch.timeline.gaps`, where the recorder measures
its own sampling the same way).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from servewatch.timeline import gaps as sampling

STEP_S = 0.05
REPORT_OVER_S = sampling.ALLOWANCE_S   # five steps: scheduling noise below this is not a freeze


class FreezeMeter:
    def __init__(self, path: Path, *, step_s: float = STEP_S, report_over_s: float = REPORT_OVER_S):
        self.path = Path(path)
        self.step_s = step_s
        self.report_over_s = report_over_s
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None

    def start(self) -> FreezeMeter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servewatch.lab.freeze", "--out", str(self.path),
             "--step", str(self.step_s), "--report-over", str(self.report_over_s)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started_at = time.monotonic()
        return self

    def measuring(self) -> bool:
        """True once the meter process is in its loop (it wrote its first line)."""
        try:
            return self.path.read_text(encoding="ascii").startswith("# measuring")
        except OSError:
            return False

    def gaps(self) -> list[tuple[float, float]]:
        try:
            text = self.path.read_text(encoding="ascii")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    out.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    continue
        return out

    def longest(self, since: float, until: float | None = None) -> float:
        """The longest gap overlapping [since, until] (now when until is None), in seconds; 0.0 if none."""
        until = time.monotonic() if until is None else until
        return sampling.longest(self._gaps(), since, until)

    def frozen(self, since: float, until: float | None = None) -> float:
        """How long [since, until] was spent in gaps (each gap clipped to it), in seconds: the time the host
        ran nothing of ours. A detection delayed by two freezes is delayed by both; the longest alone
        understates it (a real DP=2 vLLM in CI: 13.3 s frozen in a 14.8 s detection, the longest gap 5.1 s)."""
        until = time.monotonic() if until is None else until
        return sampling.frozen(self._gaps(), since, until)

    def _gaps(self) -> list[sampling.Gap]:
        return [sampling.Gap(start, end) for start, end in self.gaps()]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def __enter__(self) -> FreezeMeter:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def measure(out: Path, step_s: float, report_over_s: float) -> None:
    """Sleep `step_s` at a time; append every gap longer than `report_over_s` to `out` at once."""
    try:
        os.nice(-10)   # as the watcher does beside a CPU-hungry engine; without the right, as it is
    except OSError:
        pass
    with open(out, "a", encoding="ascii") as f:
        before = time.monotonic()
        f.write(f"# measuring from {before:.3f}\n")   # read by nothing but a person and the tests
        f.flush()
        while True:
            time.sleep(step_s)
            now = time.monotonic()
            if now - before > report_over_s:
                f.write(f"{before:.3f} {now:.3f}\n")
                f.flush()
            before = now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servewatch.lab.freeze", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--step", type=float, default=STEP_S)
    parser.add_argument("--report-over", type=float, default=REPORT_OVER_S)
    args = parser.parse_args(argv)
    try:
        measure(args.out, args.step, args.report_over)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
