"""The one HTTP transport: what load, the proxy, the probes, the scrapes and the drill speak to a server with.

- `transport.http1`: the HTTP/1.1 client (`Http1Client` over `Endpoint`, its connection protocol `Conn`, which
  the proxy's upstream side subclasses; the failure vocabulary `ConnectFailed`, `StreamCut`, `NoAnswer`).
- `transport.stream`: the stream-chunk counter (`StreamState` and the compact completions event's grammar),
  shared by the load client, the proxy and the virtual-time driver.
- `transport.sse`: splitting a byte stream into server-sent events' payloads.

No servewatch imports but the ground floor (errors, kinds): every layer above may use it.
"""
