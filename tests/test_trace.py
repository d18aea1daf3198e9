"""Traces in and out (servewatch/load/trace.py): the published sample rows of each format read back, a bad row
named by file and line, the export's rows (Mooncake and Azure) from request records, keyed prefix hashes that
share exactly the shared blocks and never join across keys, and nothing private in an exported file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.load import trace as T
from servewatch.load.trace_replay import PromptMaker

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
pytestmark = pytest.mark.timeout(60)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servewatch", *args], capture_output=True, text=True, timeout=60)


def test_mooncake_sample_rows_read_with_offsets_in_seconds_and_hash_ids():
    trace = T.read_trace(str(FIXTURES / "mooncake_conversation_head.jsonl"))
    assert trace.fmt == "mooncake" and trace.bad_count == 0
    assert [r.offset_s for r in trace.rows] == [0, 0, 0, 0, 3.0, 3.0, 5.999, 9.0]
    assert trace.rows[0].input_tokens == 6758 and trace.rows[0].output_tokens == 500
    assert list(trace.rows[0].hash_ids[:3]) == [0, 1, 2] and len(trace.rows[0].hash_ids) == 14   # ceil(6758/512)


def test_azure_sample_rows_read_as_offsets_from_the_first():
    trace = T.read_trace(str(FIXTURES / "azure_conv_head.csv"))
    assert trace.fmt == "azure" and trace.bad_count == 0 and len(trace.rows) == 10
    assert trace.rows[0].offset_s == 0.0
    assert trace.rows[1].offset_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert (trace.rows[2].input_tokens, trace.rows[2].output_tokens) == (879, 55)
    assert all(r.hash_ids is None for r in trace.rows)


def test_window_speed_rows_and_max_rows():
    path = str(FIXTURES / "mooncake_conversation_head.jsonl")
    trace = T.read_trace(path, window=(3.0, 9.0))
    assert [r.offset_s for r in trace.rows] == [0.0, 0.0, pytest.approx(2.999)]
    assert len(T.read_trace(path, max_rows=2).rows) == 2
    assert len(T.read_trace(path, window=(3.0, None), max_rows=1).rows) == 1


def test_a_bad_row_is_named_by_file_and_line_and_reading_goes_on(tmp_path):
    good = (FIXTURES / "aiperf_mooncake_example.jsonl").read_text().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([good[0], '{"timestamp": 5, "input_length": -3, "output_length": 1}', "not json",
                               good[1], '{"timestamp": 9, "input_length": 3, "output_length": 1, "hash_ids": "x"}',
                               good[2]]) + "\n")
    trace = T.read_trace(str(path))
    assert len(trace.rows) == 3 and trace.bad_count == 3
    assert [b.line for b in trace.bad] == [2, 3, 5]
    assert trace.bad[0].words() == f"{path}, line 2: 'input_length' is not a number >= 0; skipped"
    csv_path = tmp_path / "a.csv"
    lines = (FIXTURES / "azure_conv_head.csv").read_text().splitlines()
    csv_path.write_text("\n".join(lines[:3] + ["2023-11-16 18:15:51.2,abc,3", "yesterday,4,5"] + lines[3:]) + "\n")
    trace = T.read_trace(str(csv_path))
    assert len(trace.rows) == 10 and [b.line for b in trace.bad] == [4, 5]


def test_not_a_trace_is_one_clear_error(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("hello,world\n")
    with pytest.raises(ValueError, match="neither Mooncake JSONL"):
        T.read_trace(str(path))


def _records(path: Path, n: int = 6, token_ids: bool = False) -> Path:
    with open(path, "w") as fh:
        for i in range(n):
            rec = {"id": i, "scheduled": 1764900000.0 + (n - i) * 0.5, "sent": None, "http_status": 200,
                   "error": None, "input_tokens": 600 + i, "output_tokens": 10 + i, "prompt_tokens_target": 600,
                   "max_tokens": 64, "model": "secret-model", "prompt": "PRIVATE PROMPT TEXT",
                   "proxy": {"tenant": "t-secret"}}
            if token_ids:   # rows 0..2 share their first block (512 ids), row 1 equals row 0 entirely but the tail
                rec["prompt_token_ids"] = [7] * 512 + [i % 2] * (88 + i) if i < 3 else [i] * (600 + i)
            fh.write(json.dumps(rec) + "\n")
        fh.write('{"id": 99, "sched')          # cut short by a kill
    return path


def test_export_mooncake_rows_in_arrival_order_without_anything_private(tmp_path):
    src = _records(tmp_path / "requests.jsonl")
    out = tmp_path / "trace.jsonl"
    done = _cli("requests", str(src), "--export", "mooncake", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{src}, line 7: not JSON (cut short); skipped" in done.stderr
    assert "wrote 6 mooncake rows" in done.stderr and "all without hash_ids" in done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0, 500, 1000, 1500, 2000, 2500]      # sorted, ms after the first
    assert [r["input_length"] for r in rows] == [605, 604, 603, 602, 601, 600]
    assert all(set(r) == {"timestamp", "input_length", "output_length", "hash_ids_missing"} for r in rows)
    text = out.read_text()
    for private in ("PRIVATE", "secret", "t-secret", str(tmp_path), "1764900"):
        assert private not in text
    back = T.read_trace(str(out))
    assert [r.offset_s for r in back.rows] == [0, 0.5, 1.0, 1.5, 2.0, 2.5] and back.bad_count == 0


def test_export_hashes_share_exactly_the_shared_blocks_and_never_join_across_keys(tmp_path):
    src = _records(tmp_path / "requests.jsonl", token_ids=True)
    a, b, c = (tmp_path / f"{x}.jsonl" for x in "abc")
    key = tmp_path / "key"
    assert _cli("requests", str(src), "--export", "mooncake", str(a), "--hash-key-file", str(key)).returncode == 0
    assert key.stat().st_mode & 0o077 == 0
    assert _cli("requests", str(src), "--export", "mooncake", str(b), "--hash-key-file", str(key)).returncode == 0
    assert _cli("requests", str(src), "--export", "mooncake", str(c)).returncode == 0
    ra, rb, rc = ([json.loads(x) for x in p.read_text().splitlines()] for p in (a, b, c))
    assert ra == rb                                          # one key: the exports join
    by_len = {r["input_length"]: r["hash_ids"] for r in ra}
    h0, h1, h2 = by_len[600], by_len[601], by_len[602]       # records 0, 1, 2
    assert len(h0) == 2 and h0[0] == h1[0] == h2[0]          # the shared first block
    assert len({h0[1], h1[1], h2[1]}) == 3                   # different tails
    assert by_len[603][0] != h0[0]
    ids_a = {h for r in ra for h in r["hash_ids"]}
    ids_c = {h for r in rc for h in r["hash_ids"]}
    assert not ids_a & ids_c                                 # a fresh key: nothing to join on
    assert all(0 <= h < 2**53 for h in ids_a)


def test_block_hashes_are_chained_and_partial_last_block_counts():
    key = b"k" * 32
    ids = list(range(1030))
    h = T.block_hashes(key, ids, 512)
    assert len(h) == 3
    assert T.block_hashes(key, ids[:1024], 512) == h[:2]
    # the same block after a different prefix is a different id
    assert T.block_hashes(key, [9] * 512 + ids[512:1024], 512)[1] != h[1]


def test_export_azure_columns_and_fill_missing_hashes(tmp_path):
    src = _records(tmp_path / "requests.jsonl")
    out = tmp_path / "trace.csv"
    done = _cli("requests", str(src), "--export", "azure", str(out))
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    assert lines[1] == "1970-01-01 00:00:00.0000000,605,15" and lines[2].startswith("1970-01-01 00:00:00.5000000,")
    back = T.read_trace(str(out))
    assert [r.offset_s for r in back.rows] == pytest.approx([0, 0.5, 1.0, 1.5, 2.0, 2.5])
    filled = tmp_path / "filled.jsonl"
    done = _cli("requests", str(src), "--export", "mooncake", str(filled), "--fill-missing-hashes")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in filled.read_text().splitlines()]
    assert all(r["hash_ids_missing"] == T.FILLED and len(r["hash_ids"]) == 2 for r in rows)
    assert len({h for r in rows for h in r["hash_ids"]}) == 12          # shared with no other row


def test_export_errors_are_one_line():
    done = _cli("requests", str(FIXTURES / "azure_conv_head.csv"), "--export", "parquet", "x")
    assert done.returncode != 0 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "format 'parquet' is not one of mooncake, azure" in done.stderr


def test_prompt_maker_shares_text_where_rows_share_hash_ids():
    maker = PromptMaker(block=4, seed=0)
    a = maker.text(0, T.TraceRow(0, 10, 1, (46, 47, 48)))
    b = maker.text(1, T.TraceRow(0, 9, 1, (46, 47, 50)))
    c = maker.text(2, T.TraceRow(0, 10, 1, None))
    assert len(a.split()) == 10 and len(b.split()) == 9 and len(c.split()) == 10
    assert a.split()[:8] == b.split()[:8] and a.split()[8:] != b.split()[8:]
    assert maker.text(0, T.TraceRow(0, 10, 1, (46, 47, 48))) == a
    d = maker.text(3, T.TraceRow(0, 6, 1, (46,)))            # the ids cover 4 of 6: a tail of its own
    assert d.split()[:4] == a.split()[:4] and len(d.split()) == 6


def test_streamed_export_equals_the_columns_one_and_falls_back_when_far_out_of_order(tmp_path):
    import io
    import random

    rng = random.Random(3)
    src = tmp_path / "requests.jsonl"
    with open(src, "w") as fh:
        for i in range(300):
            t = 1764900000.0 + i * 0.01 + rng.random() * 0.05          # out of order by up to ~5 rows
            fh.write(json.dumps({"id": i, "scheduled": t, "http_status": 200, "error": None, "input_tokens": i + 1,
                                 "output_tokens": 3, "max_tokens": 8,
                                 **({"prompt_token_ids": [i % 4] * 700} if i % 3 == 0 else {})}) + "\n")
    key = b"x" * 32
    texts = {}
    for window in (64, 2):
        out = io.StringIO()
        st = T.export([str(src)], out, "mooncake", key=key, reorder_rows=window)
        texts[window] = out.getvalue()
        assert st.rows == 300 and st.without_hashes == 200
        assert st.streamed is (window == 64)
    assert texts[64] == texts[2]
    rows = [json.loads(x) for x in texts[64].splitlines()]
    assert rows[0]["timestamp"] == 0 and all(a["timestamp"] <= b["timestamp"] for a, b in zip(rows, rows[1:]))
    last = io.StringIO()
    st = T.export([str(src)], last, "azure", key=key, last_s=1.0)
    assert st.rows == sum(1 for r in rows if r["timestamp"] >= rows[-1]["timestamp"] - 1000)


def test_export_hashes_kept_prompt_text_with_a_local_tokenizer(tmp_path):
    pytest.importorskip("tokenizers", reason="the tokenizer extra (pip install servewatch[tokenizer]) is not installed")
    from servewatch.lab.venv import default_cache_dir

    tok = default_cache_dir() / "models" / "tiny-llama-seed0" / "tokenizer.json"
    if not tok.exists():
        pytest.skip(f"no local tokenizer.json to count with ({tok} absent; `servewatch lab setup` fetches it)")
    shared = " ".join(f"word{i}" for i in range(400))
    src = tmp_path / "requests.jsonl"
    with open(src, "w") as fh:
        for i, tail in enumerate(("alpha beta", "gamma delta", None)):
            prompt = f"{shared} {tail}" if tail else "something else entirely " * 300
            fh.write(json.dumps({"id": i, "scheduled": 1764900000.0 + i, "http_status": 200, "error": None,
                                 "input_tokens": 900, "output_tokens": 4, "max_tokens": 4, "prompt": prompt}) + "\n")
    out = tmp_path / "t.jsonl"
    done = _cli("requests", str(src), "--export", "mooncake", str(out), "--tokenizer", str(tok), "--block-size", "64")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    a, b, c = (r["hash_ids"] for r in rows)
    k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert k >= 10 and a[:k] == b[:k]                  # ~400 words of shared text: a dozen blocks of 64 in common
    assert c[0] != a[0]
    assert "word" not in out.read_text() and "alpha" not in out.read_text()


def test_a_trace_out_of_time_order_is_sorted_before_its_window(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [(5000, 1), (0, 2), (1000, 3), (7000, 4), (2500, 5)]
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1}) + "\n"
                            for t, n in rows))
    trace = T.read_trace(str(path), window=(1.0, 6.0), max_rows=3)
    assert [(r.offset_s, r.input_tokens) for r in trace.rows] == [(0.0, 3), (1.5, 5), (4.0, 1)]
    ordered = tmp_path / "o.jsonl"
    ordered.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1}) + "\n"
                               for t, n in sorted(rows)) + "not json\n")
    trace = T.read_trace(str(ordered), window=(1.0, 6.0))
    assert [r.input_tokens for r in trace.rows] == [3, 5, 1] and trace.bad_count == 0   # read up to the window's end
    assert [r.input_tokens for r in T.read_trace(str(ordered), max_rows=2).rows] == [2, 3]


def test_with_a_real_tokenizer_prompts_are_counted_to_the_recorded_length_and_keep_shared_blocks():
    import asyncio

    from servewatch.load.trace_replay import plan

    class TwoPerWord:                     # a tokenizer where a word is two tokens and a letter one, plus a BOS
        source = "tokenizer"

        async def count(self, text: str) -> int:
            return 1 + sum(2 if len(w) > 1 else 1 for w in text.split())

    trace = T.read_trace(str(FIXTURES / "mooncake_conversation_head.jsonl"))
    replay = asyncio.run(plan(trace, 1.0, TwoPerWord()))
    assert replay.maker.tokens_per_word != 1.0 and replay.exact
    counts = [asyncio.run(TwoPerWord().count(t)) for t in replay.texts]
    assert counts == [r.input_tokens for r in trace.rows]
    w = replay.maker.words_for(512)
    heads = {tuple(t.split()[:w]) for t in replay.texts}
    assert len(heads) == 1                # every row starts with block 0: the same words
    assert replay.texts[0].split()[w:2 * w] != replay.texts[1].split()[w:2 * w]
    sized = asyncio.run(plan(trace, 1.0, TwoPerWord(), exact_rows=4))   # too many rows to count before the start
    assert sized.texts is None and not sized.exact
    assert sized.summary()["prompts_counted"] is False
