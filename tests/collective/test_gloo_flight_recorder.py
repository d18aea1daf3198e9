"""A real two-rank gloo job (the lab vLLM venv's torch, TORCH_FR_BUFFER_SIZE set), read by servewatch given
only the job's PIDs: discovery from /proc/PID/environ, dumps through the pipe trigger, the analysis.

Run: `pytest -m collective tests/collective` (the default addopts deselect the marker; CI's real stage
runs it after the vLLM lab install)."""

from __future__ import annotations

import json
import time

import pytest

from servewatch.sources import collective_env, flight_recorder
from tests.collective.gloo import LAB_PYTHON, gloo_job

pytestmark = pytest.mark.collective


@pytest.fixture(scope="module", autouse=True)
def lab_torch():
    if not LAB_PYTHON.exists():
        pytest.fail(f"no lab vLLM venv python at {LAB_PYTHON}: run `servewatch lab vllm --install-only` first")


def _read(job) -> tuple[flight_recorder.Collected, flight_recorder.Analysis, float, str]:
    ranks = collective_env.discover(job.pids)
    said = collective_env.summary(ranks)
    got = flight_recorder.collect({r.rank: (r.pipe, r.dump) for r in ranks}, timeout_s=10)
    t0 = time.monotonic()
    analysis = flight_recorder.analyse(got.dumps)
    return got, analysis, time.monotonic() - t0, said


def test_rank_1_sleeping_before_its_5th_all_reduce_is_named_behind(tmp_path):
    with gloo_job("behind", tmp_path) as job:
        job.wait_for("rank 0 pipe ready", "rank 1 pipe ready",
                     "rank 0 in collective 5", "rank 1 sleeping before collective 5")
        got, analysis, named_s, said = _read(job)
    print(f"\n{said}\ndumps in {got.seconds:.3f} s, named in {named_s * 1000:.1f} ms: {analysis.why()}")
    assert said.startswith("RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 2000, pipe), 2 of 2")
    assert got.failures == {} and sorted(got.dumps) == [0, 1]
    assert analysis.behind == (("0", 1, 5),)
    assert analysis.groups[0].waiting == (0,) and analysis.groups[0].op == "all_reduce"
    assert got.seconds + named_s < 5.0


def test_all_reduce_against_broadcast_at_one_sequence_is_a_mismatch(tmp_path):
    with gloo_job("mismatch", tmp_path) as job:
        job.wait_for("rank 0 pipe ready", "rank 1 pipe ready",
                     "rank 0 in collective 5", "rank 1 in collective 5")
        got, analysis, named_s, _ = _read(job)
    print(f"\ndumps in {got.seconds:.3f} s, named in {named_s * 1000:.1f} ms: {analysis.why()}")
    assert got.failures == {}
    (mismatch,) = analysis.groups[0].mismatches
    assert mismatch.seq == 5 and mismatch.by_rank == {0: "all_reduce [1024]", 1: "broadcast [1024]"}
    assert analysis.behind == ()


def test_the_command_given_the_pids_names_rank_1(tmp_path, capsys):
    from servewatch.cli import main

    with gloo_job("behind", tmp_path) as job:
        job.wait_for("rank 0 pipe ready", "rank 1 pipe ready",
                     "rank 0 in collective 5", "rank 1 sleeping before collective 5")
        t0 = time.monotonic()
        code = main(["collectives", "--json", *[a for pid in job.pids for a in ("--pid", str(pid))]])
        elapsed = time.monotonic() - t0
    out = json.loads(capsys.readouterr().out)
    print(f"\nservewatch collectives --pid ... named it in {elapsed:.3f} s: {out['flight_recorder']['why']}")
    assert code == 1 and out["failures"] == []
    (group,) = out["flight_recorder"]["groups"]
    assert group["behind"] == [1] and group["seq"] == 5 and group["waiting"] == [0]
    assert elapsed < 5.0
