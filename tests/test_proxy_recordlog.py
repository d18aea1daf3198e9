"""The proxy's records file: JSON lines, rotation, and a failing disk that is counted and never fatal."""

from __future__ import annotations

import json
import os

import pytest

from servewatch.proxy.recordlog import RecordLog


def _rec(i: int) -> dict:
    return {"id": i, "ttft_s": 3.6e-05 * i, "error": None, "proxy": {"model": "m", "stream": True}}


def test_lines_are_json_and_rotate_at_the_size_bound(tmp_path):
    path = tmp_path / "r.jsonl"
    log = RecordLog(str(path), max_bytes=400, keep=3)                 # three files in all
    for i in range(30):
        log.write(_rec(i))
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["r.jsonl", "r.jsonl.1", "r.jsonl.2"]
    lines = [json.loads(x) for name in ("r.jsonl.2", "r.jsonl.1", "r.jsonl")       # oldest first
             for x in (tmp_path / name).read_text().splitlines()]
    assert [r["id"] for r in lines] == list(range(30 - len(lines), 30))   # the newest kept, in order
    assert lines[-1] == _rec(29)
    assert all(os.path.getsize(tmp_path / n) <= 400 for n in files)
    assert log.lost == 0 and log.rotations >= 3 and len(lines) < 30


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a disk that is always full)")
def test_a_full_disk_is_counted_and_never_raises(capsys):
    log = RecordLog("/dev/full")
    for i in range(3):
        log.write(_rec(i))           # into the buffer
    log.flush()                      # ENOSPC: the three are lost
    assert log.lost == 3 and log.failing
    log.write(_rec(3))
    log.flush()
    assert log.lost == 4
    log.close()                      # no exception at close either
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1             # one line when the run of failures starts, not one per record
    assert err[0].startswith("servewatch proxy: --records /dev/full: No space left on device; records are dropped")


class _Failing:
    """A file whose next flush fails (the disk refuses once)."""

    def __init__(self, real):
        self.real = real

    def write(self, data):
        return self.real.write(data)

    def tell(self):
        return self.real.tell()

    def flush(self):
        raise OSError(28, "No space left on device")

    def close(self):
        self.real.close()


def test_writing_resumes_when_the_disk_takes_bytes_again(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    log = RecordLog(str(path))
    log.write(_rec(0))
    log.flush()
    log._file = _Failing(log._file)
    log.write(_rec(1))
    log.flush()                      # fails: record 1 is counted lost (its bytes may or may not be on disk)
    assert log.lost == 1 and log.failing
    log.write(_rec(2))               # the file is opened afresh
    log.flush()
    log.close()
    assert not log.failing and log.lost == 1
    ids = [json.loads(x)["id"] for x in path.read_text().splitlines()]
    assert ids[0] == 0 and ids[-1] == 2
    err = capsys.readouterr().err
    assert "records are dropped and counted" in err and "writing again (1 records lost so far)" in err


def test_the_lost_records_are_exported_with_the_proxy_metrics():
    from servewatch.proxy import Proxy, ProxyConfig
    from servewatch.proxy.telemetry import Telemetry

    class _Log:
        lost = 7

    telemetry = Telemetry(sample=0.0)
    telemetry.proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9"))
    assert b"records_lost" not in telemetry.exposition()          # no records kept: no such series
    telemetry.log = _Log()
    assert b"\nservewatch_proxy_records_lost_total 7\n" in telemetry.exposition()
