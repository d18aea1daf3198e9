"""The TEST-ONLY NVML stand-in (`nvml_stand_in.c`): built with the system C compiler into a cache directory,
and loaded by servewatch's GPU source only when SERVEWATCH_TEST_ONLY_NVML names the built library.

It answers NVML's calls from a scenario file (see the C file's header for the format), so that the nvidia-ml-py
calls servewatch makes run for real without a GPU: in the fast suite, and in the lab, where a scenario's
processes can be real rank PIDs (`title:VLLM::Worker_TP1` names them by their process title).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("nvml_stand_in.c")
LIBRARY_VAR = "SERVEWATCH_TEST_ONLY_NVML"            # the built library; nothing else loads it
SCENARIO_VAR = "SERVEWATCH_TEST_ONLY_NVML_SCENARIO"  # the scenario file the library reads at nvmlInit
CLOCK_VAR = "SERVEWATCH_TEST_ONLY_NVML_CLOCK"        # optional: a file holding the scenario time (seconds)


class StandInBuildError(RuntimeError):
    pass


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build(cache_dir: Path) -> Path:
    """Compile the stand-in (once per source version) into cache_dir; the library's path."""
    cc = compiler()
    if cc is None:
        raise StandInBuildError("no C compiler (cc or gcc) on PATH: the NVML stand-in cannot be built")
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    out_dir = Path(cache_dir) / f"nvml-stand-in-{digest}"
    library = out_dir / "libnvidia-ml.so.1"
    if library.exists():
        return library
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f".libnvidia-ml.so.1.{os.getpid()}"
    done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(partial), str(SOURCE), "-lpthread"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise StandInBuildError(f"{cc} failed: {done.stderr.strip()[-2000:]}")
    os.replace(partial, library)
    return library


def environment(library: Path, scenario: Path, clock: Path | None = None) -> dict[str, str]:
    """The variables that make servewatch's GPU source read the stand-in with this scenario."""
    env = {LIBRARY_VAR: str(library), SCENARIO_VAR: str(scenario)}
    if clock is not None:
        env[CLOCK_VAR] = str(clock)
    return env


# --- scenarios for the lab: the stand-in's GPUs mapped to a real engine's ranks by their process titles -------

H100 = "NVIDIA H100 80GB HBM3"
BUSY = ("util=97 memutil=41 mem_used=72000000000 mem_total=85899345920 power_mw=610000 limit_mw=700000 temp=64 "
        "sm=1980 mem_clock=2619 max_sm=1980 max_mem=2619 reasons=0x0 ecc_vol_corr=0 ecc_vol_unc=0 ecc_agg_corr=2 "
        "ecc_agg_unc=0 remap_corr=1 remap_unc=0 remap_pending=0 remap_failure=0 pcie_replay=0 recovery_action=0 "
        "nvlink_crc=0 nvlink_replay=0 nvlink_recovery=0")
INJECT_AT = 1000.0     # the scenario time of each named scenario's fault: the lab steps the clock file there


def gpu_uuid(index: int) -> str:
    return f"GPU-5e4e0000-0000-4000-8000-{index:012d}"


def bus_id(index: int) -> str:
    return f"00000000:{0x17 + index:02X}:00.0"


def rank_scenario(titles: list[str], extra: str = "") -> str:
    """A scenario with one busy H100 per rank, GPU i held by every process whose title (argv[0]) is titles[i]
    (vLLM TP=2: ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]), or by one process where it is "pid:N", then `extra`."""
    lines = [f"device {i} {gpu_uuid(i)} {bus_id(i)} {H100}" for i in range(len(titles))]
    for i, title in enumerate(titles):
        holder = title.removeprefix("pid:") if title.startswith("pid:") else f"title:{title}"
        lines += [f"at 0 gpu {i} {BUSY}", f"at 0 proc {i} {holder} mem=71000000000 sm=95"]
    return "\n".join(lines) + "\n" + extra


# The named scenarios (GPU 1 is rank 1's): nothing happens before INJECT_AT; stepping the clock file to
# INJECT_AT (ScenarioClock.inject) makes the fault happen at once.
SCENARIOS = {
    "healthy": "",
    "xid79": f"at {INJECT_AT:g} xid 1 79\nat {INJECT_AT:g} gpu 1 lost=1\n",
    "thermal": f"at {INJECT_AT:g} gpu 1 reasons=0x40 sm=1100 temp=88\n",
}


class ScenarioClock:
    """The scenario time the stand-in reads (SERVEWATCH_TEST_ONLY_NVML_CLOCK): written whole, never torn."""

    def __init__(self, path: Path, t: float = 0.0):
        self.path = Path(path)
        self.at(t)

    def at(self, t: float) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(f"{t}\n")
        os.replace(partial, self.path)

    def inject(self) -> None:
        self.at(INJECT_AT)


def prepare(directory: Path, scenario: str, titles: list[str]) -> tuple[dict[str, str], ScenarioClock]:
    """Build the stand-in into `directory`, write the named scenario for these rank titles and its clock at 0:
    the environment to give the watcher (watch, serve or guard: never the engine) and the clock to step."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"nvml-{scenario}.txt"
    path.write_text(rank_scenario(titles, SCENARIOS[scenario]))
    clock = ScenarioClock(directory / "nvml-clock")
    return environment(build(directory), path, clock.path), clock
