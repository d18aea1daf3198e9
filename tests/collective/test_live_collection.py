"""The live path on a real two-rank gloo job (the lab vLLM venv's torch, TORCH_FR_BUFFER_SIZE set): the
recorder with servewatch's collective source over the job's PIDs, a stall pending, collects every rank's dump
through its pipe and `collective_hang` fires naming rank 1 at collective 5, within 5 s of the dumps.

Run: `pytest -m collective tests/collective` (CI's "real collectives (gloo)" stage)."""

from __future__ import annotations

import asyncio
import time

import pytest

from servewatch.clock import RealClock
from servewatch.sources.collective_source import CollectiveSource
from servewatch.watch.recorder import Recorder
from tests.collective.gloo import LAB_PYTHON, gloo_job

pytestmark = pytest.mark.collective


@pytest.fixture(scope="module", autouse=True)
def lab_torch():
    if not LAB_PYTHON.exists():
        pytest.fail(f"no lab vLLM venv python at {LAB_PYTHON}: run `servewatch lab vllm --install-only` first")


def _run(job, mode: str):
    said: list[tuple[float, str]] = []
    fired_at: list[float] = []
    source = CollectiveSource(RealClock(), 0.5, pids=job.pids, pending=lambda: True,
                              say=lambda line: said.append((time.monotonic(), line)))

    def stop_when(fired) -> bool:
        fired_at.append(time.monotonic())
        return fired.verdict.name == "collective_hang"

    recorder = Recorder([source], RealClock(), stop_when=stop_when, tool="test")
    asyncio.run(recorder.run(30.0))
    return recorder, source, said, fired_at


def test_the_recorder_names_rank_1_behind_at_its_5th_all_reduce(tmp_path):
    with gloo_job("behind", tmp_path) as job:
        job.wait_for("rank 0 pipe ready", "rank 1 pipe ready",
                     "rank 0 in collective 5", "rank 1 sleeping before collective 5")
        recorder, source, said, fired_at = _run(job, "behind")
    (fired,) = [f for f in recorder.fired if f.verdict.name == "collective_hang"]
    dumps_t = next(t for t, line in said if " dump(s) in " in line)
    print("\n" + "\n".join(line for _, line in said) + f"\nwhy: {fired.verdict.why}\n"
          f"fired {fired_at[-1] - dumps_t:.3f} s after the dumps were read")
    assert said[0][1].startswith("collectives: RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 2000, "
                                 "pipe), 2 of 2 processes")
    assert sorted(source.last_collected.dumps) == [0, 1] and source.last_collected.failures == {}
    details = fired.verdict.details
    assert (details["rank"], details["seq"], details["cause"], details["op"]) == (1, 5, "behind", "all_reduce")
    assert fired.verdict.why.startswith("rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce)")
    assert fired_at[-1] - dumps_t < 5.0


def test_the_recorder_names_a_mismatch(tmp_path):
    with gloo_job("mismatch", tmp_path) as job:
        job.wait_for("rank 0 pipe ready", "rank 1 pipe ready",
                     "rank 0 in collective 5", "rank 1 in collective 5")
        recorder, _, said, _ = _run(job, "mismatch")
    (fired,) = [f for f in recorder.fired if f.verdict.name == "collective_hang"]
    print(f"\nwhy: {fired.verdict.why}")
    assert fired.verdict.details["cause"] == "mismatch" and fired.verdict.details["seq"] == 5
