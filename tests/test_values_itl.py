"""Values of the load generator's timings from a known chunk schedule (servewatch/load/itl.py): TTFT from the
first token-carrying chunk, TPOT, the per-token and per-chunk ITL series, exact and inexact counts (issue 40:
no test computed a TTFT from a known schedule). Times are sums of powers of two, so the arithmetic is exact."""

import pytest

from servewatch.load.itl import ITL_RULE, Timings, compute_timings


def timings(t, k, total=None, exact=True) -> Timings:
    return compute_timings(t, k, total, exact)


def test_one_token_a_chunk():
    out = timings([0.5, 0.75, 1.0, 1.5], [1, 1, 1, 1])
    # TTFT the first chunk (0.5), not the last (1.5); gaps 0.25, 0.25, 0.5; TPOT (1.5 - 0.5) / (4 - 1) = 1/3
    assert (out.ttft_s, out.last_token_s, out.exact) == (0.5, 1.5, True)
    assert out.itl_chunk_s == [0.25, 0.25, 0.5] and out.itl_token_s == [0.25, 0.25, 0.5]
    assert out.tpot_s == pytest.approx(1 / 3)
    out.itl_token_s.append(9.0)
    assert out.itl_chunk_s == [0.25, 0.25, 0.5]          # two lists, not one shared


def test_chunks_without_tokens_do_not_count():
    out = timings([0.25, 0.5, 0.75, 1.0, 1.5], [0, 1, 0, 1, 1])
    # token-carrying arrivals 0.5, 1.0, 1.5: TTFT 0.5 (the 0.25 chunk had no token); TPOT 1.0 / 2 = 0.5
    assert (out.ttft_s, out.last_token_s, out.tpot_s) == (0.5, 1.5, 0.5)
    assert out.itl_chunk_s == [0.5, 0.5] == out.itl_token_s


def test_the_server_total_sets_tpot_when_the_counts_are_exact():
    out = timings([0.5, 1.0, 1.5], [1, 1, 1], total=5, exact=True)
    # TPOT (1.5 - 0.5) / (5 - 1) = 0.25; the gaps as they came
    assert (out.tpot_s, out.exact, out.itl_token_s) == (0.25, True, [0.5, 0.5])
    same = timings([0.5, 1.0, 1.5], [1, 1, 1], total=3, exact=False)        # the total agrees: exact
    assert (same.tpot_s, same.exact, same.itl_token_s) == (0.5, True, [0.5, 0.5])


def test_a_total_that_disagrees_divides_each_gap_by_the_mean_tokens_a_chunk():
    out = timings([0.5, 1.0, 1.5], [1, 1, 1], total=5, exact=False)
    # k̄ = (5 - 1 first-chunk token) / 2 gaps = 2: per token 0.5 / 2 = 0.25 a gap; TPOT 1.0 / 4 = 0.25
    assert (out.ttft_s, out.last_token_s, out.exact) == (0.5, 1.5, False)
    assert out.itl_chunk_s == [0.5, 0.5] and out.itl_token_s == [0.25, 0.25] and out.tpot_s == 0.25
    # k̄ = (2 - 2) / 1 = 0: no per-token observation; TPOT 0.5 / (2 - 1) = 0.5
    none = timings([0.5, 1.0], [2, 1], total=2, exact=False)
    assert (none.itl_chunk_s, none.itl_token_s, none.tpot_s, none.exact) == ([0.5], [], 0.5, False)
    # one chunk: no gap (k̄ 0); TPOT 0 / (5 - 1) = 0
    one = timings([0.5], [3], total=5, exact=False)
    assert (one.ttft_s, one.itl_chunk_s, one.itl_token_s, one.tpot_s) == (0.5, [], [], 0.0)


def test_several_tokens_a_chunk():
    out = timings([0.25, 0.5, 1.0, 2.0], [0, 2, 1, 4])
    # arrivals 0.5 (2 tokens), 1.0 (1), 2.0 (4): chunk gaps 0.5, 1.0; per token 0.5 once, then 1.0 / 4 four times;
    # 7 tokens: TPOT (2.0 - 0.5) / 6 = 0.25
    assert (out.ttft_s, out.last_token_s, out.exact) == (0.5, 2.0, True)
    assert out.itl_chunk_s == [0.5, 1.0]
    assert out.itl_token_s == [0.5, 0.25, 0.25, 0.25, 0.25]
    assert out.tpot_s == 0.25
    two = timings([0.5, 1.0], [2, 2])
    assert (two.itl_token_s, two.tpot_s) == ([0.25, 0.25], pytest.approx(0.5 / 3))   # 4 tokens: 0.5 / 3


def test_tpot_needs_two_tokens():
    assert timings([0.5], [1]).tpot_s is None
    assert timings([0.5], [1], total=1).tpot_s is None
    assert timings([0.5], [1], total=2).tpot_s == 0.0          # (0.5 - 0.5) / 1
    assert timings([0.5, 0.75], [1, 1]).tpot_s == 0.25
    assert timings([0.5], [2]).tpot_s == 0.0                   # 2 tokens in one chunk: (0.5 - 0.5) / 1
    assert timings([0.5], [2], total=1, exact=False).tpot_s is None


def test_no_token_no_timings():
    for t, k in (([], []), ([0.5, 1.0], [0, 0])):
        out = timings(t, k)
        assert (out.ttft_s, out.tpot_s, out.last_token_s, out.itl_token_s, out.itl_chunk_s, out.exact) == \
            (None, None, None, [], [], True)


def test_the_rule_in_words():
    assert ITL_RULE == ("per-token ITL: a chunk of k tokens arriving Δ after the previous token-carrying chunk "
                        "adds k observations of Δ/k; the first chunk's tokens add none")


def test_several_tokens_a_chunk_exact_without_a_total_or_when_the_counts_are_exact():
    # no server total: the client's counts are taken as exact (the same numbers as with exact counts)
    out = timings([0.5, 1.0, 2.0], [2, 1, 4], total=None, exact=False)
    assert (out.exact, out.itl_token_s, out.tpot_s) == (True, [0.5, 0.25, 0.25, 0.25, 0.25], 0.25)
    # exact per-chunk counts with a total of 9 (not the 7 counted): still exact; TPOT (2.0 - 0.5) / 8 = 0.1875
    out = timings([0.5, 1.0, 2.0], [2, 1, 4], total=9, exact=True)
    assert (out.exact, out.itl_token_s, out.tpot_s) == (True, [0.5, 0.25, 0.25, 0.25, 0.25], 0.1875)


def test_a_mean_under_one_token_a_chunk():
    # 3 text chunks but a server total of 2: k̄ = (2 - 1) / 2 gaps = 0.5, so each gap of 0.5 s reads 0.5 / 0.5 = 1.0
    out = timings([0.5, 1.0, 1.5], [1, 1, 1], total=2, exact=False)
    assert (out.exact, out.itl_token_s, out.itl_chunk_s, out.tpot_s) == (False, [1.0, 1.0], [0.5, 0.5], 1.0)
