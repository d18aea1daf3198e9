"""The drill on a prefill/decode pair (issue 52 item 5), on the simulator's pair (no real engine): the plan
tests/conformance/plans/pd-sim.yaml run by `servewatch drill` as a user runs it. Each fault names its side;
each verdict met must name the instance at fault (host:port, as `watch --prefill --decode` calls it), guard
holding that side acts and the guard holding the other does not, a healthy pair under steady load gives no
incident. Then the side rules themselves on made-up events, and a plan's bad pair values, one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servewatch.drill.measure import VerdictEvent
from servewatch.drill.pair import acting_events, names_instance, side_events
from servewatch.drill.plan import PlanError, load_plan, plan_from_dict

PLAN = Path(__file__).parent / "conformance" / "plans" / "pd-sim.yaml"
PAIR_VERDICTS = ("kv_transfer_stall", "kv_expired", "pd_bypass", "kv_transfer_failures")


@pytest.fixture(scope="module")
def drilled(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("pd-drill")
    done = subprocess.run([sys.executable, "-m", "servewatch", "drill", str(PLAN), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "drill.json").read_text())
    doc["exit"] = done.returncode
    return doc


def _fault(doc: dict, name: str) -> dict:
    return next(f for f in doc["faults"] if f["name"] == name)


def _side(fault: dict) -> tuple[str, str]:
    role, name = fault["facts"]["side"].split(" ", 1)
    return role, name


def test_pd_sim_plan_meets_every_expectation_with_nothing_left(drilled):
    unmet = [(f["name"], [c for c in f["checks"] if not c["met"]], f["not_run"]) for f in drilled["faults"]
             if not f["met"]]
    assert unmet == [] and drilled["exit"] == 0, unmet
    assert drilled["leaks"]["ok"] and len(drilled["faults"]) == 7
    # one start, then one more for the step after guard killed the prefill; decode killed needs only decode
    assert drilled["target"]["restarts_by_drill"] == 1 and len(drilled["target"]["ready_s"]) == 2


def test_a_healthy_pair_under_steady_load_gives_no_incident_and_serve_keeps_both_probes_up(drilled):
    fault = _fault(drilled, "healthy pair under steady load")
    seen = {*fault["detected"], *fault["elsewhere"], *fault["fired_before"]}
    assert not seen & set(PAIR_VERDICTS) and all(v in ("histogram_blind",) for v in seen), seen
    assert fault["impact"]["failed"] == 0 and fault["impact"]["requests"] > 20
    assert set(fault["livez"]) == {"200"} and set(fault["readyz"]) == {"200"}


def test_each_pair_verdict_names_the_side_at_fault(drilled):
    bypass = _fault(drilled, "router sent decode-only")
    assert _side(bypass)[0] == "prefill" and bypass["facts"]["fault_on"].startswith("decode ")
    assert bypass["detected"]["pd_bypass"] <= 4 and "pd_bypass" not in bypass["elsewhere"]
    expired = _fault(drilled, "decode stopped past the prefill's lease")
    assert _side(expired)[0] == "prefill" and 0 < expired["detected"]["kv_expired"] <= 14     # its 8 s lease and an allowance
    stall = _fault(drilled, "prefill stopped while decode waits, under guard")
    assert _side(stall)[0] == "prefill" and stall["detected"]["kv_transfer_stall"] >= 7    # its own 7 s threshold
    assert "kv_transfer_stall" not in stall["elsewhere"]
    assert "the prefill is the side to restart" in stall["explained"]["kv_transfer_stall"]
    assert _side(stall)[1] in stall["explained"]["kv_transfer_stall"].split("; prefill ", 1)[1]
    killed = _fault(drilled, "prefill killed after its step")
    assert killed["detected"]["health_loss"] <= 4 and killed["explained"]["health_loss"].startswith("prefill ")
    assert killed["facts"]["decode_after_kill"]["status"] == 500     # decode fails the request whose KV died
    gone = _fault(drilled, "decode killed")
    assert gone["explained"]["health_loss"].startswith("decode ") and gone["detected"]["health_loss"] <= 4


def test_under_serve_the_prefills_livez_fails_and_decodes_never_does(drilled):
    served = _fault(drilled, "prefill stopped while decode waits, under serve")
    assert served["livez"].get("503", 0) > 0 and set(served["livez_other"]) == {"200"}
    assert served["policy"]["acted_on"] == "kv_transfer_stall" and served["policy"]["acted_s"] <= 9


def test_guard_acts_on_the_prefill_only_and_the_guard_holding_decode_does_nothing(drilled):
    stall = _fault(drilled, "prefill stopped while decode waits, under guard")
    guard = stall["guard"]
    assert guard["acted_on"] == "kv_transfer_stall" and guard["exit"] == 3 and guard["tree_left"] == 0
    assert guard["other_side"] == {"acted": False, "exit": guard["other_side"]["exit"]}
    assert guard["other_side"]["exit"] != 3
    assert {t["pid"] for t in stall["touched"]} and stall["policy"]["acted_on"] == "kv_transfer_stall"
    # the processes guard killed are the ones the fault stopped: the prefill's
    assert stall["facts"]["decode_after_stop"]["status"] == 500


# -- the side rules on made-up events -------------------------------------------------------------------------

P, D = "127.0.0.1:1001", "127.0.0.1:1002"


def _event(verdict: str, details: dict, event: str = "fired", onset: float = 1.0) -> VerdictEvent:
    return VerdictEvent(event, verdict, onset + 1.0, onset, None, "", details)


def test_a_verdict_names_the_side_it_acts_on_else_its_instance_else_its_role():
    stall = {"decode": D, "prefill": P, "act_on": P}
    assert names_instance(stall, P, "prefill") and not names_instance(stall, D, "decode")
    own = {"instance": D, "role": "decode"}
    assert names_instance(own, D, "decode") and not names_instance(own, P, "prefill")
    expired = {"prefill": P, "expired": 2.0}
    assert names_instance(expired, P, "prefill") and not names_instance(expired, D, "decode")
    assert not names_instance(None, P, "prefill")


def test_side_events_keep_a_firing_with_its_clearing_and_acting_events_only_what_may_act_on_the_side():
    fired = _event("kv_transfer_stall", {"decode": D, "prefill": P, "act_on": P}, onset=5.0)
    cleared = _event("kv_transfer_stall", None, event="cleared", onset=5.0)
    other = _event("health_loss", {"instance": D, "role": "decode"}, onset=7.0)
    events = [fired, cleared, other]
    assert side_events(events, P, "prefill") == [fired, cleared]
    assert side_events(events, D, "decode") == [other]
    assert acting_events(events, P) == [fired, cleared]
    assert acting_events(events, D) == [other]     # an instance's own verdict may act on its own side


# -- a plan's pair values ---------------------------------------------------------------------------------

def _pd_plan(target: dict | None = None, **fault) -> dict:
    return {"name": "p", "target": target or {"engine": "sim", "pd": {"lease_s": 5}},
            "faults": [{"kind": "stop", **fault}]}


@pytest.mark.parametrize("data, said", [
    (_pd_plan(), "faults/0 (stop): side: a fault on a prefill/decode pair names the side it aims at (side: prefill "
                 "or side: decode)"),
    (_pd_plan({"engine": "llamacpp", "pd": {}}, side="prefill"),
     "target: pd: a prefill/decode pair runs on the lab vllm or the simulator (engine: vllm or sim), not llamacpp"),
    (_pd_plan({"engine": "sim", "pd": {"connector": "nixl"}}, side="prefill"),
     "target: pd/connector: the simulator's pair has no connector to choose"),
    (_pd_plan({"engine": "vllm", "pd": {"kv_wait_timeout_s": 3}}, side="prefill"),
     "target: pd/kv_wait_timeout_s: only the simulator's decode takes it (vLLM's is its own)"),
    (_pd_plan({"engine": "sim"}, side="prefill"),
     "faults/0 (stop): side: only for a prefill/decode pair's target (target: {engine: ..., pd: {...}})"),
    (_pd_plan(side="prefill", proxy=True),
     "faults/0 (stop): proxy: not on a prefill/decode pair (the pair's workload goes through servewatch proxy's "
     "pair mode already)"),
    (_pd_plan(side="left"), "faults/0/side: 'left' is not one of ['prefill', 'decode']"),
    (_pd_plan({"engine": "vllm", "pd": {"connector": "mooncake"}}, side="prefill"),
     "target/pd/connector: 'mooncake' is not one of ['nixl', 'example']"),
])
def test_a_bad_pair_value_is_one_line_naming_it(data, said):
    with pytest.raises(PlanError) as caught:
        plan_from_dict(data, source="p.yaml")
    assert str(caught.value) == f"p.yaml: {said}"
    assert "\n" not in str(caught.value)


def test_the_shipped_pair_plans_load_with_a_side_on_every_fault():
    for name in ("pd-sim", "pd-vllm"):
        plan = load_plan(PLAN.parent / f"{name}.yaml")
        assert plan.target.pd is not None and all(s.side in ("prefill", "decode") for s in plan.steps)
    vllm = load_plan(PLAN.parent / "pd-vllm.yaml")
    assert vllm.target.pd.connector == "nixl" and vllm.target.pd.lease_s == 30
    assert [s.at_fault for s in vllm.steps] == ["decode", "prefill", "prefill", "prefill", "prefill", "prefill",
                                                "decode"]


def test_the_example_connectors_plan_loads_naming_decode_for_the_lost_kv():
    plan = load_plan(PLAN.parent / "pd-vllm-example.yaml")
    assert plan.target.pd.connector == "example"
    assert [(s.kind, s.at_fault) for s in plan.steps] == [("quiet", "decode"), ("decode_only", "prefill"),
                                                          ("kv_lost", "decode")]
    assert "KV through files" in plan.target.describe() and "lease" not in plan.target.describe()


class _Ctx:
    """What kv_lost asks of a step's context: the pair, the hand-over, the moment, the step."""

    def __init__(self, pair, handover=None):
        from types import SimpleNamespace

        from servewatch.drill.run import FaultNotRun

        self.pair, self.handover, self.injected = pair, handover, False
        self.step = SimpleNamespace(request_timeout_s=30.0, hold_s=10.0)
        self.cannot = FaultNotRun

    def hand_over(self):
        return self.handover

    def _injected_now(self):
        self.injected = True


class _Handover:
    def __init__(self, storage: Path):
        self.storage, self.sent_with = storage, None

    def decode(self, timeout_s):          # what is left in the directory when decode's leg is sent
        self.sent_with = sorted(p.name for p in self.storage.rglob("*") if p.is_file())

    def join(self, timeout_s):
        return {"status": 500, "seconds": 0.4}


def test_kv_lost_removes_every_kv_file_before_decodes_leg_and_says_what_decode_answered(tmp_path):
    from servewatch.drill.faults import FAULTS

    storage = tmp_path / "kv-files"
    (storage / "req-a").mkdir(parents=True)
    for name in ("layer0.safetensors", "layer1.safetensors"):
        (storage / "req-a" / name).write_bytes(b"kv")
    (storage / "req-b.safetensors").write_bytes(b"kv")
    pair = type("Pair", (), {"kv_storage": lambda self: storage})()
    handover = _Handover(storage)
    fault = FAULTS["kv_lost"](load_plan(PLAN.parent / "pd-vllm-example.yaml").steps[2])
    ctx = _Ctx(pair, handover)
    fault.inject(ctx)
    assert handover.sent_with == [] and ctx.injected and fault.facts == {"kv_files_removed": 3}
    fault.revert(ctx)
    assert fault.facts["decode_after_loss"] == {"status": 500, "seconds": 0.4}
    assert fault.demands == "restart" and fault.takes_server_down


@pytest.mark.parametrize("pair", [None, type("Pair", (), {"kv_storage": lambda self: None})()])
def test_kv_lost_is_not_run_without_the_example_connectors_files(pair):
    from servewatch.drill.faults import FAULTS
    from servewatch.drill.run import FaultNotRun

    fault = FAULTS["kv_lost"](load_plan(PLAN.parent / "pd-vllm-example.yaml").steps[2])
    with pytest.raises(FaultNotRun, match="only on a prefill/decode pair joined by the example connector"):
        fault.inject(_Ctx(pair))


@pytest.mark.parametrize("outcome, said", [
    ({"status": 500, "seconds": 0.21}, "HTTP 500 after 0.21 s"),
    ({"status": None, "seconds": 16.0}, "no answer after 16 s"),
    ({}, "no end within the hold"),
])
def test_a_handed_over_requests_decode_leg_is_said_as_its_answer_and_time(outcome, said):
    from servewatch.drill.report import _injected

    result = {"touched": [], "facts": {"decode_after_loss": outcome, "kv_files_removed": 3}}
    assert _injected(result) == f"kv files removed 3; decode after loss: {said}"
