"""The drill plan `pd-vllm` (tests/conformance/plans/pd-vllm.yaml) on a real vLLM prefill/decode pair joined by
NIXL, run by `servewatch drill` exactly as a user runs it (test_7_drill's harness: every expectation met, the
drill's exit status and drill.json agreeing, nothing leaked, a miss explained by a measured freeze run once more):
the healthy pair under steady load, the router sent decode-only, decode stopped past the prefill's lease, the
prefill stopped while decode waits (under guard on each side), the prefill killed after its step, decode killed —
each verdict met naming the side at fault. Marker `pd`: run it with
`flock /tmp/servewatch-real-engine.lock pytest -m pd tests/conformance/test_13_pd_drill.py -s`.

Measured (docs/site/real-engines.md, "The drill on the pair (plan pd-vllm)"), 2026-12-06 22:19, load average 9-15
(two other sessions on the 2 cores): the pair ready in 83.4 s (82.7 s and 94.4 s for two more starts), 580 s in all;
pd_bypass 1.2 s, kv_expired 30.6 s (lease 30 s), kv_transfer_stall 10.8 s (threshold 10 s), guard's kill of the
prefill 4.1 s after the stop (rank_stalled; decode's guard did nothing), health_loss 1.5 s after each kill. The
healthy step missed: decode's own alive_health_ok_no_progress (2.3 s without a step, its engine starved). At 22:00
(load average ~30): the pair ready in 256 s, 688 s in all, and decode's guard killed decode on that verdict. At 22:37
(load average 2, then 20): ready in 86.3 s and 179.5 s, 580 s in all; pd_bypass 2.8 s, kv_expired 32.5 s,
kv_transfer_stall 11.0 s, health_loss 1.1 s and 1.3 s after the kills; the healthy step missed on decode's
health_loss and the step under guard did not run (the resumed prefill answered its hand-over nothing in 120 s). At
22:49 (load average 17-20): two starts (72.9 s, 89.8 s), 634 s; every fault met (pd_bypass 0.9 s, kv_expired 32.1 s,
kv_transfer_stall 10.5 s, guard's kill on rank_stalled 4.3 s, health_loss 2.8 s and 1.4 s), the healthy step missed
(decode's health_loss 14.4 s in): it missed in all four runs on this shared machine. The cause: both instances'
OpenMP threads bound to both cores, with 4 UCX threads each; one core each and one UCX thread (lab/pd.py PAIR_CORES,
NIXL_THREADS), 2026-12-07 02:04: all seven met in 371 s (the healthy step 14 requests, none failed). In the
clean-clone rehearsal at 04:00 (quiet): six of seven in 294.5 s, the healthy step missed on decode's health_loss (its
/health unanswered, two requests waiting 5.8 s and 17.6 s for KV). With each instance's whole tree on its core and
every lab vLLM process asking for AMX tiles (lab/server.py; a fresh Intel VM, 2026-12-07 07:05, the machine otherwise
idle): all seven met in 261 s, the pair ready in 30.1 s and 27.7 s. Both plans run in CI."""

from __future__ import annotations

import pytest
from test_7_drill import _drill, _timeout

pytestmark = [pytest.mark.pd]


@pytest.mark.timeout(_timeout("pd-vllm"))
def test_pd_drill_names_the_side_at_fault_on_a_real_nixl_pair(lab, run_dir):
    drilled = _drill("pd-vllm", run_dir / "drill")
    doc = drilled.runs[0][0]
    for fault in (f for run, _ in drilled.runs for f in run["faults"]):
        print(f"{fault['index']}. {fault['name']}: {fault['facts'].get('side')}; detected {fault['detected']}; "
              f"elsewhere {fault['elsewhere']}; facts {fault['facts']}")
    guarded, _, _ = drilled.fault("prefill stopped while decode waits, under guard")
    assert guarded["guard"]["acted_on"] in ("rank_stalled", "kv_transfer_stall"), guarded["guard"]
    assert guarded["guard"]["other_side"]["acted"] is False, guarded["guard"]
    stalled, _, _ = drilled.fault("prefill stopped while decode waits")
    assert stalled["policy"]["acted_on"] == "kv_transfer_stall" and stalled["elsewhere"].get("kv_transfer_stall") is None
    print(f"pair ready after {doc['target']['ready_s']} s; drill {doc['duration_s']} s")


@pytest.mark.timeout(_timeout("pd-vllm-example"))
def test_pd_drill_on_the_example_connector_names_decode_for_lost_kv(lab, run_dir):
    """The plan `pd-vllm-example`: the pair joined by ExampleConnector (KV through files), healthy under steady load,
    then the KV files of a request removed before decode reads them: decode's engine dies, the verdicts name
    decode."""
    drilled = _drill("pd-vllm-example", run_dir / "drill")
    lost, _, _ = drilled.fault("KV files removed before decode reads them")
    assert lost["facts"]["kv_files_removed"] > 0, lost["facts"]
    assert lost["facts"]["decode_after_loss"].get("status") != 200, lost["facts"]
    for fault in (f for run, _ in drilled.runs for f in run["faults"]):
        print(f"{fault['index']}. {fault['name']}: {fault['facts'].get('side')}; detected {fault['detected']}; "
              f"elsewhere {fault['elsewhere']}; facts {fault['facts']}")
