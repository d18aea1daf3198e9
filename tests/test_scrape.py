"""One scrape path: every failure kind through each of its three readers (`inspect`, watch's
MetricsSource in a running recorder, the load generator's server view), the series bound, and
`inspect`'s engine cap."""

import asyncio
import json
import re

import pytest

from servewatch.cli import main
from servewatch.clock import VirtualClock
from servewatch.errors import ExpositionError, TooManySeries
from servewatch.exposition.parser import check_series, parse
from servewatch.transport.http1 import Endpoint, Http1Client
from servewatch.load.server_view import ServerView
from servewatch.sources.http import fetch
from servewatch.transport.contract import Http1Transport
from servewatch.sources.metrics import MetricsSource
from servewatch.sources.scrape import KINDS, ScrapeBounds, ScrapeFailure, read_metrics
from servewatch.watch import Recorder
from servewatch.watch.targets import http_sources
from tests.scrape_servers import (FAILING, MAX_BYTES, MAX_SERIES, TIMEOUT_S, VLLM, many_engines, scrape_server,
                                  url_for)

BOUNDS = ScrapeBounds(max_bytes=MAX_BYTES, max_series=MAX_SERIES)


def test_every_kind_has_a_way_to_provoke_it():
    assert set(FAILING) == set(KINDS)
    with pytest.raises(ValueError):
        ScrapeFailure("unreachable")


# --- the series bound -----------------------------------------------------------------------------

def exposition(series: int) -> str:
    head = "# HELP up whether the target answers\n# TYPE up gauge\n\n"
    return head + "".join(f'up{{i="{i}"}} 1\n# a comment\n\n' for i in range(series))


@pytest.mark.parametrize("as_bytes", [False, True])
def test_series_bound_counts_sample_lines_only(as_bytes):
    def body(n):
        text = exposition(n)
        return text.encode() if as_bytes else text
    check_series(body(50), 50)                        # comments and blank lines are not series
    with pytest.raises(TooManySeries) as error:
        check_series(body(51), 50)
    # the 51st series sits on line 3 + 3 * 50 + 1
    assert error.value.line_no == 154 and "more than 50 series" in str(error.value)


@pytest.mark.parametrize("as_bytes", [False, True])
def test_series_bound_from_the_first_line_and_on_a_big_body(as_bytes):
    def check(text, bound):
        check_series(text.encode() if as_bytes else text, bound)
    check("up 1\n", 1)
    with pytest.raises(TooManySeries) as error:
        check("up 1\n  up2 1\n", 1)          # a blank before a name is still a sample line
    assert error.value.line_no == 2
    big = "# a comment long enough to make the body over a mebibyte\n" * 20_000 + "up 1\n" * 3
    check(big, 3)
    with pytest.raises(TooManySeries) as error:
        check(big, 2)
    assert error.value.line_no == 20_003


def test_parse_refuses_before_reading_any_line():
    # past the bound the body is broken; the bound answers first, so nothing past it was parsed
    text = exposition(30) + "up{broken 1\n"
    with pytest.raises(TooManySeries):
        parse(text, max_series=30)
    with pytest.raises(ExpositionError) as error:
        parse(text, max_series=31)
    assert not isinstance(error.value, TooManySeries)
    assert len(parse(exposition(30), max_series=30)["up"].samples) == 30


def test_read_metrics_on_bodies():
    good = read_metrics(200, VLLM, BOUNDS)
    assert good.dialect == "vllm" and good.engines[0].waiting == 9
    failures = {
        "http_status": read_metrics(503, b"", BOUNDS),
        "too_large": read_metrics(200, VLLM * 4, BOUNDS),
        "too_many_series": read_metrics(200, many_engines(MAX_SERIES), BOUNDS),
        "parse": read_metrics(200, b"\xff\xfe vllm:x 1\n", BOUNDS),
        "no_engine_metrics": read_metrics(200, "# TYPE up gauge\nup 1\n", BOUNDS),
    }
    assert {kind: f.kind for kind, f in failures.items()} == {kind: kind for kind in failures}
    assert failures["http_status"].label == "http_503" and failures["parse"].label == "parse"
    # the same body under a wider bound is read
    wide = read_metrics(200, many_engines(MAX_SERIES), ScrapeBounds(max_series=10_000))
    assert len(wide.engines) == MAX_SERIES


# --- inspect --------------------------------------------------------------------------------------

EXPECTED_LINE = {           # what the one stderr line says, per kind
    "connect": "connection refused",
    "dns": "the host name servewatch-no-such-host.invalid could not be resolved",
    "timeout": f"no answer within {TIMEOUT_S:g} s",
    "http_status": "HTTP 503",
    "protocol": "malformed answer",
    "too_large": f"{MAX_BYTES:,}-byte bound",
    "too_many_series": f"more than {MAX_SERIES:,} series",
    "parse": "line 1:",
    "no_engine_metrics": "no vLLM or SGLang metrics among 1 families",
}


@pytest.fixture(scope="module")
def server():
    with scrape_server() as base:
        yield base


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_says_each_failure_in_one_line(server, capsys, kind):
    url = url_for(server, kind)
    code = main(["inspect", url, "--json", "--timeout", str(TIMEOUT_S), "--max-bytes", str(MAX_BYTES),
                 "--max-series", str(MAX_SERIES)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    [line] = captured.err.strip().splitlines()
    named = f"{url!r}" if kind == "dns" else url       # a name that does not resolve is said before any request
    assert line.startswith(f"servewatch inspect: {named}: ") and EXPECTED_LINE[kind] in line


def test_inspect_reads_the_same_server_within_bounds(server, capsys):
    assert main(["inspect", server + "/metrics", "--json", "--max-series", str(MAX_SERIES)]) == 0
    assert json.loads(capsys.readouterr().out)["engines"][0]["waiting"] == 9


def test_inspect_file_over_the_series_bound(tmp_path, capsys):
    path = tmp_path / "many.prom"
    path.write_bytes(many_engines(MAX_SERIES))
    assert main(["inspect", str(path), "--max-series", str(MAX_SERIES)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(path) in line and f"more than {MAX_SERIES:,} series" in line and "--max-series" in line


def tables(out: str) -> list[str]:
    """The engine label of each engine table, in the order printed (a long title wraps)."""
    return re.findall(r"^engine (\d+), model tiny", out, re.MULTILINE)


def inspect_both(path, capsys) -> tuple[list[str], str]:
    """(engine labels in --json order, the table output)."""
    assert main(["inspect", str(path), "--json"]) == 0
    engines = [engine["labels"]["engine"] for engine in json.loads(capsys.readouterr().out)["engines"]]
    assert main(["inspect", str(path)]) == 0
    return engines, capsys.readouterr().out


def test_inspect_table_shows_eight_engines_and_json_all(tmp_path, capsys):
    path = tmp_path / "eleven.prom"
    path.write_bytes(many_engines(11))
    engines, out = inspect_both(path, capsys)
    assert sorted(engines, key=int) == [str(i) for i in range(11)]
    assert "11 engine(s), the first 8 shown" in out
    assert tables(out) == engines[:8]
    assert "model_name=" not in out and "engine=" not in out      # label pairs are said in words
    assert "3 more engine(s) not shown" in out and "--json lists them all" in out


def test_inspect_table_with_few_engines_leaves_nothing_out(tmp_path, capsys):
    path = tmp_path / "eight.prom"
    path.write_bytes(many_engines(8))
    engines, out = inspect_both(path, capsys)
    assert len(engines) == 8 and tables(out) == engines and "shown" not in out


# --- watch: MetricsSource in a recorder ----------------------------------------------------------

async def _record_each_kind(base: str):
    urls = [url_for(base, kind) for kind in KINDS] + [base + "/metrics"]
    clock = VirtualClock()
    async with Http1Transport() as session:
        pending = iter(urls)

        async def transport():
            return await fetch(session, next(pending), timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)

        source = MetricsSource(transport, clock, 1.0, max_bytes=MAX_BYTES, max_series=MAX_SERIES)
        recorder = Recorder([source], clock)
        await recorder.run_virtual(len(urls) - 1)
    return recorder.ring.window().metrics


def test_watch_records_each_failure_as_a_typed_sample_and_goes_on(server):
    samples = asyncio.run(asyncio.wait_for(_record_each_kind(server), 60))
    expected = [("http_503" if kind == "http_status" else kind) for kind in KINDS]
    assert [s.error for s in samples[:-1]] == expected
    assert all(s.engines == () for s in samples[:-1])
    last = samples[-1]
    assert last.error is None and last.dialect == "vllm" and last.engines[0].waiting == 9


# --- the load generator's server view -------------------------------------------------------------

async def _view_each_kind(base: str):
    errors = {}
    for kind in (*KINDS, None):
        url = base + "/metrics" if kind is None else url_for(base, kind)
        client = Http1Client(Endpoint.parse(url.removesuffix("/metrics")), connect_timeout=TIMEOUT_S)
        view = ServerView(client, asyncio.get_running_loop().time, None, 1.0, timeout_s=TIMEOUT_S, bounds=BOUNDS)
        sample = await view.scrape_once()
        await client.close()
        errors[kind] = (sample.error, sample.running, view.summary()["errors"])
    return errors


def test_load_server_view_names_each_failure_kind(server):
    errors = asyncio.run(asyncio.wait_for(_view_each_kind(server), 60))
    for kind in KINDS:
        label = "http_503" if kind == "http_status" else kind
        assert errors[kind] == (label, None, {label: 1}), kind
    assert errors[None] == (None, 7, {})


# --- a body over the series bound is refused while it arrives, by each reader -----------------------------------

def test_each_reader_refuses_an_endless_exposition_at_the_series_bound_not_the_byte_bound(server, capsys):
    """/endless streams sample lines without end: read whole, a body stops only at the byte bound (16 MiB by
    default: too_large, with 16 MiB held); each reader refuses it at the series bound instead, once its first
    bytes hold more series than the bound."""
    code = main(["inspect", server + "/endless/metrics", "--timeout", "10", "--max-series", str(MAX_SERIES)])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"more than {MAX_SERIES:,} series (the series bound); --max-series sets it" in line

    async def watch_and_load():
        async with Http1Transport() as transport:       # the sources as watch and serve build them: default bounds
            [metrics] = [s for s in http_sources(transport, server, VirtualClock(), 1.0, gpu=False,
                                                        metrics_path="/endless/metrics")
                         if s.kind == "metrics"]
            [sample] = await metrics.poll()
        client = Http1Client(Endpoint.parse(server + "/endless"), connect_timeout=5.0)
        view = ServerView(client, asyncio.get_running_loop().time, None, 1.0, timeout_s=10.0,
                          bounds=ScrapeBounds(max_series=MAX_SERIES))
        seen = await view.scrape_once()
        await client.close()
        return sample.error, seen.error
    assert asyncio.run(asyncio.wait_for(watch_and_load(), 60)) == ("too_many_series", "too_many_series")
