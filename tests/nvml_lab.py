"""The test-only NVML stand-in for the fast suite: built once per session with the system C compiler, loaded by
the real pynvml (nvidia-ml-py) under SERVEWATCH_TEST_ONLY_NVML, its scenario time stepped through a clock file
(no sleeps: each reading is taken at a scenario time the test sets)."""

from __future__ import annotations

from pathlib import Path

from servewatch.lab.nvml_stand_in import CLOCK_VAR, LIBRARY_VAR, SCENARIO_VAR, compiler

H100 = "NVIDIA H100 80GB HBM3"
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
BUS0 = "00000000:17:00.0"
BUS1 = "00000000:2A:00.0"
DEVICES = f"device 0 {UUID0} {BUS0} {H100}\ndevice 1 {UUID1} {BUS1} {H100}\n"
# A busy, healthy H100 pair (TP=2): the fields every reading answers unless a scenario changes them.
BUSY = ("util=97 memutil=41 mem_used=72000000000 mem_total=85899345920 power_mw=610000 limit_mw=700000 temp=64 "
        "sm=1980 mem_clock=2619 max_sm=1980 max_mem=2619 reasons=0x0 ecc_vol_corr=0 ecc_vol_unc=0 ecc_agg_corr=2 "
        "ecc_agg_unc=0 remap_corr=1 remap_unc=0 remap_pending=0 remap_failure=0 pcie_replay=0 recovery_action=0 "
        "nvlink_crc=0 nvlink_replay=0 nvlink_recovery=0")


def tp2(extra: str = "", pids=(111, 112)) -> str:
    """A TP=2 scenario: ranks `pids` on GPUs 0 and 1, busy from scenario time 0, then `extra` lines."""
    return (DEVICES + f"at 0 gpu 0 {BUSY}\nat 0 gpu 1 {BUSY}\n"
            f"at 0 proc 0 {pids[0]} mem=71000000000 sm=95\nat 0 proc 1 {pids[1]} mem=71000000000 sm=94\n" + extra)


class StandIn:
    """One scenario: `at(t)` sets the scenario clock, `probe()` a fresh NvmlProbe reading it."""

    def __init__(self, library: Path, directory: Path, monkeypatch):
        self.library = library
        self.directory = directory
        self.clock = directory / "clock"
        self.scenario = directory / "scenario.txt"
        self.at(0.0)
        monkeypatch.setenv(LIBRARY_VAR, str(library))
        monkeypatch.setenv(SCENARIO_VAR, str(self.scenario))
        monkeypatch.setenv(CLOCK_VAR, str(self.clock))

    def write(self, text: str) -> StandIn:
        self.scenario.write_text(text)
        return self

    def at(self, t: float) -> None:
        partial = self.clock.with_suffix(".partial")
        partial.write_text(f"{t}\n")
        partial.replace(self.clock)        # the library reads it whole or the previous one

    def probe(self):
        from servewatch.sources.gpu import NvmlProbe

        probe = NvmlProbe()
        assert probe.error is None, probe.error
        return probe


def have_compiler() -> bool:
    return compiler() is not None


def exec_done(proc, text: str, timeout_s: float = 10.0) -> None:
    """Until /proc/PID/cmdline shows `text` (a Popen child runs the parent's command line until it has exec'd):
    the condition itself, checked until a deadline."""
    import os
    import time

    deadline = time.monotonic() + timeout_s
    path = f"/proc/{proc.pid}/cmdline"
    while time.monotonic() < deadline:
        with open(path, "rb") as f:
            if text.encode() in f.read():
                return
        os.sched_yield()
    raise AssertionError(f"pid {proc.pid} never showed {text!r} in its command line")
