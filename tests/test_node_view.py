"""`serve --node`: the engines on this node found by their process titles (no URL), their ports read in their
own network namespace, their pod UIDs from their cgroups, and each rank's state exported for Prometheus."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from servewatch.serve.node import NodeView
from servewatch.sinks.export.exporter import label
from servewatch.sinks.export.rank_series import NodeRankCollector
from servewatch.sources.node import discover, listening_port, pod_uid

# A fake engine: an "API server" listening on a port, whose child titles itself VLLM::EngineCore (argv[0], as
# setproctitle shows in /proc/PID/cmdline) and starts two VLLM::Worker_TPn; each says "up" once it is in place.
# (With such an argv[0] Python cannot find its own executable: the path is passed down.)
RANK = "import sys, time\nprint('up', flush=True)\ntime.sleep(120)\n"
CORE = textwrap.dedent("""
    import subprocess, sys, time
    workers = [subprocess.Popen([f"VLLM::Worker_TP{n}", "-c", sys.argv[1]], executable=sys.argv[2],
                                stdout=subprocess.PIPE, text=True) for n in (0, 1)]
    print(" ".join(str(w.pid) for w in workers if w.stdout.readline() == "up\\n"), flush=True)
    time.sleep(120)
""")
API = textwrap.dedent("""
    import socket, subprocess, sys, time
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    core = subprocess.Popen(["VLLM::EngineCore", "-c", sys.argv[1], sys.argv[2], sys.executable],
                            executable=sys.executable,
                            stdout=subprocess.PIPE, text=True)
    print(listener.getsockname()[1], core.pid, core.stdout.readline().strip(), flush=True)
    time.sleep(120)
""")


@pytest.fixture
def fake_engine():
    api = subprocess.Popen([sys.executable, "-c", API, CORE, RANK], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    port, core, *workers = map(int, api.stdout.readline().split())
    yield api.pid, port, core, workers
    os.killpg(api.pid, signal.SIGKILL)
    api.wait(timeout=10)


def test_an_engine_is_found_by_its_titles_with_its_port_and_its_ranks(fake_engine):
    api, port, core, workers = fake_engine
    [engine] = [e for e in discover() if e.root_pid == api]
    assert (engine.port, engine.engine, engine.ranks) == (port, str(port), 3)
    assert engine.pod_uid is None                     # not in a pod here


def test_the_node_view_exports_each_rank_state_and_a_stopped_rank_reads_t(fake_engine):
    api, port, core, workers = fake_engine
    import time

    import psutil

    view = NodeView("node-a", 1.0)
    os.kill(workers[1], signal.SIGSTOP)
    try:
        # the stop lands asynchronously: the view is read once the kernel says the rank is stopped (a read right
        # after the signal found it still running, 'R', in the fast suite of 2026-12-06 23:50)
        deadline = time.monotonic() + 10
        while psutil.Process(workers[1]).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)      # another process's state: polled
        view.refresh()
        families = NodeRankCollector(view.node, lambda: view.samples, label).collect()
    finally:
        os.kill(workers[1], signal.SIGCONT)
    rows = {tuple(s.labels[k] for k in ("engine", "role", "rank", "state")) for s in families[0].samples
            if s.labels["engine"] == str(port)}
    assert rows == {(str(port), "engine_core", "none", "S"), (str(port), "worker", "TP0", "S"),
                    (str(port), "worker", "TP1", "T")}
    assert {s.labels["node"] for s in families[0].samples} == {"node-a"}
    assert {s.labels["pod_uid"] for s in families[0].samples} == {"none"}
    assert view.errors == 0


def test_a_failing_discovery_is_counted_and_keeps_the_last_good_view():
    calls = []

    def discover_twice():
        calls.append(1)
        if len(calls) > 1:
            raise OSError("/proc unreadable")
        return []
    clock = iter([0.0, 100.0])
    view = NodeView("n", 1.0, discover=discover_twice, clock=lambda: next(clock))
    view.refresh()
    view.samples = [("kept", None)]
    view.refresh()
    assert view.errors == 1 and view.samples == [("kept", None)]


def test_port_and_pod_uid_are_read_from_the_process_own_proc_files(tmp_path):
    """The socket inodes of the process's fds, matched with LISTEN rows of its own namespace's tcp tables
    (port 0x1F90 = 8080 listening, 0x1F91 connected); the pod UID from a cgroupfs or a systemd path."""
    proc = tmp_path / "77"
    (proc / "fd").mkdir(parents=True)
    (proc / "net").mkdir()
    os.symlink("socket:[4242]", proc / "fd" / "3")
    os.symlink("socket:[4343]", proc / "fd" / "4")
    os.symlink("/dev/null", proc / "fd" / "0")
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (proc / "net" / "tcp").write_text(
        header + "   0: 00000000:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4343\n"
        "   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242\n"
        "   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9999\n")
    assert listening_port(77, str(tmp_path)) == 8080     # 80 listens too, but on another process's socket
    (proc / "cgroup").write_text("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                                 "1f2e3d4c_5b6a_4789_8a9b_0c1d2e3f4a5b.slice/cri-containerd-abc.scope\n")
    assert pod_uid(77, str(tmp_path)) == "1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b"
    (proc / "cgroup").write_text("11:cpu:/kubepods/besteffort/pod0a1b2c3d-0000-4111-8222-333344445555/c0ffee\n")
    assert pod_uid(77, str(tmp_path)) == "0a1b2c3d-0000-4111-8222-333344445555"
    (proc / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    assert pod_uid(77, str(tmp_path)) is None
    assert listening_port(78, str(tmp_path)) is None and pod_uid(78, str(tmp_path)) is None


def test_a_real_listening_socket_is_read_from_proc():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert listening_port(os.getpid()) == listener.getsockname()[1]
    assert listening_port(os.getpid()) is None            # closed: nothing listens


def test_serve_node_without_a_target_exports_the_engines_on_this_node(fake_engine):
    import asyncio

    from servewatch.serve.config import ServeConfig
    from tests.serve_harness import running_serve, until

    api, port, core, workers = fake_engine

    async def main():
        async with running_serve(ServeConfig(node="node-a", listen="127.0.0.1:0")) as serve:
            async def found():
                return await serve.metric("servewatch_node_rank_state", node="node-a", engine=str(port),
                                          role="worker", rank="TP1", state="S")
            assert await until(found, 30, "the fake engine's TP1 worker in the node view") == 1
            assert await serve.metric("servewatch_node_view_errors_total") == 0
            assert (await serve.json("/api/v1/targets"))["targets"] == []       # no URL target at all
    asyncio.run(asyncio.wait_for(main(), timeout=60))


@pytest.mark.parametrize("argv, message", [
    (["serve"], "no targets: give --target URL, --file-sd FILE, --prometheus-sd URL, --node NAME"),
    (["serve", "--node", "bad name!"], "--node 'bad name!': a node name"),
])
def test_serve_needs_a_target_or_a_node_and_a_node_name_that_is_one(argv, message, capsys):
    from servewatch.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err
