"""`servewatch serve`: watch a fleet; speak Prometheus (/metrics), Alertmanager and Kubernetes probes."""

from __future__ import annotations

import argparse

from servewatch.commands.recording import add_recording_arguments

HELP = "watch many servers in one process; export verdicts to Prometheus, Alertmanager and probes"
DESCRIPTION = ("Record every target as `watch` does (the same detectors), from a YAML config, --target URLs "
               "and Prometheus file_sd files (re-read when they change). Serves /metrics, /api/v1/targets, "
               "/api/v1/verdicts and /targets/NAME/livez and /readyz on --listen (loopback by default). "
               "Runs until ^C, SIGTERM or SIGHUP: an orderly stop, exit 128 + the signal.")

# serve's wording of the shared recording flags (servewatch.watch.options), defaults from serve's own
_HELP = {
    "interval": "each target's probe and scrape cadence (default {interval:g}s)",
    "probe": "turn off the active probe (on by default in serve: when a target's counters have not moved for "
             "--probe-interval, one completion of 1 token asks it to serve; cost: at most one 1-token request per "
             "idle target per interval, {probes_an_hour:g} an hour at the default)",
    "probe_interval": "at most one probe per S (default {probe_interval_s:g}s)",
    "probe_deadline": "a probe without a token after S has missed (default: {probe_deadline_words})",
    "history": "history kept per target (default {history_min:g}m)",
    "detector_settings": "a detector threshold for every target, e.g. --set stall.floor_s=5 (repeatable)",
}


def arguments(parser: argparse.ArgumentParser) -> None:
    from servewatch.sinks.delivery.registry import sink_kinds, sink_names

    parser.add_argument("--config", metavar="FILE", help="YAML config: listen, interval, history, out, "
                                                         f"{', '.join(sink_names())}, shard, targets, file_sd, "
                                                         "prometheus_sd, node, gpu_metrics")
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
    parser.add_argument("--node", metavar="NAME",
                        help="also export every engine rank running on this node, found by process titles (no URL): "
                             "servewatch_node_rank_state{node,engine,pod_uid,role,rank,state}, the engine named by "
                             "the port its API server listens on and its pod UID; for a DaemonSet with hostPID, "
                             "NAME from the node name (deploy/kubernetes/node-daemonset.yaml). Needs no --target")
    parser.add_argument("--gpu-metrics", action="append", default=[], metavar="[NAME=]URL",
                        help="dcgm-exporter's /metrics (e.g. http://127.0.0.1:9400/metrics): NAME=URL reads the GPUs "
                             "of the target named NAME from there in NVML's place; a bare URL is this node's "
                             "exporter, used for every target on this node (a pid, or a loopback URL) that names "
                             "none of its own when NVML cannot be loaded here (said once at start) (repeatable)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="the HTTP surface (default 127.0.0.1:9464)")
    from servewatch.serve.config import FLEET_RECORDING, RECORDING_FLAGS

    # None when not given: the config file's value (or the default) stands
    add_recording_arguments(parser, FLEET_RECORDING, RECORDING_FLAGS[:5], overlay=True, help=_HELP)
    parser.add_argument("--out", metavar="DIR", help="incident bundles, one directory per target")
    parser.add_argument("--bundle-cap", type=float, metavar="MB", dest="bundle_cap",
                        help="all targets' bundles together stay under MB MiB, the oldest go first (default 1024)")
    for kind in sink_kinds():         # --alertmanager URL, --webhook URL, ...: each registered live sink
        parser.add_argument(f"--{kind.name.replace('_', '-')}", dest=kind.name, metavar="URL", help=kind.help)
    parser.add_argument("--shard", metavar="I/N", help="watch only the targets whose stable hash falls on shard I of N")
    parser.add_argument("--json", action="store_true",
                        help="one JSON line per event on stdout, each naming its target (in place of the plain line "
                             "per verdict fired, with its bundle's path, and per verdict cleared)")
    add_recording_arguments(parser, FLEET_RECORDING, RECORDING_FLAGS[5:], help=_HELP)


def run(args) -> int:
    import asyncio

    from servewatch import stopping
    from servewatch.serve import heap
    from servewatch.serve.app import loop_factory, serve
    from servewatch.watch.event_lines import EventLines

    config = config_from_args(args)   # a bad config: one line naming file, line and key; exit 2
    _say_unresolved(config.targets)
    heap.settle()

    async def main() -> int:
        stop = asyncio.Event()
        remove = stopping.on_stop(asyncio.get_running_loop(), stop.set)    # ^C, SIGTERM, SIGHUP: an orderly stop
        try:
            return await serve(config, stop=stop, events=EventLines(json_lines=args.json))
        finally:
            remove()

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        code = runner.run(main())
    return stopping.status() if stopping.received() is not None else code


def config_from_args(args):
    """The config file (if any), then each command-line option over it (servewatch.serve.config.overlaid): the
    namespace is read here, typed values go below."""
    from servewatch.commands.recording import recording_from_args
    from servewatch.serve.config import RECORDING_FLAGS, ServeConfig, ServeFlags, load, overlaid
    from servewatch.sinks.delivery.registry import sink_names

    config = load(args.config) if args.config else ServeConfig()
    return overlaid(config, ServeFlags(
        targets=tuple(args.target or ()), proxies=tuple(args.proxy or ()), gpu_metrics=tuple(args.gpu_metrics or ()),
        file_sd=tuple(args.file_sd or ()), listen=args.listen, out=args.out,
        sinks={name: getattr(args, name) for name in sink_names() if getattr(args, name, None) is not None},
        recording=recording_from_args(args, config.recording, RECORDING_FLAGS),   # the flags given, over the file's
        bundle_cap_mib=args.bundle_cap, shard=args.shard, prometheus_sd=args.prometheus_sd,
        prometheus_sd_job=args.prometheus_sd_job, node=args.node))


def _say_unresolved(targets) -> None:
    """A target whose host name does not resolve is said once, as such (not as "could not connect"), and watched
    all the same: in a fleet a name may appear later (a pod's DNS record), and the others are still watched."""
    import sys

    from servewatch.transport.urls import HostNotResolved, resolve

    for target in targets:
        try:
            resolve(target.url)
        except HostNotResolved as exc:
            print(f"servewatch serve: target {target.name}: {exc}; watched all the same, as down until it resolves",
                  file=sys.stderr, flush=True)
