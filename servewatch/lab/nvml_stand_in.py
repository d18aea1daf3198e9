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
