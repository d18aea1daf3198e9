"""NCCL RAS: the parsers against the report formats NCCL documents (tests/fixtures/nccl_ras/, from NCCL's own
docs at 2.30.7), and the client's bounds against a local stand-in speaking RAS's line protocol."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from servewatch.sources import nccl_ras as ras

FIXTURES = Path(__file__).parent / "fixtures" / "nccl_ras"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_json_sample_names_the_unresponsive_rank():
    report = ras.parse(fixture("docs_json_2.29.1.json"))
    assert report.format == "json" and report.nccl_version == "2.29.1" and report.known_version
    (comm,) = report.comms
    assert comm.hash == "0xae94423cfbb2ef4a" and comm.size == 2 and comm.missing == (1,)
    assert [(r.rank, r.pid, r.state) for r in comm.ranks] == [(0, 1524344, "ok"), (1, 1524345, "unresponsive")]
    assert comm.ranks[0].counts["AllReduce"] == 0
    assert report.why() == "RAS (NCCL 2.29.1): rank 1 of comm 0xae94423cfbb2ef4a unresponsive"


def test_json_counts_per_op_name_the_rank_behind():
    doc = json.loads(fixture("docs_json_2.29.1.json"))
    comm = doc["communicators"][0]
    rank = comm["ranks"][0]
    comm["ranks"] = [dict(rank, rank=i, pid=100 + i, collective_counts=dict(rank["collective_counts"],
                     AllReduce=1412 if i < 3 else 1411)) for i in range(4)]
    comm["missing_ranks"] = []
    report = ras.parse(json.dumps(doc))
    assert report.why() == "RAS (NCCL 2.29.1): ranks 0–2 at AllReduce 1,412, rank 3 at 1,411"


def test_text_mismatch_names_the_outliers_and_the_version_is_said_unknown():
    report = ras.parse(fixture("docs_text_mismatch_counts.txt"))
    assert report.format == "text" and report.nccl_version is None and not report.known_version
    (comm,) = report.comms
    assert comm.ident == "#0-0" and comm.hash == "0x27a079b828ff1a75" and comm.errors == ("MISMATCH",)
    assert comm.groups == (("operation", 26, 6650), ("operation", 6, 6649))
    assert [r.rank for r in comm.ranks] == [0, 2, 3, 4, 5, 7] and comm.ranks[0].pid == 483072
    assert report.why() == ("RAS (NCCL version not in the report): 26 ranks at collective 6,650, "
                            "ranks 0, 2, 3, 4, 5, 7 at 6,649")


def test_text_incomplete_and_dead():
    stopped = ras.parse(fixture("docs_text_incomplete_stopped.txt"))
    assert stopped.unreached == ((3487984, "172.16.64.213"),) and stopped.comms[0].missing == (21,)
    assert stopped.notes == ("Encountered 2 communication timeouts while gathering communicator data",)
    assert "rank 21 of comm 0xcf264af53edbe986 missing" in stopped.why()
    dead = ras.parse(fixture("docs_text_dead.txt"))
    assert dead.dead == ((3487984, "172.16.64.213"),)
    assert dead.why().endswith("process 3487984 on 172.16.64.213 considered dead")


def test_text_healthy_and_transitional_tables():
    ok = ras.parse(fixture("docs_text_running_ok.txt"))
    assert ok.table == ((0, 8, "RUNNING", "OK"),) and ok.why().endswith("8 comms RUNNING OK; no rank behind")
    fin = ras.parse(fixture("docs_text_finalize_status.txt"))
    assert [row[2] for row in fin.table] == ["FINALIZE", "RUNNING", "INIT"]
    assert fin.comms[0].errors == ("MISMATCH",)


def test_versions_known_and_unknown():
    head = "NCCL version {} compiled with CUDA 12.9\nCUDA runtime version 12090, driver version 12090\n\n"
    body = fixture("docs_text_running_ok.txt")
    assert ras.parse(head.format("2.27.3") + body).known_version
    newer = ras.parse(head.format("2.31.0") + body)
    assert newer.nccl_version == "2.31.0" and not newer.known_version
    assert "does not know" in newer.why()
    doc = json.loads(fixture("docs_json_2.29.1.json"))
    assert not ras.parse(json.dumps(dict(doc, nccl_version="3.0.0"))).known_version


class StandIn:
    """A local listener speaking RAS's line protocol with a canned report (or misbehaving on purpose)."""

    def __init__(self, report: str, *, json_ok: bool = True, greeting: bytes | None = None, silent: bool = False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.report, self.json_ok, self.greeting, self.silent = report, json_ok, greeting, silent
        self.said: list[str] = []
        self.done = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.sock.accept()
        with conn:
            f = conn.makefile("rwb")
            if self.silent:
                self.done.wait(30)
                return
            if self.greeting is not None:
                f.write(self.greeting)
                f.flush()
                self.done.wait(30)
                return
            for line in f:
                text = line.decode().strip()
                self.said.append(text)
                if text.startswith("CLIENT PROTOCOL"):
                    f.write(b"SERVER PROTOCOL 2\n")
                elif text.startswith("TIMEOUT"):
                    f.write(b"OK\n")
                elif text == "SET FORMAT json":
                    f.write(b"OK\n" if self.json_ok else b"ERROR: unknown command\n")
                elif text.endswith("STATUS"):
                    f.write(self.report.encode())
                    f.flush()
                    return
                f.flush()

    def close(self):
        self.done.set()
        self.sock.close()


def test_client_reads_json_through_the_protocol():
    stand_in = StandIn(fixture("docs_json_2.29.1.json"))
    try:
        report = ras.query(stand_in.addr, total_s=10)
    finally:
        stand_in.close()
    assert stand_in.said == ["CLIENT PROTOCOL 2", "TIMEOUT 5", "SET FORMAT json", "STATUS"]
    assert report.format == "json" and report.comms[0].missing == (1,)


def test_client_falls_back_to_text_before_2_28_7():
    stand_in = StandIn("NCCL version 2.26.2 compiled with CUDA 12.8\n\n" + fixture("docs_text_mismatch_counts.txt"),
                       json_ok=False)
    try:
        report = ras.query(stand_in.addr, total_s=10)
    finally:
        stand_in.close()
    assert report.format == "text" and report.nccl_version == "2.26.2" and report.known_version
    assert report.notes == ("RAS has no JSON format (NCCL < 2.28.7): the text report was read",)


def test_client_bounds_refused_silent_and_foreign_ports():
    with socket.socket() as s:                        # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(ras.RasError, match="connection refused"):
        ras.query(f"127.0.0.1:{free}")
    silent = StandIn("", silent=True)
    try:
        with pytest.raises(ras.RasError, match="no answer within the time bound"):
            ras.query(silent.addr, total_s=0.3)
    finally:
        silent.close()
    http = StandIn("", greeting=b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    try:
        with pytest.raises(ras.RasError, match="not as NCCL RAS"):
            ras.query(http.addr, total_s=5)
    finally:
        http.close()
    with pytest.raises(ras.RasError, match="not HOST:PORT"):
        ras.query("localhost")


def test_client_bounds_the_report_size():
    big = StandIn("x" * 5000)
    try:
        with pytest.raises(ras.RasError, match="report over"):
            ras.query(big.addr, max_bytes=1000, total_s=10)
    finally:
        big.close()
