"""Pure logic of the load generator: ITL rule, percentiles, goodput, signature, arrivals, prompts,
SSE splitting, the server view's histogram deltas."""

from __future__ import annotations

import asyncio
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servewatch.engine.state import Counters, EngineState, Histogram
from servewatch.load import records as R
from servewatch.load.itl import compute_timings
from servewatch.load.prompts import ApproxCounter, LocalCounter, build_prompt
from servewatch.load.scenarios import Goodput, LoadConfig, arrival_times, parse_arrival, prompt_lengths
from servewatch.load.server_view import ServerView, run_means
from servewatch.transport.sse import SseSplitter
from servewatch.load.summary import is_good, percentile, stats, summarize


# ---------------------------------------------------------------- ITL rule

def test_itl_rule_on_exact_numbers():
    # first chunk 1 token at 0.100; then 3 tokens at 0.160 (Δ=60 ms), 2 tokens at 0.180 (Δ=20 ms)
    t = compute_timings([0.100, 0.160, 0.180], [1, 3, 2], total_tokens=6, counts_exact=True)
    assert t.ttft_s == 0.100
    assert t.itl_token_s == pytest.approx([0.02, 0.02, 0.02, 0.01, 0.01])
    assert t.itl_chunk_s == pytest.approx([0.06, 0.02])
    assert t.tpot_s == pytest.approx(0.08 / 5)
    assert t.exact


def test_itl_ignores_token_less_chunks_and_first_chunk_tokens():
    # chat: a role chunk with 0 tokens, then a first chunk of 2 tokens, then 1 token
    t = compute_timings([0.05, 0.1, 0.13], [0, 2, 1], total_tokens=3, counts_exact=True)
    assert t.ttft_s == 0.1
    assert t.itl_token_s == pytest.approx([0.03])
    assert t.tpot_s == pytest.approx(0.03 / 2)


def test_itl_without_continuous_usage_is_flagged_inexact():
    t = compute_timings([0.1, 0.2, 0.3], [1, 1, 1], total_tokens=7, counts_exact=False)
    assert not t.exact
    # 6 tokens after the first over 2 chunk gaps: k̄ = 3 per chunk
    assert t.itl_token_s == pytest.approx([0.1 / 3, 0.1 / 3])
    assert t.tpot_s == pytest.approx(0.2 / 6)


@given(st.lists(st.tuples(st.floats(0.0001, 1.0), st.integers(1, 8)), min_size=1, max_size=50))
@settings(max_examples=200, deadline=None)
def test_itl_per_token_sums_to_the_token_span(chunks):
    times, t = [], 0.0
    for gap, _ in chunks:
        t += gap
        times.append(t)
    counts = [k for _, k in chunks]
    timings = compute_timings(times, counts, total_tokens=sum(counts), counts_exact=True)
    assert len(timings.itl_token_s) == sum(counts) - counts[0]
    assert sum(timings.itl_token_s) == pytest.approx(times[-1] - times[0])
    assert len(timings.itl_chunk_s) == len(times) - 1


# ---------------------------------------------------------------- percentiles and summary

@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=2, max_size=300))
@settings(max_examples=200, deadline=None)
def test_percentiles_match_the_statistics_module(values):
    data = sorted(values)
    # statistics.quantiles(method="inclusive") is the same R-7 definition, computed independently
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    for q in (1, 50, 90, 99):
        assert percentile(data, q) == pytest.approx(cuts[q - 1], rel=1e-9, abs=1e-9)
    assert percentile(data, 0) == data[0] and percentile(data, 100) == data[-1]


def test_stats_by_hand():
    s = stats([4.0, 1.0, 3.0, 2.0])
    assert s["mean"] == 2.5 and s["p50"] == 2.5 and s["max"] == 4.0 and s["count"] == 4
    assert s["p90"] == pytest.approx(3.7)        # 1 + 0.9*3 = rank 2.7 → 3 + 0.7*(4-3)
    assert stats([])["p50"] is None


def _rec(i, ttft, e2e, tpot, error=None, out=10):
    rec = R.RequestRecord(id=i, scheduled=100.0 + i, prompt_tokens_target=5, max_tokens=out, sent=100.0 + i + 0.001,
                          http_status=200 if error in (None, R.TRUNCATED) else 500, ttft_s=ttft, e2e_s=e2e, tpot_s=tpot,
                          input_tokens=5, output_tokens=out, token_source="server", error=error)
    rec.itl_token_s = [tpot] * (out - 1) if tpot else []
    return rec


def test_summary_counts_errors_apart_and_computes_goodput():
    records = [_rec(0, 0.1, 1.0, 0.01), _rec(1, 0.3, 2.0, 0.02), _rec(2, 0.2, 1.5, 0.05),
               _rec(3, 0.1, 0.5, 0.01, error=R.HTTP_5XX), _rec(4, 0.1, 0.4, 0.01, error=R.TRUNCATED, out=10)]
    config = LoadConfig(url="http://x", scenario="custom", rate=2.0, requests=5,
                        goodput=Goodput.parse("ttft=250,tpot=30")).resolved()
    s = summarize(config, records, wall_s=4.0, prompt_source="approx", prompts_exact=True)
    assert s["requests"] == 5 and s["ok"] == 3
    assert s["errors"]["http_5xx"] == 1 and s["errors"]["truncated"] == 1 and s["errors"]["connect"] == 0
    assert s["ttft_s"]["count"] == 3 and s["ttft_s"]["mean"] == pytest.approx(0.2)
    assert s["e2e_s"]["max"] == 2.0                   # failures never enter latency stats
    # good: #0 only (#1 ttft 300 > 250, #2 tpot 50 > 30; failures are never good)
    assert s["goodput_fraction"] == pytest.approx(1 / 5) and s["goodput"] == pytest.approx(1 / 4.0)
    assert s["achieved_rate"] == pytest.approx(1.0)
    assert s["schedule_delay_s"]["p99"] == pytest.approx(0.001)
    assert s["tokens_out"] == 30 and s["token_count_source"] == "server"
    sig = s["signature"]
    assert sig["sources"]["queue_wait_s"] is None and sig["sources"]["ttft_s"] == "client"
    assert sig["ttft_s"] == pytest.approx(0.2) and sig["tokens_out"] == pytest.approx(10)


def test_goodput_parse_rejects_bad_items():
    assert Goodput.parse("ttft=100, e2e=2000") == Goodput(ttft_s=0.1, e2e_s=2.0)
    for bad in ("ttft", "foo=1", "ttft=abc", "tpot=0"):
        with pytest.raises(ValueError):
            Goodput.parse(bad)


def test_is_good_treats_one_token_tpot_as_zero():
    rec = _rec(0, 0.1, 0.1, None, out=1)
    assert is_good(rec, Goodput(tpot_s=0.001))


# ---------------------------------------------------------------- scenarios and arrivals

def test_presets_carry_the_seed_numbers():
    c = LoadConfig(url="u", scenario="overload").resolved()
    assert (c.rate, c.prompt_tokens, c.output_tokens, c.duration_s) == (14.0, 44, 128, 60.0)
    c = LoadConfig(url="u", scenario="long-prompt").resolved()
    assert (c.rate, c.prompt_tokens, c.output_tokens, c.prompt_pool) == (1.0, 2905, 64, 1)
    c = LoadConfig(url="u", scenario="long-output", rate=0.5, output_tokens=512).resolved()
    assert (c.rate, c.output_tokens) == (0.5, 512)
    c = LoadConfig(url="u", scenario="normal", concurrency=4).resolved()
    assert c.rate is None and c.concurrency == 4


@pytest.mark.parametrize("kw,msg", [({"scenario": "custom"}, "needs --rate"), ({"scenario": "x"}, "unknown scenario"),
                                    ({"rate": -1}, "positive"), ({"arrival": "gamma:x"}, "gamma"),
                                    ({"arrival": "burst"}, "poisson"), ({"duration_s": 5, "requests": 3}, "not both"),
                                    ({"output_tokens": 0}, ">= 1")])
def test_bad_configs_say_what_is_wrong(kw, msg):
    with pytest.raises(ValueError, match=msg):
        LoadConfig(url="u", **kw).resolved()


def test_arrivals_are_seeded_and_have_the_asked_rate():
    a = arrival_times("poisson", 10.0, seed=3, requests=5000)
    assert a == arrival_times("poisson", 10.0, seed=3, requests=5000)
    assert a != arrival_times("poisson", 10.0, seed=4, requests=5000)
    assert a[0] == 0.0 and all(b > x for x, b in zip(a, a[1:]))
    gaps = [b - x for x, b in zip(a, a[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.1, rel=0.1)         # exponential: sd = mean
    c = arrival_times("constant", 4.0, seed=0, duration_s=2.0)
    assert c == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])
    g = arrival_times("gamma:0.25", 10.0, seed=1, requests=5000)
    ggaps = [b - x for x, b in zip(g, g[1:])]
    assert statistics.mean(ggaps) == pytest.approx(0.1, rel=0.1)
    assert statistics.stdev(ggaps) / statistics.mean(ggaps) == pytest.approx(2.0, rel=0.15)   # cv = 1/sqrt(k)
    assert parse_arrival("gamma:2") == ("gamma", 2.0)


def test_prompt_lengths_seeded_normal():
    lengths = prompt_lengths(100, 10, 2000, seed=1)
    assert lengths == prompt_lengths(100, 10, 2000, seed=1)
    assert statistics.mean(lengths) == pytest.approx(100, abs=1.5) and min(lengths) >= 1
    assert prompt_lengths(7, 0, 3, seed=1) == [7, 7, 7]


# ---------------------------------------------------------------- prompts

def _tiny_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"])
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(["time", "year", "way", "day", "man", "work", "life", "hand", "bank",
                                   "rock", "sand", "gold", "ship", "read", "grow"]) for _ in range(30))
              for _ in range(200)]
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    file = path / "tokenizer.json"
    tok.save(str(file))
    return path


@pytest.mark.parametrize("target", [2, 17, 44, 300])
def test_prompts_built_to_the_exact_token_count_with_a_local_tokenizer(tmp_path, target):
    counter = LocalCounter(_tiny_tokenizer(tmp_path))
    prompt = asyncio.run(build_prompt(counter, target, random.Random(target)))
    assert prompt.source == "tokenizer"
    # checked with the tokenizer directly, BOS included, as the server would count it
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(prompt.text).ids
    assert len(ids) == target == prompt.tokens and prompt.exact


def test_prompts_differ_and_approx_is_flagged():
    rng = random.Random(0)
    a = asyncio.run(build_prompt(ApproxCounter(), 44, rng))
    b = asyncio.run(build_prompt(ApproxCounter(), 44, rng))
    assert a.text != b.text and len(a.text.split()) == 44 and a.source == "approx"


def test_local_tokenizer_missing_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        LocalCounter(tmp_path)


# ---------------------------------------------------------------- SSE

def test_sse_splitter_handles_split_events_crlf_and_multiline():
    s = SseSplitter()
    assert s.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert s.feed(b':2}\n\n: comment\n\ndata: [DONE]\r') == [b'{"b":2}']
    assert s.feed(b"\n\r\n") == [b"[DONE]"]
    assert s.feed(b"data: x\ndata: y\n\n") == [b"x\ny"]
    small = SseSplitter(max_event_bytes=10)
    with pytest.raises(ValueError):
        small.feed(b"data: " + b"x" * 100)


# ---------------------------------------------------------------- server view

def _engine(queue_sum, queue_count, running, waiting, kv, prompt, gen, finished, preempt=0.0):
    h = Histogram(edges=(0.1, 1.0), cumulative=(queue_count, queue_count), count=queue_count, sum=queue_sum)
    return EngineState(dialect="vllm", naming="vllm-0.32", labels={"engine": "0"}, running=running,
                       waiting=waiting, kv_usage=kv, histograms={"queue": h},
                       counters=Counters(prompt_tokens=prompt, generation_tokens=gen, preemptions=preempt,
                                         finished={"length": finished}))


def test_run_means_are_histogram_and_counter_deltas():
    first = [_engine(10.0, 100, 0, 0, 0.0, 1000, 5000, 100)]
    last = [_engine(14.0, 110, 3, 1, 0.2, 1440, 6280, 110)]
    means = run_means(first, last)
    assert means["queue"] == pytest.approx(0.4)                 # (14-10)/(110-100)
    assert means["tokens_in"] == pytest.approx(44) and means["tokens_out"] == pytest.approx(128)
    reset = [_engine(1.0, 5, 0, 0, 0.0, 10, 10, 5)]
    assert run_means(last, reset)["queue"] is None               # a counter reset is not subtracted


def test_server_view_on_the_real_vllm_fixture():
    fixture = Path(__file__).resolve().parent / "fixtures" / "metrics"
    view = ServerView(None, lambda: 0.0, None, 0.5)
    t0 = (fixture / "vllm_kv_pressure_t0.prom").read_bytes()
    t1 = (fixture / "vllm_kv_pressure_t1.prom").read_bytes()
    a = view.ingest(t0, 1.0, 1.1)
    b = view.ingest(t1, 2.0, 2.3)
    view.ingest(b"# nothing an engine would expose\nfoo_total 1\n", 3.0, 3.1)
    # the values in the two captures, read through the dialects
    assert (a.dialect, a.running, a.waiting) == ("vllm", 7, 9) and a.kv_usage == pytest.approx(0.8889, abs=1e-3)
    assert (b.running, b.waiting, b.kv_usage) == (7, 4, 1.0)
    assert b.scrape_s == pytest.approx(0.3)
    s = view.summary()
    assert s["samples"] == 3 and s["errors"] == {"no_engine_metrics": 1}
    assert (s["max_running"], s["max_waiting"], s["max_kv"]) == (7, 9, 1.0)
    assert s["dialect"] == "vllm"
