"""The verdicts of a prefill/decode deployment (issue 52), on windows built from EngineState scrapes: each fires
on its fault with its evidence in words, none fires on a healthy pair under steady load, and only the side at
fault may be acted on (guard's policy, serve's livez, the pair's readiness)."""

from __future__ import annotations

import dataclasses

from servewatch.actions.policy import GuardConfig, action_for
from servewatch.detectors import DetectorConfig, registry, run_detectors
from servewatch.detectors.verdict import PAGE, RESTART, Verdict
from servewatch.engine.state import Counters, EngineState, KvTransfer
from servewatch.serve import probes
from servewatch.timeline.samples import HealthSample, MetricsSample, ProcessMember, ProcessSample
from servewatch.timeline.window import InstanceWindow, Window

PAIR = ("kv_transfer_stall", "kv_expired", "pd_bypass", "kv_transfer_failures")


def scrape(t: float, role: str, **kv) -> MetricsSample:
    prompt = kv.pop("prompt", None)
    state = EngineState("vllm", "vllm-0.32", {"engine": "0"}, running=0.0, waiting=0.0,
                        counters=Counters(prompt_tokens=prompt), kv_transfer=KvTransfer(role=role, **kv))
    return MetricsSample(t, "vllm", "vllm-0.32", (state,))


def instance(name: str, role: str, scrapes, health_ok=lambda t: True, process=None) -> InstanceWindow:
    scrapes = list(scrapes)
    health = tuple(HealthSample(s.t, 200 if health_ok(s.t) else None, 0.01 if health_ok(s.t) else None,
                                None if health_ok(s.t) else "connect") for s in scrapes)
    good = tuple(s for s in scrapes if health_ok(s.t))
    return InstanceWindow(name, role, Window(health=health, metrics=good, process=tuple(process or ())))


def healthy(seconds: int = 120, rate: int = 300):
    """A pair under steady load: a request a second, its 300 prompt tokens prefilled on prefill and moved to
    decode; decode's gauge sees one waiting for KV now and then (a transfer in progress at the scrape)."""
    prefill = [scrape(t, "prefill", prompt=t * rate, transfers=t, expired=0.0, failed_notifications=0.0)
               for t in range(seconds)]
    decode = [scrape(t, "decode", waiting_for_kv=1.0 if t % 7 == 0 else 0.0, external_prompt_tokens=t * rate,
                     local_prompt_tokens=t * 1.0, transfers=t, failed_transfers=0.0, prompt=t * (rate + 1))
              for t in range(seconds)]
    return prefill, decode


def deployment(prefill: InstanceWindow, decode: InstanceWindow) -> Window:
    return Window(instances=(prefill, decode))


def names(verdicts) -> list[str]:
    return [v.name for v in verdicts]


def test_a_healthy_pair_under_steady_load_gives_no_verdict():
    prefill, decode = healthy()
    verdicts = run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", decode)))
    assert verdicts == []


def stalled_decode(until: int, stall_from: int):
    """Transfers go on until `stall_from`; from then decode has one request waiting for KV and nothing arrives."""
    out = []
    for t in range(until):
        moving = min(t, stall_from)
        out.append(scrape(t, "decode", waiting_for_kv=1.0 if t >= stall_from else 0.0,
                          fetch_in_progress=1.0 if t >= stall_from else 0.0,
                          external_prompt_tokens=moving * 300.0, transfers=float(moving), failed_transfers=0.0))
    return out


def test_stall_with_the_prefill_killed_restarts_the_prefill_only():
    prefill, _ = healthy(70)
    killed_at = 20
    decode = stalled_decode(70, 20)
    window = deployment(instance("p0", "prefill", prefill, health_ok=lambda t: t < killed_at),
                        instance("d0", "decode", decode))
    # the stall began at 20: the bound of 30 s is not reached by the scrape of t = 49, and is by t = 50
    assert "kv_transfer_stall" not in names(run_detectors(_until(window, 49)))
    assert "kv_transfer_stall" in names(run_detectors(_until(window, 50)))
    verdicts = [v for v in run_detectors(window) if v.name == "kv_transfer_stall"]
    assert len(verdicts) == 1
    stall = verdicts[0]
    assert stall.onset == 20 and stall.t == 69
    assert stall.action == RESTART
    assert stall.details["act_on"] == "p0" and stall.details["prefill_state"] == "silent"
    assert stall.details["decode"] == "d0"
    assert stall.why == ("decode d0: 1 request waiting for KV for 49 s (bound 30 s) and no transferred token "
                         "arrived; prefill p0: /health has not answered 2xx for 49 s (connect) — the prefill is the "
                         "side to restart; decode is not restarted")
    assert stall.why.endswith("the prefill is the side to restart; decode is not restarted")
    # guard holding the prefill's tree acts; guard holding decode's never does; a single server's guard neither
    assert action_for(stall.name, GuardConfig(instance="p0"), stall.details, RESTART) is not None
    assert action_for(stall.name, GuardConfig(instance="d0"), stall.details, RESTART) is None
    assert action_for(stall.name, GuardConfig(), stall.details, RESTART) is None
    # the prefill's livez fails, decode's never does
    assert not probes.livez([stall], instance="p0").ok
    assert probes.livez([stall], instance="d0").ok


def _until(window: Window, t: float) -> Window:
    """The deployment as it stood at `t`."""
    def cut(w: Window) -> Window:
        return Window(health=tuple(s for s in w.health if s.t <= t), metrics=tuple(s for s in w.metrics if s.t <= t),
                      process=tuple(s for s in w.process if s.t <= t))
    return Window(instances=tuple(InstanceWindow(i.name, i.role, cut(i.window)) for i in window.instances))


def test_stall_with_the_prefill_stopped_names_its_process():
    prefill, _ = healthy(60)
    member = ProcessMember(700, 1.0, "engine_core", "VLLM::EngineCore", "stopped")
    process = [ProcessSample(59.5, 600, 1.0, True, (member,))]
    window = deployment(instance("p0", "prefill", prefill, process=process), instance("d0", "decode",
                                                                                      stalled_decode(60, 10)))
    stall = next(v for v in run_detectors(window) if v.name == "kv_transfer_stall")
    assert stall.details["prefill_state"] == "stopped" and stall.details["act_on"] == "p0"
    assert "prefill p0: VLLM::EngineCore (pid 700) is stopped" in stall.why


def test_stall_with_a_live_prefill_pages_and_acts_on_no_side():
    prefill, _ = healthy(60)
    window = deployment(instance("p0", "prefill", prefill), instance("d0", "decode", stalled_decode(60, 10)))
    stall = next(v for v in run_detectors(window) if v.name == "kv_transfer_stall")
    assert stall.action == PAGE and "act_on" not in stall.details
    assert stall.details["prefill_state"] == "alive"
    assert stall.why.endswith("prefill p0: /health answers 2xx — the prefill lives: the transfer between them is at "
                              "fault (a person decides; decode is not restarted)")
    assert all(action_for(stall.name, GuardConfig(instance=side), stall.details, PAGE) is None for side in ("p0", "d0"))
    assert probes.livez([stall], instance="d0").ok and probes.livez([stall], instance="p0").ok


def test_a_slow_transfer_under_the_bound_is_no_stall():
    prefill, _ = healthy(60)
    window = deployment(instance("p0", "prefill", prefill), instance("d0", "decode", stalled_decode(60, 31)))
    assert "kv_transfer_stall" not in names(run_detectors(window))     # 28 s waiting: under the 30 s bound


def test_kv_expired_pages_with_the_lease_and_decodes_wait():
    prefill, decode = healthy(60)
    prefill = [dataclasses.replace(s, engines=(dataclasses.replace(
        s.engines[0], kv_transfer=dataclasses.replace(s.engines[0].kv_transfer, expired=2.0 if s.t >= 50 else 0.0)),))
        for s in prefill]
    decode = [dataclasses.replace(s, engines=(dataclasses.replace(
        s.engines[0], kv_transfer=dataclasses.replace(s.engines[0].kv_transfer,
                                                      waiting_for_kv=1.0 if 12 <= s.t <= 47 else 0.0)),))
        for s in decode]
    verdicts = run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", decode)))
    assert names(verdicts) == ["kv_expired"]
    expired = verdicts[0]
    assert expired.onset == 50 and expired.details["lease_s"] == 30.0 and expired.details["decode_wait_s"] == 35.0
    assert expired.why == ("prefill p0 released the KV blocks of 2 requests before decode read them in the last "
                           "60 s (its lease: 30 s, the kv_lease_s setting; vLLM's kv_lease_duration); decode d0 had "
                           "a request waiting for KV for 35 s: decode's answers to them may be wrong")
    assert registry.action_for(expired) == PAGE


def test_pd_bypass_when_decode_computes_every_prompt_and_prefill_is_idle():
    prefill = [scrape(t, "prefill", prompt=5000.0, transfers=40.0, expired=0.0) for t in range(60)]
    decode = [scrape(t, "decode", waiting_for_kv=0.0, external_prompt_tokens=9000.0, local_prompt_tokens=t * 100.0,
                     transfers=40.0) for t in range(60)]
    verdicts = run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", decode)))
    assert names(verdicts) == ["pd_bypass"]
    assert verdicts[0].why == ("decode d0 computed 5900 prompt tokens itself in the last 60 s and none came by KV "
                               "transfer, while the prefill was idle (p0 computed none): requests bypass the "
                               "prefill (a router gone decode-only, or a wrong prefill address)")
    # the active probe's few tokens a minute stay under the bound
    probed = [scrape(t, "decode", external_prompt_tokens=9000.0, local_prompt_tokens=(t // 10) * 8.0)
              for t in range(60)]
    assert run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", probed))) == []


def test_kv_transfer_failures_at_a_rate_names_each_side():
    prefill, decode = healthy(60, rate=300)
    decode = [dataclasses.replace(s, engines=(dataclasses.replace(
        s.engines[0], kv_transfer=dataclasses.replace(s.engines[0].kv_transfer,
                                                      failed_transfers=float(max(0, s.t - 50)))),))
        for s in decode]
    verdicts = run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", decode)))
    assert names(verdicts) == ["kv_transfer_failures"]
    assert verdicts[0].why == ("9 KV transfer failures in the last 60 s (9 failed transfers at decode d0, 13% of "
                               "68 tried): the requests they carried fail or are recomputed")
    assert verdicts[0].onset == 51
    # two failures are under kv_failure_min: the end of one stalled transfer, not a rate
    few = [dataclasses.replace(s, engines=(dataclasses.replace(
        s.engines[0], kv_transfer=dataclasses.replace(s.engines[0].kv_transfer,
                                                      failed_transfers=float(min(2, max(0, s.t - 50))))),))
        for s in decode]
    assert run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", few))) == []


def test_an_instances_own_verdicts_are_named_and_act_on_that_side_only():
    """A dead prefill's own health_loss is judged on its own window and named; it never fails decode's livez."""
    prefill, decode = healthy(60)
    window = deployment(instance("p0", "prefill", prefill, health_ok=lambda t: t < 40), instance("d0", "decode", decode))
    verdicts = run_detectors(window)
    lost = [v for v in verdicts if v.name == "health_loss"]
    assert [(v.details["instance"], v.details["role"]) for v in lost] == [("p0", "prefill")]
    dead = Verdict("engine_dead", 60.0, 40.0, "why", (), {"instance": "p0", "role": "prefill"})
    assert not probes.livez([dead], instance="p0").ok
    assert probes.livez([dead], instance="d0").ok
    assert action_for("engine_dead", GuardConfig(instance="d0"), dead.details) is None
    assert action_for("engine_dead", GuardConfig(instance="p0"), dead.details) is not None


def test_the_pair_is_not_ready_while_no_prefill_is():
    ok, down = probes.EndpointAnswer(True, "ok"), probes.EndpointAnswer(False, "/health not 2xx (connect)")
    answer = probes.deployment_readyz([("p0", "prefill", down), ("d0", "decode", ok)])
    assert not answer.ok and answer.reason == "no prefill instance is ready (p0: /health not 2xx (connect))"
    assert probes.deployment_readyz([("p0", "prefill", down), ("p1", "prefill", ok), ("d0", "decode", ok)]).ok
    assert not probes.deployment_readyz([("p0", "prefill", ok), ("d0", "decode", down)]).ok


def test_the_pair_verdicts_are_declared_once_with_their_action():
    for name in PAIR:
        spec = registry.spec(name)
        assert spec is not None and spec.pair
    assert registry.action_of("kv_transfer_stall") == RESTART
    assert "kv_transfer_stall" in registry.by_action(RESTART)
    assert {registry.action_of(n) for n in PAIR[1:]} == {PAGE}
    # a single server's window never gives a pair verdict
    assert not set(names(run_detectors(Window(metrics=tuple(stalled_decode(60, 10)))))) & set(PAIR)
    assert DetectorConfig().kv_stall_s == 30.0


def test_decodes_requests_waiting_for_kv_are_not_its_own_stall():
    """A decode whose only work waits for KV from a dead prefill (vLLM counts it waiting, reason deferred) is not
    stalled itself: the stall is the pair's, acted on the prefill; a decode with its own work frozen still is."""
    prefill, _ = healthy(60)

    def decode(own_waiting: float):
        out = []
        for s in stalled_decode(60, 10):
            state = s.engines[0]
            waiting = (state.kv_transfer.waiting_for_kv or 0.0) + own_waiting
            counters = Counters(prompt_tokens=1000.0, generation_tokens=500.0, steps=100.0)
            out.append(dataclasses.replace(s, engines=(dataclasses.replace(state, waiting=waiting, counters=counters),)))
        return out

    verdicts = run_detectors(deployment(instance("p0", "prefill", prefill, health_ok=lambda t: t < 10),
                                        instance("d0", "decode", decode(0.0))))
    assert [v.details.get("instance") for v in verdicts if v.name == "alive_health_ok_no_progress"] == []
    assert next(v for v in verdicts if v.name == "kv_transfer_stall").details["act_on"] == "p0"
    frozen = run_detectors(deployment(instance("p0", "prefill", prefill), instance("d0", "decode", decode(2.0))))
    assert [v.details.get("instance") for v in frozen if v.name == "alive_health_ok_no_progress"] == ["d0"]


# --- on the real pair's scrapes (tests/fixtures/pd: vLLM 0.32 CPU with NixlConnector, 2026-12-06) ------------------

def real(name: str, t: float, **kv) -> MetricsSample:
    """A fixture's /metrics as the dialect reads it, at time `t` (`kv`: connector fields replaced, said where used)."""
    from pathlib import Path

    from servewatch.dialects import read_scrape

    text = (Path(__file__).parent / "fixtures" / "pd" / f"{name}.metrics.txt").read_text()
    sample = read_scrape(text)
    engines = tuple(dataclasses.replace(e, kv_transfer=dataclasses.replace(e.kv_transfer, **kv)) if kv else e
                    for e in sample.engines)
    return MetricsSample(t, sample.dialect, sample.naming, engines)


def test_real_pair_a_hand_over_after_failures_gives_no_verdict_and_the_bypass_gives_pd_bypass():
    prefill = [real("nixl-healthy-prefill", t) for t in (0.0, 40.0, 100.0)]
    decode = [real("nixl-decode-after-kill-and-expired-read", 0.0), real("nixl-decode-healthy-after-failures", 40.0)]
    healthy_pair = deployment(instance("p0", "prefill", prefill[:2]), instance("d0", "decode", decode))
    assert [v.name for v in run_detectors(healthy_pair) if v.name in PAIR] == []
    # 60 s later: the new prompt sent to decode alone (the last transfer is then out of the 60 s window)
    bypassed = decode + [real("nixl-bypass-decode", 100.0)]
    verdicts = [v for v in run_detectors(deployment(instance("p0", "prefill", prefill),
                                                    instance("d0", "decode", bypassed))) if v.name in PAIR]
    assert names(verdicts) == ["pd_bypass"]
    assert verdicts[0].why.startswith("decode d0 computed 1090 prompt tokens itself in the last 60 s and none came by "
                                      "KV transfer, while the prefill was idle (p0 computed none)")


def test_real_pair_an_expired_lease_gives_kv_expired():
    # the scrape before the release: the same prefill with its expired-lease counter still at 0
    prefill = [real("nixl-lease-expired-prefill", 0.0, expired=0.0), real("nixl-lease-expired-prefill", 5.5)]
    decode = [real("nixl-decode-healthy-after-failures", t) for t in (0.0, 5.5)]
    verdicts = [v for v in run_detectors(deployment(instance("p0", "prefill", prefill),
                                                    instance("d0", "decode", decode))) if v.name in PAIR]
    assert names(verdicts) == ["kv_expired"]
    assert verdicts[0].details["expired"] == 1.0
    assert verdicts[0].why.endswith("decode's wait for KV was too short for its scrapes to see: decode's answers to "
                                    "them may be wrong")


def test_real_pair_decode_waiting_on_a_killed_prefill_is_a_stall_once_past_the_bound():
    """The scrape of decode 0.7 s after a request whose prefill was killed, held as it stood (the real request failed
    after 5.5 s: under the bound, no stall; held past 30 s, the stall names the prefill)."""
    prefill = [real("nixl-healthy-prefill", t) for t in range(0, 3)]

    def held(seconds: int):
        return deployment(instance("p0", "prefill", prefill + [real("nixl-healthy-prefill", t) for t in
                                                                 range(3, seconds + 1)], health_ok=lambda t: t < 3),
                          instance("d0", "decode", [real("nixl-decode-healthy-after-failures", t) for t in range(3)] +
                                   # (its transferred counters carried on from the scrapes before: one decode)
                                   [real("nixl-prefill-killed-decode-waiting", t, external_prompt_tokens=2121.0,
                                         transfers=2.0) for t in range(3, seconds + 1)]))
    assert "kv_transfer_stall" not in names(run_detectors(held(8)))
    stall = next(v for v in run_detectors(held(34)) if v.name == "kv_transfer_stall")
    assert stall.details["act_on"] == "p0" and stall.onset == 3 and stall.since_s == 31



def test_pd_bypass_is_not_hidden_by_the_probes_few_tokens_on_an_idle_prefill():
    probed = [scrape(t, "prefill", prompt=5000.0 + (t // 10) * 8.0, transfers=40.0, expired=0.0) for t in range(60)]
    decode = [scrape(t, "decode", waiting_for_kv=0.0, external_prompt_tokens=9000.0, local_prompt_tokens=t * 100.0,
                     transfers=40.0) for t in range(60)]
    verdicts = run_detectors(deployment(instance("p0", "prefill", probed), instance("d0", "decode", decode)))
    assert names(verdicts) == ["pd_bypass"]
    assert "while the prefill was idle (p0 computed 40 prompt tokens)" in verdicts[0].why
    busy = [scrape(t, "prefill", prompt=5000.0 + t * 10.0, transfers=40.0, expired=0.0) for t in range(60)]
    assert run_detectors(deployment(instance("p0", "prefill", busy), instance("d0", "decode", decode))) == []
