"""Client CPU per scrape: a bounded aiohttp GET against the transport `watch` and `serve` use (the transport
contract over the project's HTTP/1.1 client, `transport.contract.Http1Transport`), on the same server in the same run.

    .venv/bin/python benchmarks/scrape_client.py [--requests 3000]

The server is benchmarks/fleet.py's fake vLLM (a real 51 kB vLLM 0.32 scrape) in its own process, so
`time.process_time()` here counts the client's CPU only. Each contender fetches /metrics and /health
one request after another over a keep-alive connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _aiohttp_get(session, url: str, max_bytes: int = 64 * 2**20) -> tuple[int, bytes]:
    """The contender: a bounded GET on aiohttp, as `sources.http.fetch` was before the transport contract."""
    async with session.get(url, allow_redirects=False) as response:
        chunks, size = [], 0
        while chunk := await response.content.read(64 * 1024):
            size += len(chunk)
            assert size <= max_bytes
            chunks.append(chunk)
        return response.status, b"".join(chunks)


async def measure(base: str, requests: int) -> dict[tuple[str, str], float]:
    import aiohttp

    from servewatch.transport.deadline import within
    from servewatch.sources.http import FetchResponse, http_transport
    from servewatch.transport.contract import Http1Transport

    out = {}
    async with aiohttp.ClientSession() as session, Http1Transport() as transport:
        for path in ("/metrics", "/health"):
            async def theirs():
                status, body = await within(_aiohttp_get(session, base + path), 5)
                return FetchResponse(status, body, 0.0)
            contenders = {"aiohttp": theirs, "http1": http_transport(transport, base + path, timeout_s=5)}
            for name, get in contenders.items():
                assert isinstance(await get(), FetchResponse)
                started = time.process_time()
                for _ in range(requests):
                    answer = await get()
                out[name, path] = (time.process_time() - started) / requests
                assert isinstance(answer, FetchResponse) and answer.status == 200, answer
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    port, control_port = free_port(), free_port()
    fleet = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fleet.py"), "--serve-fleet", "1", str(port),
                              str(control_port)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert fleet.stdout.readline().strip() == "ready"
        figures = asyncio.run(measure(f"http://127.0.1.1:{port}", args.requests))
    finally:
        fleet.terminate()
        fleet.wait(timeout=30)
    for path in ("/metrics", "/health"):
        ours, theirs = figures["http1", path], figures["aiohttp", path]
        print(f"{path:9s} client CPU per request: ours {ours * 1e6:.0f} µs, aiohttp {theirs * 1e6:.0f} µs "
              f"({ours / theirs:.2f}x)")


if __name__ == "__main__":
    main()
