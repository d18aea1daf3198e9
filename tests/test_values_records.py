"""Values of servewatch/load/records.py (issue 50: the record every load and proxy figure is read from, found by the
mutation rule): the JSON a record is written as (times to the microsecond, durations to 0.1 us), read back field by
field, and the one line naming the first field that is not what is written."""

from __future__ import annotations

import pytest

from servewatch.load import records as R


def full() -> R.RequestRecord:
    rec = R.RequestRecord(id=3, scheduled=1_700_000_000.1234567, prompt_tokens_target=12, max_tokens=4,
                          sent=1_700_000_000.3456789, http_status=200, ttft_s=0.123456789, e2e_s=1.987654321,
                          tpot_s=0.0123456789, chunk_t_s=[0.123456789, 0.5], chunk_tokens=[1, 3],
                          itl_token_s=[0.1, 0.2222222222], itl_chunk_s=[0.37654321], itl_exact=True, input_tokens=12,
                          output_tokens=4, token_source="server", finish_reason="length", error=None,
                          error_detail="d", text="t", prompt="p", model="m", api="completions")
    return rec


def test_a_record_as_written():
    out = full().to_json()
    # epoch times to the microsecond, durations to 7 decimals; the schedule delay is sent - scheduled
    assert (out["scheduled"], out["sent"]) == (1_700_000_000.123457, 1_700_000_000.345679)
    assert (out["ttft_s"], out["e2e_s"], out["tpot_s"]) == (0.1234568, 1.9876543, 0.0123457)
    assert out["schedule_delay_s"] == round(1_700_000_000.3456789 - 1_700_000_000.1234567, 7) == 0.2222221
    assert out["chunks"] == [[0.1234568, 1], [0.5, 3]] and out["itl_token_s"] == [0.1, 0.2222222]
    assert out["itl_chunk_s"] == [0.3765432] and out["error_detail"] == "d"
    assert "prompt" not in out and "text" not in out and "proxy" not in out
    kept = full().to_json(keep_text=True)
    assert (kept["prompt"], kept["text"]) == ("p", "t")
    unsent = R.RequestRecord(id=1, scheduled=5.0, prompt_tokens_target=1, max_tokens=1).to_json()
    assert (unsent["sent"], unsent["schedule_delay_s"], unsent["e2e_s"]) == (None, None, None)


def test_read_back_as_written():
    back = R.RequestRecord.from_json(full().to_json())
    assert (back.id, back.scheduled, back.sent, back.ttft_s, back.e2e_s, back.tpot_s) == \
           (3, 1_700_000_000.123457, 1_700_000_000.345679, 0.1234568, 1.9876543, 0.0123457)
    assert (back.chunk_t_s, back.chunk_tokens, back.itl_exact, back.error_detail) == ([0.1234568, 0.5], [1, 3], True, "d")
    assert back.text is None and back.prompt is None                       # text is never read back


@pytest.mark.parametrize("obj, words", [
    ({"scheduled": 1.0}, "field 'id' is missing"),
    ({"id": 1}, "field 'scheduled' is missing"),
    ({"id": 1, "scheduled": -1.0}, "field 'scheduled': -1 is not a time in epoch seconds (1970 to 9999)"),
    ({"id": 1, "scheduled": 253402300800.0}, "field 'scheduled': 2.53402e+11 is not a time in epoch seconds (1970 to 9999)"),
    ({"id": 1, "scheduled": 1.0, "sent": -0.5}, "field 'sent': -0.5 is not a time in epoch seconds (1970 to 9999)"),
    ({"id": True, "scheduled": 1.0}, "field 'id': expected a number, got true or false"),
    ({"id": 1.5, "scheduled": 1.0}, "field 'id': expected a number, got a number"),
    ({"id": 1, "scheduled": "now"}, "field 'scheduled': expected a number, got a string"),
    ({"id": 1, "scheduled": 1.0, "ttft_s": [1]}, "field 'ttft_s': expected a number, got an array"),
    ({"id": 1, "scheduled": 1.0, "model": 3}, "field 'model': expected a string, got a number"),
    ({"id": 1, "scheduled": 1.0, "model": False}, "field 'model': expected a string, got true or false"),
    ({"id": 1, "scheduled": 1.0, "itl_exact": "yes"}, "field 'itl_exact': expected true or false, got a string"),
    ({"id": 1, "scheduled": 1.0, "proxy": []}, "field 'proxy': expected an object, got an array"),
    ({"id": 1, "scheduled": 1.0, "chunks": {}}, "field 'chunks': expected an array, got an object"),
    ({"id": 1, "scheduled": 1.0, "chunks": [[0.5, 1.5]]}, "field 'chunks': expected [[seconds, tokens], ...]"),
    ({"id": 1, "scheduled": 1.0, "chunks": [[0.5, True]]}, "field 'chunks': expected [[seconds, tokens], ...]"),
    ({"id": 1, "scheduled": 1.0, "chunks": [["x", 1]]}, "field 'chunks': expected [[seconds, tokens], ...]"),
    ({"id": 1, "scheduled": 1.0, "itl_chunk_s": ["x"]}, "field 'itl_chunk_s': expected a list of seconds"),
    ({"id": 1, "scheduled": 1.0, "itl_token_s": [None]}, "field 'itl_token_s': expected a list of seconds"),
])
def test_what_is_not_a_record_is_named(obj, words):
    with pytest.raises(ValueError) as bad:
        R.RequestRecord.from_json(obj)
    assert str(bad.value) == words


def test_the_edges_of_time_and_the_kinds_named():
    # 0 (1970) and the last second of 9999 are times; an int token count and an int time are read
    rec = R.RequestRecord.from_json({"id": 1, "scheduled": 0.0, "sent": R.LAST_EPOCH_S, "chunks": [[1, 2]]})
    assert (rec.scheduled, rec.sent, rec.chunk_t_s, rec.chunk_tokens) == (0.0, 253402300799.0, [1.0], [2])
    assert R.RequestRecord.from_json({"id": 1, "scheduled": 0.5}).scheduled == 0.5
    assert (R._json_kind(None), R._json_kind(True), R._json_kind(2), R._json_kind(2.5), R._json_kind(b"")) == \
           ("another kind of value", "true or false", "a number", "a number", "another kind of value")
    with pytest.raises(ValueError) as bad:
        R.RequestRecord.from_json("[]")
    assert str(bad.value) == "not a JSON object"
