"""Request records read back (`servewatch requests`): load's and the proxy's records are one format, read
by one reader; bad lines are counted with their places; --keep-text and --keep-itl on the proxy."""

from __future__ import annotations

import asyncio
import json

import pytest

from servewatch.load import records as R
from servewatch.load.readback import read_records, summarize_records, window
from servewatch.load.scenarios import Goodput
from tests.test_proxy import Running, _post, _raw, _stream, _stream_body
from tests.test_load_sim import SimServer

pytestmark = pytest.mark.timeout(60)


def _same(a: R.RequestRecord, b: R.RequestRecord) -> None:
    """b is a read back as to_json wrote it (times rounded to 0.1 µs, text dropped); the delay is made
    again from the two stamps, each rounded to the µs."""
    again, first = b.to_json(), a.to_json()
    assert again.pop("schedule_delay_s") == pytest.approx(first.pop("schedule_delay_s"), abs=1.1e-6)
    assert again == first
    assert b.text is None and b.prompt is None


def test_load_records_read_back_as_they_were_written(tmp_path):
    from servewatch.load.output import write_outputs
    from tests.test_load_client import _run

    _, result = _run({"tokens_per_chunk": 3, "gap_s": 0.002}, requests=3, output_tokens=9, keep_text=True)
    write_outputs(result, tmp_path)
    read = read_records([tmp_path / "requests.jsonl"], sequences=True)
    assert read.bad_count == 0 and len(read.records) == 3
    by_id = {r.id: r for r in result.records}
    for rec in read.records:
        _same(by_id[rec.id], rec)
        assert len(rec.itl_token_s) == 9 - 3 and rec.proxy is None
        assert (rec.model, rec.api) == (result.model, "completions") and rec.model
    assert "tok" in (tmp_path / "requests.jsonl").read_text()        # the file kept text; the reader did not
    light = read_records([tmp_path / "requests.jsonl"])               # what the figures need only
    assert [list(r.itl_token_s) for r in light.records] == [list(r.itl_token_s) for r in read.records]
    assert all(r.chunk_t_s == () and r.itl_chunk_s == () for r in light.records)


def _proxied(keep_text: bool = False, keep_itl: bool = False, chat: bool = False):
    async def go():
        async with SimServer(profile="h100-8b", tokens_per_chunk=2, model_name="m") as sim, \
                Running(sim.url, keep_text=keep_text, keep_itl=keep_itl) as proxy:
            body = {**_stream_body(8, prompt="hello there"),
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
            await _stream(proxy.port, body)
            await _raw(proxy.port, _post("/v1/chat/completions", {
                "model": "m", "max_tokens": 4, "ignore_eos": True,
                "messages": [{"role": "user", "content": "what is up"}]}))
            return proxy.records
    return asyncio.run(go())


def test_proxy_records_read_back_and_keep_every_gap_only_when_asked():
    plain = _proxied()
    for rec in plain:
        back = R.RequestRecord.from_json(json.loads(json.dumps(rec.to_json())))
        _same(rec, back)
        assert back.model == "m" and "model" not in back.proxy and list(back.itl_token_s) == []
    assert [r.api for r in plain] == ["completions", "chat"]
    assert plain[0].proxy["itl_p99_s"] is not None
    kept = _proxied(keep_itl=True)
    stream = kept[0]
    assert stream.output_tokens == 8 and sum(stream.chunk_tokens) == 8 and stream.itl_exact
    assert len(stream.itl_token_s) == 8 - stream.chunk_tokens[0]
    assert sum(stream.itl_token_s) == pytest.approx(stream.chunk_t_s[-1] - stream.chunk_t_s[0])
    _same(stream, R.RequestRecord.from_json(json.loads(json.dumps(stream.to_json()))))
    assert max(stream.itl_token_s) == pytest.approx(stream.proxy["itl_max_s"], abs=1e-6)


def test_keep_text_puts_prompt_and_completion_in_the_records_only():
    from servewatch.proxy.recordlog import record_sink

    for rec in _proxied():
        assert rec.prompt is None and rec.text is None
    stream, chat = _proxied(keep_text=True)
    assert stream.prompt == "hello there" and stream.text and stream.output_tokens == 8
    assert chat.prompt == "user: what is up" and chat.text and chat.output_tokens == 4
    assert "hello" not in json.dumps(stream.to_json())             # to_json() keeps text only when told

    written, observed = [], []

    class Log:
        write = written.append

    class Telemetry:
        @staticmethod
        def observe(ex, rec):
            observed.append(rec)

    record_sink(Log, Telemetry, keep_text=True)(None, stream)
    record_sink(Log, Telemetry)(None, chat)
    assert written[0]["prompt"] == "hello there" and written[0]["text"] == stream.text
    assert "prompt" not in written[1] and "text" not in written[1]


def _rec(i, model, ttft, error=None, tenant="t1", tokens=10):
    rec = R.RequestRecord(id=i, scheduled=1000.0 + i, prompt_tokens_target=None, max_tokens=tokens)
    rec.sent, rec.http_status = rec.scheduled + 0.001, 200 if error is None else 503
    rec.error = error
    rec.ttft_s, rec.e2e_s, rec.tpot_s = ttft, ttft + 0.5, 0.05
    rec.output_tokens = tokens if error is None else None
    rec.model, rec.api = model, "completions"
    rec.proxy = {"tenant": tenant, "itl_p99_s": 0.07}
    return rec


def test_groups_outcomes_percentiles_and_goodput():
    recs = [_rec(i, "a", 0.1 * (i + 1)) for i in range(5)]                     # a: TTFT 0.1 .. 0.5
    recs += [_rec(5, "b", 0.2), _rec(6, "b", 0.2, error=R.HTTP_5XX, tenant="t2")]
    out = summarize_records(recs, "model", Goodput(ttft_s=0.25))
    assert [g["key"] for g in out["groups"]] == ["a", "b"]
    a, b = out["groups"]
    assert a["requests"] == 5 and a["ttft_s"]["p50"] == pytest.approx(0.3)
    assert a["ttft_s"]["p99"] == pytest.approx(0.1 + 0.4 * 0.99)              # linear between ranks
    assert b["outcomes"] == {"ok": 1, "http_5xx": 1} and b["ok"] == 1
    assert a["goodput_fraction"] == pytest.approx(2 / 5) and b["goodput_fraction"] == pytest.approx(1 / 2)
    assert out["total"]["goodput_fraction"] == pytest.approx(3 / 7)
    assert out["total"]["itl_from"] == "each request's p99" and out["total"]["tokens_out"] == 60
    assert out["total"]["span_s"] == pytest.approx(6 + 0.001 + 0.2 + 0.5)
    by_tenant = summarize_records(recs, "tenant")
    assert {g["key"]: g["requests"] for g in by_tenant["groups"]} == {"t1": 6, "t2": 1}
    old_load_rec = _rec(7, "a", 0.1)                  # load's records of before 2026-12-04 named no model
    old_load_rec.proxy = old_load_rec.model = None
    assert summarize_records([old_load_rec], "model")["groups"][0]["key"] == "(not recorded)"
    assert summarize_records([old_load_rec], "tenant")["groups"][0]["key"] == "(not recorded)"
    assert [r.id for r in window(recs, last_s=2)] == [4, 5, 6]
    assert [r.id for r in window(recs, since=1005)] == [5, 6]


def test_bad_lines_are_counted_with_their_places_and_never_stop_the_reading(tmp_path):
    good = json.dumps(_rec(1, "a", 0.1).to_json())
    path = tmp_path / "requests.jsonl"
    far = json.dumps({**json.loads(good), "scheduled": 1e300})
    path.write_text("\n".join([good, "not json", json.dumps({"id": "x", "scheduled": 1.0}), good,
                               json.dumps([1, 2]), far, good[:40]]))
    read = read_records([path])
    assert len(read.records) == 2 and read.bad_count == 5
    assert [(b.line, b.why) for b in read.bad] == [
        (2, "not JSON"), (3, "not a request record: field 'id': expected a number, got a string"),
        (5, "not a request record: not a JSON object"),
        (6, "not a request record: field 'scheduled': 1e+300 is not a time in epoch seconds (1970 to 9999)"),
        (7, "not JSON (cut short)")]
    read = read_records([path], keep_bad=2)
    assert len(read.bad) == 2 and read.bad_count == 5


def test_a_line_over_the_bound_is_skipped_without_being_held(tmp_path, monkeypatch):
    from servewatch.load import readback

    monkeypatch.setattr(readback, "MAX_LINE_BYTES", 100)
    good = json.dumps(_rec(1, "a", 0.1).to_json())
    path = tmp_path / "requests.jsonl"
    path.write_text("x" * (3 * 2**20) + "\n" + good[:90] + "\n")   # a 3 MiB line, then a short bad one
    read = read_records([path])
    assert read.bad_count == 2 and [(b.line, b.why) for b in read.bad] == [
        (1, f"a line of {3 * 2**20 + 1:,} bytes, over 100"), (2, "not JSON")]


# ---------------------------------------------------------------- the command

def _file(tmp_path, recs, name="requests.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    return str(path)


def test_the_command_prints_a_table_and_json(tmp_path, capsys):
    from servewatch.cli import main

    recs = [_rec(i, "a", 0.1 * (i + 1)) for i in range(5)] + [_rec(5, "b", 0.2, error=R.STREAM_CUT)]
    older = _file(tmp_path, recs[:3], "requests.jsonl.1")
    newer = _file(tmp_path, recs[3:])
    assert main(["requests", newer, older, "--goodput", "ttft=250"]) == 0
    out = capsys.readouterr().out
    assert "6 requests recorded by servewatch proxy" in out and "stream_cut 1" in out
    assert "a             5       0  300.0  " in out and "40.0%" in out     # a's TTFT p50; a's goodput 2 of 5
    assert "not ok, model b: stream_cut 1" in out and "None" not in out
    assert main(["requests", newer, older, "--by", "outcome", "--json", "--last", "2s"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["requests"] == 3 and {g["key"] for g in data["groups"]} == {"ok", "stream_cut"}
    assert data["files"] == [newer, older] and data["skipped_lines"] == 0
    (tmp_path / "requests.jsonl.2").write_text("")                    # a directory: its files, oldest first
    assert main(["requests", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == [str(tmp_path / n) for n in
                                                           ("requests.jsonl.2", "requests.jsonl.1", "requests.jsonl")]


@pytest.mark.parametrize("argv, words", [
    (["requests", "{missing}"], "cannot read {missing}: No such file or directory"),
    (["requests", "{dir}"], "{dir}: a directory without a requests.jsonl"),
    (["requests", "{empty}"], "no request records in {empty} (1 line that is not a record)"),
    (["requests", "{good}", "--last", "ten"], "--last: 'ten' is not a duration"),
    (["requests", "{good}", "--since", "yesterday"], "--since: 'yesterday' is neither an ISO 8601 time"),
    (["requests", "{good}", "--since", "2100-01-01T00:00:00Z"], "none of the 1 requests arrived in the window"),
    (["requests", "{good}", "--goodput", "ttft=fast"], "--goodput: goodput item 'ttft=fast'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, words):
    from servewatch.cli import main

    (tmp_path / "d").mkdir()
    places = {"missing": str(tmp_path / "nope.jsonl"), "dir": str(tmp_path / "d"), "empty": str(tmp_path / "e.jsonl"),
              "good": _file(tmp_path, [_rec(1, "a", 0.1)])}
    (tmp_path / "e.jsonl").write_text("garbage\n")
    argv = [a.format(**places) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("servewatch requests: ") and words.format(**places) in err[-1]
    assert "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("flag", ["--keep-text", "--keep-itl"])
def test_keeping_more_asks_for_a_records_file(capsys, flag):
    from servewatch.cli import main

    assert main(["proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", flag]) == 2
    assert capsys.readouterr().err == (f"servewatch proxy: {flag} keeps more in the records file: give one with "
                                       "--records FILE\n")


def test_the_html_page_has_the_figures_and_charts_and_no_text(tmp_path, capsys):
    from servewatch.cli import main
    from servewatch.load.requests_report import over_time

    recs = [_rec(i, "a", 0.1 * (i + 1)) for i in range(5)] + [_rec(5, "b", 0.2, error=R.STREAM_CUT)]
    recs[0].prompt, recs[0].text = "a secret prompt", "a secret answer"
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r.to_json(keep_text=True)) + "\n" for r in recs))
    page = tmp_path / "r.html"
    assert main(["requests", str(path), "--html", str(page), "--goodput", "ttft=250"]) == 0
    assert capsys.readouterr().err == f"servewatch requests: wrote {page}\n"
    html = page.read_text()
    assert "secret" not in html and "<script" not in html and "http" not in html.replace("http://www.w3.org", "")
    assert html.count("<svg") == 3 and "300.0 ms" in html and "stream_cut 1" in html and "40.0%" in html
    series, width = over_time(recs)
    assert width == 1.0 and [v for _, v in series["arrivals"]][:6] == [1.0] * 6
    assert [v for _, v in series["not_ok"]][5] == 1.0 and series["ttft_p50"][5][1] is None
    assert sum(v for _, v in series["tokens"]) == 50
    assert main(["requests", str(path), "--html", str(tmp_path / "no" / "r.html")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"servewatch requests: --html: cannot write {tmp_path / 'no' / 'r.html'}: No such file or directory")


def test_the_default_grouping_is_by_model_where_the_records_name_one(tmp_path, capsys):
    from servewatch.cli import main

    proxied = _file(tmp_path, [_rec(1, "a", 0.1)], "proxy.jsonl")
    plain = _rec(2, "a", 0.1)
    plain.proxy = None
    loaded = _file(tmp_path, [plain], "load.jsonl")
    plain.model = None
    old_load = _file(tmp_path, [plain], "old-load.jsonl")
    for path, by in ((proxied, "model"), (loaded, "model"), (old_load, "all")):
        assert main(["requests", path, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["by"] == by


def test_a_tenant_key_file_of_ones_own_changes_every_tenants_hash(tmp_path, capsys):
    import os
    import stat

    from servewatch.proxy.config import DEFAULT_TENANT_KEY, tenant_key
    from servewatch.proxy.exchange import tenant_id

    path = tmp_path / "tenant.key"
    key = tenant_key(str(path))                                   # made: 32 random bytes, hex, 0600
    assert len(key) == 64 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert tenant_key(str(path)) == key                           # read back the same
    assert tenant_key(str(tmp_path / "other.key")) != key
    assert tenant_id(b"acme", key) != tenant_id(b"acme", DEFAULT_TENANT_KEY) == tenant_id(b"acme")
    assert len(tenant_id(b"acme", key)) == 12
    (tmp_path / "short.key").write_text("abc\n")
    with pytest.raises(ValueError, match="holds 3 bytes"):
        tenant_key(str(tmp_path / "short.key"))

    from servewatch.cli import main

    argv = ["proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--tenant-key-file"]
    assert main([*argv, str(tmp_path / "short.key")]) == 2
    assert capsys.readouterr().err == (f"servewatch proxy: --tenant-key-file {tmp_path / 'short.key'}: holds 3 "
                                       "bytes; a key of at least 16 is expected\n")
    assert main([*argv, str(tmp_path / "no" / "k")]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_the_proxy_hashes_tenants_with_its_configured_key():
    from servewatch.proxy.exchange import tenant_id

    async def go(key):
        async with SimServer(profile="h100-8b", model_name="m") as sim, Running(sim.url, tenant_key=key) as proxy:
            await _raw(proxy.port, _post("/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 2},
                                         "X-Tenant: acme\r\n"))
            return proxy.records[0].proxy["tenant"]

    key = b"0123456789abcdef0123"
    assert asyncio.run(go(key)) == tenant_id(b"acme", key) != tenant_id(b"acme")


def test_a_group_name_from_the_file_is_printed_as_it_is(tmp_path, capsys):
    from servewatch.cli import main

    path = _file(tmp_path, [_rec(1, "[/bold]", 0.1), _rec(2, "[red]x", 0.1)])
    assert main(["requests", path]) == 0
    out = capsys.readouterr().out
    assert "[/bold]" in out and "[red]x" in out


def test_a_proxy_record_of_the_older_format_reads_its_model_and_api_from_its_proxy_part():
    """Before 2026-12-04 the proxy wrote the model and the API inside its part of the record."""
    line = {"id": 1, "scheduled": 1796287686.82, "http_status": 200, "ttft_s": 0.019,
            "proxy": {"api": "chat", "model": "m", "stream": True, "tenant": "eb9aa2113fd0"}}
    rec = R.RequestRecord.from_json(line)
    assert (rec.model, rec.api) == ("m", "chat") and rec.proxy == {"stream": True, "tenant": "eb9aa2113fd0"}
    assert rec.to_json()["model"] == "m" and "model" not in rec.to_json()["proxy"]
    line["model"] = "top"
    assert R.RequestRecord.from_json(line).model == "top"            # the newer place wins
    line["proxy"]["model"] = 7
    line.pop("model")
    assert R.RequestRecord.from_json(line).model is None             # not a name: not taken
