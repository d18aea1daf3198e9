"""The prefill/decode verdicts' values (detectors/pd.py, issue 50 item 8): each verdict whole — its time, onset,
words, evidence, details and action — where scripts/mutation.sh's mutants of the module changed a value that
tests/test_pd_verdicts.py did not read: how the prefill lives (its process, /health at health_fail_count), the
stall's onset from the first scrape, fetch_in_progress where no waiting_for_kv is exported, a counter reset, the
boundaries (pd_bypass_min_tokens reached, kv_failure_min, kv_failure_fraction), several instances of a role.
Through run_detectors only: the module's layout may change, its verdicts may not."""

from __future__ import annotations

import dataclasses

import pytest

from servewatch.detectors import DetectorConfig, run_detectors, settings
from servewatch.detectors.verdict import PAGE, RESTART, Evidence, Verdict
from servewatch.errors import ServewatchError
from servewatch.timeline.samples import HealthSample, ProcessMember, ProcessSample
from servewatch.timeline.window import InstanceWindow, Window
from tests.test_pd_verdicts import healthy, instance, scrape, stalled_decode

TAIL = " — the prefill is the side to restart; decode is not restarted"
LIVES = " — the prefill lives: the transfer between them is at fault (a person decides; decode is not restarted)"
NOT_KNOWN = (" — whether the prefill lives is not known yet (it is counted down after 3 /health misses in a row): "
             "a person decides; decode is not restarted")


def verdicts(name: str, *instances: InstanceWindow) -> list[Verdict]:
    return [v for v in run_detectors(Window(instances=instances)) if v.name == name]


def with_kv(samples, **fields_at):
    """Each scrape with connector fields replaced: fields_at[name] is a function of the scrape's time."""
    out = []
    for s in samples:
        state = s.engines[0]
        kv = dataclasses.replace(state.kv_transfer, **{k: f(s.t) for k, f in fields_at.items()})
        out.append(dataclasses.replace(s, engines=(dataclasses.replace(state, kv_transfer=kv),)))
    return out


def at(samples, index: int, t: float):
    samples = list(samples)
    samples[index] = dataclasses.replace(samples[index], t=t)
    return samples


def bare(name: str, role: str, metrics=(), health=(), process=()) -> InstanceWindow:
    return InstanceWindow(name, role, Window(health=tuple(health), metrics=tuple(metrics), process=tuple(process)))


def ok_health(times):
    return [HealthSample(t, 200, 0.01) for t in times]


# --- kv_transfer_stall -------------------------------------------------------------------------------------------

# decode d0: one request waiting for KV from t = 10, nothing arriving; its last scrape at 59.98765 (held 49.98765 s)
STALLED = at(stalled_decode(60, 10), -1, 59.98765)
BASE = (Evidence("metrics", 10, "kv_transfer.waiting_for_kv", 1.0),
        Evidence("metrics", 59.98765, "kv_transfer.waiting_for_kv", 1.0),
        Evidence("metrics", 59.98765, "kv_transfer.external_prompt_tokens", 3000.0))
HEAD = "decode d0: 1 request waiting for KV for 50 s (bound 30 s) and no transferred token arrived"


def stall_of(prefill: InstanceWindow | None, *decodes: InstanceWindow) -> Verdict:
    found = verdicts("kv_transfer_stall", *((prefill,) if prefill else ()), *decodes,
                     instance("d0", "decode", STALLED))
    assert [v.details["decode"] for v in found] == ["d0"]
    return found[0]


def test_stall_with_a_dead_prefill_process_names_the_exit_and_its_sample():
    prefill, _ = healthy(60)
    p0 = instance("p0", "prefill", prefill, process=[ProcessSample(58.5, 600, 1.0, False)])
    # before d0: a decode never scraped, one waiting under the bound, one not waiting, one whose wait ended at its
    # last scrape (the request failed: nothing arrived): none of them is a stall, and none stops d0's from being judged
    short = with_kv(stalled_decode(60, 40), waiting_for_kv=lambda t: 1.0 if t >= 40 else 0.0)
    _, idle = healthy(60)
    ended = with_kv(stalled_decode(60, 10), waiting_for_kv=lambda t: 1.0 if 10 <= t < 59 else 0.0,
                    fetch_in_progress=lambda t: 0.0)
    # and one whose gauge dipped to 0 at the scrape before its last: a wait begun at the last scrape, 0 s held
    again = with_kv(stalled_decode(60, 10), waiting_for_kv=lambda t: 0.0 if t == 58 else 1.0 if t >= 10 else 0.0,
                    fetch_in_progress=lambda t: 0.0)
    stall = stall_of(p0, bare("dx", "decode"), instance("d1", "decode", short), instance("d2", "decode", idle),
                     instance("d3", "decode", ended), instance("d4", "decode", again))
    assert stall == Verdict(
        "kv_transfer_stall", 59.98765, 10, HEAD + "; prefill p0: its process exited" + TAIL,
        BASE + (Evidence("process", 58.5, "alive", False),),
        {"decode": "d0", "waiting": 1.0, "held_s": 49.988, "prefill": "p0", "prefill_state": "dead", "act_on": "p0"},
        action=RESTART)


def test_stall_with_a_stopped_member_without_a_title_names_its_pid_and_status():
    prefill, _ = healthy(60)
    member = ProcessMember(701, 1.0, "engine_core", "", "stopped")
    p0 = instance("p0", "prefill", prefill, process=[ProcessSample(59.5, 600, 1.0, True, (member,))])
    stall = stall_of(p0)
    assert stall.why == HEAD + "; prefill p0: a process (pid 701) is stopped" + TAIL
    assert stall.evidence == BASE + (Evidence("process", 59.5, "members.status", "stopped"),)
    assert (stall.details["prefill_state"], stall.details["act_on"], stall.action) == ("stopped", "p0", RESTART)


def test_stall_with_the_prefill_failing_health_exactly_health_fail_count_times_is_silent():
    prefill, _ = healthy(60)
    p0 = instance("p0", "prefill", prefill, health_ok=lambda t: t < 57)      # 57, 58, 59 failed: 3, the count
    stall = stall_of(p0)
    assert stall.why == HEAD + "; prefill p0: /health has not answered 2xx for 2 s (connect)" + TAIL
    assert stall.evidence == BASE + (Evidence("health", 59, "error", "connect"),)
    assert stall.details == {"decode": "d0", "waiting": 1.0, "held_s": 49.988, "prefill": "p0",
                             "prefill_state": "silent", "act_on": "p0"}


def test_stall_with_the_prefill_failing_health_fewer_times_says_its_last_answer_and_pages():
    prefill, _ = healthy(60)
    health = ok_health(range(58)) + [HealthSample(58, 503, 0.01), HealthSample(59, None, None, "timeout")]
    p0 = bare("p0", "prefill", prefill[:58], health)
    stall = stall_of(p0)
    assert stall.why == HEAD + "; prefill p0: /health timeout" + NOT_KNOWN
    assert stall.evidence == BASE + (Evidence("health", 59, "error", "timeout"),)
    assert stall.details == {"decode": "d0", "waiting": 1.0, "held_s": 49.988, "prefill": "p0",
                             "prefill_state": "unknown"}
    assert stall.action == PAGE


def test_stall_with_the_prefill_failing_its_last_health_check_only_is_not_alive():
    prefill, _ = healthy(60)
    health = ok_health(range(59)) + [HealthSample(59, None, None, "connect")]
    stall = stall_of(bare("p0", "prefill", prefill[:59], health))
    assert stall.why == HEAD + "; prefill p0: /health connect" + NOT_KNOWN
    assert (stall.details["prefill_state"], stall.evidence[-1]) == ("unknown", Evidence("health", 59, "error",
                                                                                         "connect"))


def test_stall_with_a_live_prefill_points_at_its_last_health_answer():
    prefill, _ = healthy(60)
    health = [HealthSample(t, 204 if t == 59 else 200, 0.01) for t in range(60)]
    stall = stall_of(bare("p0", "prefill", prefill, health))
    assert stall.why == HEAD + "; prefill p0: /health answers 2xx" + LIVES
    assert stall.evidence == BASE + (Evidence("health", 59, "status", 204),)
    assert (stall.details["prefill_state"], stall.action) == ("alive", PAGE)


def test_stall_with_a_prefill_nothing_was_read_from():
    prefill, _ = healthy(60)
    stall = stall_of(bare("p0", "prefill", prefill))          # scrapes, but no /health and no process read
    assert stall.why == HEAD + "; prefill p0: nothing read from it yet" + NOT_KNOWN
    assert stall.evidence == BASE
    assert stall.details["prefill_state"] == "unknown" and "act_on" not in stall.details


def test_stall_with_no_prefill_in_the_deployment_pages():
    assert stall_of(None) == Verdict(
        "kv_transfer_stall", 59.98765, 10, HEAD + "; no prefill instance is known to this deployment", BASE,
        {"decode": "d0", "waiting": 1.0, "held_s": 49.988}, action=PAGE)


def test_a_stall_from_the_first_scrape_has_that_scrape_as_its_onset():
    prefill, _ = healthy(40)
    [stall] = verdicts("kv_transfer_stall", instance("p0", "prefill", prefill), instance("d0", "decode",
                                                                                         stalled_decode(40, 0)))
    assert (stall.onset, stall.t, stall.details["held_s"]) == (0, 39, 39)
    assert stall.evidence[0] == Evidence("metrics", 0, "kv_transfer.waiting_for_kv", 1.0)


def test_a_stall_read_from_fetch_in_progress_where_decode_exports_no_waiting_for_kv():
    prefill, _ = healthy(60)
    decode = with_kv(stalled_decode(60, 10), waiting_for_kv=lambda t: None,
                     fetch_in_progress=lambda t: 2.0 if t >= 10 else 0.0)
    [stall] = verdicts("kv_transfer_stall", instance("p0", "prefill", prefill), instance("d0", "decode", decode))
    assert stall.why.startswith("decode d0: 2 requests waiting for KV for 49 s (bound 30 s)")
    assert (stall.onset, stall.details["waiting"]) == (10, 2.0)
    assert stall.evidence[:2] == (Evidence("metrics", 10, "kv_transfer.waiting_for_kv", 2.0),
                                  Evidence("metrics", 59, "kv_transfer.waiting_for_kv", 2.0))


# --- kv_expired --------------------------------------------------------------------------------------------------

def _prefill(expired):
    prefill, _ = healthy(60)
    return with_kv(prefill, expired=expired)


def _decode_waiting(stretches):
    """Decode with a request waiting for KV inside each (start, end) stretch (scrapes each second)."""
    _, decode = healthy(60)
    decode = with_kv(decode, waiting_for_kv=lambda t: 1.0 if any(a <= t <= b for a, b in stretches) else 0.0)
    return decode


def test_kv_expired_counts_a_reset_counter_from_zero_and_names_the_prefill_whose_counter_rose():
    p0 = instance("p0", "prefill", _prefill(lambda t: 0.0))
    # p1's counter: 5 at 40, then the prefill restarted and counted 3 by 50: 8 released
    p1 = instance("p1", "prefill", _prefill(lambda t: 0.0 if t < 40 else 5.0 if t < 50 else 3.0))
    # decode waited from its first scrape to 20.98765 (the longest stretch; 5 s more from 30), as long in d1
    waits = at(_decode_waiting([(0, 20), (30, 35)]), 21, 20.98765)
    waits = with_kv(waits, waiting_for_kv=lambda t: 1.0 if t <= 20.98765 or 30 <= t <= 35 else 0.0)
    [expired] = verdicts("kv_expired", p0, p1, instance("d0", "decode", waits), instance("d1", "decode", waits))
    assert (expired.t, expired.onset) == (59, 40)
    assert expired.details == {"prefill": "p1", "expired": 8.0, "lease_s": 30.0, "decode_wait_s": 20.988}
    assert expired.why == ("prefill p1 released the KV blocks of 8 requests before decode read them in the last 60 s "
                           "(its lease: 30 s, the kv_lease_s setting; vLLM's kv_lease_duration); decode d0 had a "
                           "request waiting for KV for 21 s: decode's answers to them may be wrong")


def test_kv_expired_at_the_last_scrape_points_at_that_scrape():
    p0 = instance("p0", "prefill", _prefill(lambda t: 2.0 if t >= 59 else 0.0))
    _, decode = healthy(60)
    [expired] = verdicts("kv_expired", p0, instance("d0", "decode", with_kv(decode, waiting_for_kv=lambda t: 0.0)))
    assert expired == Verdict(
        "kv_expired", 59, 59,
        "prefill p0 released the KV blocks of 2 requests before decode read them in the last 60 s (its lease: 30 s, "
        "the kv_lease_s setting; vLLM's kv_lease_duration); decode's wait for KV was too short for its scrapes to "
        "see: decode's answers to them may be wrong",
        (Evidence("metrics", 59, "kv_transfer.expired", 2.0),),
        {"prefill": "p0", "expired": 2.0, "lease_s": 30.0, "decode_wait_s": None})



def test_kv_expired_evidence_is_its_first_rise_and_the_newest_scrape_each_with_its_own_value():
    # 2 released at 40, 3 more at 50: the onset's evidence holds 2 (the value then), the newest holds 5
    p0 = instance("p0", "prefill", _prefill(lambda t: 0.0 if t < 40 else 2.0 if t < 50 else 5.0))
    _, decode = healthy(60)
    [expired] = verdicts("kv_expired", p0, instance("d0", "decode", with_kv(decode, waiting_for_kv=lambda t: 0.0)))
    assert (expired.onset, expired.details["expired"]) == (40, 5.0)
    assert expired.evidence == (Evidence("metrics", 40, "kv_transfer.expired", 2.0),
                                Evidence("metrics", 59, "kv_transfer.expired", 5.0))

# --- pd_bypass ---------------------------------------------------------------------------------------------------

def _bypass_decode(local, external=lambda t: 9000.0):
    return [scrape(t, "decode", waiting_for_kv=0.0, external_prompt_tokens=external(t), local_prompt_tokens=local(t),
                   transfers=40.0) for t in range(60)]


IDLE_PREFILL = [scrape(t, "prefill", prompt=5000.0, transfers=40.0, expired=0.0) for t in range(60)]


def test_pd_bypass_whole_with_two_prefills_and_two_decodes():
    p0 = bare("p0", "prefill", health=[HealthSample(t, None, None, "connect") for t in range(60)])   # no good scrape
    p1 = instance("p1", "prefill", IDLE_PREFILL)
    served = _bypass_decode(lambda t: 100.0, external=lambda t: t * 300.0)        # d0: served by transfer
    bypassed = _bypass_decode(lambda t: max(0, t - 20) * 100.0)                   # d1: computes from t = 21
    [bypass] = verdicts("pd_bypass", p0, p1, instance("d0", "decode", served), instance("d1", "decode", bypassed))
    assert bypass == Verdict(
        "pd_bypass", 59, 21,
        "decode d1 computed 3900 prompt tokens itself in the last 60 s and none came by KV transfer, while the "
        "prefill was idle (p0 gave no good scrape, p1 computed none): requests bypass the prefill (a router gone "
        "decode-only, or a wrong prefill address)",
        (Evidence("metrics", 59, "kv_transfer.local_prompt_tokens", 3900.0),
         Evidence("metrics", 59, "kv_transfer.external_prompt_tokens", 9000.0)),
        {"decode": "d1", "local_prompt_tokens": 3900.0, "prefill": "p0"})


def test_pd_bypass_evidence_is_the_last_scrapes_even_where_a_counter_went_back_to_zero():
    bypassed = _bypass_decode(lambda t: t * 100.0, external=lambda t: 0.0 if t == 59 else 9000.0)
    [bypass] = verdicts("pd_bypass", instance("p0", "prefill", IDLE_PREFILL), instance("d0", "decode", bypassed))
    assert bypass.evidence[1] == Evidence("metrics", 59, "kv_transfer.external_prompt_tokens", 0.0)
    assert bypass.details["local_prompt_tokens"] == 5900.0


def test_pd_bypass_at_its_boundaries():
    p0 = instance("p0", "prefill", IDLE_PREFILL)
    # decode computed exactly pd_bypass_min_tokens (256): a bypass
    exactly = _bypass_decode(lambda t: 256.0 if t >= 30 else 0.0)
    assert [v.details["local_prompt_tokens"] for v in verdicts("pd_bypass", p0, instance("d0", "decode", exactly))] \
        == [256.0]
    # one token less: none
    under = _bypass_decode(lambda t: 255.0 if t >= 30 else 0.0)
    assert verdicts("pd_bypass", p0, instance("d0", "decode", under)) == []
    # the prefill computed exactly as many: it works, no bypass
    working = [scrape(t, "prefill", prompt=5000.0 + (256.0 if t >= 30 else 0.0)) for t in range(60)]
    assert verdicts("pd_bypass", instance("p0", "prefill", working),
                    instance("d0", "decode", _bypass_decode(lambda t: t * 100.0))) == []
    # one token came by transfer: no bypass
    one = _bypass_decode(lambda t: t * 100.0, external=lambda t: 9001.0 if t >= 30 else 9000.0)
    assert verdicts("pd_bypass", p0, instance("d0", "decode", one)) == []
    # decode exports no transferred-token counter: nothing to judge
    unknown = [scrape(t, "decode", waiting_for_kv=0.0, local_prompt_tokens=t * 100.0) for t in range(60)]
    assert verdicts("pd_bypass", p0, instance("d0", "decode", unknown)) == []


# --- kv_transfer_failures ----------------------------------------------------------------------------------------

def _side(role, n=60, **fields):
    """Scrapes of one side each second, each field a function of time."""
    return [scrape(t, role, **{k: f(t) for k, f in fields.items()}) for t in range(n)]


def test_kv_transfer_failures_whole_across_both_sides():
    p_none = bare("px", "prefill")                                                 # never scraped
    p0 = instance("p0", "prefill", _side("prefill", transfers=lambda t: t * 2.0,
                                         failed_notifications=lambda t: 2.0 if t >= 40 else 0.0))
    d0 = instance("d0", "decode", _side("decode", transfers=lambda t: min(t, 45) * 1.0,
                                        failed_transfers=lambda t: float(max(0, t - 56))))
    d1 = instance("d1", "decode", [scrape(59.5, "decode", transfers=7.0, failed_transfers=0.0)])   # one scrape
    [failures] = verdicts("kv_transfer_failures", p_none, p0, d0, d1)
    assert failures == Verdict(
        "kv_transfer_failures", 59.5, 40,
        "5 KV transfer failures in the last 60 s (2 failed notifications at prefill p0; 3 failed transfers at decode "
        "d0, 10% of 50 tried): the requests they carried fail or are recomputed",
        (Evidence("metrics", 59, "kv_transfer.failed_notifications", 2.0),
         Evidence("metrics", 59, "kv_transfer.failed_transfers", 3.0)),
        {"failed": 5.0, "transfers": 45.0})


def test_kv_transfer_failures_newest_is_the_latest_instances_last_scrape():
    d0 = instance("d0", "decode", _side("decode", n=50, transfers=lambda t: t * 1.0,
                                        failed_transfers=lambda t: float(max(0, t - 40))))
    p0 = instance("p0", "prefill", _side("prefill", transfers=lambda t: t * 1.0))
    lone = instance("d9", "decode", [scrape(30.0, "decode", transfers=0.0)])          # first, with one scrape
    [failures] = verdicts("kv_transfer_failures", lone, d0, p0)
    assert (failures.t, failures.onset, failures.details) == (59, 41, {"failed": 9.0, "transfers": 49.0})


def test_kv_transfer_failures_where_only_the_prefill_counts_transfers_at_kv_failure_min():
    p0 = instance("p0", "prefill", _side("prefill", transfers=lambda t: min(t, 27) * 1.0))
    d0 = instance("d0", "decode", _side("decode", failed_transfers=lambda t: 3.0 if t >= 50 else 0.0))
    [failures] = verdicts("kv_transfer_failures", p0, d0)
    assert failures.why == ("3 KV transfer failures in the last 60 s (3 failed transfers at decode d0, 10% of 30 "
                            "tried): the requests they carried fail or are recomputed")
    assert failures.details == {"failed": 3.0, "transfers": 27.0}


def test_kv_transfer_failures_with_no_transfer_counted_says_no_share_and_keeps_kv_failure_min():
    d0 = instance("d0", "decode", _side("decode", bootstrap_failed=lambda t: 3.0 if t >= 50 else 0.0))
    [failures] = verdicts("kv_transfer_failures", d0)
    assert failures.why == ("3 KV transfer failures in the last 60 s (3 failed bootstraps at decode d0): the requests "
                            "they carried fail or are recomputed")
    assert failures.details == {"failed": 3.0, "transfers": None}
    two = instance("d0", "decode", _side("decode", bootstrap_failed=lambda t: 2.0 if t >= 50 else 0.0))
    assert verdicts("kv_transfer_failures", two) == []


def test_kv_transfer_failures_at_the_fraction_and_under_it():
    def pair(done: float):
        return (instance("p0", "prefill", _side("prefill")),
                instance("d0", "decode", _side("decode", transfers=lambda t: min(t, done),
                                               failed_transfers=lambda t: 3.0 if t >= 58 else 0.0)))
    [at_fraction] = verdicts("kv_transfer_failures", *pair(57.0))           # 3 of 60: 5 %, the bound
    assert at_fraction.why.endswith("(3 failed transfers at decode d0, 5% of 60 tried): the requests they carried "
                                    "fail or are recomputed")
    assert verdicts("kv_transfer_failures", *pair(58.0)) == []              # 3 of 61: under 5 %


def test_kv_failure_fraction_is_a_share():
    assert DetectorConfig(kv_failure_fraction=1.5).problems() == ["kv_failure_fraction is a share from 0 to 1, not 1.5"]
    assert DetectorConfig(kv_failure_fraction=-0.1).problems() == [
        "kv_failure_fraction is a share from 0 to 1, not -0.1"]
    assert DetectorConfig(kv_failure_fraction=1.0).problems() == []


def test_pd_bypass_says_a_scraped_prefill_without_a_prompt_counter_exports_none_not_that_it_gave_no_scrape():
    uncounted = [scrape(t, "prefill", transfers=40.0, expired=0.0) for t in range(60)]     # good scrapes, no prompt
    bypassed = _bypass_decode(lambda t: t * 100.0)
    [bypass] = verdicts("pd_bypass", instance("p0", "prefill", uncounted), instance("d0", "decode", bypassed))
    assert "while the prefill was idle (p0 exports no prompt-token count)" in bypass.why


def test_pd_bypass_min_tokens_under_one_is_refused():
    with pytest.raises(ServewatchError) as caught:
        settings.build(["pd_bypass_min_tokens=0"])
    assert str(caught.value) == "--set: pd_bypass_min_tokens counts at least 1, not 0"
    assert settings.build(["pd_bypass_min_tokens=1"]).pd_bypass_min_tokens == 1.0
