"""Values of the load run's summary (servewatch/load/summary.py): percentiles by linear interpolation between
closest ranks (R type 7, numpy's default), the goodput test at its thresholds (just under, at, just over),
achieved rate, means and the signature row's sources — each computed by hand beside the assertion (issue 40)."""

import pytest

from servewatch.load import summary as S
from servewatch.load.itl import ITL_RULE
from servewatch.load.records import ERROR_CLASSES, RequestRecord
from servewatch.load.scenarios import Goodput, LoadConfig


def rec(i, sent, *, ttft=None, tpot=None, e2e=None, status=200, error=None, itl=(), chunk_itl=(), exact=True,
        tokens_in=None, tokens_out=None, source="server", scheduled=None):
    r = RequestRecord(id=i, scheduled=sent if scheduled is None else scheduled, prompt_tokens_target=8,
                      max_tokens=16, sent=sent, http_status=status, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, error=error)
    r.itl_token_s, r.itl_chunk_s, r.itl_exact = list(itl), list(chunk_itl), exact
    r.input_tokens, r.output_tokens, r.token_source = tokens_in, tokens_out, source
    return r


@pytest.mark.parametrize("values, q, want", [
    ([], 50, None), ([7], 99, 7.0), ([1, 2], 50, 1.5),
    ([1, 2, 3, 4], 50, 2.5),           # pos (4 - 1) x 0.5 = 1.5: 2 + (3 - 2) x 0.5
    ([1, 2, 3, 4], 90, 3.7),           # pos 2.7: 3 + (4 - 3) x 0.7
    ([1, 2, 3, 4, 5], 99, 4.96),       # pos 3.96: 4 + 1 x 0.96
    ([10, 20, 30], 0, 10.0), ([10, 20, 30], 100, 30.0),   # pos 0 and pos 2 (hi capped at n - 1)
    ([0, 100], 25, 25.0),              # pos 0.25
])
def test_percentile(values, q, want):
    got = S.percentile(values, q)
    assert got == (None if want is None else pytest.approx(want))
    if values and len(values) == 1:
        assert isinstance(got, float)


def test_stats():
    assert S.stats([]) == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    out = S.stats([4.0, 1.0, 3.0, 2.0])                # sorted first
    # mean 10 / 4 = 2.5; p50 2.5; p90 3.7; p99 pos 2.97: 3 + 0.97 = 3.97; max 4
    assert out == {"count": 4, "mean": 2.5, "p50": 2.5, "p90": pytest.approx(3.7), "p99": pytest.approx(3.97),
                   "max": 4.0}


def test_is_good_at_each_threshold():
    slo = Goodput(ttft_s=0.5, tpot_s=0.05, e2e_s=2.0)
    assert S.is_good(rec(1, 0.0, ttft=0.5, tpot=0.05, e2e=2.0), slo)                      # at each: good
    assert not S.is_good(rec(1, 0.0, ttft=0.5001, tpot=0.05, e2e=2.0), slo)
    assert not S.is_good(rec(1, 0.0, ttft=0.5, tpot=0.0501, e2e=2.0), slo)
    assert not S.is_good(rec(1, 0.0, ttft=0.5, tpot=0.05, e2e=2.0001), slo)
    assert S.is_good(rec(1, 0.0, ttft=0.4999, tpot=None, e2e=1.9999), slo)                # a 1-token answer: TPOT 0
    assert not S.is_good(rec(1, 0.0, ttft=None, e2e=1.0), slo)                            # no TTFT: not good
    assert not S.is_good(rec(1, 0.0, ttft=0.1, e2e=None), slo)
    assert not S.is_good(rec(1, 0.0, ttft=0.1, e2e=1.0, status=503), slo)
    assert not S.is_good(rec(1, 0.0, ttft=0.1, e2e=1.0, error="truncated"), slo)
    assert S.is_good(rec(1, 0.0), Goodput())                                               # no SLO: ok is good
    assert S.is_good(rec(1, 0.0, ttft=None, e2e=None, tpot=9.0), Goodput(tpot_s=None))


def test_summarize():
    config = LoadConfig(url="http://x", scenario="custom", rate=2.0, seed=7, prompt_tokens=100, output_tokens=20,
                        goodput=Goodput(ttft_s=0.5))
    records = [rec(1, 100.0, ttft=0.25, tpot=0.5, e2e=1.25, itl=[0.5, 0.5], chunk_itl=[1.0], tokens_in=10,
                   tokens_out=3, scheduled=99.75),
               rec(2, 101.0, ttft=0.75, tpot=0.25, e2e=2.75, itl=[0.25], chunk_itl=[0.25], tokens_in=30, tokens_out=5,
                   exact=None),
               rec(3, 102.0, error="timeout", status=None, e2e=9.0, itl=[9.0]),
               rec(4, None, error="connect", status=None, scheduled=103.0)]
    out = S.summarize(config, records, wall_s=4.0, prompt_source="approx", prompts_exact=False, server=None,
                      client_name="http1")
    # sent 100, 101, 102: achieved (3 - 1) / (102 - 100) = 1 a second; schedule delays 0.25, 0, 0
    assert (out["requests"], out["ok"], out["achieved_rate"], out["requested_rate"]) == (4, 2, 1.0, 2.0)
    assert out["errors"] == {**{name: 0 for name in ERROR_CLASSES}, "timeout": 1, "connect": 1}
    assert out["schedule_delay_s"] == {"p50": 0.0, "p99": pytest.approx(0.245), "max": 0.25,
                                       "mean": pytest.approx(0.25 / 3)}
    # latencies over the ok ones only: TTFT 0.25, 0.75 -> mean 0.5, p50 0.5
    assert (out["ttft_s"]["count"], out["ttft_s"]["mean"], out["ttft_s"]["p50"]) == (2, 0.5, 0.5)
    assert out["itl_s"]["count"] == 3 and out["itl_s"]["max"] == 0.5          # the failed one's 9.0 is left out
    assert out["itl_chunk_s"]["count"] == 2 and out["itl_chunk_s"]["max"] == 1.0
    assert out["e2e_s"]["max"] == 2.75 and out["tpot_s"]["mean"] == 0.375
    # goodput: TTFT <= 0.5 -> 1 good of 4 records: fraction 0.25, 1 / 4 s = 0.25 a second
    assert (out["goodput"], out["goodput_fraction"], out["goodput_slo"]) == (0.25, 0.25, config.goodput.to_json())
    assert (out["tokens_in"], out["tokens_out"], out["token_count_source"]) == (40, 8, "server")
    assert (out["itl_exact"], out["itl_rule"], out["client"], out["seed"], out["scenario"]) == \
        (True, ITL_RULE, "http1", 7, "custom")
    assert (out["arrival"], out["concurrency"], out["wall_s"], out["prompt_token_source"], out["prompts_exact"]) == \
        ("poisson", None, 4.0, "approx", False)
    assert (out["output_tokens_requested"], out["prompt_tokens_requested"], out["server_view"]) == (20, 100, None)
    # the client view: tokens 40 / 2 = 20 in, 8 / 2 = 4 out; generation (1.25 - 0.25 + 2.75 - 0.75) / 2 = 1.5
    client = out["signature"]["client"]
    assert client == {"tokens_in": 20.0, "tokens_out": 4.0, "ttft_s": 0.5, "itl_s": pytest.approx(1.25 / 3),
                      "generation_s": 1.5, "e2e_s": 2.0}


def test_summarize_edges():
    config = LoadConfig(url="http://x", scenario="custom", concurrency=4)
    one = S.summarize(config, [rec(1, 100.0, ttft=0.1, e2e=1.0, exact=False, source="client")], wall_s=0.0,
                      prompt_source="approx", prompts_exact=True)
    assert (one["achieved_rate"], one["goodput"], one["goodput_fraction"], one["goodput_slo"]) == (None, None, None, None)
    assert (one["arrival"], one["concurrency"], one["itl_exact"], one["token_count_source"]) == (None, 4, False, "approx")
    same_time = S.summarize(config, [rec(1, 100.0), rec(2, 100.0)], wall_s=1.0, prompt_source="p", prompts_exact=True)
    assert same_time["achieved_rate"] is None                         # two sends at the same instant: no rate
    gp = LoadConfig(url="http://x", scenario="custom", rate=1.0, goodput=Goodput(e2e_s=1.0))
    none = S.summarize(gp, [], wall_s=0.0, prompt_source="p", prompts_exact=True)
    assert (none["goodput"], none["goodput_fraction"], none["ok"]) == (None, None, 0)
    assert none["signature"]["client"] == {"tokens_in": None, "tokens_out": None, "ttft_s": None, "itl_s": None,
                                           "generation_s": None, "e2e_s": None}


def test_signature_prefers_the_server():
    client = {"tokens_in": 20.0, "tokens_out": 4.0, "ttft_s": 0.5, "itl_s": 0.1, "generation_s": 1.5, "e2e_s": 2.0}
    server = {"means": {"tokens_in": 21.0, "queue": 0.01, "prefill": 0.2, "ttft": None, "decode": 1.4},
              "max_running": 3, "max_waiting": 0, "max_kv": 0.5}
    row = S.signature(client, server)
    assert {k: row[k] for k in S.SIGNATURE_FIELDS} == {
        "tokens_in": 21.0, "tokens_out": 4.0, "queue_wait_s": 0.01, "prefill_s": 0.2, "ttft_s": 0.5, "itl_s": 0.1,
        "generation_s": 1.4, "e2e_s": 2.0, "max_running": 3, "max_waiting": 0, "max_kv": 0.5}
    assert row["sources"] == {"tokens_in": "server", "tokens_out": "client", "queue_wait_s": "server",
                              "prefill_s": "server", "ttft_s": "client", "itl_s": "client", "generation_s": "server",
                              "e2e_s": "client", "max_running": "server", "max_waiting": "server", "max_kv": "server"}
    assert row["client"] is client
    bare = S.signature({}, None)
    assert all(bare[k] is None and bare["sources"][k] is None for k in S.SIGNATURE_FIELDS)
    means = S.signature({}, {"means": {"itl": 0.02, "e2e": 3.0, "tokens_out": 7.0}})
    assert (means["itl_s"], means["e2e_s"], means["tokens_out"]) == (0.02, 3.0, 7.0)


# -- what the first mutation run left open (scripts/mutation.sh) -----------------------------------------------------

def test_summarize_counts_repeated_errors_and_reads_the_server():
    config = LoadConfig(url="http://x", scenario="custom", rate=1.0, goodput=Goodput(ttft_s=1.0))
    records = [rec(1, 100.0, error="timeout", status=None), rec(2, 100.0, error="timeout", status=None),
               rec(3, 101.0, ttft=0.5, e2e=None, tokens_in=None, tokens_out=None)]     # ok, without an end or counts
    server = {"means": {"ttft": 0.25}, "max_running": 2}
    out = S.summarize(config, records, wall_s=0.5, prompt_source="p", prompts_exact=True, server=server)
    assert out["errors"]["timeout"] == 2 and out["client"] == "http1" and out["api"] == "completions"
    # sent 100, 100, 101: (3 - 1) / (101 - 100) = 2 a second
    assert out["achieved_rate"] == 2.0
    # 1 good (TTFT 0.5 <= 1) in 0.5 s: 2 a second
    assert out["goodput"] == 2.0 and out["goodput_fraction"] == pytest.approx(1 / 3)
    assert (out["tokens_in"], out["tokens_out"]) == (0, 0)
    assert (out["signature"]["ttft_s"], out["signature"]["sources"]["ttft_s"]) == (0.25, "server")
    assert out["signature"]["max_running"] == 2 and out["server_view"] is server
    assert out["signature"]["client"]["generation_s"] is None            # no e2e: no generation time


def test_achieved_rate_of_two_sends_and_of_equal_times():
    config = LoadConfig(url="http://x", scenario="custom", rate=1.0)

    def rate(*sent):
        return S.summarize(config, [rec(i, t) for i, t in enumerate(sent)], wall_s=1.0, prompt_source="p",
                           prompts_exact=True)["achieved_rate"]
    assert rate(100.0, 100.5) == 2.0                 # (2 - 1) / 0.5
    assert rate(100.0, 101.0, 101.0) == 2.0          # (3 - 1) / 1
    assert rate(100.0, 100.0, 102.0) == 1.0          # (3 - 1) / 2
    assert rate(100.0) is None


def test_signature_takes_the_client_where_the_server_is_silent():
    client = {"tokens_in": 20.0, "tokens_out": 4.0, "ttft_s": 0.5, "itl_s": 0.1, "generation_s": 1.5, "e2e_s": 2.0}
    row = S.signature(client, None)
    assert {k: row[k] for k in ("tokens_in", "tokens_out", "ttft_s", "itl_s", "generation_s", "e2e_s")} == client
    assert all(row["sources"][k] == "client" for k in client)
    assert all(row[k] is None for k in ("queue_wait_s", "prefill_s", "max_running", "max_waiting", "max_kv"))


def test_an_error_class_outside_the_load_generators_own_is_counted_from_zero():
    config = LoadConfig(url="http://x", scenario="custom", rate=1.0)
    # the proxy's records add client_abort, not one of ERROR_CLASSES: 0 + 1
    out = S.summarize(config, [rec(1, 100.0, error="client_abort", status=None)], wall_s=1.0, prompt_source="p",
                      prompts_exact=True)
    assert out["errors"]["client_abort"] == 1
