"""The one HTTP transport: what servewatch speaks to a server with.

- `transport.contract`: the one contract. A request bounded in bytes and time goes to `send`, which returns the
  answer or ONE typed outcome (refused, dns, tls, connect, timeout, no_answer, cut, too_large, protocol,
  http_status), the mapping from socket, TLS, HTTP and timer errors to outcomes written once (`outcome_of`);
  `Http1Transport` (over `transport.http1`), `send_blocking` for a thread without an event loop, `MockTransport`
  for tests. Its callers: the recorder's scrapes, health checks, active probe and dcgm-exporter reads
  (`sources.http`, `sources.completions`, for watch, guard, diagnose and serve), serve's Prometheus discovery,
  inspect's fetch, the canary, the live sinks' POSTs, the drill's reads and faults, gpu-check, the proxy pair's
  prefill leg and other paths (`proxy.pair`) and load's view of the server (through `outcome_of`).
- `transport.http1`: the HTTP/1.1 client behind the contract (`Http1Client` over `Endpoint`; about half
  aiohttp's client CPU per scrape, benchmarks/scrape_client.py), also used directly where a stream is read as it
  arrives: the load generator (0.55x aiohttp's CPU per token, benchmarks/load_client.py), the proxy's
  upstream side, which subclasses its connection protocol `Conn`, and the proxy pair's decode leg (its
  failures worded through `outcome_of`).
- `transport.deadline`: `within`, the deadline every request is held to.
- `transport.stream`: the stream-chunk counter (`StreamState` and the compact completions event's grammar),
  shared by the load client, the proxy and the virtual-time driver.
- `transport.sse`: splitting a byte stream into server-sent events' payloads.
- `transport.urls`: the one URL checker.

No servewatch imports but the ground floor (errors, kinds): every layer above may use it. The modules that still
import another HTTP client are listed, each with its reason, in tests/test_structure.py (HTTP_IMPORTS_ALLOWED).
"""
