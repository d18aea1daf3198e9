"""Posting JSON to an HTTP endpoint from a background thread: a bounded queue, each post bounded in
time and bytes, retried with exponential backoff, never blocking the caller. An outage is said once on
stderr when it starts and once when it ends."""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable

from servewatch.transport.contract import HTTP_STATUS, TIMEOUT, TOO_LARGE, Failed, HttpRequest, send_blocking

MAX_ANSWER_BYTES = 64 * 1024


class Delivery:
    def __init__(self, url: str, what: str, *, timeout_s: float = 5.0, attempts: int = 8,
                 first_backoff_s: float = 0.5, backoff_cap_s: float = 30.0, max_queue: int = 1000,
                 periodic: Callable[[], list[bytes]] | None = None, period_s: float = 60.0,
                 on_give_up: Callable[[], None] | None = None, tool: str = "serve"):
        self.url, self.what, self.tool = url, what, tool
        self.timeout_s, self.attempts = timeout_s, attempts
        self.first_backoff_s, self.backoff_cap_s = first_backoff_s, backoff_cap_s
        self.periodic, self.period_s = periodic, period_s
        self.on_give_up = on_give_up
        self.delivered = self.given_up = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._closing = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._work, name=f"servewatch-{what}", daemon=True)
        self._thread.start()

    def submit(self, body: bytes) -> None:
        """Queue one post; when the queue is full the oldest waiting post is dropped (and counted)."""
        while True:
            try:
                self._queue.put_nowait(body)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (bounded by timeout_s), then stop."""
        self._closing.set()
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _work(self) -> None:
        next_periodic = time.monotonic() + self.period_s
        while True:
            try:
                body = self._queue.get(timeout=max(0.05, next_periodic - time.monotonic()))
            except queue.Empty:
                body = None
                if self.periodic is not None and not self._closing.is_set():
                    for again in self.periodic():
                        self._deliver(again)
                next_periodic = time.monotonic() + self.period_s
                continue
            if body is None:
                if self._closing.is_set():
                    return
                continue
            self._deliver(body)

    def _deliver(self, body: bytes) -> None:
        delay = self.first_backoff_s
        for attempt in range(self.attempts):
            problem = self._post(body)
            if problem is None:
                if self._failing:
                    print(f"servewatch {self.tool}: {self.what} {self.url}: delivering again", file=sys.stderr,
                          flush=True)
                self._failing = False
                self.delivered += 1
                return
            if not self._failing:
                print(f"servewatch {self.tool}: {self.what} {self.url}: {problem}; retrying with backoff, "
                      "watching continues", file=sys.stderr, flush=True)
                self._failing = True
            if self._closing.is_set() and attempt >= 1:
                break
            if self._closing.wait(delay) and attempt >= 1:
                break
            delay = min(self.backoff_cap_s, delay * 2)
        self.given_up += 1
        if self.on_give_up is not None:
            self.on_give_up()

    def _post(self, body: bytes) -> str | None:
        """None when delivered, else why not in a few words (the transport contract's outcome, from this
        thread, which has no event loop of its own: `send_blocking`)."""
        got = send_blocking(HttpRequest("POST", self.url, timeout_s=self.timeout_s, max_bytes=MAX_ANSWER_BYTES,
                                        body=body))
        failed = got if isinstance(got, Failed) else got.failure()
        if failed is None or (failed.outcome == TOO_LARGE and 200 <= (failed.status or 0) < 300):
            return None              # delivered: a long answer is not read past the bound
        if failed.outcome in (HTTP_STATUS, TIMEOUT):
            return failed.detail
        return f"unreachable ({failed.detail})"
