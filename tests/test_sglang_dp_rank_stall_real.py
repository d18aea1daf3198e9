"""A real SGLang 0.5.23 at --data-parallel-size 2 with DP rank 1's scheduler stopped under four streams
(tests/fixtures/sglang_real/dp2_rank1_stop: the bundle of the clean-clone CI run of 2026-12-05, step 11 of
short-sglang). The tokenizer process counts the model's tokens once for both ranks, so while rank 1 stood still its
"generation tokens" kept moving with rank 0's work for 4.4 s, and the stall was told 8.39 s after the stop, past the
step's 8 s bound. Read as the dialect now reads two ranks of one model (their tokens shared), rank 1's own steps
stop at the stop and the stall follows its threshold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from servewatch.bundle import serialize
from servewatch.bundle.verify import load_bundle
from servewatch.detectors import DetectorConfig, progress
from servewatch.timeline.samples import MetricsSample
from servewatch.timeline.window import Window

BUNDLE = Path(__file__).parent / "fixtures" / "sglang_real" / "dp2_rank1_stop"
STOPPED_AT = 1796479322.0411465      # the drill's injected_at for this step (drill.json of that run)


def _samples(shared: bool):
    _, dicts = load_bundle(BUNDLE)
    samples = [serialize.sample_from_dict(d) for d in dicts]
    if not shared:
        return samples
    out = []
    for s in samples:
        if isinstance(s, MetricsSample) and len(s.engines) > 1:
            engines = [dataclasses.replace(e, counters=dataclasses.replace(e.counters, tokens_shared=True))
                       for e in s.engines]
            s = dataclasses.replace(s, engines=engines)
        out.append(s)
    return out


def _first_stall(samples) -> tuple[float, object] | None:
    samples = sorted(samples, key=lambda s: s.t)
    config = DetectorConfig()
    for i in range(len(samples)):
        if samples[i].t < STOPPED_AT:
            continue
        for verdict in progress.detect(Window.from_samples(samples[: i + 1]), config):
            if "dp_rank=1" in verdict.details["engine"]:
                return verdict.t - STOPPED_AT, verdict
    return None


def test_the_stopped_dp_rank_is_told_by_its_own_steps_within_its_threshold():
    found = _first_stall(_samples(shared=True))
    assert found is not None, "the stall of DP rank 1 was not told"
    after, verdict = found
    # The last scrape before the stop is 0.06 s before it and the next one 0.41 s after; the threshold is the
    # verdict's own (4 x the recent cadence, at least the 2 s floor), and a verdict is told at the scrape that
    # crosses it: one 0.5 s cadence.
    assert after <= 0.41 + verdict.details["threshold_s"] + 0.5, after
    assert "DP rank 1" in verdict.why and "sglang::scheduler_DP1" in verdict.why
    assert "generation tokens" not in verdict.why       # the model's tokens are not this rank's evidence


def test_read_as_before_the_models_tokens_hid_the_stop_for_four_seconds():
    after, _ = _first_stall(_samples(shared=False))
    assert after > 8.0          # the CI's 8.39 s: what the shared tokens cost


def test_a_bundle_written_before_the_verdicts_and_source_kinds_moved_still_verifies():
    # written by servewatch 0.1.0 on 2026-12-05: before issue 51 split DetectorConfig into each verdict's settings
    # (its stored config has the 47 keys of then) and before the source kinds became a registry; verify reads it,
    # recomputes its verdict from its samples with the stored config, and finds the same
    import json

    from servewatch.bundle.verify import verify_bundle

    stored = json.loads((BUNDLE / "incident.json").read_text(encoding="utf-8"))
    assert (stored["servewatch_version"], stored["schema"], len(stored["detector_config"])) == (
        "0.1.0", "servewatch.incident/1", 47)
    verified = verify_bundle(BUNDLE)
    assert (verified.verdicts_checked, len(verified.samples)) == (1, 119)
