"""A small loopback TCP proxy with an adjustable per-chunk delay: the slow network path of a drill.

It runs its own event loop in a thread; `delay_s` may be changed at any time (a float store is atomic).
"""

from __future__ import annotations

import asyncio
import threading

CHUNK = 65536


class DelayProxy:
    def __init__(self, upstream_host: str, upstream_port: int, host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port: int | None = None
        self.delay_s = 0.0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "DelayProxy":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the drill's TCP proxy did not start")
        return self

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, self.host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = list(asyncio.all_tasks(self._loop))
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        except asyncio.CancelledError:
            pass

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                if self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except OSError:
                pass
