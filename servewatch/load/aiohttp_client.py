"""The same client interface as http1.Http1Client, on aiohttp; kept for measurement
(benchmarks/load_client.py compares the two) and as a fallback (`client="aiohttp"`)."""

from __future__ import annotations

# aiohttp on purpose: the contender benchmarks/load_client.py measures transport.http1 against, and a fallback.
import aiohttp

from servewatch.transport.http1 import BodyTooLarge, ConnectFailed, Endpoint, StreamCut, checked_headers


class _Response:
    __slots__ = ("_resp", "status", "_max_body", "_received")

    def __init__(self, resp: aiohttp.ClientResponse, max_body: int):
        self._resp = resp
        self.status = resp.status
        self._max_body = max_body
        self._received = 0

    async def read_some(self) -> bytes:
        try:
            data = await self._resp.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise StreamCut(type(exc).__name__) from None
        except aiohttp.ClientError as exc:
            raise StreamCut(type(exc).__name__) from None
        self._received += len(data)
        if self._received > self._max_body:
            raise BodyTooLarge(f"body over {self._max_body} bytes")
        return data

    async def stream_into(self, on_body) -> None:
        while True:
            data = await self.read_some()
            if not data:
                return
            on_body(data)

    async def read_all(self, limit: int) -> bytes:
        parts, size = [], 0
        while True:
            data = await self.read_some()
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > limit:
                raise BodyTooLarge(f"body over {limit} bytes")
            parts.append(data)

    def release(self) -> None:
        self._resp.release()


class AiohttpClient:
    def __init__(self, endpoint: Endpoint, *, connect_timeout: float = 10.0, max_body: int = 64 * 2**20,
                 headers: tuple[tuple[str, str], ...] = ()):
        self.endpoint = endpoint
        self._extra = dict(checked_headers(headers))
        self.max_body = max_body
        self._base = f"{endpoint.scheme}://{endpoint.host_header}{endpoint.base_path}"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
            read_bufsize=256 * 1024, auto_decompress=False)

    async def request(self, method: str, path: str, body: bytes | None = None,
                      content_type: str = "application/json", on_sent=None) -> _Response:
        headers = {**self._extra, **({"Content-Type": content_type} if body is not None else {})} or None
        if on_sent is not None:
            on_sent()
        try:
            resp = await self._session.request(method, self._base + path, data=body, headers=headers)
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(type(exc).__name__) from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
            raise StreamCut(type(exc).__name__) from None
        return _Response(resp, self.max_body)

    async def close(self) -> None:
        await self._session.close()
