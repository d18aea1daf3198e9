"""The slot picture's values (sources/slots.py, issue 50 item 8): what scripts/mutation.sh's mutants of the module
change and tests/test_llamacpp.py (the simulator through the real transport) did not see: how long a slot has been
busy on one request, to the second, and when a new request on it starts the count again; each failure's kind and
elapsed time; the counts; the JSON inspect prints; the default byte bound."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servewatch.clock import VirtualClock
from servewatch.dialects import llamacpp
from servewatch.dialects.base import Slot
from servewatch.sources import slots as slots_mod
from servewatch.sources.http import FetchResponse
from servewatch.sources.scrape import ScrapeFailure
from servewatch.sources.slots import MAX_BYTES, SlotsReading, SlotsSource, SlotView, reading_json

DIALECT = llamacpp.DIALECT


def _slot(id, busy, task=None, decoded=None, processed=None):
    item = {"id": id, "n_ctx": 4096, "is_processing": busy}
    if task is not None:
        item["id_task"] = task
        item["n_prompt_tokens"] = 40
        item["n_prompt_tokens_processed"] = processed if processed is not None else 30
        item["n_prompt_tokens_cache"] = 10
        item["next_token"] = [{"n_decoded": decoded if decoded is not None else 5, "n_remain": 7}]
    return item


class Answers:
    """A transport that answers each poll with the next of `answers` (a list, a FetchResponse or a failure)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.closed = 0

    async def __call__(self):
        answer = self.answers.pop(0)
        if isinstance(answer, list):
            return FetchResponse(200, json.dumps(answer).encode(), 0.25)
        return answer


def _poll(source):
    [reading] = asyncio.run(source.poll())
    return reading


def test_a_slot_busy_on_one_request_counts_from_the_first_reading_that_saw_it_and_a_new_request_starts_again():
    clock = VirtualClock(1000.0)
    transport = Answers(
        [_slot(0, False), _slot(1, True, task=11), _slot(2, True, task=21)],
        [_slot(0, True, task=31), _slot(1, True, task=11), _slot(2, True, task=22)],
        [_slot(0, True, task=31), _slot(1, False), _slot(2, True, task=22)],
        [_slot(0, True, task=31), _slot(1, True, task=11), _slot(2, True, task=22)])
    source = SlotsSource(transport, clock, 2.5, DIALECT)
    assert (source.interval, source.dialect) == (2.5, DIALECT)

    first = _poll(source)
    assert (first.t, first.error, first.elapsed_s) == (1000.0, None, 0.25)
    assert [(v.slot.id, v.busy_s) for v in first.slots] == [(0, None), (1, 0.0), (2, 0.0)]

    clock.advance(3.0)
    second = _poll(source)
    # slot 0 newly busy: 0 s; slot 1 the same task: 3 s since the first reading; slot 2 a new task: 0 s again
    assert [(v.slot.id, v.busy_s) for v in second.slots] == [(0, 0.0), (1, 3.0), (2, 0.0)]

    clock.advance(4.0)
    third = _poll(source)
    assert [(v.slot.id, v.busy_s) for v in third.slots] == [(0, 4.0), (1, None), (2, 4.0)]

    clock.advance(2.0)
    fourth = _poll(source)
    # slot 1 idle in between: busy again, even on the same task id, counts from this reading
    assert [(v.slot.id, v.busy_s) for v in fourth.slots] == [(0, 6.0), (1, 0.0), (2, 6.0)]
    assert fourth.t == 1009.0


def test_the_task_id_is_read_from_the_listing_and_never_kept_in_a_reading():
    data = [_slot(0, True, task=7), _slot(1, False), {"id": 2, "is_processing": True}, "not a slot", {"no": "id"}]
    assert slots_mod._task_ids(data) == {0: 7, 1: None, 2: None}
    reading = _poll(SlotsSource(Answers([_slot(0, True, task=987654)]), VirtualClock(5.0), 1.0, DIALECT))
    assert "987654" not in repr(reading) and "987654" not in json.dumps(reading_json(reading))


def test_the_counts_of_busy_and_prefilling_slots():
    reading = _poll(SlotsSource(Answers(
        [_slot(0, True, task=1, decoded=0), _slot(1, True, task=2, decoded=3), _slot(2, False),
         _slot(3, True, task=4, decoded=0), _slot(4, False)]), VirtualClock(), 1.0, DIALECT))
    assert (reading.busy, reading.prefilling) == (3, 2)
    assert SlotsReading(1.0).busy == 0 and SlotsReading(1.0).prefilling == 0
    empty = SlotsReading(12.5)
    assert (empty.t, empty.slots, empty.elapsed_s, empty.error) == (12.5, (), None, None)


@pytest.mark.parametrize("answer, error, elapsed", [
    (ScrapeFailure("timeout", 0.5), "timeout", 0.5),
    (ScrapeFailure("connect", 0.01), "connect", 0.01),
    (FetchResponse(503, b'{"error": "Loading model"}', 0.02), "http_503", 0.02),
    (FetchResponse(201, b"[]", 0.03), "http_201", 0.03),
    (FetchResponse(404, b"[]", 0.04), "http_404", 0.04),
    (FetchResponse(200, b"not json", 0.05), "parse", 0.05),
    (FetchResponse(200, b"\xff\xfe\xfd", 0.06), "parse", 0.06),
    (FetchResponse(200, b'{"slots": []}', 0.07), "parse", 0.07),
    (FetchResponse(200, b'[{"id": "0", "is_processing": true}]', 0.08), "parse", 0.08),
])
def test_each_failure_is_its_kind_with_its_time_and_no_slots(answer, error, elapsed):
    reading = _poll(SlotsSource(Answers(answer), VirtualClock(77.0), 1.0, DIALECT))
    assert (reading.t, reading.error, reading.elapsed_s, reading.slots) == (77.0, error, elapsed, ())


def test_a_failure_between_two_readings_keeps_the_count_of_a_request_still_on_its_slot():
    clock = VirtualClock(0.0)
    source = SlotsSource(Answers([_slot(0, True, task=5)], ScrapeFailure("timeout", 1.0), [_slot(0, True, task=5)]),
                         clock, 1.0, DIALECT)
    assert _poll(source).slots[0].busy_s == 0.0
    clock.advance(2.0)
    assert _poll(source).error == "timeout"
    clock.advance(2.0)
    assert _poll(source).slots[0].busy_s == 4.0


def test_inspect_json_is_every_slot_in_numbers():
    reading = _poll(SlotsSource(Answers([_slot(0, True, task=9, decoded=0, processed=12), _slot(1, False)]),
                                VirtualClock(), 1.0, DIALECT))
    assert reading_json(reading) == {
        "error": None, "busy": 1, "prefilling": 1,
        "slots": [{"id": 0, "busy": True, "prefilling": True, "n_ctx": 4096, "prompt_processed": 12,
                   "prompt_cached": 10, "decoded": 0, "remaining": 7, "busy_s": 0.0},
                  {"id": 1, "busy": False, "prefilling": False, "n_ctx": 4096, "prompt_processed": None,
                   "prompt_cached": None, "decoded": None, "remaining": None, "busy_s": None}]}
    failed = SlotsReading(3.0, error="timeout", elapsed_s=0.5)
    assert reading_json(failed) == {"error": "timeout", "busy": 0, "prefilling": 0, "slots": []}
    view = SlotView(Slot(3, True, decoded=2), 1.5)
    assert reading_json(SlotsReading(1.0, (view,)))["slots"][0]["busy_s"] == 1.5


def test_close_connections_closes_a_transport_that_has_close_and_passes_one_that_has_not():
    class Closable(Answers):
        async def close(self):
            self.closed += 1

    closable = Closable()
    asyncio.run(SlotsSource(closable, VirtualClock(), 1.0, DIALECT).close_connections())
    assert closable.closed == 1

    async def plain():
        raise AssertionError("not called")

    asyncio.run(SlotsSource(plain, VirtualClock(), 1.0, DIALECT).close_connections())


def test_the_default_byte_bound_is_one_mebibyte():
    assert MAX_BYTES == 1_048_576


class _Listing(BaseHTTPRequestHandler):
    body = b"[]"
    hold: threading.Event | None = None

    def do_GET(self):
        if self.hold is not None:
            self.hold.wait(5.0)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def listing():
    servers = []

    def serve(body: bytes, hold: threading.Event | None = None) -> str:
        handler = type("Handler", (_Listing,), {"body": body, "hold": hold})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/slots"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_read_once_reads_one_listing_over_http_within_its_bound(listing):
    data = [_slot(0, True, task=3, decoded=4), _slot(1, False)]
    url = listing(json.dumps(data).encode())
    reading = slots_mod.read_once(url, DIALECT, timeout_s=5.0)
    assert (reading.error, reading.busy, [v.slot.decoded for v in reading.slots]) == (None, 1, [4, None])
    assert reading.slots[0].busy_s == 0.0 and reading.elapsed_s is not None and reading.elapsed_s >= 0
    body = json.dumps(data).encode()
    assert slots_mod.read_once(url, DIALECT, timeout_s=5.0, max_bytes=len(body)).error is None
    assert slots_mod.read_once(url, DIALECT, timeout_s=5.0, max_bytes=len(body) - 1).error == "too_large"


def test_read_once_bounds_the_body_by_default_at_one_mebibyte(listing):
    pad = b" " * (MAX_BYTES - 2)
    assert slots_mod.read_once(listing(b"[" + pad + b"]"), DIALECT, timeout_s=5.0).error is None
    assert slots_mod.read_once(listing(b"[" + pad + b" ]"), DIALECT, timeout_s=5.0).error == "too_large"


def test_read_once_gives_up_at_its_timeout(listing):
    hold = threading.Event()
    try:
        reading = slots_mod.read_once(listing(b"[]", hold), DIALECT, timeout_s=0.3)
    finally:
        hold.set()
    assert reading.error == "timeout"
    assert 0.3 <= reading.elapsed_s < 3.0


def test_read_once_on_a_closed_port_is_a_connect_failure():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert slots_mod.read_once(f"http://127.0.0.1:{port}/slots", DIALECT, timeout_s=2.0).error == "connect"


# --- the recorder's source: the engine named by the newest scrape, a backoff after a timeout ----------------------

class Closing(Answers):
    async def close(self):
        self.closed += 1


def test_the_backoff_after_a_timeout_doubles_from_two_cadences_to_its_cap_and_starts_again_after_an_answer():
    from servewatch.sources.slots import MAX_BACKOFF_S, EngineSlotsSource

    assert MAX_BACKOFF_S == 60.0
    timeout = ScrapeFailure("timeout", 5.0)
    answers = Closing(timeout, timeout, timeout, timeout, [_slot(0, False)], timeout, timeout)
    clock = VirtualClock(0.0)
    source = EngineSlotsSource(lambda path: answers, clock, 10.0, lambda: DIALECT)
    asked = []

    def poll_at(t):
        clock.set(t)
        readings = asyncio.run(source.poll())
        if readings:
            asked.append((t, readings[0].error))
        return readings

    for t in (0.0, 19.9, 20.0, 59.9, 60.0, 119.9, 120.0, 179.9, 180.0, 180.0, 199.9, 200.0):
        poll_at(t)
    # 20 s (2 cadences), 40 s, 60 s, 60 s (the cap); an answer; then 20 s again
    assert asked == [(0.0, "timeout"), (20.0, "timeout"), (60.0, "timeout"), (120.0, "timeout"), (180.0, None),
                     (180.0, "timeout"), (200.0, "timeout")]


def test_a_new_engine_gets_a_new_listing_source_and_the_old_ones_connections_are_closed():
    from servewatch.sources.slots import EngineSlotsSource

    other = copy.copy(DIALECT)             # another engine's dialect that lists its slots elsewhere
    other.slots_path = "/v2/slots"
    engine = {"now": DIALECT}
    made = {}

    def transport_for(path):
        made[path] = Closing([_slot(0, True, task=1)], [_slot(0, True, task=1)])
        return made[path]

    clock = VirtualClock(100.0)
    source = EngineSlotsSource(transport_for, clock, 1.0, lambda: engine["now"])
    asyncio.run(source.close_connections())                  # nothing read yet: nothing to close
    assert source.interval == 1.0 and made == {}
    assert asyncio.run(source.poll())[0].slots[0].busy_s == 0.0
    clock.advance(2.0)
    assert asyncio.run(source.poll())[0].slots[0].busy_s == 2.0     # the same source: the same request counted
    engine["now"] = other
    clock.advance(1.0)
    [reading] = asyncio.run(source.poll())
    assert (sorted(made), made["/slots"].closed, reading.slots[0].busy_s) == (["/slots", "/v2/slots"], 1, 0.0)
    asyncio.run(source.close_connections())
    assert (made["/slots"].closed, made["/v2/slots"].closed) == (1, 1)


def test_after_an_answer_the_next_listing_is_asked_at_once_and_a_timeout_backs_off_two_cadences_again():
    from servewatch.sources.slots import EngineSlotsSource

    timeout = ScrapeFailure("timeout", 0.1)
    answers = Answers([_slot(0, False)], [_slot(0, False)], timeout, timeout)
    clock = VirtualClock(0.0)
    source = EngineSlotsSource(lambda path: answers, clock, 0.25, lambda: DIALECT)
    errors = []
    for t in (0.0, 0.5, 0.5, 0.99, 1.0):
        clock.set(t)
        errors += [(t, r.error) for r in asyncio.run(source.poll())]
    assert errors == [(0.0, None), (0.5, None), (0.5, "timeout"), (1.0, "timeout")]
