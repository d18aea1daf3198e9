"""`servewatch sim`: the built-in vLLM/SGLang-compatible engine over HTTP."""

from __future__ import annotations

import argparse

from servewatch.errors import ServewatchError

HELP = "run the built-in vLLM/SGLang-compatible engine (no GPU needed)"
DESCRIPTION = ("Serve an OpenAI-compatible API with a simulated vLLM or SGLang engine: continuous batching, "
               "KV blocks, preemption, prefix caching, real /metrics and logs, injectable faults.")


class SimUsageError(ServewatchError):
    pass


def arguments(parser: argparse.ArgumentParser) -> None:
    from servewatch.sim.behaviour import engine_names
    from servewatch.sim.config import SimConfig

    parser.add_argument("--dialect", choices=engine_names(), default=SimConfig.dialect,
                        help=f"which engine the simulator speaks (default {SimConfig.dialect})")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on stderr)")
    parser.add_argument("--model-name", default=None, help="served model name (default: the profile's model)")
    parser.add_argument("--profile", default=None, help="h100-8b, rtx3060-7b (default) or tiny-cpu")
    parser.add_argument("--max-num-seqs", type=int, default=256,
                        help="requests the engine runs at once, as vLLM's flag (default 256)")
    parser.add_argument("--kv-tokens", type=int, default=None, help="KV pool size in tokens (default: profile)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="tokens per KV cache block (default: the profile's)")
    parser.add_argument("--max-batched-tokens", type=int, default=8192,
                        help="tokens one engine step may schedule, as vLLM's flag (default 8192)")
    parser.add_argument("--max-model-len", type=int, default=None,
                        help="the longest prompt plus output in tokens; longer requests get a 400 (default: the "
                             "profile's, cut to what the KV pool holds)")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="pack up to K tokens per SSE chunk")
    parser.add_argument("--no-prefix-caching", action="store_true",
                        help="no reuse of KV blocks between requests with the same prompt prefix")
    parser.add_argument("--log-stats-interval", type=float, default=10.0,
                        help="seconds between the engine's throughput lines in its log, as vLLM's "
                             "VLLM_LOG_STATS_INTERVAL (default 10)")
    parser.add_argument("--startup-seconds", type=float, default=0.0, help="time until the engine is ready")
    parser.add_argument("--exit-delay", type=float, default=2.0, help="engine death -> process exit, seconds")
    parser.add_argument("--health-timeout", type=float, default=20.0, help="SGLang /health generation timeout")
    parser.add_argument("--enable-server-load-tracking", action="store_true",
                        help="vLLM's flag: /load reports in-flight requests (without it, 0 as in vLLM)")
    parser.add_argument("--pd-role", choices=("prefill", "decode"), default=None,
                        help="run as one side of a prefill/decode pair, honouring requests' kv_transfer_params")
    parser.add_argument("--kv-lease-seconds", type=float, default=30.0,
                        help="prefill: how long it keeps a request's KV for decode (default 30, vLLM's lease)")
    parser.add_argument("--kv-wait-timeout", type=float, default=50.0,
                        help="decode: how long it waits for a request's KV before failing it (default 50)")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC",
                        help="e.g. stall@30s, engine-death@20s:exit=0, slow@10s:factor=3, crash-oom:budget=80 "
                             "(repeatable)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the simulated model's weights: the same seed and requests give the same tokens "
                             "(default 0)")
    parser.add_argument("--log-file", default=None, help="write the engine's log lines here (default: stdout)")
    replay = parser.add_argument_group("telemetry replay", "serve an incident bundle's recorded /health and /metrics "
                                       "over time, in the engine's own names, instead of simulating an engine")
    replay.add_argument("--replay", metavar="BUNDLE", default=None,
                        help="the bundle directory to replay (watch its process view with `watch URL --replay BUNDLE`)")
    replay.add_argument("--speed", type=float, default=1.0, help="bundle seconds per second (default 1)")
    replay.add_argument("--loop", action="store_true",
                        help="play again from the start after the end, counters continuing (default: hold the last "
                             "recorded state)")
    replay.add_argument("--start", type=float, default=0.0, metavar="SECONDS",
                        help="begin this many seconds into the bundle (default 0)")


def run(args: argparse.Namespace) -> int:
    import sys

    from servewatch.sim.config import SimConfig
    from servewatch.sim.faults import FaultSpecError, parse_fault_spec
    from servewatch.sim.profiles import DEFAULT_PROFILE, PROFILES
    from servewatch.sim.server import serve

    if not 0 <= args.port <= 65535:
        raise SimUsageError(f"--port {args.port} is not a TCP port")
    if args.replay is not None:
        return _replay(args)
    if args.loop or args.speed != 1.0 or args.start:
        raise SimUsageError("--speed, --loop and --start go with --replay BUNDLE")
    profile = args.profile or DEFAULT_PROFILE
    if profile not in PROFILES:
        raise SimUsageError(f"--profile {profile!r} is unknown (known: {', '.join(sorted(PROFILES))})")
    for spec in args.fault:
        try:
            parse_fault_spec(spec)
        except FaultSpecError as exc:
            raise SimUsageError(f"--fault {spec!r}: {exc}") from None
    try:
        config = SimConfig(dialect=args.dialect, profile=profile, model_name=args.model_name,
                           max_num_seqs=args.max_num_seqs, kv_tokens=args.kv_tokens, block_size=args.block_size,
                           max_batched_tokens=args.max_batched_tokens, max_model_len=args.max_model_len,
                           seed=args.seed, enable_prefix_caching=not args.no_prefix_caching,
                           tokens_per_chunk=args.tokens_per_chunk, log_stats_interval=args.log_stats_interval,
                           startup_seconds=args.startup_seconds, exit_delay=args.exit_delay,
                           health_timeout=args.health_timeout, faults=list(args.fault),
                           enable_server_load_tracking=args.enable_server_load_tracking, pd_role=args.pd_role,
                           kv_lease_seconds=args.kv_lease_seconds, kv_wait_timeout=args.kv_wait_timeout)
    except ValueError as exc:
        raise SimUsageError(str(exc)) from None
    log_stream = sys.stdout
    if args.log_file:
        try:
            log_stream = open(args.log_file, "a", encoding="utf-8")
        except OSError as exc:
            raise SimUsageError(f"cannot open --log-file {args.log_file}: {exc.strerror}") from None

    def listening(port: int) -> None:
        print(f"servewatch sim: {args.dialect} engine ({profile}) on http://{args.host}:{port}", file=sys.stderr,
              flush=True)

    try:
        return _serve_until_signal(args, serve, lambda: _sim_engine(config, log_stream), listening)
    finally:
        if log_stream is not sys.stdout:
            log_stream.close()


def _replay(args: argparse.Namespace) -> int:
    import sys

    from servewatch.sim.replay import Playhead, ReplayError, load
    from servewatch.sim.replay_server import serve

    try:
        telemetry = load(args.replay)
        playhead = Playhead(telemetry, speed=args.speed, loop=args.loop, start_offset=args.start)
    except ReplayError as exc:
        raise SimUsageError(f"--replay: {exc}") from None

    def listening(port: int) -> None:
        verdicts = ", ".join(f"{v['name']} at {float(v['t']) - telemetry.start:.1f} s" for v in telemetry.verdicts)
        after = "plays again from the start (counters continuing)" if args.loop else "holds its last recorded state"
        print(f"servewatch sim: replaying {telemetry.dialect} telemetry ({telemetry.end - telemetry.start:.1f} s, "
              f"{len(telemetry.metrics)} scrapes, from {args.start:g} s, at {args.speed:g}x; after its end it "
              f"{after}) on http://{args.host}:{port}", file=sys.stderr, flush=True)
        if verdicts:
            print(f"servewatch sim: the bundle's verdicts (bundle seconds): {verdicts}", file=sys.stderr, flush=True)

    return _serve_until_signal(args, serve, lambda: playhead, listening)


def _serve_until_signal(args: argparse.Namespace, serve, make, listening) -> int:
    """Serve what `make()` gives on --host/--port until SIGINT or SIGTERM (the simulated engine or a replay)."""
    import asyncio
    import signal

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        served = make()
        try:
            return await serve(served, args.host, args.port, on_listening=listening, stop=stop)
        except OSError as exc:
            raise SimUsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None

    return asyncio.run(main())


def _sim_engine(config, log_stream):
    from servewatch.clock import RealClock
    from servewatch.sim.faults import FaultSpecError
    from servewatch.sim.engine import SimEngine

    try:
        return SimEngine(config, RealClock(), log_stream=log_stream)
    except FaultSpecError as exc:       # e.g. startup-hang@STAGE with a stage this engine does not log
        raise SimUsageError(f"--fault: {exc}") from None
