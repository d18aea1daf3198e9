"""A small asyncio client that puts a real vLLM into a known condition (busy, queued, KV-full).

It is not the system under test: the load generator (`servewatch load`) is tested where its own
behaviour matters. One event loop on one thread, so that on 2 cores the client does not starve the
server (see real-vllm-cpu.md, "Driving load on 2 cores").
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import aiohttp

PROMPT = "the quick brown fox jumps over the lazy dog and keeps running far away"


@dataclass
class TrafficResult:
    statuses: list[int | str] = field(default_factory=list)   # HTTP status, or an error class name
    completion_tokens: list[int | None] = field(default_factory=list)


def _numbered(prompt: str | list[int], i: int) -> str | list[int]:
    """Request i's prompt: its number first, so no two requests share a cached prefix. A list is token
    ids (exactly that many tokens reach the engine)."""
    if isinstance(prompt, str):
        return f"{i} {prompt}"
    return [10 + i % 1000, *prompt[1:]]


class Traffic:
    """Fire `n` completions with `concurrency` in flight, in a background thread; bounded by `timeout_s`."""

    def __init__(self, url: str, *, n: int, concurrency: int, max_tokens: int,
                 prompt: str | list[int] = PROMPT, timeout_s: float = 120.0, model: str = "tiny"):
        self.url = url.rstrip("/") + "/v1/completions"
        self.n, self.concurrency, self.max_tokens = n, concurrency, max_tokens
        self.prompt, self.timeout_s, self.model = prompt, timeout_s, model
        self.result = TrafficResult()
        self.done = threading.Event()
        self._cancelled = False
        self._answered = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._main, name="traffic", daemon=True)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)

    def wait_results(self, count: int, timeout_s: float) -> bool:
        """Until `count` requests have an outcome (or all are done)."""
        with self._answered:
            return self._answered.wait_for(lambda: len(self.result.statuses) >= count or self.done.is_set(),
                                           timeout_s)

    def cancel(self) -> Traffic:
        """Hang up on the requests in flight and send no more (the engine aborts them): once a case has
        seen the condition it drove the server into, the rest of the work only costs CI time. Those
        requests are left out of `result`."""
        self._cancelled = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self._bounded())
        except (asyncio.TimeoutError, asyncio.CancelledError, aiohttp.ClientError, OSError):
            pass
        finally:
            self.done.set()
            with self._answered:
                self._answered.notify_all()

    async def _bounded(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        if not self._cancelled:
            await asyncio.wait_for(self._run(), self.timeout_s)

    async def _run(self) -> None:
        gate = asyncio.Semaphore(self.concurrency)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        # A fresh connection per request: uvicorn closes idle keep-alive connections after 5 s, and a
        # request that waited longer in the pool would otherwise meet a closed socket.
        connector = aiohttp.TCPConnector(limit=self.concurrency, force_close=True)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(*(self._one(session, gate, i) for i in range(self.n)))

    async def _one(self, session: aiohttp.ClientSession, gate: asyncio.Semaphore, i: int) -> None:
        body = {
            "model": self.model,
            "prompt": _numbered(self.prompt, i),
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
        async with gate:
            if self._cancelled:
                return
            try:
                async with session.post(self.url, json=body) as response:
                    payload = await response.json(content_type=None) if response.status == 200 else {}
                    self.result.statuses.append(response.status)
                    self.result.completion_tokens.append((payload.get("usage") or {}).get("completion_tokens"))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                self.result.statuses.append(type(exc).__name__)
                self.result.completion_tokens.append(None)
            with self._answered:
                self._answered.notify_all()
