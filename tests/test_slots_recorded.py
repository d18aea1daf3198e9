"""The slot picture recorded by `watch` (issue 53): where the engine's dialect lists its slots (Dialect.slots_path),
the recorder's slots source reads the listing into the timeline and its bundles (numbers only, allow-listed), and
not_serving uses it: a listing that times out with /metrics is evidence beside it, and a busy slot's tokens moving
between listings answered since the first missed probe is a long prompt, not a hang."""

from __future__ import annotations

import asyncio
import json

import pytest

from servewatch import dialects
from servewatch.bundle.serialize import sample_from_dict, sample_to_dict
from servewatch.clock import VirtualClock
from servewatch.detectors import not_serving as N
from servewatch.detectors.config import DetectorConfig
from servewatch.dialects.base import Slot
from servewatch.sources.http import FetchResponse
from servewatch.sources.scrape import ScrapeFailure
from servewatch.sources.slots import EngineSlotsSource
from servewatch.timeline.samples import SlotsSample, SlotView
from servewatch.timeline.window import Window
from tests.test_llamacpp import T0, LlamacppSim, _window, watch_until_hung

SLOT_KEYS = {"id", "busy", "busy_s", "n_ctx", "prompt_tokens", "prompt_processed", "prompt_cached", "decoded",
             "remaining"}


def _listing(t, *, processed=30, decoded=0, busy=True, error=None):
    if error is not None:
        return SlotsSample(T0 + t, error=error, elapsed_s=5.0)
    return SlotsSample(T0 + t, (SlotView(Slot(0, busy, 2048, processed, processed, 0, decoded, -1),
                                         t if busy else None),), 0.01)


def _with_slots(window, *listings):
    return Window(health=window.health, metrics=window.metrics, probe=window.probe, logs=window.logs,
                  slots=tuple(listings))


# --- not_serving reads the slot picture ---------------------------------------------------------------------------

def test_a_slot_listing_timed_out_with_metrics_is_evidence_named_in_the_verdict():
    # /metrics answers until 10 then times out (15, 20); probes asked at 12 and 20 miss (15, 23); /slots timed out at
    # 14 and 19 (and at 9, before the first probe was asked: not counted)
    window = _with_slots(_window(), _listing(8), _listing(9, error="timeout"), _listing(14, error="timeout"),
                         _listing(19, error="timeout"))
    [verdict] = N.detect(window, DetectorConfig())
    assert verdict.details["slots_timeouts"] == 2 and verdict.details["timed_out"] == "/metrics"
    assert "its slot listing timed out too (2 time(s))" in verdict.why
    assert [(e.source, e.t - T0, e.value) for e in verdict.evidence if e.source == "slots"] == \
        [("slots", 14, "timeout"), ("slots", 19, "timeout")]
    [without] = N.detect(_window(), DetectorConfig())
    assert "slots_timeouts" not in without.details and "slot listing" not in without.why


def test_a_slot_computing_its_prompt_between_listings_is_a_long_prompt_not_a_hang():
    # listings answered at 13 and 18 (after the first probe was asked at 12) with slot 0's prompt tokens moving
    moving = _with_slots(_window(running=1.0), _listing(13, processed=512), _listing(18, processed=1024))
    assert N.detect(moving, DetectorConfig()) == []
    # the same count in both: the loop answers but computes nothing: the hang is said
    frozen = _with_slots(_window(running=1.0), _listing(13, processed=512), _listing(18, processed=512))
    assert [v.name for v in N.detect(frozen, DetectorConfig())] == ["not_serving"]
    # tokens that moved before the first probe was asked prove nothing about now
    before = _with_slots(_window(running=1.0), _listing(8, processed=512), _listing(11, processed=1024))
    assert [v.name for v in N.detect(before, DetectorConfig())] == ["not_serving"]


# --- in bundles: numbers only ---------------------------------------------------------------------------------------

def test_a_slot_listing_travels_through_a_bundle_as_allow_listed_numbers():
    import jsonschema

    from servewatch.bundle.schemas import _shipped
    from tests.test_gpu_ranks import samples_schema

    sample = SlotsSample(5.0, (SlotView(Slot(0, True, 2048, 40, 30, 10, 3, 7), 1.25), SlotView(Slot(1, False), None)),
                         0.02)
    stored = sample_to_dict(sample)
    assert set(stored) == {"source", "t", "elapsed_s", "error", "slots"}
    assert [set(s) for s in stored["slots"]] == [SLOT_KEYS, SLOT_KEYS]
    assert stored["slots"][0] == {"id": 0, "busy": True, "busy_s": 1.25, "n_ctx": 2048, "prompt_tokens": 40,
                                  "prompt_processed": 30, "prompt_cached": 10, "decoded": 3, "remaining": 7}
    assert sample_from_dict(stored) == sample
    jsonschema.validate([stored], samples_schema(_shipped("samples")))
    with pytest.raises(jsonschema.ValidationError):        # the schema is closed: a prompt has no place
        jsonschema.validate([{**stored, "slots": [{**stored["slots"][0], "prompt": "secret"}]}],
                            samples_schema(_shipped("samples")))
    failed = sample_to_dict(SlotsSample(6.0, error="timeout after 5 s", elapsed_s=5.0))
    assert (failed["error"], failed["slots"]) == ("timeout", [])


# --- the recorder's source ------------------------------------------------------------------------------------------

class Answers:
    def __init__(self, *answers):
        self.answers, self.asked = list(answers), 0

    async def __call__(self):
        self.asked += 1
        answer = self.answers.pop(0)
        return FetchResponse(200, json.dumps(answer).encode(), 0.01) if isinstance(answer, list) else answer


def test_the_slots_source_asks_only_an_engine_that_lists_slots_and_backs_off_after_a_timeout():
    clock = VirtualClock(start=T0)
    answers = Answers(ScrapeFailure("timeout", 1.0), ScrapeFailure("timeout", 1.0),
                      [{"id": 0, "n_ctx": 2048, "is_processing": False}])
    paths, engine = [], {"name": None}

    def transport_for(path):
        paths.append(path)
        return answers

    source = EngineSlotsSource(transport_for, clock, 0.5, lambda: dialects.by_name(engine["name"]))
    poll = lambda: asyncio.run(source.poll())  # noqa: E731
    assert source.kind == "slots"
    assert poll() == [] and paths == []                      # no engine known yet: nothing asked
    engine["name"] = "vllm"
    assert poll() == [] and paths == []                      # vLLM lists no slots
    engine["name"] = "llamacpp"
    [first] = poll()
    assert (paths, first.error, answers.asked) == (["/slots"], "timeout", 1)
    clock.advance(0.5)
    assert poll() == [] and answers.asked == 1               # within the backoff (2 cadences: 1 s): not asked
    clock.advance(0.5)
    [second] = poll()
    assert (second.error, answers.asked) == ("timeout", 2)
    clock.advance(1.5)
    assert poll() == [] and answers.asked == 2               # the backoff doubled: 2 s
    clock.advance(0.5)
    [third] = poll()
    assert (third.error, third.busy, len(third.slots), answers.asked) == (None, 0, 1, 3)


# --- watch on the simulator speaking llama.cpp ---------------------------------------------------------------------

@pytest.fixture
def ready_sim():
    server = LlamacppSim(startup=0.0)
    yield server
    server.close()


def test_watch_records_the_slot_picture_into_the_timeline_and_the_bundle(ready_sim, tmp_path, capsys):
    """The idle hang on the simulator speaking llama.cpp: the bundle holds the slot listings read before it (three
    idle slots, numbers only) and counts them; the verdict is not_serving."""
    code, lines, fired = watch_until_hung(ready_sim, tmp_path, capsys)
    assert code == 1 and [line["verdict"] for line in fired] == ["not_serving"], lines
    bundle = tmp_path / fired[0]["bundle"]
    stored = [s for path in sorted(bundle.glob("samples-*.json"))
              for s in json.loads(path.read_text())["samples"] if s["source"] == "slots"]
    answered = [s for s in stored if s["error"] is None]
    assert len(answered) >= 3
    assert all([slot["busy"] for slot in s["slots"]] == [False, False, False] for s in answered)
    assert all(set(slot) == SLOT_KEYS and slot["n_ctx"] > 0 for s in answered for slot in s["slots"])
    incident = json.loads((bundle / "incident.json").read_text())
    assert incident["window"]["samples"]["slots"] == len(stored)
