"""`servewatch proxy` put together: the request path, its records, its /metrics and its traces."""

from __future__ import annotations

import asyncio
import gc
import math
import sys

from servewatch import stopping
from servewatch.errors import ServewatchError
from servewatch.proxy.config import DEFAULT_TENANT_KEY, WATCH_FLAGS, ProxyConfig, tenant_key
from servewatch.proxy.server import Proxy


def config_from_args(args) -> ProxyConfig:
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


async def run_proxy(args, listen: tuple[str, int], metrics_listen: tuple[str, int] | None) -> int:
    from servewatch.proxy.recordlog import RecordLog, flush_forever, record_sink
    from servewatch.proxy.telemetry import Telemetry

    config = config_from_args(args)
    if (config.keep_text or config.keep_itl) and not args.records:
        raise ServewatchError(f"{'--keep-text' if config.keep_text else '--keep-itl'} keeps more in the records "
                              "file: give one with --records FILE")
    log = None
    if args.records:
        try:
            log = RecordLog(args.records, max_bytes=int(args.records_max_mb * 2**20), keep=args.records_keep)
        except OSError as exc:
            raise ServewatchError(f"--records {args.records}: {exc.strerror or exc}") from None
    telemetry = Telemetry(otlp_endpoint=args.otlp_endpoint, sample=args.trace_sample)
    telemetry.log = log

    try:
        if config.prefill:
            from servewatch.proxy.pair import PairProxy      # the pair's path: its own module, the single path untouched

            proxy = PairProxy(config, on_record=record_sink(log, telemetry, config.keep_text))
        else:
            proxy = Proxy(config, on_record=record_sink(log, telemetry, config.keep_text))
    except ValueError as exc:
        raise ServewatchError(f"--upstream {args.upstream}: {exc}") from None
    telemetry.proxy = proxy
    try:
        port = await proxy.start(*listen)
    except OSError as exc:
        raise ServewatchError(f"--listen {args.listen}: {exc.strerror or exc}") from None
    # what was built to start (modules, the registry) is kept for good: the collector's older generations
    # stop walking it again and again under the per-request garbage of the request path
    gc.freeze()
    metrics_runner = None
    try:
        if metrics_listen is not None:
            try:
                metrics_runner, mport = await telemetry.serve_metrics(proxy, *metrics_listen)
            except OSError as exc:
                raise ServewatchError(f"--metrics-listen {args.metrics_listen}: {exc.strerror or exc}") from None
            print(f"servewatch proxy: /metrics on http://{metrics_listen[0]}:{mport}/metrics", file=sys.stderr)
        if config.keep_text:
            print(f"servewatch proxy: --keep-text: {args.records} holds every prompt and completion as text; "
                  "do not share it", file=sys.stderr)
        if config.prefill:
            where = (f"prefill {', '.join(config.prefill)} then decode {', '.join(config.decode)} "
                     "(each side in turn)")
        else:
            where = config.upstream
        print(f"servewatch proxy: listening on {listen[0]}:{port}, forwarding to {where}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        remove = stopping.on_stop(asyncio.get_running_loop(), stop.set)   # ^C, SIGTERM, SIGHUP: an orderly stop
        try:
            flusher = asyncio.create_task(flush_forever(log)) if log is not None else None
            watcher = asyncio.create_task(_watch(args, proxy, stop)) if args.watch else None
            try:
                await asyncio.wait_for(stop.wait(), args.duration)
            except TimeoutError:
                pass
            if flusher is not None:
                flusher.cancel()
            if watcher is not None:
                watcher.cancel()
                try:
                    await watcher
                except asyncio.CancelledError:
                    pass
        finally:
            remove()
    finally:
        await proxy.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        telemetry.close()
        if log is not None:
            log.close()
    if stopping.received() is not None:
        stopping.say("proxy", _records_kept(log))
        return stopping.status()
    return 0


def _records_kept(log) -> str:
    """The stop line's words for the records file: every record finished before the stop is in it, whole."""
    if log is None:
        return "no --records given, no record written"
    kept = log.written - log.lost
    rotated = f" and {log.rotations} rotated file{'' if log.rotations == 1 else 's'}" if log.rotations else ""
    return f"{kept} record{'' if kept == 1 else 's'} kept in {log.path}{rotated}"


async def _watch(args, proxy, stop: asyncio.Event) -> None:
    """The recorder over the upstream (health, /metrics) with the proxy's requests as one more source:
    verdicts as JSON lines on stdout, bundles with --out."""
    from servewatch.proxy.signals import RequestsSource
    from servewatch.watch.options import RecordingOptions, recording_from_args
    from servewatch.watch.event_lines import EventLines
    from servewatch.watch.session import record

    options = recording_from_args(args, RecordingOptions(url=args.upstream), WATCH_FLAGS)

    def sources_for(clock):
        return [RequestsSource(proxy, clock, options.interval)]

    try:
        lines = EventLines(json_lines=True)      # the output contract of watch (watch.event_lines)
        await record(options, None, tool="proxy", listeners=[lines.fired], clear_listeners=[lines.cleared],
                     evidence_listeners=[lines.evidence],
                     extra_sources=sources_for)
    finally:
        stop.set()
