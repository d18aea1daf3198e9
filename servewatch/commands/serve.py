"""`servewatch serve`: watch a fleet; speak Prometheus (/metrics), Alertmanager and Kubernetes probes."""

from __future__ import annotations

from servewatch.watch.options import DEFAULT_HISTORY_S, DEFAULT_PROBE_DEADLINE_S, DEFAULT_PROBE_INTERVAL_S, duration


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="watch many servers in one process; export verdicts to Prometheus, Alertmanager and probes",
        description="Record every target as `watch` does (the same detectors), from a YAML config, --target URLs "
                    "and Prometheus file_sd files (re-read when they change). Serves /metrics, /api/v1/targets, "
                    "/api/v1/verdicts and /targets/NAME/livez and /readyz on --listen (loopback by default). "
                    "Runs until SIGINT or SIGTERM.")
    parser.add_argument("--config", metavar="FILE", help="YAML config: listen, interval, history, out, alertmanager, "
                                                         "webhook, shard, targets, file_sd, prometheus_sd")
    parser.add_argument("--target", action="append", default=[], metavar="[NAME=]URL",
                        help="a server to watch, e.g. http://127.0.0.1:8000, or NAME=URL to name it (repeatable)")
    parser.add_argument("--proxy", action="append", default=[], metavar="NAME=HOST:PORT",
                        help="run a proxy (as `servewatch proxy`) on HOST:PORT in front of the target named NAME; "
                             "its requests become one more source of that target (requests_no_token among the "
                             "verdicts) and its GenAI metrics are at /targets/NAME/proxy/metrics (repeatable)")
    parser.add_argument("--file-sd", action="append", default=[], metavar="FILE",
                        help="a Prometheus file_sd file (JSON or YAML; a glob in the last part is allowed; repeatable)")
    parser.add_argument("--prometheus-sd", metavar="URL",
                        help="discover targets from this Prometheus server's active targets (/api/v1/targets)")
    parser.add_argument("--prometheus-sd-job", metavar="JOB", help="...of this job only")
    parser.add_argument("--listen", metavar="HOST:PORT", help="the HTTP surface (default 127.0.0.1:9464)")
    parser.add_argument("--interval", type=duration, help="each target's probe and scrape cadence (default 2s)")
    parser.add_argument("--no-probe", action="store_true",
                        help="turn off the active probe (on by default in serve: when a target's counters have not "
                             "moved for --probe-interval, one completion of 1 token asks it to serve; cost: at most "
                             "one 1-token request per idle target per interval, 120 an hour at the default)")
    parser.add_argument("--probe-interval", type=duration, metavar="S", help=f"at most one probe per S (default {DEFAULT_PROBE_INTERVAL_S:g}s)")
    parser.add_argument("--probe-deadline", type=duration, metavar="S",
                        help=f"a probe without a token after S has missed (default {DEFAULT_PROBE_DEADLINE_S:g}s)")
    parser.add_argument("--history", type=duration, help=f"history kept per target (default {DEFAULT_HISTORY_S / 60:g}m)")
    parser.add_argument("--out", metavar="DIR", help="incident bundles, one directory per target")
    parser.add_argument("--bundle-cap", type=float, metavar="MB", dest="bundle_cap",
                        help="all targets' bundles together stay under MB MiB, the oldest go first (default 1024)")
    parser.add_argument("--alertmanager", metavar="URL", help="post alerts to this Alertmanager (v2 API)")
    parser.add_argument("--webhook", metavar="URL", help="post fired/cleared events as JSON to this URL")
    parser.add_argument("--shard", metavar="I/N", help="watch only the targets whose stable hash falls on shard I of N")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="detector_settings",
                        help="a detector threshold for every target, e.g. --set stall.floor_s=5 (repeatable)")
    parser.add_argument("--detectors", metavar="FILE", dest="detectors_file",
                        help="detector thresholds from a TOML file ([stall] floor_s = 5); --set wins")
    parser.set_defaults(func=run)


def run(args) -> int:
    import asyncio
    import signal
    import sys

    from servewatch.serve import heap
    from servewatch.serve.app import serve
    from servewatch.serve.config import from_args

    config = from_args(args)          # a bad config: one line naming file, line and key; exit 2
    heap.settle()

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await serve(config, stop=stop)

    code = asyncio.run(main())
    print("servewatch serve: stopped", file=sys.stderr)
    return code
