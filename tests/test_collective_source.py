"""The live collective source (servewatch.sources.collective_source): discovery said once, every rank's Flight
Recorder dump collected through its pipe when a stall is pending, `collective_hang` fired by the recorder
from the timeline; and each safety case said in one line (a pipe no one reads, a pipe that would block, a
dump too large, a RAS port held by something else, a process that is not the one discovered).

The ranks here are stand-ins (tests/collective/fake_rank.py, standard library only) that serve dumps a
real gloo job recorded; the real job is tests/collective/test_live_collection.py (marker collective)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from servewatch.clock import RealClock
from servewatch.sources import collective_source as cs
from servewatch.sources import flight_recorder as fr
from servewatch.watch.recorder import Recorder

FAKE = Path(__file__).parent / "collective" / "fake_rank.py"
FIXTURES = Path(__file__).parent / "fixtures" / "flight_recorder"


def _line(proc: subprocess.Popen, timeout_s: float = 20.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, f"the stand-in rank said nothing in {timeout_s:g} s"
    return proc.stdout.readline().strip()


@contextlib.contextmanager
def ranks(tmp_path: Path, modes=("serve", "serve"), case: str = "behind", extra_env: dict | None = None,
          rank_env: bool = True):
    procs = []
    try:
        for rank, mode in enumerate(modes):
            env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(tmp_path / "pipe_"),
                       TORCH_FR_DUMP_TEMP_FILE=str(tmp_path / "fr_"), **(extra_env or {}))
            env.pop("RANK", None)
            if rank_env:
                env["RANK"] = str(rank)
            procs.append(subprocess.Popen([sys.executable, str(FAKE), mode,
                                           str(FIXTURES / f"gloo_{case}_rank{rank}.json"),
                                           *(() if rank_env else (str(rank),))],
                                          env=env, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            assert _line(proc) == "ready"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


def _record(source: cs.CollectiveSource, duration: float = 10.0):
    fired_at: list[float] = []

    def stop_when(fired) -> bool:
        fired_at.append(time.monotonic())
        return fired.verdict.name == "collective_hang"

    recorder = Recorder([source], RealClock(), stop_when=stop_when, tool="test")
    t0 = time.monotonic()
    asyncio.run(recorder.run(duration))
    return recorder, t0, fired_at


def test_a_pending_stall_collects_every_ranks_dump_and_collective_hang_fires(tmp_path):
    said: list[str] = []
    with ranks(tmp_path) as procs:
        source = cs.CollectiveSource(RealClock(), 0.2, pids=[p.pid for p in procs], pending=lambda: True,
                                     say=said.append)
        recorder, t0, fired_at = _record(source)
    (fired,) = [f for f in recorder.fired if f.verdict.name == "collective_hang"]
    assert fired.verdict.details["rank"] == 1 and fired.verdict.details["seq"] == 5
    assert fired.verdict.details["evidence"] == "flight_recorder"
    assert said[0] == "collectives: RAS: not in use (no NCCL loaded); Flight Recorder: on (buffer 2000, pipe), " \
                      "2 of 2 processes"
    assert sum(line.startswith("collectives: RAS") for line in said) == 1      # said once
    assert source.collections == 1 and sorted(source.last_collected.dumps) == [0, 1]
    assert str(tmp_path) not in " ".join(said)
    # the bundle's copy of the dumps: positions, numbers only
    positions = [e.fields for e in recorder.ring.window().logs if e.fields.get("state") == "position"]
    assert {(p["rank"], p["entered"]) for p in positions} == {(0, 5), (1, 4)}


def test_ranks_without_rank_in_their_environment_are_found_by_their_pipes_names(tmp_path):
    said: list[str] = []
    with ranks(tmp_path, rank_env=False) as procs:
        source = cs.CollectiveSource(RealClock(), 0.2, pids=[p.pid for p in procs], pending=lambda: True,
                                     say=said.append)
        recorder, _, _ = _record(source)
    assert said[0].endswith("Flight Recorder: on (buffer 2000, pipe), 2 of 2 processes; 2 without RANK: their "
                            "pipes are found by name")
    (fired,) = recorder.fired
    assert (fired.verdict.details["rank"], fired.verdict.details["seq"]) == (1, 5)
    assert sorted(source.last_collected.dumps) == [0, 1]


def test_nothing_pending_writes_no_pipe(tmp_path):
    said: list[str] = []
    with ranks(tmp_path) as procs:
        source = cs.CollectiveSource(RealClock(), 0.1, pids=[p.pid for p in procs], pending=lambda: False,
                                     say=said.append)
        _record(source, duration=0.6)
    assert source.collections == 0 and not (tmp_path / "fr_0").exists()
    assert len(said) == 1


def test_forced_collection_before_a_kill(tmp_path):
    with ranks(tmp_path) as procs:
        source = cs.CollectiveSource(RealClock(), 60.0, pids=[p.pid for p in procs], pending=lambda: False,
                                     say=lambda line: None)
        recorder = Recorder([source], RealClock(), tool="test")

        async def go():
            await recorder.poll(source)          # the first poll: nothing pending, nothing asked
            assert source.collections == 0
            return await cs.collect_now(recorder)

        assert asyncio.run(go()) is source
    assert source.collections == 1
    assert [e.fields["rank"] for e in recorder.ring.window().logs if e.fields.get("state") == "behind"] == [1]


def test_a_pipe_no_one_reads_and_a_dump_too_large_are_one_line_each(tmp_path):
    said: list[str] = []
    with ranks(tmp_path, modes=("noread", "huge")) as procs:
        source = cs.CollectiveSource(RealClock(), 0.1, pids=[p.pid for p in procs], pending=lambda: True,
                                     say=said.append, dump_timeout_s=2.0)
        recorder, _, _ = _record(source, duration=0.8)
    assert "collectives: rank 0: no process reads the dump trigger pipe: not written" in said
    assert any(line.startswith("collectives: rank 1: dump of 41,943,040 bytes is over the") for line in said)
    assert not recorder.fired
    assert len(said) == len(set(said))              # each said once, however often it repeats


def test_a_pipe_that_would_block_is_said_not_waited_on(tmp_path):
    pipe = tmp_path / "p.pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)     # a reader that never reads
    try:
        writer = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        with contextlib.suppress(BlockingIOError):
            for _ in range(100_000):
                os.write(writer, b"x" * 4096)
        os.close(writer)
        t0 = time.monotonic()
        assert fr.request_dump(str(pipe)) == "the dump trigger pipe is full (a request is already pending)"
        assert time.monotonic() - t0 < 1.0
    finally:
        os.close(reader)


def test_a_process_not_the_one_discovered_is_not_written(tmp_path):
    with ranks(tmp_path, modes=("serve",)) as (proc,):
        pipe = str(tmp_path / "pipe_0.pipe")
        assert cs.not_ours(proc.pid, pipe, cs._create_time(proc.pid)) is None
        why = cs.not_ours(proc.pid, pipe, 12.0)
        assert why == f"pid {proc.pid} is no longer the process discovered (gone or its PID reused): not written"
        said: list[str] = []
        source = cs.CollectiveSource(RealClock(), 0.1, pids=[proc.pid], pending=lambda: True, say=said.append)
        source._created[proc.pid] = 12.0                 # as if the PID had been reused since discovery
        _record(source, duration=0.5)
    assert f"collectives: rank 0: {why}" in said and source.collections == 0
    assert not (tmp_path / "fr_0").exists()


def test_an_unproven_server_gets_no_pipe_write(tmp_path):
    said: list[str] = []
    with ranks(tmp_path, modes=("serve",)) as (proc,):
        source = cs.CollectiveSource(RealClock(), 0.1, pids=[proc.pid], pending=lambda: True, say=said.append,
                                     proven=lambda: False)
        _record(source, duration=0.4)
    assert "collectives: the server's identity is not proven: no dump trigger written" in said
    assert not (tmp_path / "fr_0").exists()


def _fake_proc(tmp_path: Path, pid: int, env: dict) -> str:
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "maps").write_bytes(b"7f0000-7f1000 r-xp 0 0:0 0 /usr/lib/libnccl.so.2.27.3\n")
    return str(tmp_path / "proc")


def test_a_ras_port_held_by_something_else_is_one_line(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def answer():
        with contextlib.suppress(OSError):
            for _ in range(4):
                conn, _ = server.accept()
                with conn:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    proc = _fake_proc(tmp_path, 4242, {"RANK": "0", "NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
    said: list[str] = []
    source = cs.CollectiveSource(RealClock(), 0.1, pids=[4242], pending=lambda: False, say=said.append, proc=proc)
    try:
        recorder, _, _ = _record(source, duration=0.5)
    finally:
        server.close()
    assert said[0].startswith("collectives: RAS: on (127.0.0.1:"), said
    assert (f"collectives: RAS at 127.0.0.1:{port}: the port answers, but not as NCCL RAS (something else holds it)"
            in said)
    assert source.ras_reads == 0 and not recorder.fired


def test_ras_silent_port_is_bounded(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)                                   # accepts (the kernel does) and never answers
    port = server.getsockname()[1]
    proc = _fake_proc(tmp_path, 4243, {"RANK": "0", "NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
    said: list[str] = []
    source = cs.CollectiveSource(RealClock(), 0.1, pids=[4243], pending=lambda: False, say=said.append, proc=proc,
                                 ras_total_s=0.5)

    async def go():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await source.poll()
        return loop.time() - t0

    try:
        took = asyncio.run(go())
    finally:
        server.close()
    assert f"collectives: RAS at 127.0.0.1:{port}: no answer within the time bound" in said
    assert took < 0.5 + 0.5                            # the bound plus a measured allowance (discovery, thread)


def test_watch_pid_collects_the_dumps_once_the_stall_holds_and_names_the_rank(tmp_path):
    """`servewatch watch URL --pid ROOT` over a tree with a simulator stalled under four streams and two
    stand-in ranks: the stall holds, the dumps are collected through the pipes, collective_hang fires naming
    rank 1 at collective 5, its bundle verifies and its report shows the ranks' positions."""
    import json
    import signal

    from servewatch.bundle.incident import load_incident
    from servewatch.bundle.summarize import render_markdown
    from tests.test_watch_command import free_port, send_long_requests, wait_healthy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tree = subprocess.Popen([sys.executable, str(FAKE.with_name("fake_server_tree.py")), str(port), str(tmp_path),
                             "behind", "--fault", "stall@3s"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    watch = None
    try:
        assert _line(tree) == "ready"
        wait_healthy(url)
        send_long_requests(url)
        watch = subprocess.Popen([sys.executable, "-m", "servewatch", "watch", url, "--pid", str(tree.pid),
                                  "--interval", "0.5", "--json", "--duration", "60", "--out", str(tmp_path / "b")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fired = []
        while not any(f["verdict"] == "collective_hang" for f in fired):
            line = _line(watch, timeout_s=60)
            assert line, "watch ended before collective_hang"
            fired.append(json.loads(line))
        watch.send_signal(signal.SIGTERM)
        _, stderr = watch.communicate(timeout=30)
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        os.killpg(tree.pid, signal.SIGTERM)
        tree.wait(timeout=20)
    hang = next(f for f in fired if f["verdict"] == "collective_hang")
    stall = [f["verdict"] for f in fired if f["verdict"] != "collective_hang"]
    print(f"\nfired in order: {[f['verdict'] for f in fired]}; collective_hang: {hang['why']}")
    assert stall, "collective_hang fired with no stall pending before it"
    assert hang["why"].startswith("rank 1 behind in group 0: rank 0 waiting in collective 5 (all_reduce)")
    said = [line for line in stderr.splitlines() if "collectives:" in line]
    assert said[0] == ("servewatch watch: collectives: RAS: not in use (no NCCL loaded); Flight Recorder: on "
                       "(buffer 2000, pipe), 2 of 4 processes"), stderr      # the parent and the simulator are not ranks
    assert sum("Flight Recorder: on" in line for line in said) == 1
    assert any(" 2 dump(s) in " in line for line in said)
    report = render_markdown(load_incident(hang["bundle"]))
    assert "| 0 | 0 | 4 | 5 | all_reduce |" in report


def test_guard_collects_every_ranks_dump_before_it_kills_the_tree(tmp_path):
    """`servewatch guard URL --pid ROOT` over the same tree: on the stall, the dumps are read (the forced
    collection before the kill) and said before the tree is killed."""
    import signal

    from tests.test_watch_command import free_port, send_long_requests, wait_healthy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tree = subprocess.Popen([sys.executable, str(FAKE.with_name("fake_server_tree.py")), str(port), str(tmp_path),
                             "behind", "--fault", "stall@3s"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert _line(tree) == "ready"
        wait_healthy(url)
        send_long_requests(url)
        guard = subprocess.run([sys.executable, "-m", "servewatch", "guard", url, "--pid", str(tree.pid),
                                "--interval", "0.5", "--no-stacks", "--duration", "60"],
                               capture_output=True, text=True, timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tree.pid, signal.SIGKILL)
        tree.wait(timeout=20)
    lines = guard.stderr.splitlines()
    print("\n" + "\n".join(lines))
    assert guard.returncode == 3, guard.stderr
    kill = next(i for i, line in enumerate(lines) if "killed the tree" in line)
    dumps = [i for i, line in enumerate(lines) if "collectives: 2 dump(s) in " in line]
    assert dumps and dumps[-1] < kill
    assert "rank 1 at collective 4 (completed) — behind; rank 0 waiting in collective 5" in lines[dumps[-1]]
    hang = next(i for i, line in enumerate(lines)     # watch.event_lines' fired line, on guard's stderr
                if re.match(r"servewatch guard: \d\d:\d\d:\d\d verdict collective_hang fired: rank 1 ", line))
    assert dumps[-1] < hang < kill


def test_ras_read_on_its_slow_cadence_fires_collective_hang_from_its_counts(tmp_path):
    """A RAS stand-in speaking NCCL's protocol, answering the text report NCCL documents (26 ranks at operation
    6650, 6 at 6649): the first poll reads it, collective_hang fires naming the first rank behind, and no
    second read comes within the 30 s cadence."""
    from tests.test_nccl_ras import StandIn, fixture

    stand_in = StandIn("NCCL version 2.26.2 compiled with CUDA 12.8\n\n" + fixture("docs_text_mismatch_counts.txt"),
                       json_ok=False)
    proc = _fake_proc(tmp_path, 4244, {"RANK": "0", "NCCL_RAS_ADDR": stand_in.addr})
    said: list[str] = []
    source = cs.CollectiveSource(RealClock(), 0.1, pids=[4244], pending=lambda: False, say=said.append, proc=proc)
    try:
        recorder, _, _ = _record(source, duration=10.0)
    finally:
        stand_in.close()
    (fired,) = recorder.fired
    assert fired.verdict.name == "collective_hang" and fired.verdict.details["evidence"] == "ras"
    assert fired.verdict.why == ("rank 0 behind: at collective count 6649, other ranks at 6650 — RAS; Flight "
                                 "Recorder: not read")
    assert source.ras_reads == 1 and stand_in.said[-1] == "STATUS"

    async def again():                     # the next poll, at once: nothing pending, RAS not due for 30 s
        t0 = time.monotonic()
        await source.poll()
        return time.monotonic() - t0

    before = list(said)
    assert asyncio.run(again()) < 0.5 and source.ras_reads == 1
    assert said == before                  # no connection tried (the stand-in is closed: it would be refused, said)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t


def test_the_tree_is_read_again_on_the_slow_cadence_not_at_every_poll(tmp_path):
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    environ = proc / "77" / "environ"
    environ.write_bytes(b"RANK=0\0")
    clock = _Clock()
    said: list[str] = []
    source = cs.CollectiveSource(clock, 0.5, pids=[77], pending=lambda: False, say=said.append, proc=str(proc))

    async def poll_at(t: float) -> int:
        clock.t = t
        await source.poll()
        return source._ranks[0].fr_buffer

    async def go():
        assert await poll_at(0.0) is None           # no maps: the torch and its default are not known
        environ.write_bytes(b"RANK=0\0TORCH_FR_BUFFER_SIZE=2000\0")     # the rank's environment, as read later
        assert await poll_at(10.0) is None                               # not read again: nothing pending
        assert await poll_at(30.0) == 2000                               # the slow cadence

    asyncio.run(go())
    assert len(said) == 1


def test_ras_is_read_at_once_while_a_stall_is_pending_at_most_once_a_second(tmp_path):
    from tests.test_nccl_ras import fixture

    report = ("NCCL version 2.26.2 compiled with CUDA 12.8\n\n" + fixture("docs_text_mismatch_counts.txt")).encode()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    addr = f"127.0.0.1:{server.getsockname()[1]}"
    served: list[int] = []

    def serve():                                     # NCCL's RAS protocol, one connection after another
        with contextlib.suppress(OSError):
            while len(served) < 8:
                conn, _ = server.accept()
                with conn, conn.makefile("rwb") as f:
                    for line in f:
                        text = line.decode().strip()
                        reply = {"CLIENT": b"SERVER PROTOCOL 2\n", "TIMEOUT": b"OK\n"}.get(text.split(" ")[0],
                                                                                          b"ERROR\n")
                        f.write(report if text.endswith("STATUS") else reply)
                        f.flush()
                        if text.endswith("STATUS"):
                            served.append(1)
                            break

    threading.Thread(target=serve, daemon=True).start()
    proc = _fake_proc(tmp_path, 4245, {"RANK": "0", "NCCL_RAS_ADDR": addr})
    clock = _Clock()
    pending = [False]
    source = cs.CollectiveSource(clock, 0.5, pids=[4245], pending=lambda: pending[0], say=lambda line: None,
                                 proc=proc)

    async def poll_at(t: float) -> int:
        clock.t = t
        await source.poll()
        return source.ras_reads

    async def go():
        assert await poll_at(0.0) == 1           # the first read
        assert await poll_at(5.0) == 1           # nothing pending: the 30 s cadence
        pending[0] = True
        assert await poll_at(5.5) == 2           # a stall pending: at once
        assert await poll_at(6.0) == 2           # ... at most once a second
        assert await poll_at(6.5) == 3

    try:
        asyncio.run(go())
    finally:
        server.close()


def test_a_silent_ras_port_never_delays_the_recorders_other_sources(tmp_path):
    from servewatch.timeline.samples import HealthSample

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)                                   # accepts (the kernel does) and never answers
    proc = _fake_proc(tmp_path, 4246, {"RANK": "0", "NCCL_RAS_ADDR": f"127.0.0.1:{server.getsockname()[1]}"})
    clock = RealClock()

    class Health:
        kind, interval = "health", 0.1

        async def poll(self):
            return [HealthSample(clock.now(), 200, 0.001)]

    source = cs.CollectiveSource(clock, 0.1, pids=[4246], pending=lambda: True, say=lambda line: None, proc=proc,
                                 ras_total_s=1.5)
    recorder = Recorder([Health(), source], clock, tool="test")
    try:
        asyncio.run(recorder.run(1.5))               # the RAS read waits out its whole 1.5 s bound meanwhile
    finally:
        server.close()
    health = recorder.ring.window().health
    gaps = [b.t - a.t for a, b in zip(health, health[1:])]
    assert source.ras_reads == 0 and len(health) >= 10, len(health)
    assert max(gaps) < 0.1 + 0.2, gaps                # the cadence plus a measured allowance for a shared CPU
