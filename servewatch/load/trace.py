"""Request traces in and out: Mooncake JSONL rows, the Azure LLM inference trace CSV, servewatch's own records.

Out (`servewatch requests --export mooncake|azure FILE`): one row per request, in arrival order. A Mooncake
row is what `vllm bench serve --dataset-name timed_trace` reads with its default labels::

    {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [8817..., 4242...]}

`timestamp` is the arrival in milliseconds after the first request (pass `--timed-trace-sec-multiplier
0.001` to vLLM, as for Mooncake's own traces); `hash_ids` name the prompt's blocks of `block` tokens (512,
as Mooncake), each a chained keyed hash (HMAC-SHA256 of the previous block's digest and this block's token
ids, with a secret per export unless `--hash-key-file` reuses one): two requests share their first k ids
exactly when their prompts share their first k blocks, and no text, token id or other export can be
recovered or joined from them. A record without token ids (the default: the proxy keeps no text) gets no
`hash_ids` and says so: `"hash_ids_missing": "not recorded"`. Nothing else of a record goes out: no
request id, no model, no tenant, no path, no wall-clock time.

The Azure CSV has the columns TIMESTAMP, ContextTokens, GeneratedTokens; its TIMESTAMPs count from
1970-01-01 00:00:00 (the arrival after the first request, not the time of day).

Memory: records are streamed through a reorder window (64k rows: a proxy writes a record when its request
ends, so a little out of arrival order); where they are further out of order than that, the export starts
again from compact columns, 24 bytes a request and 8 a hash, never a dict per record.

In (`servewatch load URL --trace FILE`): `read_trace` reads any of the three (told apart by the first
line), a bad row is a `BadRow` (file, line, why) and reading goes on.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import os
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import orjson

DEFAULT_BLOCK = 512
NOT_RECORDED = "not recorded"
FILLED = "not recorded; unique ids filled in"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
FORMATS = ("mooncake", "azure")
MAX_LINE_BYTES = 4 * 2**20
KEY_BYTES = 32
_HASH_MASK = (1 << 53) - 1          # exact in a JSON double: every reader keeps the id as it is


# ---------------------------------------------------------------------------------------------- hashing

def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def load_or_create_key(path: str) -> tuple[bytes, bool]:
    """The key in `path` (hex, as written here), or a new one written there (mode 0600). (key, created)."""
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except FileNotFoundError:
        key = new_key()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(key.hex() + "\n")
        return key, True
    except UnicodeDecodeError:
        raise ValueError("not a key file written by servewatch (64 hex digits)") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError("not a key file written by servewatch (64 hex digits)") from None
    if len(key) < 16:
        raise ValueError(f"a key of {len(key)} bytes is too short (at least 16)")
    return key, False


def local_tokenize(path: str) -> Callable[[str], list[int]]:
    """Text -> token ids with a local tokenizer.json (or a directory holding one), special tokens included
    as the server counts them. OSError, ValueError or ImportError (no `tokenizers`) for the caller to word."""
    from servewatch.load.prompts import LocalCounter

    tok = LocalCounter(path)._tok
    return lambda text: tok.encode(text, add_special_tokens=True).ids


def block_hashes(key: bytes, token_ids, block: int = DEFAULT_BLOCK) -> list[int]:
    """One id per block of `block` token ids (the last one partial), each chained over the blocks before."""
    out: list[int] = []
    prev = b""
    for start in range(0, len(token_ids), block):
        part = token_ids[start:start + block]
        digest = hmac.new(key, prev + struct.pack(f"<{len(part)}I", *part), hashlib.sha256).digest()
        out.append(int.from_bytes(digest[:8], "big") & _HASH_MASK)
        prev = digest
    return out


# ------------------------------------------------------------------------------------------------ export

@dataclass(slots=True)
class ExportStats:
    rows: int = 0
    without_hashes: int = 0
    skipped: int = 0
    bad: list = field(default_factory=list)     # (path, line, why), the first few
    rows: int = 0
    streamed: bool = False                      # through the reorder window (else from compact columns)


class _Rows:
    """Compact columns of the rows to write: 8 + 4 + 4 + 8 bytes a row, 8 a hash."""

    def __init__(self) -> None:
        self.arrival = array("d")
        self.inp = array("I")
        self.out = array("I")
        self.hash_at = array("q")       # start in `hashes`, -1: none recorded
        self.hashes = array("Q")

    def add(self, arrival: float, inp: int, out: int, hashes: list[int] | None) -> None:
        self.arrival.append(arrival)
        self.inp.append(inp)
        self.out.append(out)
        if hashes is None:
            self.hash_at.append(-1)
        else:
            self.hash_at.append(len(self.hashes))
            self.hashes.extend(hashes)


def _record_lengths(obj: dict) -> tuple[int, int] | None:
    """(input tokens, output tokens) of a record: the server's counts where it gave them; for a request that
    did not finish well, the output it asked for (max_tokens), as the demand the trace should replay."""
    inp = obj.get("input_tokens")
    if not _is_count(inp):
        inp = obj.get("prompt_tokens_target")
    ok = obj.get("error") is None and obj.get("http_status") == 200
    out = obj.get("output_tokens") if ok else None
    if not _is_count(out):
        out = obj.get("max_tokens")
        if not _is_count(out):
            out = obj.get("output_tokens")
    if not _is_count(inp) or not _is_count(out):
        return None
    return inp, out


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**32


def _record_token_ids(obj: dict, tokenize: Callable[[str], list[int]] | None):
    ids = obj.get("prompt_token_ids")
    if isinstance(ids, list) and ids and all(_is_count(t) for t in ids):
        return ids
    if tokenize is not None and isinstance(obj.get("prompt"), str):
        return tokenize(obj["prompt"])
    return None


def iter_record_lines(paths: Iterable[str]) -> Iterator[tuple[str, int, bytes]]:
    for path in paths:
        with open(path, "rb") as fh:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
                if line.strip():
                    yield str(path), number, line


def _parse_record(line: bytes):
    """(arrival, input tokens, output tokens, the record) of a records line, or why it is not one."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "not JSON" + ("" if line.endswith(b"\n") else " (cut short)")
    if not isinstance(obj, dict):
        return "not a request record: not a JSON object"
    arrival = obj.get("scheduled")
    if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not arrival >= 0:
        return "not a request record: field 'scheduled' is not epoch seconds"
    lengths = _record_lengths(obj)
    if lengths is None:
        return "not a request record: no token counts (input_tokens / max_tokens)"
    return float(arrival), lengths[0], lengths[1], obj


def _parsed_records(paths: Iterable[str], st: "ExportStats", keep_bad: int):
    """(arrival, input tokens, output tokens, the record) of every line that is a request record; the others are
    counted in `st` (the first `keep_bad` of them with their file, line and why) and skipped."""
    for path, number, line in iter_record_lines(paths):
        parsed = _parse_record(line)
        if isinstance(parsed, str):
            st.skipped += 1
            if len(st.bad) < keep_bad:
                st.bad.append((path, number, parsed))
            continue
        yield parsed


def collect_rows(paths: Iterable[str], *, key: bytes, block: int = DEFAULT_BLOCK,
                 tokenize: Callable[[str], list[int]] | None = None, since: float | None = None,
                 keep_bad: int = 5) -> tuple[_Rows, ExportStats]:
    """Every row in compact columns (the export's way when the records are far out of arrival order); a line
    that is not a record is counted and skipped."""
    rows, st = _Rows(), ExportStats()
    for arrival, inp, out, obj in _parsed_records(paths, st, keep_bad):
        if since is None or arrival >= since:
            ids = _record_token_ids(obj, tokenize)
            rows.add(arrival, inp, out, block_hashes(key, ids, block) if ids else None)
    return rows, st


def _order(rows: _Rows) -> Iterable[int]:
    a = rows.arrival
    if all(a[i] <= a[i + 1] for i in range(len(a) - 1)):
        return range(len(a))            # load's records, a proxy's with one request at a time: no index list
    return sorted(range(len(a)), key=a.__getitem__)


def _ms(seconds: float) -> int | float:
    ms = round(seconds * 1000.0, 3)
    return int(ms) if ms == int(ms) else ms


def _format(fmt: str, offset: float, inp: int, out: int, hashes, seq: int, fill_key: bytes | None,
            block: int) -> str:
    if fmt == "azure":
        return f"{_azure_time(offset)},{inp},{out}\n"
    row = {"timestamp": _ms(offset), "input_length": inp, "output_length": out}
    if hashes is None:
        row["hash_ids_missing"] = NOT_RECORDED
        if fill_key is not None:
            row["hash_ids_missing"] = FILLED
            row["hash_ids"] = [int.from_bytes(hmac.new(fill_key, struct.pack("<QQ", seq, j), hashlib.sha256)
                                              .digest()[:8], "big") & _HASH_MASK for j in range(-(-inp // block))]
    else:
        row["hash_ids"] = list(hashes)
    return orjson.dumps(row).decode() + "\n"


def write_trace(rows: _Rows, out, fmt: str, last_s: float | None = None, *, fill_key: bytes | None = None,
                block: int = DEFAULT_BLOCK) -> tuple[int, int]:
    """Write the rows (arrival order) to the text stream `out`, only those within `last_s` of the newest
    when given; (rows written, rows without hashes). With `fill_key`, a row without hashes gets ids of its
    own (keyed, shared with no other row: a replay builds a prompt of the full length with no prefix reuse,
    where vLLM's reader builds an empty one from no ids) and still says they were not recorded."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from {', '.join(FORMATS)}")
    order = _order(rows)
    n = len(rows.arrival)
    cutoff = max(rows.arrival) - last_s if n and last_s is not None else None
    t0 = min((a for a in rows.arrival if cutoff is None or a >= cutoff), default=0.0)
    without = written = 0
    # where each row's hashes end: the next start among rows that have them (one backward pass, 8 bytes a row)
    hash_end = array("q", bytes(8 * n))
    end = len(rows.hashes)
    for i in range(n - 1, -1, -1):
        hash_end[i] = end
        if rows.hash_at[i] >= 0:
            end = rows.hash_at[i]
    write = out.write
    if fmt == "azure":
        write(",".join(AZURE_COLUMNS) + "\n")
    for i in order:
        if cutoff is not None and rows.arrival[i] < cutoff:
            continue
        written += 1
        start = rows.hash_at[i]
        without += start < 0
        write(_format(fmt, rows.arrival[i] - t0, rows.inp[i], rows.out[i],
                      None if start < 0 else rows.hashes[start:hash_end[i]], i, fill_key, block))
    return written, without


class _Disorder(Exception):
    """A record arrived before one already written: further out of order than the reorder window."""


REORDER_ROWS = 65536


def export(paths: list[str], out, fmt: str, *, key: bytes, block: int = DEFAULT_BLOCK,
           tokenize: Callable[[str], list[int]] | None = None, since: float | None = None,
           last_s: float | None = None, fill_key: bytes | None = None, keep_bad: int = 5,
           reorder_rows: int = REORDER_ROWS) -> ExportStats:
    """The records of `paths` as a trace on the seekable text stream `out`, streamed through a reorder window
    of `reorder_rows` (records are written as requests finish, so a little out of arrival order): memory is
    the window's, not the file's. Records further out of order than that are written again from compact
    columns (24 bytes a row). With `last_s`, a first pass finds the newest arrival. `stats.rows` and
    `stats.without_hashes` say what was written; `stats.bad` the first bad lines (path, line, why)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from {', '.join(FORMATS)}")
    cutoff = None
    if last_s is not None:
        newest = None
        for _path, _number, line in iter_record_lines(paths):
            parsed = _parse_record(line)
            if not isinstance(parsed, str) and (since is None or parsed[0] >= since):
                newest = parsed[0] if newest is None else max(newest, parsed[0])
        cutoff = None if newest is None else newest - last_s
    st = ExportStats()
    try:
        out.seek(0)
        out.truncate()
        st.rows, st.without_hashes = _stream(paths, out, fmt, key, block, tokenize, since, cutoff, fill_key,
                                             reorder_rows, st, keep_bad)
        st.streamed = True
    except _Disorder:
        out.seek(0)
        out.truncate()
        rows, st = collect_rows(paths, key=key, block=block, tokenize=tokenize, since=since, keep_bad=keep_bad)
        st.rows, st.without_hashes = write_trace(rows, out, fmt, last_s, fill_key=fill_key, block=block)
    return st


def _stream(paths, out, fmt, key, block, tokenize, since, cutoff, fill_key, window, st, keep_bad) -> tuple[int, int]:
    import heapq

    t0 = None
    heap: list = []
    written = without = seq = 0
    last = -1.0
    write = out.write
    if fmt == "azure":
        write(",".join(AZURE_COLUMNS) + "\n")

    def emit(item) -> None:
        nonlocal written, without, last, t0
        arrival, n, inp, outp, hashes = item
        if t0 is None:
            t0 = arrival                # the smallest: a smaller one later would be a _Disorder
        last = arrival
        written += 1
        without += hashes is None
        write(_format(fmt, arrival - t0, inp, outp, hashes, n, fill_key, block))

    for arrival, inp, outp, obj in _parsed_records(paths, st, keep_bad):
        if (since is not None and arrival < since) or (cutoff is not None and arrival < cutoff):
            continue
        if arrival < last:
            raise _Disorder
        ids = _record_token_ids(obj, tokenize)
        seq += 1
        heapq.heappush(heap, (arrival, seq, inp, outp, array("Q", block_hashes(key, ids, block)) if ids else None))
        if len(heap) > window:
            emit(heapq.heappop(heap))
    while heap:
        emit(heapq.heappop(heap))
    return written, without


def _azure_time(offset_s: float) -> str:
    """The Azure trace's TIMESTAMP layout (2023-11-16 18:15:46.6805900), counted from 1970-01-01."""
    import datetime as dt

    micros = round(offset_s * 1e6)
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond:06d}0"


# -------------------------------------------------------------------------------------------------- read

@dataclass(slots=True)
class TraceRow:
    offset_s: float                 # arrival, seconds after the trace's first row (before --window/--speed)
    input_tokens: int
    output_tokens: int
    hash_ids: Sequence[int] | None = None   # prefix-block ids (an array('q')); None: not in the trace


@dataclass(slots=True)
class BadRow:
    path: str
    line: int
    why: str

    def words(self) -> str:
        return f"{self.path}, line {self.line}: {self.why}; skipped"


@dataclass(slots=True)
class Trace:
    rows: list[TraceRow]
    fmt: str                        # "mooncake" | "azure" | "servewatch"
    bad: list[BadRow] = field(default_factory=list)
    bad_count: int = 0
    block: int = DEFAULT_BLOCK


def sniff(path: str) -> str:
    """The format of a trace file from its first non-empty line."""
    with open(path, "rb") as fh:
        for line in fh:
            text = line.strip()
            if not text:
                continue
            if text.startswith(b"{"):
                try:
                    obj = orjson.loads(text)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict) and "scheduled" in obj:
                    return "servewatch"
                return "mooncake"
            head = [c.strip().lower() for c in text.decode("utf-8", "replace").split(",")]
            if head[:3] == [c.lower() for c in AZURE_COLUMNS] or "contexttokens" in head:
                return "azure"
            raise ValueError("neither Mooncake JSONL, an Azure trace CSV (TIMESTAMP,ContextTokens,"
                             "GeneratedTokens) nor servewatch's request records")
    raise ValueError("an empty file")


def read_trace(path: str, *, keep_bad: int = 5, max_rows: int | None = None,
               window: tuple[float, float | None] | None = None, block: int = DEFAULT_BLOCK,
               _ordered: bool = True) -> Trace:
    """The rows of a trace, in arrival order, offsets from its first row. `window` (A, B) keeps the rows
    that arrived at A s or later and before B s (after the first row), re-based to A; `max_rows` the first
    N of those. A file in time order (as published traces are) is read only up to the end of what is kept;
    one out of order is read whole and sorted. OSError is the caller's; ValueError when the file is none of
    the three formats."""
    fmt = sniff(path)
    trace = Trace([], fmt, block=block)
    reader = {"mooncake": _mooncake, "azure": _azure, "servewatch": _records}[fmt]
    lo, hi = window if window is not None else (0.0, None)
    raw: list[tuple[float, int, int, object]] = []
    kept, last = 0, None
    for item in reader(path):
        if isinstance(item, BadRow):
            trace.bad_count += 1
            if len(trace.bad) < keep_bad:
                trace.bad.append(item)
            continue
        if not _ordered:
            raw.append(item)
            continue
        if last is not None and item[0] < last:
            # out of time order: read it all again, whole, and sort (rows skipped so far may be kept after all)
            return read_trace(path, keep_bad=keep_bad, max_rows=max_rows, window=window, block=block,
                              _ordered=False)
        last = item[0]
        if raw and (hi is not None and item[0] - raw[0][0] >= hi or max_rows is not None and kept >= max_rows):
            break                               # in time order: nothing later is kept
        offset = item[0] - raw[0][0] if raw else 0.0
        if raw and offset < lo:
            continue                            # before the window: only the first row (t0) is needed
        kept += offset >= lo
        raw.append(item)
    if not _ordered:
        raw.sort(key=lambda r: r[0])
    t0 = raw[0][0] if raw else 0.0
    for t, inp, out, hashes in raw:
        offset = t - t0
        if offset < lo or (hi is not None and offset >= hi):
            continue
        trace.rows.append(TraceRow(offset - lo, inp, out, hashes))
        if max_rows is not None and len(trace.rows) >= max_rows:
            break
    return trace


def _lines(path: str) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as fh:
        for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
            if line.strip():
                yield number, line


def _json_row(path: str, number: int, line: bytes):
    if len(line) > MAX_LINE_BYTES:
        return BadRow(path, number, f"a line over {MAX_LINE_BYTES:,} bytes")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return BadRow(path, number, "not JSON" + ("" if line.endswith(b"\n") else " (cut short)"))
    if not isinstance(obj, dict):
        return BadRow(path, number, "not a JSON object")
    return obj


def _number(obj: dict, name: str, *, integer: bool) -> int | float | str:
    """The field's value, or a string saying why not."""
    x = obj.get(name)
    if x is None:
        return f"no {name!r}"
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x < 0:
        return f"{name!r} is not a number >= 0"
    if integer:
        if x != int(x) or x >= 2**31:
            return f"{name!r} is not a whole number of tokens"
        return int(x)
    if x == float("inf"):
        return f"{name!r} is not finite"
    return x


def _mooncake(path: str):
    for number, line in _lines(path):
        obj = _json_row(path, number, line)
        if isinstance(obj, BadRow):
            yield obj
            continue
        ts = _number(obj, "timestamp", integer=False)
        inp = _number(obj, "input_length", integer=True)
        out = _number(obj, "output_length", integer=True)
        why = next((v for v in (ts, inp, out) if isinstance(v, str)), None)
        hashes = obj.get("hash_ids")
        if why is None and hashes is not None:
            if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                                       for h in hashes):
                why = "'hash_ids' is not a list of whole numbers"
        if why is not None:
            yield BadRow(path, number, why)
            continue
        yield ts / 1000.0, inp, out, (_ids(hashes) if hashes else None)


def _ids(hashes: list[int]):
    """Compact ids (8 bytes each, not a Python int each); a tuple where one is past 64 bits."""
    try:
        return array("q", hashes)
    except OverflowError:
        return tuple(hashes)


def _records(path: str):
    for number, line in _lines(path):
        obj = _json_row(path, number, line)
        if isinstance(obj, BadRow):
            yield obj
            continue
        t = obj.get("scheduled")
        lengths = _record_lengths(obj)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0:
            yield BadRow(path, number, "'scheduled' is not epoch seconds")
        elif lengths is None:
            yield BadRow(path, number, "no token counts (input_tokens / max_tokens)")
        else:
            yield float(t), lengths[0], lengths[1], None


def _azure_seconds(text: str) -> float:
    """'2023-11-16 18:15:46.6805900' (any number of fraction digits) or plain seconds, as epoch-ish seconds."""
    import datetime as dt

    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    whole, _, frac = text.partition(".")
    t = dt.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    if frac and not frac.isdigit():
        raise ValueError(text)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def _azure(path: str):
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        header = None
        for row in reader:
            number = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            if header is None:
                names = [c.strip().lower() for c in row]
                try:
                    header = tuple(names.index(c.lower()) for c in AZURE_COLUMNS)
                except ValueError:
                    yield BadRow(path, number, "a header without TIMESTAMP, ContextTokens, GeneratedTokens")
                    return
                continue
            if len(row) <= max(header):
                yield BadRow(path, number, f"{len(row)} columns, fewer than the header's")
                continue
            ts, ctx, gen = (row[i].strip() for i in header)
            try:
                t = _azure_seconds(ts)
            except ValueError:
                yield BadRow(path, number, f"TIMESTAMP {ts[:40]!r} is not a time")
                continue
            if not (ctx.isdigit() and gen.isdigit()):
                yield BadRow(path, number, "ContextTokens / GeneratedTokens are not whole numbers")
                continue
            yield t, int(ctx), int(gen), None
