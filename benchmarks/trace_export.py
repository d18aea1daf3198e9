"""Trace export memory: peak RSS of `servewatch requests --export mooncake` over N request records (default a
million, as the proxy writes them: ~450 bytes a line, slightly out of arrival order as requests finish out of
order), against a plain export of the same rows (every record json-loaded into a list, the rows built as dicts,
one json.dump), each in its own process; and the time of each. The export runs twice: as the command runs it
(streamed through its reorder window) and with a window too small for the records' disorder (so from
compact columns, its way for records far out of arrival order).

    .venv/bin/python benchmarks/trace_export.py [--rows 1000000] [--ids-every 0] [--keep]

--ids-every K gives every K-th record 1,500 prompt token ids (hash_ids for it: 3 blocks of 512). The rows the
two write are checked equal (the export's hash ids aside, which no plain dump could make).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T_WINDOW = 65536        # servewatch.load.trace.REORDER_ROWS

EXPORT = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[3])
from servewatch.load import trace as T
t = time.perf_counter()
with open(sys.argv[2], "w+", buffering=1 << 20) as fh:
    st = T.export([sys.argv[1]], fh, "mooncake", key=T.new_key(), reorder_rows=int(sys.argv[4]))
print(st.rows, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, int(st.streamed))
"""

PLAIN = r"""
import json, resource, sys, time
t = time.perf_counter()
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
records.sort(key=lambda r: r["scheduled"])
t0 = records[0]["scheduled"]
rows = []
for r in records:
    ok = r.get("error") is None and r.get("http_status") == 200
    rows.append({"timestamp": round((r["scheduled"] - t0) * 1000, 3), "input_length": r["input_tokens"],
                 "output_length": r["output_tokens"] if ok else r["max_tokens"]})
with open(sys.argv[2], "w") as fh:
    json.dump(rows, fh)
print(len(rows), time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def make_records(path: Path, n: int, ids_every: int) -> None:
    rng = random.Random(0)
    t = 1764900000.0
    with open(path, "w") as fh:
        for i in range(n):
            t += rng.expovariate(200.0)
            late = rng.random() * 0.5                 # written when it finished: a little out of arrival order
            rec = {"id": i, "scheduled": round(t + late, 6), "sent": round(t + late + 0.0002, 6),
                   "schedule_delay_s": 0.0002, "http_status": 200, "error": None, "error_detail": None,
                   "ttft_s": 0.05, "tpot_s": 0.01, "e2e_s": 1.3, "input_tokens": rng.randint(10, 4000),
                   "output_tokens": rng.randint(1, 500), "token_source": "server", "prompt_tokens_target": 0,
                   "max_tokens": 512, "finish_reason": "length", "itl_exact": True, "chunks": [],
                   "itl_token_s": [], "itl_chunk_s": [], "model": "meta-llama/Llama-3.1-8B-Instruct",
                   "api": "chat", "proxy": {"tenant": "a1b2c3d4e5f6", "itl_p99_s": 0.02, "upstream": "u1"}}
            if ids_every and i % ids_every == 0:
                rec["prompt_token_ids"] = [rng.randrange(128000) for _ in range(1500)]
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")


def run(script: str, src: Path, out: Path, window: int = 0) -> tuple[int, float, float, str]:
    done = subprocess.run([sys.executable, "-c", script, str(src), str(out), str(ROOT), str(window)],
                          capture_output=True, text=True, check=True)
    n, seconds, maxrss_kib, *streamed = done.stdout.split()
    how = "" if not streamed else ("streamed through the reorder window" if streamed[0] == "1"
                                   else "from compact columns")
    return int(n), float(seconds), int(maxrss_kib) / 1024, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ids-every", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sw-trace-bench-") as tmp:
        src = Path(tmp) / "requests.jsonl"
        t = time.perf_counter()
        make_records(src, args.rows, args.ids_every)
        size = src.stat().st_size
        print(f"{args.rows:,} records, {size / 2**20:.0f} MiB, made in {time.perf_counter() - t:.1f} s")
        n1, s1, m1, how1 = run(EXPORT, src, Path(tmp) / "trace.jsonl", T_WINDOW)
        n3, s3, m3, how3 = run(EXPORT, src, Path(tmp) / "columns.jsonl", 16)   # too small a window: columns
        n2, s2, m2, _ = run(PLAIN, src, Path(tmp) / "plain.json")
        assert (Path(tmp) / "trace.jsonl").read_bytes().count(b"\n") == n3
        ours = [json.loads(x) for x in open(Path(tmp) / "trace.jsonl")]
        plain = json.load(open(Path(tmp) / "plain.json"))
        for a, b in zip(ours, plain):
            a.pop("hash_ids", None)
            a.pop("hash_ids_missing", None)
        assert n1 == n2 == args.rows and len(ours) == len(plain)
        assert all(a["input_length"] == b["input_length"] and a["output_length"] == b["output_length"]
                   and abs(a["timestamp"] - b["timestamp"]) < 0.002 for a, b in zip(ours, plain))
        del ours, plain
        print(f"export, {how1}: peak RSS {m1:7.0f} MiB, {s1:5.1f} s")
        print(f"export, {how3}:                peak RSS {m3:7.0f} MiB, {s3:5.1f} s")
        print(f"plain json dump of the same rows:                  peak RSS {m2:7.0f} MiB, {s2:5.1f} s")
        print(f"ratio: {m1 / m2:.3f} of the plain dump's memory streamed ({m2 / m1:.1f}x less), "
              f"{m3 / m2:.3f} from columns ({m2 / m3:.1f}x less)")
        if args.keep:
            keep = Path.cwd() / "trace-bench"
            keep.mkdir(exist_ok=True)
            os.replace(src, keep / "requests.jsonl")


if __name__ == "__main__":
    main()
