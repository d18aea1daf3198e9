"""`servewatch proxy --listen HOST:PORT --upstream URL`: the request path."""

from __future__ import annotations

import argparse

from servewatch.errors import ServewatchError
from servewatch.commands.recording import add_pair_arguments, add_recording_arguments, duration
from servewatch.proxy.config import (DECODE_FIRST_BYTE_TIMEOUT_S, DEFAULT_TENANT_KEY, PREFILL_TIMEOUT_S, WATCH_FLAGS,
                                     ProxyConfig, tenant_key)
from servewatch.watch.options import RecordingOptions

HELP = "pass requests through to an engine and record each one (TTFT, tokens, outcome by reason)"
DESCRIPTION = ("An OpenAI-compatible pass-through in front of a vLLM or SGLang server. Completions and chat "
               "completions (streamed or not) are recorded one line per request, without prompt or "
               "completion text; any other path is forwarded untouched. Responses reach the client byte "
               "for byte as the engine sent them. With --prefill and --decode instead of --upstream, each request "
               "goes through a disaggregated pair (prefill, then decode with the prefill's KV) and both legs are "
               "recorded.")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="where clients connect, e.g. 127.0.0.1:8080")
    p.add_argument("--upstream", metavar="URL", help="the engine, e.g. http://127.0.0.1:8000")
    add_pair_arguments(p, "instead of --upstream, a disaggregated pair: a prefill instance (repeat for more; taken "
                          "in turn); each request is prefilled there with max_tokens 1, then sent to a --decode "
                          "instance with the prefill's kv_transfer_params",
                       "a decode instance of the pair (repeat for more; taken in turn); its answer is the client's")
    p.add_argument("--prefill-timeout", type=float, default=PREFILL_TIMEOUT_S, metavar="S",
                   help=f"a pair's prefill leg: its whole answer within S (default {PREFILL_TIMEOUT_S:g}, as "
                        "--first-byte-timeout)")
    p.add_argument("--decode-first-byte-timeout", type=float, default=DECODE_FIRST_BYTE_TIMEOUT_S, metavar="S",
                   help=f"a pair's decode leg: its first byte within S (default {DECODE_FIRST_BYTE_TIMEOUT_S:g}: above "
                        "the engines' own bound on a KV wait); then --read-timeout between reads")
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve the proxy's own /metrics here (a separate port: the engine's /metrics stays reachable "
                        "through the proxy)")
    p.add_argument("--records", metavar="FILE", help="append one JSON line per request to FILE (rotated by size)")
    p.add_argument("--keep-text", action="store_true",
                   help="records also carry each prompt and completion, as text (for debugging your own traffic; "
                        "never in metrics, traces or bundles)")
    p.add_argument("--keep-itl", action="store_true",
                   help="records also carry every chunk's arrival and every inter-token gap (as `servewatch load` "
                        "writes them), not only each request's p50, p99 and max gap")
    p.add_argument("--records-max-mb", type=float, default=64.0, help="rotate the records file at this size (default 64)")
    p.add_argument("--records-keep", type=int, default=3, help="files kept, the current one included (default 3)")
    p.add_argument("--max-connections", type=int, default=4096, help="client connections; over it: 503 (default 4096)")
    p.add_argument("--max-request-mb", type=float, default=32.0, help="request body limit; over it: 413 (default 32)")
    p.add_argument("--first-byte-timeout", type=float, default=900.0, metavar="S",
                   help="upstream answer deadline after the request is sent (default 900: queues and prefills are long)")
    p.add_argument("--read-timeout", type=float, default=300.0, metavar="S",
                   help="upstream silence allowed inside a response (default 300)")
    p.add_argument("--tenant-header", default="x-tenant",
                   help="tenant from this header, else from the API key; stored hashed (default x-tenant)")
    p.add_argument("--tenant-key-file", metavar="FILE",
                   help="the tenant hash's secret key, read from FILE (made with a random key if it does not exist); "
                        "without it the key is servewatch's own, public one, and a guess of a header can be "
                        "checked against its hash")
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="export one span per request over OTLP/HTTP, e.g. http://127.0.0.1:4318 "
                        "(needs the [otel] extra)")
    p.add_argument("--trace-sample", type=float, default=0.1, metavar="RATE",
                   help="fraction of successful requests traced (errors are always kept; default 0.1)")
    p.add_argument("--watch", action="store_true",
                   help="also record the upstream (health, /metrics) with the proxy's requests as a source, and "
                        "print verdicts (requests_no_token among them) as JSON lines")
    add_recording_arguments(p, RecordingOptions(url=""), WATCH_FLAGS,
                            help={"interval": "--watch cadence in seconds (default {interval:g})",
                                  "out": "with --watch: an incident bundle per verdict into DIR",
                                  "detector_settings": "with --watch: a detector threshold, e.g. --set no_token.floor_s=5"})
    p.add_argument("--duration", type=duration, metavar="S", help="stop after S seconds (default: until ^C)")


def host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ServewatchError(f"{flag} {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def proxy_config(args) -> ProxyConfig:
    """The request path's options from the flags, checked: one line and status 2 for a bad one."""
    import math

    for flag, value in (("--max-connections", args.max_connections), ("--max-request-mb", args.max_request_mb),
                        ("--first-byte-timeout", args.first_byte_timeout), ("--read-timeout", args.read_timeout),
                        ("--records-max-mb", args.records_max_mb), ("--records-keep", args.records_keep),
                        ("--prefill-timeout", args.prefill_timeout),
                        ("--decode-first-byte-timeout", args.decode_first_byte_timeout)):
        if not 0 < value < math.inf:         # NaN too
            raise ServewatchError(f"{flag} must be above 0")
    if not 0.0 <= args.trace_sample <= 1.0:
        raise ServewatchError("--trace-sample must be between 0 and 1")
    if args.otlp_endpoint:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(args.otlp_endpoint)
        except ValueError:                  # an unclosed '['
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServewatchError(f"--otlp-endpoint {args.otlp_endpoint!r}: not an http(s) URL "
                                  "(e.g. http://127.0.0.1:4318)")
    from servewatch.transport.urls import resolve

    prefill, decode = tuple(args.prefill or ()), tuple(args.decode or ())
    if args.upstream is None and not (prefill and decode):
        raise ServewatchError("give --upstream URL, or a pair: --prefill URL and --decode URL (each may repeat)")
    if args.upstream is not None and (prefill or decode):
        raise ServewatchError("--upstream is one engine; --prefill and --decode are a pair: give one or the other")
    if args.upstream is None and args.watch:
        raise ServewatchError("--watch records one upstream; a pair's instances are recorded by `servewatch watch` "
                              "on each")
    for flag, url in (("--upstream", args.upstream), *(("--prefill", u) for u in prefill),
                      *(("--decode", u) for u in decode)):
        if url is not None:
            parsed = resolve(url, flag)     # a bad URL, a host name that does not resolve: one line, status 2
            if parsed.scheme != "http" and flag != "--upstream":    # (--upstream's: Proxy says it)
                raise ServewatchError(f"{flag} {url!r}: a plain http:// URL is expected")
    key = DEFAULT_TENANT_KEY
    if args.tenant_key_file:
        try:
            key = tenant_key(args.tenant_key_file)
        except (OSError, ValueError) as exc:
            raise ServewatchError(f"--tenant-key-file {args.tenant_key_file}: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
    return ProxyConfig(upstream=args.upstream or "", prefill=prefill, decode=decode,
                       prefill_timeout_s=args.prefill_timeout, decode_first_byte_timeout_s=args.decode_first_byte_timeout,
                       max_connections=args.max_connections,
                       max_request_bytes=int(args.max_request_mb * 2**20),
                       first_byte_timeout_s=args.first_byte_timeout, read_idle_timeout_s=args.read_timeout,
                       tenant_header=args.tenant_header.lower(), tenant_key=key, keep_text=args.keep_text,
                       keep_itl=args.keep_itl)


def run(args) -> int:
    import asyncio

    from servewatch.proxy.app import ProxyRun, run_proxy
    from servewatch.commands.recording import recording_from_args

    listen = host_port(args.listen, "--listen")
    metrics = host_port(args.metrics_listen, "--metrics-listen") if args.metrics_listen else None
    config = proxy_config(args)
    proxy_run = ProxyRun(listen=listen, metrics_listen=metrics, records=args.records,
                         records_max_mb=args.records_max_mb, records_keep=args.records_keep,
                         otlp_endpoint=args.otlp_endpoint, trace_sample=args.trace_sample, duration=args.duration,
                         watch=recording_from_args(args, RecordingOptions(url=args.upstream), WATCH_FLAGS)
                         if args.watch else None)
    try:
        import uvloop          # the [fast] extra: the event loop's own cost per read and write is a third lower
    except ImportError:
        uvloop = None
    try:
        if uvloop is not None:
            return uvloop.run(run_proxy(config, proxy_run))
        return asyncio.run(run_proxy(config, proxy_run))
    except KeyboardInterrupt:   # a signal before it listened, or a second one: stopped at once (servewatch.stopping)
        from servewatch import stopping

        stopping.say("proxy")
        return stopping.status()
